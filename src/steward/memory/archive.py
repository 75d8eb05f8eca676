"""The archive: summaries and compressed context kept for later, and search over past work.

Compression replaces old context by summaries; the originals stay in the run logs. This
module keeps the summaries that outlive a run (a session's running summary) and searches
what was said and found before: archived text, the goals and answers of earlier runs, and
the tool outputs and replies in their logs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from steward.store.engine import like_pattern, write_transaction
from steward.store.schema import archive, events, runs


@dataclass(frozen=True, slots=True)
class ArchiveRow:
    id: int
    kind: str
    ref: str
    content: str
    run_id: str | None
    session_id: str | None
    created_at: float


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: where it was found and the text around the match."""

    where: str  # "run", "archive", or an event type
    run_id: str | None
    seq: int | None
    snippet: str


class ArchiveStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def put(
        self,
        kind: str,
        content: str,
        *,
        run_id: str | None = None,
        session_id: str | None = None,
        ref: str = "",
    ) -> None:
        row = {"kind": kind, "content": content, "run_id": run_id, "session_id": session_id, "ref": ref}
        async with write_transaction(self._engine) as conn:
            await conn.execute(archive.insert().values(**row, created_at=time.time()))

    async def latest(self, kind: str, *, session_id: str | None = None) -> ArchiveRow | None:
        query = sa.select(archive).where(archive.c.kind == kind)
        if session_id is not None:
            query = query.where(archive.c.session_id == session_id)
        query = query.order_by(archive.c.id.desc()).limit(1)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).mappings().one_or_none()
        return None if row is None else ArchiveRow(**row)

    async def search(self, text: str, *, limit: int = 10, exclude_run: str | None = None) -> list[Hit]:
        """Case-insensitive search, newest first, in archived text, run goals and answers, and
        the tool outputs and model replies of run logs."""
        needle = text.strip().lower()
        if not needle:
            return []
        pattern = like_pattern(needle)
        hits: list[Hit] = []
        async with self._engine.connect() as conn:
            found = await conn.execute(
                sa.select(archive.c.kind, archive.c.run_id, archive.c.content)
                .where(sa.func.lower(archive.c.content).like(pattern, escape="\\"))
                .order_by(archive.c.id.desc())
                .limit(limit)
            )
            hits += [Hit(f"archive:{r.kind}", r.run_id, None, _snippet(r.content, needle)) for r in found]
            found = await conn.execute(
                sa.select(runs.c.id, runs.c.goal, runs.c.output)
                .where(
                    sa.or_(
                        sa.func.lower(runs.c.goal).like(pattern, escape="\\"),
                        sa.func.lower(runs.c.output).like(pattern, escape="\\"),
                    )
                )
                .where(runs.c.id != (exclude_run or ""))
                .order_by(runs.c.created_at.desc())
                .limit(limit)
            )
            hits += [
                Hit("run", r.id, None, _snippet(f"goal: {r.goal} | answer: {r.output}", needle))
                for r in found
            ]
            found = await conn.execute(
                sa.select(events.c.run_id, events.c.seq, events.c.type, events.c.data)
                .where(events.c.type.in_(("tool_result", "model_reply", "compaction")))
                .where(sa.func.lower(events.c.data).like(pattern, escape="\\"))
                .where(events.c.run_id != (exclude_run or ""))
                .order_by(events.c.ts.desc())
                .limit(limit)
            )
            for r in found:
                data = json.loads(r.data)
                body = str(data.get("output") or data.get("text") or "")
                hits.append(Hit(r.type, r.run_id, r.seq, _snippet(body, needle)))
        return hits[:limit]


def _snippet(text: str, needle: str, width: int = 240) -> str:
    at = text.lower().find(needle)
    start = max(0, at - width // 2) if at >= 0 else 0
    piece = " ".join(text[start : start + width].split())
    return ("…" if start else "") + piece + ("…" if start + width < len(text) else "")
