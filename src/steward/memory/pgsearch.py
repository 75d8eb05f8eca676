"""PostgreSQL's side of long-term memory: vectors searched with pgvector, and the keyword ranking.

Where ``CREATE EXTENSION vector`` works, ``memory_vectors`` also keeps each vector in a ``vector``
column and a search is cosine distance in SQL, under the query's own WHERE, so the scope filter is
the database's: through an HNSW index per model for a large scope, exactly for a small one. The
keyword list is BM25 over ``memory_terms``, postings of the items' ``tsvector`` lexemes.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from steward.embed.base import from_bytes
from steward.memory.vectors import CacheChange, NumPyIndex, Tuning, Vector, VectorIndex, VectorQuery
from steward.store.schema import memory_items, memory_vectors

_log = logging.getLogger(__name__)


def keyword_select(
    terms: Sequence[str],
    where: Sequence[sa.ColumnElement[bool]],
    columns: Sequence[sa.ColumnElement[Any]],
    *,
    top: int | None,
) -> sa.Select[Any]:
    """The items holding any of ``terms`` (their lexemes) under ``where``, best first by BM25;
    words found in more than ``COMMON_SHARE`` of the items are left out when rarer ones are
    there, and a query of common words only ranks the newest of its matches (``_RANKED``).
    With ``top``, only the best ``top`` matches of the whole store are joined to their items and
    filtered, else every match is. Each row also says how many matches were ranked
    (``SCORED``): fewer than ``top`` means every match was.

    The score is read from ``memory_terms`` alone: per lexeme, its document frequency (its idf
    computed once), then its postings read from the index and summed per item. ts_rank
    instead read each match's row and tsvector: one question of 27.6 k matches on 100 k items
    took 54 ms that way, 10 ms here. (The idf computed per posting, from a window count, cost
    14 ms: the arithmetic per row, not the reads.)"""
    from steward.memory.hybrid import COMMON_SHARE, RANK_LIMIT

    items = memory_items
    ranked = sa.text(_RANKED + ("" if top is None else " LIMIT :top")).bindparams(
        sa.bindparam("terms", list(terms), type_=postgresql.ARRAY(sa.Text)),
        sa.bindparam("common_share", COMMON_SHARE, type_=sa.Float),
        sa.bindparam("rank_limit", RANK_LIMIT, type_=sa.Integer),
    )
    if top is not None:
        ranked = ranked.bindparams(sa.bindparam("top", top, type_=sa.Integer))
    best = ranked.columns(sa.column("item_id", sa.Integer), sa.column("score", sa.REAL)).cte("scored")
    # The items are fetched by id (``= ANY`` of the scored ids, a primary-key lookup each): joined
    # on the id alone, the planner, which guesses one row for the scope's WHERE, read all of
    # memory_items and probed the scores for each row (0.8 s on 100 k items, not 1 ms).
    ids = sa.cast(
        sa.select(sa.func.array_agg(best.c.item_id)).scalar_subquery(), postgresql.ARRAY(sa.Integer)
    )
    scored = sa.select(sa.func.count()).select_from(best).scalar_subquery().label(SCORED)
    return (
        sa.select(*columns, scored)
        .select_from(best.join(items, items.c.id == best.c.item_id))
        .where(items.c.id == sa.any_(ids), *where)
        .order_by(best.c.score.desc(), items.c.updated_at.desc(), items.c.id.desc())
    )


#: The column of ``keyword_select``'s rows that counts the matches ranked.
SCORED = "steward_scored"

# The ranking, in one statement. Each word's share of the items is read from the planner's
# statistics of the tsv column (``most_common_elems``, kept by ANALYZE): a catalogue read, where
# counting a common word's matches would read thousands of rows. The statistics are read once
# into ``common``, which each word's lexemes are then checked against (unnested per word, they
# cost 1.5 ms a word under load). A word PostgreSQL drops (no lexeme) adds nothing; a store
# under 200 items (or never analysed) keeps every word, as on SQLite.
#
# A lexeme's document frequency is its share in the same statistics times the items, counted
# from the postings' index only when the statistics do not list it (rarer than any they list):
# counting three words of 3.7 k items each on 100 k items took 1.8 ms, four common ones 5 ms,
# and ANALYZE samples enough rows to know a listed share within a few tenths of a percent (an
# idf moved by as much changes little in the order). When every word is common, only the
# newest matches are ranked, as SQLite ranks its newest RANK_LIMIT: the postings from the
# ``floor``, the highest id among each lexeme's (RANK_LIMIT / lexemes)-th newest, so that at
# most RANK_LIMIT items are summed (one such question summed 24 k items, 23 ms). Such words say
# little about which older item is meant.
_LEXEMES = """
common AS MATERIALIZED (
    SELECT e.lexeme, e.freq
    FROM pg_stats AS s,
         unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS e(lexeme, freq)
    WHERE s.schemaname = current_schema() AND s.tablename = 'memory_items' AND s.attname = 'tsv'
      AND e.lexeme IS NOT NULL
), stored AS MATERIALIZED (
    SELECT greatest(reltuples, 1)::float8 AS n FROM pg_class WHERE oid = 'memory_items'::regclass
), words AS MATERIALIZED (
    SELECT l.lexemes,
           cardinality(l.lexemes) > 0
           AND NOT l.lexemes && (
               SELECT coalesce(array_agg(c.lexeme), '{}') FROM common AS c WHERE c.freq > :common_share
           ) AS rare
    FROM unnest(CAST(:terms AS text[])) AS t(term),
         LATERAL (SELECT tsvector_to_array(to_tsvector('english', t.term)) AS lexemes) AS l
), plan AS MATERIALIZED (
    SELECT EXISTS (SELECT FROM words WHERE words.rare) AS selective,
           (SELECT n FROM stored) < 200 AS small
), wanted AS MATERIALIZED (
    SELECT DISTINCT x.lexeme
    FROM words, unnest(words.lexemes) AS x(lexeme), plan
    WHERE words.rare OR NOT plan.selective OR plan.small
)"""
_RANKED = f"""WITH {_LEXEMES}, counted AS MATERIALIZED (
    SELECT w.lexeme, coalesce(
        (SELECT c.freq * st.n FROM common AS c WHERE c.lexeme = w.lexeme),
        (SELECT count(*) FROM memory_terms AS m WHERE m.lexeme = w.lexeme)::float8
    ) AS df
    FROM wanted AS w, stored AS st
), idf AS MATERIALIZED (
    SELECT d.lexeme, ln(1 + (greatest(st.n - d.df, 0) + 0.5) / (d.df + 0.5))::real AS idf
    FROM counted AS d, stored AS st
), floor AS MATERIALIZED (
    SELECT coalesce(max(f.item_id), 0) AS id
    FROM plan, wanted AS w,
         LATERAL (SELECT m.item_id FROM memory_terms AS m WHERE m.lexeme = w.lexeme
                  ORDER BY m.item_id DESC
                  OFFSET greatest(:rank_limit / (SELECT count(*) FROM wanted) - 1, 0) LIMIT 1) AS f
    WHERE NOT plan.selective AND NOT plan.small
)
SELECT p.item_id, sum(p.weight * i.idf) AS score
FROM idf AS i, floor,
     LATERAL (SELECT m.item_id, m.weight FROM memory_terms AS m
              WHERE m.lexeme = i.lexeme AND m.item_id >= floor.id) AS p
