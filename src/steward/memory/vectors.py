"""Vector search backends of long-term memory: NumPy exact search, or pgvector on PostgreSQL.

Vectors are stored once per (content hash, model) in ``memory_vectors`` as float32 bytes; a
search only ever compares vectors of one model, and only the vectors of items of one scope.

* ``NumPyIndex`` (any engine): a scope's vectors are loaded once as a matrix and kept per
  (scope, model); a query is one matrix product. The copy is checked against the scope's
  generation (``memory_scopes``, bumped by every change, by any process) on each search. Changes
  made through this process are applied to the copy in place (``note``); any other change
  reloads it.
* ``PgVectorIndex`` (in ``steward.memory.pgsearch``; PostgreSQL where ``CREATE EXTENSION
  vector`` works): the vectors are also kept in a ``vector`` column and searched in SQL, under
  the same WHERE as every other query, so the scope filter is the database's.
* sqlite-vec: only probed (``sqlite_vec_status``): Python's ``sqlite3`` here cannot load
  extensions, so SQLite uses NumPy.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from steward.memory.partition import Ints, Partition, assign, layout, list_count, train
from steward.store.schema import memory_items, memory_vectors

if TYPE_CHECKING:
    from steward.config import MemorySettings

_log = logging.getLogger(__name__)

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class VectorQuery:
    """One search: the nearest vectors of ``model`` among the items ``where`` selects."""

    key: Hashable  # the scope, as the cache's key
    scope_where: Sequence[sa.ColumnElement[bool]]  # the scope alone (what a cached matrix holds)
    where: Sequence[sa.ColumnElement[bool]]  # scope, visibility and any filters
    filtered: bool  # whether ``where`` has filters beyond scope and visibility (tags, kinds)
    model: str
    vector: Vector  # one query vector; for ``nearest_older``, one row per new item
    limit: int
    now: float
    generation: int


class VectorIndex(Protocol):
    """Searches one scope's vectors of one embedding model."""

    @property
    def name(self) -> str: ...

    async def search(self, conn: AsyncConnection, query: VectorQuery) -> list[tuple[int, float]]:
        """(item id, cosine) of the nearest items, best first."""
        ...

    async def nearest_older(
        self, conn: AsyncConnection, query: VectorQuery, ids: Sequence[int]
    ) -> list[list[tuple[int, float]]]:
        """For each new item ``ids[i]`` (vector: row i of ``query.vector``), the (id, cosine) of
        the ``query.limit`` nearest items of the scope older than it, best first."""
        ...

    async def store(self, conn: AsyncConnection, model: str, vectors: Mapping[str, Vector]) -> None:
        """Called after ``memory_vectors`` rows were written for these content hashes."""
        ...

    def note(self, key: Hashable, change: CacheChange) -> None:
        """A change this process made to a scope, and the generation it moved the scope to."""
        ...


@dataclass(slots=True)
class CacheChange:
    before: int  # the scope's generation before the change
    after: int  # and after it
    added: dict[int, tuple[str, Vector, float]] = field(default_factory=dict)  # id: (model, vector, expires)
    removed: set[int] = field(default_factory=set)
    expires: dict[int, float] = field(default_factory=dict)  # id: new expiry (inf: none)


def _top(sims: npt.NDArray[np.float32], ids: npt.NDArray[np.int64], limit: int) -> list[tuple[int, float]]:
    finite = int(np.isfinite(sims).sum())
    limit = min(limit, finite)
    if limit <= 0:
        return []
    part = np.argpartition(-sims, limit - 1)[:limit] if limit < sims.shape[0] else np.arange(sims.shape[0])
    order = part[np.lexsort((-ids[part], -sims[part]))]
    return [(int(ids[i]), float(sims[i])) for i in order if np.isfinite(sims[i])]


