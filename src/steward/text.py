"""Text helpers shared by the runtime and the model fakes (no dependencies)."""

from __future__ import annotations

import json
from typing import Any


def compact_json(value: Any) -> str:
    """``value`` as JSON without spaces (values JSON cannot hold are written with ``str``)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def excerpt(text: str, limit: int) -> str:
    """The head and tail of ``text`` within ``limit`` characters (the fallback, and the fakes')."""
    if len(text) <= limit:
        return text
    head = max(1, limit * 3 // 5)
    tail = max(1, limit - head - 40)
    return f"{text[:head]}\n[... {len(text) - head - tail:,} chars omitted ...]\n{text[-tail:]}"


def shown(text: str, *, lines: bool = False) -> str:
    """``text`` safe to print on a terminal: what is not printable (ESC, CR and the other
    control characters, bidirectional overrides, bytes of a file name that are not UTF-8) is
    written as an escape (``\\x1b``, ``\\r``, ``\\xff``), and ``\\`` as ``\\\\``, so what is
    printed reads back as exactly one name. Every file name Steward prints goes through this.

    ``lines``: for prose (a model's answer, a tool's output), newlines and tabs stay and a
    backslash is itself; control sequences are escaped all the same."""
    if lines:
        if _plain(text):
            return text
        return "".join(c if c in "\n\t\\" else _escaped(c) for c in text)
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(_escaped(char) for char in text)


def _plain(text: str) -> bool:
    """Printable but for newlines and tabs (the common case, checked at C speed)."""
    return text.isprintable() or text.replace("\n", "").replace("\t", "").isprintable()


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def _escaped(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    if char == " " or char.isprintable():
        return char
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (os.fsdecode's surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