GROUP BY p.item_id
ORDER BY score DESC, p.item_id DESC"""  # noqa: S608 (constant text: the query's words are parameters)
_CHOSEN = f"(WITH {_LEXEMES} SELECT coalesce(array_agg(lexeme ORDER BY lexeme), '{{}}') FROM wanted)"  # noqa: S608


def selective_lexemes(terms: Sequence[str]) -> sa.ColumnElement[Any]:
    """The lexemes ``keyword_select`` ranks for ``terms``: without those of words found in more
    than ``COMMON_SHARE`` of the items when rarer ones are there."""
    from steward.memory.hybrid import COMMON_SHARE

    chosen = sa.text(_CHOSEN).bindparams(
        sa.bindparam("terms", list(terms), type_=postgresql.ARRAY(sa.Text)),
        sa.bindparam("common_share", COMMON_SHARE, type_=sa.Float),
    )
    lexemes: postgresql.ARRAY[Any] = postgresql.ARRAY(sa.Text)
    return sa.cast(chosen.columns(sa.column("q", lexemes)).scalar_subquery(), lexemes)


def vector_literal(vector: Vector) -> str:
    """A vector as pgvector's text form, ``[0.1,0.2,...]``."""
    return "[" + ",".join(repr(float(x)) for x in np.asarray(vector, dtype=np.float32).reshape(-1)) + "]"


