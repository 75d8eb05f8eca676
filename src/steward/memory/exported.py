"""Long-term memory items as JSON Lines: what ``steward memory export`` writes and ``import`` reads.

One JSON object a line, every field of an item but its vector (derived, and model-specific):
``id``, ``scope`` (``user``, ``persona``, ``workspace``), ``kind``, ``text``, ``tags``,
``run_id``, ``session_id``, ``created_at``, ``updated_at``, ``expires_at``, ``hidden_at``,
``merged``. On import ``id`` is only an order (the store gives new ids); a line that is not such
an object is an error naming its line and field.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from typing import Any

from steward.errors import StewardError
from steward.memory.longterm import KeptItem, MemoryItem, Scope, normalise_tags

#: The longest line read (an item's text is a few KB; this stops a wrong file early).
MAX_LINE_CHARS = 4_000_000


def as_dict(item: MemoryItem) -> dict[str, Any]:
    """Every field of an item, as one exported line holds it (the id first, the scope an object)."""
    return {"id": item.id, **dataclasses.asdict(item), "tags": list(item.tags)}


class LineError(StewardError):
    """A line of an export file that cannot be imported."""


def read_lines(lines: Iterable[str]) -> list[KeptItem]:
    """Every item of an export, oldest first (by its exported id, else its line); the first bad
    line raises ``LineError`` naming it, before anything is written."""
    numbered: list[tuple[float, int, KeptItem]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE_CHARS:
            raise LineError(f"line {number}: longer than {MAX_LINE_CHARS:,} characters; is this an export?")
        item, order = parse_line(line, number)
        numbered.append((order, number, item))
    numbered.sort(key=lambda entry: (entry[0], entry[1]))
    return [item for _, _, item in numbered]


def parse_line(line: str, number: int) -> tuple[KeptItem, float]:
    """One exported item and its order (its old id, else +inf: after those that have one)."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise LineError(f"line {number}: not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise LineError(f"line {number}: expected a JSON object, as `steward memory export` writes")
    field = _Fields(data, number)
    scope = data.get("scope")
    if not isinstance(scope, dict):
        raise LineError(f'line {number}: "scope" must be an object with user, persona and workspace')
    where = _Fields(scope, number, prefix="scope.")
    text = field.text("text")
    if not text.strip():
        raise LineError(f'line {number}: "text" is empty; every item needs its text')
    tags = data.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise LineError(f'line {number}: "tags" must be a list of strings')
    merged = data.get("merged", 1)
    if not isinstance(merged, int) or isinstance(merged, bool) or not 1 <= merged < 2**31:
        raise LineError(f'line {number}: "merged" must be a whole number from 1 (got {merged!r})')
    created = field.time("created_at")
    item = KeptItem(
        scope=Scope(where.text("user"), where.text("persona"), where.text("workspace")),
        kind=field.text("kind"),
        text=text,
        tags=normalise_tags(tags),
        run_id=field.optional_text("run_id"),
        session_id=field.optional_text("session_id"),
        created_at=created,
        updated_at=field.optional_time("updated_at") or created,
        expires_at=field.optional_time("expires_at"),
        hidden_at=field.optional_time("hidden_at"),
        merged=merged,
    )
    old_id = data.get("id")
    order = float(old_id) if isinstance(old_id, int) and not isinstance(old_id, bool) else math.inf
    return item, order


class _Fields:
    """Typed reads of one object's fields; a wrong one raises ``LineError`` naming line and field."""

    def __init__(self, data: dict[str, Any], number: int, prefix: str = "") -> None:
        self._data = data
        self._number = number
        self._prefix = prefix

    def _fail(self, name: str, what: str) -> LineError:
        return LineError(f'line {self._number}: "{self._prefix}{name}" must be {what}')

    def text(self, name: str) -> str:
        value = self._data.get(name)
        if not isinstance(value, str):
            raise self._fail(name, "a string")
        return value

    def optional_text(self, name: str) -> str | None:
        value = self._data.get(name)
        if value is not None and not isinstance(value, str):
            raise self._fail(name, "a string or null")
        return value

    def time(self, name: str) -> float:
        value = self.optional_time(name)
        if value is None:
            raise self._fail(name, "a time in seconds since 1970")
        return value

    def optional_time(self, name: str) -> float | None:
        value = self._data.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self._fail(name, "a time in seconds since 1970, or null")
        return float(value)
