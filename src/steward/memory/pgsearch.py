"""PostgreSQL's side of long-term memory: vectors searched with pgvector, and the keyword ranking.

Where ``CREATE EXTENSION vector`` works, ``memory_vectors`` also keeps each vector in a ``vector``
column and a search is cosine distance in SQL, under the query's own WHERE, so the scope filter is
the database's. The keyword list ranks ``tsvector`` matches with ``ts_rank``.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from steward.embed.base import from_bytes
from steward.memory.vectors import CacheChange, NumPyIndex, Vector, VectorIndex, VectorQuery
from steward.store.schema import memory_items, memory_vectors

_log = logging.getLogger(__name__)


def keyword_select(
    terms: Sequence[str], where: Sequence[sa.ColumnElement[bool]], columns: Sequence[sa.ColumnElement[Any]]
) -> sa.Select[Any]:
    """The items whose ``tsvector`` matches any of ``terms`` under ``where``, best first."""
    items = memory_items
    tsquery = sa.func.websearch_to_tsquery(sa.literal_column("'english'"), " or ".join(terms))
    tsv: sa.ColumnElement[object] = sa.literal_column("memory_items.tsv")
    return (
        sa.select(*columns)
        .where(tsv.op("@@")(tsquery), *where)
        # ts_rank by term frequency, divided by 1 + log(length) (normalisation 1): nearest to BM25
        # of PostgreSQL's rankings. On LongMemEval-S (bench/memory.py) keyword R@5 went from .64
        # with ts_rank_cd to .86, and the fused list from .79 to .89.
        .order_by(sa.func.ts_rank(tsv, tsquery, 1).desc(), items.c.updated_at.desc(), items.c.id.desc())
    )


def vector_literal(vector: Vector) -> str:
    """A vector as pgvector's text form, ``[0.1,0.2,...]``."""
    return "[" + ",".join(repr(float(x)) for x in np.asarray(vector, dtype=np.float32).reshape(-1)) + "]"


class PgVectorIndex:
    """Exact cosine search in PostgreSQL with pgvector, under the query's own WHERE.

    Near-duplicate checks of a batch of new items compare each with every older item of its
    scope: one matrix product in NumPy, against a scan per item in SQL, so they use the NumPy
    copy of the scope (kept as ``NumPyIndex`` keeps it)."""

    name = "pgvector"

    def __init__(self) -> None:
        self._numpy = NumPyIndex()

    async def search(self, conn: AsyncConnection, query: VectorQuery) -> list[tuple[int, float]]:
        items, vectors = memory_items, memory_vectors
        embedding: sa.ColumnElement[object] = sa.literal_column("memory_vectors.embedding")
        distance = embedding.op("<=>")(sa.text("CAST(:target AS vector)"))
        where = [*query.where, embedding.is_not(None)]
        similarity = (1 - distance).label("similarity")
        select = (
            sa.select(items.c.id, similarity)
            .select_from(
                items.join(
                    vectors,
                    (vectors.c.content_hash == items.c.content_hash) & (vectors.c.model == query.model),
                )
            )
            .where(*where)
            .order_by(similarity.desc(), items.c.id.desc())  # by the output: one distance a row
            .limit(query.limit)
        )
        rows = (await conn.execute(select, {"target": vector_literal(query.vector)})).all()
        return [(int(row[0]), float(row[1])) for row in rows]

    async def store(self, conn: AsyncConnection, model: str, vectors: Mapping[str, Vector]) -> None:
        for digest, vector in vectors.items():
            await conn.execute(
                sa.text(
                    "UPDATE memory_vectors SET embedding = CAST(:v AS vector) "
                    "WHERE content_hash = :h AND model = :m"
                ),
                {"v": vector_literal(vector), "h": digest, "m": model},
            )

    async def nearest_older(
        self, conn: AsyncConnection, query: VectorQuery, ids: Sequence[int]
    ) -> list[list[tuple[int, float]]]:
        return await self._numpy.nearest_older(conn, query, ids)

    def note(self, key: Hashable, change: CacheChange) -> None:
        self._numpy.note(key, change)


async def choose_index(engine: AsyncEngine) -> VectorIndex:
    """pgvector when the database is PostgreSQL and the extension can be created; else NumPy."""
    if engine.dialect.name != "postgresql":
        return NumPyIndex()
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS vector"))
            await conn.execute(
                sa.text("ALTER TABLE memory_vectors ADD COLUMN IF NOT EXISTS embedding vector")
            )
    except sa.exc.DBAPIError as exc:
        _log.info("pgvector is not available (%s); vectors are searched with NumPy", str(exc).splitlines()[0])
        return NumPyIndex()
    index = PgVectorIndex()
    await _backfill(engine, index)
    return index


async def _backfill(engine: AsyncEngine, index: PgVectorIndex, batch: int = 500) -> None:
    """Vectors stored before pgvector was there get their ``vector`` column now."""
    while True:
        async with engine.begin() as conn:
            rows = (
                await conn.execute(
                    sa.text(
                        "SELECT content_hash, model, dim, vector FROM memory_vectors "
                        "WHERE embedding IS NULL LIMIT :n"
                    ),
                    {"n": batch},
                )
            ).all()
            for digest, model, dim, blob in rows:
                await index.store(conn, model, {digest: from_bytes(blob, dim)})
        if len(rows) < batch:
            return
