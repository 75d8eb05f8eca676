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
