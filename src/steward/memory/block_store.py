"""Core memory blocks in the store's ``memory_blocks`` table, one row per (scope, label).

A scope is ``"agent"`` for blocks shared by every session, or a session id. Only the value
and the cap are stored; what a block is for comes from its definition in code.
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from steward.errors import StoreError
from steward.memory.blocks import CoreMemory, MemoryBlock
from steward.store.engine import write_transaction
from steward.store.schema import memory_blocks

AGENT_SCOPE = "agent"


class MemoryStore:
    """Loads and saves core memory blocks; ``where`` names the store in error messages."""

    def __init__(self, engine: AsyncEngine, *, where: str = "") -> None:
        self._engine = engine
        self.where = where

    async def blocks(self, scope: str = AGENT_SCOPE) -> list[MemoryBlock]:
        """The stored blocks of a scope, by label."""
        query = (
            sa.select(memory_blocks.c.label, memory_blocks.c.value, memory_blocks.c.limit_chars)
            .where(memory_blocks.c.scope == scope)
            .order_by(memory_blocks.c.label)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [MemoryBlock(row.label, row.value, row.limit_chars) for row in rows]

    async def load(self, scope: str = AGENT_SCOPE, definitions: CoreMemory | None = None) -> CoreMemory:
        """The blocks of ``definitions`` (default: ``CoreMemory.default()``) with their stored values.

        A defined block keeps its definition's cap and description: changing them in code
        takes effect on the next load. A stored block with no definition is kept (with its
        stored cap) after the defined ones, so nothing the agent wrote is lost.
        """
        memory = CoreMemory((definitions or CoreMemory.default()).blocks)
        for stored in await self.blocks(scope):
            if stored.label in memory:
                defined = memory.get(stored.label)
                memory.set(MemoryBlock(stored.label, stored.value, defined.limit_chars, defined.description))
            else:
                memory.set(stored)
        return memory

    async def save(self, block: MemoryBlock, scope: str = AGENT_SCOPE) -> None:
        """Write one block's value and cap (insert or overwrite)."""
        values = {
            "scope": scope,
            "label": block.label,
            "value": block.value,
            "limit_chars": block.limit_chars,
            "updated_at": time.time(),
        }
        try:
            async with write_transaction(self._engine) as conn:
                insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
                statement = insert(memory_blocks).values(**values)
                await conn.execute(
                    statement.on_conflict_do_update(
                        index_elements=[memory_blocks.c.scope, memory_blocks.c.label],
                        set_={
                            "value": statement.excluded.value,
                            "limit_chars": statement.excluded.limit_chars,
                            "updated_at": statement.excluded.updated_at,
                        },
                    )
                )
        except (OSError, sa_exc.DBAPIError) as exc:
            cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc
            reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0][:200]
            raise StoreError(
                f"could not save memory block {block.label!r} to the store at {self.where or 'the store'}: "
                f"{reason}. The block keeps its previous value; check that the store is writable."
            ) from None

    async def delete(self, label: str, scope: str = AGENT_SCOPE) -> bool:
        """Forget a stored block; whether there was one."""
        async with write_transaction(self._engine) as conn:
            gone = await conn.execute(
                memory_blocks.delete().where(memory_blocks.c.scope == scope, memory_blocks.c.label == label)
            )
        return bool(gone.rowcount)
