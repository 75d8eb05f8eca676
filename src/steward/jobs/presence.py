"""Which workers are there, and for which roles: so that a submit that waits can say when nobody
will ever take its job (no worker serves its role), and again when one arrives.

A worker says it is there when it starts and every ``BEAT_S`` while it runs; one that stops
removes its row. A worker not seen for ``GONE_AFTER_S`` is gone (killed, its machine down):
its row stays until another worker starts and clears rows that old.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from steward.store.engine import write_transaction
from steward.store.schema import workers as workers_table

BEAT_S = 5.0
"""How often a running worker says it is still there."""

GONE_AFTER_S = 20.0
"""A worker not seen for this long is counted as gone."""

_FORGET_AFTER_S = 24 * 3600.0  # rows of workers gone this long are removed when another starts


async def seen(engine: AsyncEngine, worker_id: str, roles: Sequence[str], *, starting: bool = False) -> None:
    """Say that ``worker_id`` is there, taking jobs of ``roles`` (empty: any role)."""
    t, now = workers_table, time.time()
    async with write_transaction(engine) as conn:
        if starting:
            await conn.execute(t.delete().where(t.c.seen_at < now - _FORGET_AFTER_S))
        touched = await conn.execute(t.update().where(t.c.id == worker_id).values(seen_at=now))
        if touched.rowcount == 0:
            await conn.execute(
                t.insert().values(id=worker_id, roles=json.dumps(list(roles)), started_at=now, seen_at=now)
            )


async def gone(engine: AsyncEngine, worker_id: str) -> None:
    """The worker stops: it no longer serves anything."""
    async with write_transaction(engine) as conn:
        await conn.execute(workers_table.delete().where(workers_table.c.id == worker_id))


async def serving(engine: AsyncEngine, role: str) -> list[str]:
    """The workers there now that take jobs of ``role`` (a worker of any role included)."""
    t = workers_table
    query = sa.select(t.c.id, t.c.roles).where(t.c.seen_at >= time.time() - GONE_AFTER_S).order_by(t.c.id)
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    found = []
    for worker_id, roles in rows:
        try:
            taken = json.loads(roles)
        except ValueError:
            taken = []
        if not taken or role in taken:
            found.append(str(worker_id))
    return found
