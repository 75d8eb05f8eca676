"""Nothing reaches the store unredacted: every event, every field, whoever writes it.

The store redacts each event's data (every string in it, keys included) and each run's output
with the redaction of the run's workspace before the row is written, outside the write
transaction (reading secret files must not hold the database). By default that is the secrets
of the workspace as a run there sees them (``steward.safety.secrets.watches.StoreRedaction``):
the values of its secret files and those its configuration hands to processes. So an event
written by ``steward rewind``, by a cancelled job's closing or by a run itself is redacted alike.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from steward.store.schema import runs as runs_table

Redact = Callable[[str], str]
RedactFor = Callable[[str], Redact]
"""A run's workspace (``""``: none) -> what redacts the text written for that run."""

_REMEMBERED_RUNS = 4096  # runs whose workspace is kept (a server writes for many)


class RunRedaction:
    """The redaction of each run's writes, by the run's workspace (looked up once per run)."""

    def __init__(self, engine: AsyncEngine, source: RedactFor | None) -> None:
        self._engine = engine
        self._source = source
        self._workspaces: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, run_id: str, workspace: str) -> None:
        with self._lock:
            self._workspaces[run_id] = workspace
            self._workspaces.move_to_end(run_id)
            if len(self._workspaces) > _REMEMBERED_RUNS:
                self._workspaces.popitem(last=False)

    async def workspaces(self, run_ids: Iterable[str]) -> dict[str, str]:
        """Each run's workspace (``""`` for a run not in the store: its write fails anyway)."""
        wanted = list(dict.fromkeys(run_ids))
        found: dict[str, str] = {}
        missing: list[str] = []
        with self._lock:
            for run_id in wanted:
                if run_id in self._workspaces:
                    found[run_id] = self._workspaces[run_id]
                else:
                    missing.append(run_id)
        if missing:
            query = sa.select(runs_table.c.id, runs_table.c.workspace).where(runs_table.c.id.in_(missing))
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
            for run_id, workspace in rows:
                self.remember(run_id, workspace or "")
                found[run_id] = workspace or ""
        return {run_id: found.get(run_id, "") for run_id in wanted}

    def redactor(self, workspace: str) -> Redact:
        """What redacts text of runs in ``workspace``; may read files (call it off the loop)."""
        if self._source is None:
            from steward.safety.secrets.watches import StoreRedaction

            self._source = StoreRedaction()
        return self._source(workspace)


def redacted(value: Any, redact: Redact) -> Any:
    """``value`` (JSON-like: dicts, lists, strings, numbers) with every string redacted, keys
    included. Iterative: a deeply nested value (a tool's JSON output) cannot exhaust the stack."""
    if isinstance(value, str):
        return redact(value)
    if not isinstance(value, dict | list | tuple):
        return value
    root = _empty_like(value)
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:  # each container is visited once
        source, target = stack.pop()
        pairs = source.items() if isinstance(source, dict) else enumerate(source)
        for key, item in pairs:
            new: Any
            if isinstance(item, str):
                new = redact(item)
            elif isinstance(item, dict | list | tuple):
                new = _empty_like(item)
                stack.append((item, new))
            else:
                new = item
            if isinstance(target, dict):
                target[redact(key) if isinstance(key, str) else key] = new
            else:
                target.append(new)
    return root


def _empty_like(value: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> dict[Any, Any] | list[Any]:
    return {} if isinstance(value, dict) else []
