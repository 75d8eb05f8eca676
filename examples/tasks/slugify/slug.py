"""URL slugs for page titles."""

import re


def slugify(title):
    """'Hello, World!' -> 'hello-world': lower case, words joined by single dashes."""
    words = re.findall(r"[A-Za-z0-9]+", title)
    return "-".join(words)