#: Up to this many rows a scope is searched exactly (a few ms); above, through a partition
#: (the default of ``[memory] exact_limit``).
EXACT_LIMIT = 20_000
#: Share of the lists (~sqrt(n)) a search reads: recall@50 against exact is 0.96-0.97 at 100 k
#: rows on the bench's data (``bench/vectors.py``; 0.91-0.94 at 0.075). ``[memory] probe_share``.
PROBE_SHARE = 0.15
#: Lists a new item's near-duplicate check reads: a duplicate (cosine >= merge_similarity) lies
#: in its own list or a neighbouring one.
NPROBE_NEAR = 6
#: Rows added since the grouping, scored exactly, before they are grouped in (no retraining).
TAIL_LIMIT = 8192
#: The centroids are trained again when the scope has grown by this factor since training.
RETRAIN_GROWTH = 2.0


@dataclass(frozen=True, slots=True)
class Tuning:
    """How a search by meaning trades exactness for speed: ``[memory] exact_limit``,
    ``probe_share`` (NumPy) and the ``pgvector_*`` settings."""

    exact_limit: int = EXACT_LIMIT
    probe_share: float = PROBE_SHARE
    pg_exact_items: int = 2_000  # pgsearch.PgVectorIndex: a scope this small is scanned exactly,
    pg_exact_share: float = 0.02  # as is one holding this share of the store or less;
    pg_ef_factor: int = 2  # HNSW's candidate list, as a multiple of the results wanted

    @classmethod
    def of(cls, settings: MemorySettings) -> Tuning:
        return cls(
            exact_limit=settings.exact_limit,
            probe_share=settings.probe_share,
            pg_exact_items=settings.pgvector_exact_items,
            pg_exact_share=settings.pgvector_exact_share,
            pg_ef_factor=settings.pgvector_ef_factor,
        )


