"""Text helpers."""


def is_palindrome(text):
    """Whether ``text`` reads the same backwards, ignoring case, spaces and punctuation."""
    raise NotImplementedError
