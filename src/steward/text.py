"""Text helpers shared by the runtime and the model fakes (no dependencies)."""

from __future__ import annotations


def excerpt(text: str, limit: int) -> str:
    """The head and tail of ``text`` within ``limit`` characters (the fallback, and the fakes')."""
    if len(text) <= limit:
        return text
    head = max(1, limit * 3 // 5)
    tail = max(1, limit - head - 40)
    return f"{text[:head]}\n[... {len(text) - head - tail:,} chars omitted ...]\n{text[-tail:]}"