class ScopeMatrix:
    """A scope's vectors of one model: rows appended in place, removed rows masked; above
    ``exact_limit`` rows, grouped by a ``Partition`` (rows reordered list after list)."""

    def __init__(self, generation: int, dim: int, tuning: Tuning | None = None) -> None:
        self.tuning = tuning if tuning is not None else Tuning()
        self.generation = generation
        self.dim = dim
        self.count = 0
        self.data = np.zeros((0, dim), dtype=np.float32)
        self.ids = np.zeros(0, dtype=np.int64)
        self.expires = np.zeros(0, dtype=np.float64)
        self.alive = np.zeros(0, dtype=bool)
        self.row: dict[int, int] = {}
        self.partition: Partition | None = None
        # Grouping 100 k rows takes seconds: it runs in a thread (``NumPyIndex._ready``), one at a
        # time; while it runs the matrix is ``busy`` and a change evicts it instead of editing it.
        self.lock = asyncio.Lock()
        self.busy = False

    def add(self, ids: Sequence[int], vectors: Vector, expires: Sequence[float]) -> None:
        need = self.count + len(ids)
        if need > self.data.shape[0]:
            size = max(need, 2 * self.data.shape[0], 64)
            self.data = np.resize(self.data, (size, self.dim))
            self.ids = np.resize(self.ids, size)
            self.expires = np.resize(self.expires, size)
            self.alive = np.resize(self.alive, size)
            self.alive[self.count :] = False
        end = self.count + len(ids)
        self.data[self.count : end] = vectors
        self.ids[self.count : end] = ids
        self.expires[self.count : end] = expires
        self.alive[self.count : end] = True
        for offset, item_id in enumerate(ids):
            old = self.row.get(item_id)
            if old is not None:
                self.alive[old] = False
            self.row[item_id] = self.count + offset
        self.count = end

    def remove(self, item_id: int) -> None:
        row = self.row.pop(item_id, None)
        if row is not None:
            self.alive[row] = False

    def search(self, query: VectorQuery, allowed: set[int] | None) -> list[tuple[int, float]]:
        n = self.count
        vector = query.vector.reshape(1, -1).astype(np.float32)
        if n == 0 or vector.shape[1] != self.dim:
            return []
        if allowed is not None and len(allowed) <= self.tuning.exact_limit:  # few: score them all
            rows = np.fromiter((r for r in map(self.row.get, allowed) if r is not None), dtype=np.int64)
            sims = self.data[rows] @ vector[0]
            keep = self.expires[rows] > query.now
            return _top(np.where(keep, sims, -np.inf).astype(np.float32), self.ids[rows], query.limit)
        part = self.fresh_partition()
        probed: list[tuple[int, int]] = []
        if part is not None:
            probed = part.segments(part.probe(vector, part.lists_for(self.tuning.probe_share))[0])
        spans = [(0, n)] if part is None else [*probed, (part.packed, n)]
        spans = [(s, e) for s, e in spans if e > s] or [(0, 0)]
        rows = np.concatenate([np.arange(s, e, dtype=np.int64) for s, e in spans])
        sims = np.concatenate([self.data[s:e] @ vector[0] for s, e in spans])
        keep = self.alive[rows] & (self.expires[rows] > query.now)
        if allowed is not None:
            keep &= np.isin(self.ids[rows], np.fromiter(allowed, dtype=np.int64))
        return _top(np.where(keep, sims, -np.inf).astype(np.float32), self.ids[rows], query.limit)

    def nearest_older(self, query: VectorQuery, new_ids: Sequence[int]) -> list[list[tuple[int, float]]]:
        n = self.count
        vectors = query.vector.reshape(len(new_ids), -1).astype(np.float32)
        if n == 0 or vectors.shape[1] != self.dim:
            return [[] for _ in new_ids]
        part = self.fresh_partition()
        out: list[list[tuple[int, float]]] = []
        for start in range(0, len(new_ids), _NEAR_CHUNK):
            chunk = np.asarray(new_ids[start : start + _NEAR_CHUNK], dtype=np.int64)
            found = _Candidates(len(chunk), query.limit)
            every = np.arange(len(chunk))
            if part is None:
                self._score_span(found, (0, n), every, vectors[start : start + len(chunk)], chunk, query.now)
            else:
                block = vectors[start : start + len(chunk)]
                probes = part.probe(block, NPROBE_NEAR)
                flat = probes.ravel()
                order = np.argsort(flat, kind="stable")
                lists, firsts = np.unique(flat[order], return_index=True)
                groups = np.split(order // probes.shape[1], firsts[1:])
                spans = zip(part.offsets[lists].tolist(), part.offsets[lists + 1].tolist(), strict=True)
                for span, queries in zip(spans, groups, strict=True):
                    self._score_span(found, span, queries, block, chunk, query.now)
                self._score_span(found, (part.packed, n), every, block, chunk, query.now)
            out += found.best()
        return out

    def _score_span(
        self,
        found: _Candidates,
        span: tuple[int, int],
        queries: npt.NDArray[np.intp],
        block: Vector,
        new_ids: npt.NDArray[np.int64],
        now: float,
    ) -> None:
        """Score rows ``span`` against the ``queries`` rows of ``block``; keep each one's best
        rows among those alive, unexpired and older than its new item."""
        start, end = span
        if end <= start or queries.size == 0:
            return
        ids = self.ids[start:end]
        keep = self.alive[start:end] & (self.expires[start:end] > now)
        step = max(1, _SCORE_CELLS // (end - start))
        for first in range(0, queries.size, step):
            some = queries[first : first + step]
            sims = self.data[start:end] @ block[some].T
            sims = np.where(keep[:, None] & (ids[:, None] < new_ids[some][None, :]), sims, -np.inf)
            found.offer(some, sims.astype(np.float32), ids)

    def needs_grouping(self) -> bool:
        """Whether the next search would (re)build the partition first."""
        part = self.partition
        if len(self.row) <= self.tuning.exact_limit:
            return False
        return (
            part is None
            or len(self.row) > part.trained * RETRAIN_GROWTH
            or self.count - part.packed > TAIL_LIMIT
        )

    def fresh_partition(self) -> Partition | None:
        """The partition to search through, built or brought up to date first; None (exact) up
        to ``exact_limit`` rows."""
        part = self.partition
        if len(self.row) <= self.tuning.exact_limit:
            self.partition = None
            return None
        if part is None or len(self.row) > part.trained * RETRAIN_GROWTH:
            self._group(None)
        elif self.count - part.packed > TAIL_LIMIT:
            self._group(part)
        return self.partition

    def _group(self, previous: Partition | None) -> None:
        """Drop removed rows, (re)train unless ``previous`` is kept, and reorder the rows list
        after list."""
        live = np.flatnonzero(self.alive[: self.count])
        data = self.data[: self.count]  # a view: one copy of the rows is made, the reordered one
        centroids = train(data, list_count(len(live)), rows=live) if previous is None else previous.centroids
        order, offsets = layout(assign(data, centroids)[live], centroids.shape[0])
        rows = live[order]
        self.data, self.ids = data[rows], self.ids[rows]
        self.expires, self.alive = self.expires[rows], np.ones(len(rows), dtype=bool)
        self.count = len(rows)
        self.row = {int(item_id): row for row, item_id in enumerate(self.ids.tolist())}
        trained = len(rows) if previous is None else previous.trained
        self.partition = Partition(centroids, offsets, len(rows), trained)


class _Candidates:
    """Each new item's best (id, cosine) so far, gathered span by span."""

    def __init__(self, queries: int, limit: int) -> None:
        self.limit = limit
        self.sims: list[npt.NDArray[np.float32]] = []
        self.ids: list[npt.NDArray[np.int64]] = []
        self.queries: list[npt.NDArray[np.intp]] = []
        self.count = queries

    def offer(self, queries: npt.NDArray[np.intp], sims: npt.NDArray[np.float32], ids: Ints) -> None:
        """``sims`` is (rows, queries): keep each column's ``limit`` best rows."""
        rows = sims.shape[0]
        if rows > self.limit:
            best = np.argpartition(-sims, self.limit - 1, axis=0)[: self.limit]
        else:
            best = np.broadcast_to(np.arange(rows)[:, None], sims.shape)
        self.sims.append(np.take_along_axis(sims, best, axis=0).T.ravel())
        self.ids.append(ids[best].T.ravel())
        self.queries.append(np.repeat(queries, best.shape[0]))

    def best(self) -> list[list[tuple[int, float]]]:
        if not self.sims:
            return [[] for _ in range(self.count)]
        sims, ids = np.concatenate(self.sims), np.concatenate(self.ids)
        queries = np.concatenate(self.queries)
        order = np.lexsort((-ids, -sims, queries))  # by new item, then best first
        out: list[list[tuple[int, float]]] = [[] for _ in range(self.count)]
        for i in order.tolist():
            hits = out[int(queries[i])]
            if len(hits) < self.limit and np.isfinite(sims[i]):
                hits.append((int(ids[i]), float(sims[i])))
        return out


_NEAR_CHUNK = 4096  # new items per pass: each list is read once per pass
#: Cells of one (rows x new items) product: bounds its memory (16 MB).
_SCORE_CELLS = 4_000_000
#: Scopes whose vectors one process keeps in memory; the least recently searched goes first.
MAX_CACHED_SCOPES = 64


class NumPyIndex:
    """Exact cosine search over a scope's vectors held as one matrix per (scope, model)."""

    name = "numpy"

    def __init__(self, tuning: Tuning | None = None) -> None:
        self._tuning = tuning if tuning is not None else Tuning()
        self._cache: dict[tuple[Hashable, str], ScopeMatrix] = {}

    async def search(self, conn: AsyncConnection, query: VectorQuery) -> list[tuple[int, float]]:
        matrix = await self._matrix(conn, query)
        allowed = None
        if query.filtered:
            found = await conn.execute(sa.select(memory_items.c.id).where(*query.where))
            allowed = set(found.scalars().all())
        await _ready(matrix)
        return matrix.search(query, allowed)

    async def nearest_older(
        self, conn: AsyncConnection, query: VectorQuery, ids: Sequence[int]
    ) -> list[list[tuple[int, float]]]:
        matrix = await self._matrix(conn, query)
        await _ready(matrix)
        return matrix.nearest_older(query, ids)

    async def _matrix(self, conn: AsyncConnection, query: VectorQuery) -> ScopeMatrix:
        key = (query.key, query.model)
        matrix = self._cache.pop(key, None)  # popped and put back: the dict's order is recency
        if matrix is None or matrix.generation != query.generation:
            matrix = await self._load(conn, query)
        self._cache[key] = matrix
        while len(self._cache) > MAX_CACHED_SCOPES:
            del self._cache[next(iter(self._cache))]
        return matrix

    async def _load(self, conn: AsyncConnection, query: VectorQuery) -> ScopeMatrix:
        items, vectors = memory_items, memory_vectors
        rows = (
            await conn.execute(
                sa.select(items.c.id, items.c.expires_at, vectors.c.dim, vectors.c.vector)
                .select_from(
                    items.join(
                        vectors,
                        (vectors.c.content_hash == items.c.content_hash) & (vectors.c.model == query.model),
                    )
                )
                .where(*query.scope_where, items.c.hidden_at.is_(None))
                .order_by(items.c.id)
            )
        ).all()
        dim = int(query.vector.shape[-1])  # a 2-D query (nearest_older) has the same columns
        rows = [row for row in rows if row[2] == dim]
        matrix = ScopeMatrix(query.generation, dim, self._tuning)
        if rows:
            data = np.frombuffer(b"".join(row[3] for row in rows), dtype="<f4").reshape(len(rows), dim)
            expires = [np.inf if row[1] is None else row[1] for row in rows]
            matrix.add([row[0] for row in rows], data.astype(np.float32), expires)
        return matrix

    async def store(self, conn: AsyncConnection, model: str, vectors: Mapping[str, Vector]) -> None:
        return None

    def note(self, key: Hashable, change: CacheChange) -> None:
        for (scope, model), matrix in list(self._cache.items()):
            if scope != key:
                continue
            if matrix.generation != change.before or matrix.busy:  # changed elsewhere, or being
                del self._cache[(scope, model)]  # grouped in a thread: reload it at the next search
                continue
            matrix.generation = change.after
            for item_id in change.removed:
                matrix.remove(item_id)
            for item_id, expiry in change.expires.items():
                row = matrix.row.get(item_id)
                if row is not None:
                    matrix.expires[row] = expiry
            added = [
                (i, v, e) for i, (m, v, e) in change.added.items() if m == model and v.shape[-1] == matrix.dim
            ]
            if added:
                matrix.add([a[0] for a in added], np.stack([a[1] for a in added]), [a[2] for a in added])


async def _ready(matrix: ScopeMatrix) -> None:
    """Group ``matrix`` in a thread when a search needs it: seconds at 100 k rows that would
    otherwise stall every other task of the process (a worker's heartbeats among them)."""
    async with matrix.lock:  # uncontended, taking it does not yield
        if matrix.needs_grouping():
            matrix.busy = True
            try:
                await asyncio.to_thread(matrix.fresh_partition)
            finally:
                matrix.busy = False


def sqlite_vec_status() -> str:
    """Why SQLite searches vectors with NumPy (sqlite-vec is probed, not used)."""
    import sqlite3

    if not hasattr(sqlite3.Connection, "enable_load_extension"):
        return "this Python's sqlite3 cannot load extensions (sqlite-vec): NumPy exact search"
    try:
        import sqlite_vec  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return "sqlite-vec is not installed: NumPy exact search"
    return "sqlite-vec could be loaded; Steward searches with NumPy (exact)"
