"""``steward runs export``: which runs, and each as JSONL lines in the format asked for.

- ``events``: the run's event log, one event per line (the audit trail; the default).
- ``chat``: one training record per run (``steward.trajectories.chat_record``).
- ``tasks``: one row per task the runs worked on, for trainers that make their own rollouts
  (GRPO): the goal as a ``prompt`` and the verifier command (``steward.trajectories.tasks``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from steward.errors import StewardError

if TYPE_CHECKING:
    from steward.store.events import EventStore, RunRow

Format = Literal["events", "chat", "tasks"]
FORMATS: tuple[Format, ...] = ("events", "chat", "tasks")
ENDED = ("done", "failed", "cancelled")
_AGO = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True, slots=True)
class Selection:
    """The runs to export: by id (each must have ended), or every ended run created since a time."""

    ids: tuple[str, ...] = ()
    every: bool = False
    since: float | None = None


def parse_since(text: str, now: float | None = None) -> float:
    """``--since``: an age (``30m``, ``12h``, ``7d``, ``2w``) or a date (``2026-11-01``, ISO 8601)."""
    given = text.strip()
    if found := _AGO.fullmatch(given):
        return (now if now is not None else time.time()) - float(found.group(1)) * _UNITS[found.group(2)]
    try:
        return datetime.fromisoformat(given).timestamp()  # naive: the local time, as `runs list` shows
    except ValueError:
        raise StewardError(
            f"--since {text!r} is not an age or a date: give e.g. 12h, 7d, 2026-11-01 or 2026-11-01T09:30"
        ) from None


async def selected(store: EventStore, selection: Selection) -> tuple[list[RunRow], int]:
    """The runs to export, oldest first, and how many were left out because they have not ended."""
    if selection.ids:
        rows = [await store.find_run(run_id) for run_id in dict.fromkeys(selection.ids)]
        for row in rows:
            if row.status not in ENDED:
                raise StewardError(
                    f"run {row.id} is {row.status}: it has no outcome yet. Export it once it has ended "
                    "(`steward runs show` says how it goes on)"
                )
        return rows, 0
    rows = await _every_run(store, selection.since)
    kept = [row for row in rows if row.status in ENDED]
    return kept, len(rows) - len(kept)


async def _every_run(store: EventStore, since: float | None) -> list[RunRow]:
    import sqlalchemy as sa

    from steward.store.events import RunRow
    from steward.store.schema import runs

    query = sa.select(runs).order_by(runs.c.created_at, runs.c.id)
    if since is not None:
        query = query.where(runs.c.created_at >= since)
    async with store.engine.connect() as conn:
        found = (await conn.execute(query)).mappings().all()
    return [RunRow(**row) for row in found]


async def lines(
    store: EventStore, rows: Sequence[RunRow], fmt: Format, *, thinking: bool = False
) -> AsyncIterator[str]:
    """The JSONL lines of ``rows`` in ``fmt`` (without their newlines), run after run;
    ``thinking``: chat records carry the model's reasoning (``reasoning_content``)."""
    from steward.events import encode_event
    from steward.trajectories import record_of
    from steward.trajectories.tasks import task_rows

    records: list[dict[str, object]] = []
    for row in rows:
        events = await store.events(row.id)
        match fmt:
            case "events":
                for event in events:
                    yield encode_event(event)
            case "chat":
                yield _json(record_of(row, events, thinking=thinking))
            case "tasks":
                record = record_of(row, events)  # its outcome is kept, not its messages
                records.append({"run": record["run"], "reward": record["reward"]})
    if fmt == "tasks":
        for task in task_rows(records):
            yield _json(task)


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