# A search whose scope (with its filters) holds at most ``Tuning.pg_exact_items`` items, or
# ``pg_exact_share`` of all items, is an exact scan: the HNSW graph would have to walk past the
# other scopes' vectors to find enough of its own, where the exact scan reads only these. HNSW's
# candidate list per search (``hnsw.ef_search``) is ``pg_ef_factor`` times the results asked
# for, within pgvector's bounds:
_EF_RANGE = (40, 1_000)
#: How long a process trusts what it read of the catalogue (the store's size, a missing index).
_CATALOGUE_S = 60.0
#: Scopes whose size ``_small`` remembers (a dict cleared when full).
_MAX_SCOPES_SEEN = 10_000
#: The key of a connection's ``info`` that holds the ``hnsw.ef_search`` its session was given.
_HNSW_SET = "steward.hnsw_ef_search"
#: pgvector's first version with iterative index scans (a filtered search that does not starve).
_ITERATIVE = (0, 8, 0)


def sql_string(value: str) -> str:
    """``value`` as an SQL string literal. Safe only with ``standard_conforming_strings`` on
    (``choose_index`` checks it): a backslash is then an ordinary character, and a doubled quote
    is the only escape, so no value can end the literal early."""
    if "\x00" in value:
        raise ValueError("a NUL character cannot be in a PostgreSQL string")
    return "'" + value.replace("'", "''") + "'"


def hnsw_index_name(model: str, dim: int) -> str:
    """The HNSW index of one model's vectors: a name from a hash, whatever the model is called."""
    return "ix_memory_hnsw_" + hashlib.sha256(f"{model}\x00{dim}".encode()).hexdigest()[:16]


