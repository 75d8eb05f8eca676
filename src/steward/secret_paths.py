"""Which file names hold secrets: the patterns, shared by the configuration, the file tools and
the safety layers (the sandbox masks these files, the file tools refuse them, values are redacted).

Patterns are globs matched against the file's *name* (not its path), case-sensitively, like
``.gitignore`` patterns without a slash. This module imports nothing of Steward's: it is the
foundation both the tools and the safety layers build on.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from pathlib import PurePath

DEFAULT_SECRET_FILES: tuple[str, ...] = (
    ".env",
    ".env.*",
    "*.env",
    ".envrc",
    ".npmrc",
    ".pypirc",
    ".netrc",
    "_netrc",
    ".pgpass",
    ".git-credentials",
    ".dockercfg",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
)
"""What counts as a secret file unless configured otherwise."""

NOT_SECRET: tuple[str, ...] = (".env.example", ".env.sample", ".env.template", ".env.dist", "*.pub")
"""Names that match a pattern above but are, by convention, safe to share."""


def is_secret_name(name: str, patterns: Iterable[str] = DEFAULT_SECRET_FILES) -> bool:
    """Whether a file called ``name`` holds secrets, by the patterns."""
    if any(fnmatch.fnmatchcase(name, safe) for safe in NOT_SECRET):
        return False
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def is_secret_path(path: str | PurePath, patterns: Iterable[str] = DEFAULT_SECRET_FILES) -> bool:
    """Whether the file at ``path`` (any form; only its name counts) holds secrets."""
    name = PurePath(path).name
    return bool(name) and is_secret_name(name, patterns)