class PgVectorIndex:
    """Cosine search in PostgreSQL with pgvector, under the query's own WHERE.

    Each (model, dimension) gets a partial HNSW index on ``embedding::vector(dim)`` when its
    vectors are first stored; a search over a scope of more than ``pg_exact_items`` items walks
    it with an iterative scan (the scope's join and filters stay in the same SQL), and a smaller
    scope, or one the walk could not fill, is scanned exactly.

    Near-duplicate checks of a batch of new items compare each with every older item of its
    scope: one matrix product in NumPy, against a scan per item in SQL, so they use the NumPy
    copy of the scope (kept as ``NumPyIndex`` keeps it)."""

    name = "pgvector"

    def __init__(self, *, ann: bool = True, tuning: Tuning | None = None) -> None:
        self._tuning = tuning if tuning is not None else Tuning()
        self._numpy = NumPyIndex(self._tuning)
        self._ann = ann  # HNSW indexes made and used (pgvector >= 0.8, literals safe to write)
        self._has_index: dict[tuple[str, int], tuple[bool, float]] = {}  # (model, dim): (found, when)
        self._size: tuple[int, float] = (0, -math.inf)  # the store's items (estimate), when read
        # scope: ((its generation, the bound), whether it was small then)
        self._small_seen: dict[Hashable, tuple[tuple[int, int], bool]] = {}

    async def search(self, conn: AsyncConnection, query: VectorQuery) -> list[tuple[int, float]]:
        rows = await self.search_rows(conn, query, [memory_items.c.id])
        return [(int(row[0]), float(row[-1])) for row in rows]

    async def search_rows(
        self, conn: AsyncConnection, query: VectorQuery, columns: Sequence[sa.ColumnElement[Any]]
    ) -> Sequence[sa.Row[*tuple[Any, ...]]]:
        """``search`` that reads ``columns`` of each item found, then its cosine (``similarity``,
        the last column), best first: a recall gets the rows it may return with the search
        instead of a round trip after it. ``columns`` must start with the item's id."""
        dim = int(query.vector.shape[-1])
        if self._ann and await self._indexed(conn, query.model, dim) and not await self._small(conn, query):
            rows = await self._nearest(conn, query, dim, columns)
            if len(rows) >= query.limit:
                return rows
        return await self._exact(conn, query, dim, columns)

    async def _nearest(
        self, conn: AsyncConnection, query: VectorQuery, dim: int, columns: Sequence[sa.ColumnElement[Any]]
    ) -> list[sa.Row[*tuple[Any, ...]]]:
        """The HNSW walk, continued (``relaxed_order``) until ``limit`` rows pass the WHERE or
        pgvector's ``hnsw.max_scan_tuples`` is reached.

        In a transaction the settings last as it does (a round trip each search). On a connection
        in autocommit (``LongTermMemory.recall``'s) they are the session's: set once per server
        connection and remembered in its ``info``, which lives as long as that connection, where
        a session setting made in a transaction would be undone by the pool's rollback."""
        ef = min(max(query.limit * self._tuning.pg_ef_factor, _EF_RANGE[0]), _EF_RANGE[1])
        options = conn.sync_connection.get_execution_options() if conn.sync_connection is not None else {}
        session = options.get("isolation_level") == "AUTOCOMMIT"
        if not session or conn.info.get(_HNSW_SET) != ef:
            local = "false" if session else "true"
            await conn.execute(
                sa.text(
                    f"SELECT set_config('hnsw.ef_search', :ef, {local}), "
                    f"set_config('hnsw.iterative_scan', 'relaxed_order', {local})"
                ),
                {"ef": str(ef)},
            )
            if session:
                conn.info[_HNSW_SET] = ef
        typed: sa.ColumnElement[object] = sa.literal_column(f"memory_vectors.embedding::vector({dim})")
        distance = typed.op("<=>")(sa.text(f"CAST(:target AS vector({dim}))"))
        select = (
            sa.select(*columns, (1 - distance).label("similarity"))
            .select_from(_joined(query.model))
            # The index's own predicate, written as it: the planner matches it literally.
            .where(
                memory_vectors.c.model == sa.literal_column(sql_string(query.model)),
                memory_vectors.c.dim == sa.literal_column(str(dim)),
                *query.where,
            )
            .order_by(distance)
            .limit(query.limit)
        )
        rows = (await conn.execute(select, {"target": vector_literal(query.vector)})).all()
        # relaxed_order may return near-ties out of order: ordered here as the exact scan orders.
        return sorted(rows, key=lambda row: (-row[-1], -row[0]))

    async def _exact(
        self, conn: AsyncConnection, query: VectorQuery, dim: int, columns: Sequence[sa.ColumnElement[Any]]
    ) -> list[sa.Row[*tuple[Any, ...]]]:
        embedding: sa.ColumnElement[object] = sa.literal_column("memory_vectors.embedding")
        distance = embedding.op("<=>")(sa.text("CAST(:target AS vector)"))
        similarity = (1 - distance).label("similarity")
        select = (
            sa.select(*columns, similarity)
            .select_from(_joined(query.model))
            .where(*query.where, memory_vectors.c.dim == dim, embedding.is_not(None))
            .order_by(similarity.desc(), memory_items.c.id.desc())  # by the output: one distance a row
            .limit(query.limit)
        )
        return list((await conn.execute(select, {"target": vector_literal(query.vector)})).all())

    async def _small(self, conn: AsyncConnection, query: VectorQuery) -> bool:
        """Whether the items ``query.where`` selects are few enough for the exact scan: counted
        only up to that bound, so the count costs what the exact scan would at most. Without
        filters the answer is kept until the scope changes (its generation moves): a round trip
        and a walk over up to ``pg_exact_items`` rows less per recall of an unchanged scope."""
        tuning = self._tuning
        bound = max(tuning.pg_exact_items, int(await self._store_size(conn) * tuning.pg_exact_share))
        seen = (query.generation, bound)
        if not query.filtered and (known := self._small_seen.get(query.key)) is not None and known[0] == seen:
            return known[1]
        some = sa.select(memory_items.c.id).where(*query.where).limit(bound + 1).subquery()
        counted = (await conn.execute(sa.select(sa.func.count()).select_from(some))).scalar_one()
        small = int(counted) <= bound
        if not query.filtered:
            if len(self._small_seen) >= _MAX_SCOPES_SEEN:
                self._small_seen.clear()  # bounded; each scope is counted again once
            self._small_seen[query.key] = (seen, small)
        return small

    async def _store_size(self, conn: AsyncConnection) -> int:
        """The planner's estimate of the items stored (0 before the first ANALYZE), re-read each minute."""
        size, when = self._size
        if time.monotonic() - when > _CATALOGUE_S:
            found = await conn.execute(
                sa.text("SELECT reltuples FROM pg_class WHERE oid = 'memory_items'::regclass")
            )
            size = max(int(found.scalar_one_or_none() or 0), 0)
            self._size = (size, time.monotonic())
        return size

    async def _indexed(self, conn: AsyncConnection, model: str, dim: int) -> bool:
        """Whether the HNSW index of (model, dim) exists; one not found is looked for again a
        minute later (another process may have made it)."""
        found, when = self._has_index.get((model, dim), (False, -math.inf))
        if not found and time.monotonic() - when > _CATALOGUE_S:
            name = hnsw_index_name(model, dim)
            probe = sa.text("SELECT to_regclass(:name) IS NOT NULL")
            found = bool((await conn.execute(probe, {"name": name})).scalar_one())
            self._has_index[(model, dim)] = (found, time.monotonic())
        return found

    async def store(self, conn: AsyncConnection, model: str, vectors: Mapping[str, Vector]) -> None:
        if not vectors:
            return
        await conn.execute(
            sa.text(
                "UPDATE memory_vectors AS v SET embedding = CAST(d.e AS vector) "
                "FROM unnest(CAST(:hashes AS text[]), CAST(:vectors AS text[])) AS d(h, e) "
                "WHERE v.content_hash = d.h AND v.model = :m"
            ),
            {"hashes": list(vectors), "vectors": [vector_literal(v) for v in vectors.values()], "m": model},
        )
        if self._ann:
            for dim in sorted({int(np.asarray(v).reshape(-1).shape[0]) for v in vectors.values()}):
                await self._make_index(conn, model, dim)

    async def _make_index(self, conn: AsyncConnection, model: str, dim: int) -> None:
        """The HNSW index of (model, dim), made in the writer's transaction when missing. Only the
        holder of a transaction lock makes one: a second writer skips it rather than wait, which
        could deadlock with the first (each holding the other's table lock)."""
        if self._has_index.get((model, dim), (False, 0.0))[0]:
            return
        name = hnsw_index_name(model, dim)
        if (await conn.execute(sa.text("SELECT to_regclass(:name) IS NULL"), {"name": name})).scalar_one():
            if not (
                await conn.execute(sa.text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": _LOCK})
            ).scalar():
                return
            ddl = (
                f"CREATE INDEX IF NOT EXISTS {name} ON memory_vectors "
                f"USING hnsw ((embedding::vector({dim})) vector_cosine_ops) "
                f"WHERE model = {sql_string(model)} AND dim = {dim}"
            )
            # Every colon escaped: in sa.text a colon and a word would be a parameter.
            await conn.execute(sa.text(ddl.replace(":", "\\:")))
        self._has_index[(model, dim)] = (True, time.monotonic())

    async def nearest_older(
        self, conn: AsyncConnection, query: VectorQuery, ids: Sequence[int]
    ) -> list[list[tuple[int, float]]]:
        return await self._numpy.nearest_older(conn, query, ids)

    def note(self, key: Hashable, change: CacheChange) -> None:
        self._numpy.note(key, change)


#: The advisory lock (a number of our own) held by the transaction that makes an HNSW index.
_LOCK = 0x5354_4557_484E_5357 & 0x7FFF_FFFF_FFFF_FFFF


def _joined(model: str) -> sa.Join:
    items, vectors = memory_items, memory_vectors
    return items.join(vectors, (vectors.c.content_hash == items.c.content_hash) & (vectors.c.model == model))


async def choose_index(engine: AsyncEngine, tuning: Tuning | None = None) -> VectorIndex:
    """pgvector when the database is PostgreSQL and the extension can be created; else NumPy.
    HNSW indexes are made and used from pgvector 0.8 (iterative scans), with literals written as
    ``standard_conforming_strings`` reads them; before, every search is exact."""
    if engine.dialect.name != "postgresql":
        return NumPyIndex(tuning)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS vector"))
            await conn.execute(
                sa.text("ALTER TABLE memory_vectors ADD COLUMN IF NOT EXISTS embedding vector")
            )
            version = (
                await conn.execute(sa.text("SELECT extversion FROM pg_extension WHERE extname = 'vector'"))
            ).scalar_one()
            strings = (await conn.execute(sa.text("SHOW standard_conforming_strings"))).scalar_one()
    except sa.exc.DBAPIError as exc:
        _log.info("pgvector is not available (%s); vectors are searched with NumPy", str(exc).splitlines()[0])
        return NumPyIndex(tuning)
    index = PgVectorIndex(ann=_version(str(version)) >= _ITERATIVE and strings == "on", tuning=tuning)
    await _backfill(engine, index)
    return index


def _version(text: str) -> tuple[int, ...]:
    parts = [part for part in text.split(".") if part.isdigit()]
    return tuple(int(part) for part in parts)


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
