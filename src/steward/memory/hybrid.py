"""Keyword search over memory items, and the fusion of the keyword and vector lists.

The keyword list is BM25 on SQLite (FTS5's ``bm25()``) and on PostgreSQL (``memory_terms``). The
user's words never reach either query language as syntax: the query is cut into words (letters,
digits), each word is quoted (FTS5) or passed as a bound parameter joined by ``or``
(``websearch_to_tsquery``, which never fails on its input), so ``text:*``, ``NEAR``, quotes and
operators in a query are only words, and a query can neither fail nor widen what is searched.
Words are OR-ed so that an item matching some of them still ranks, below one matching more.

Both lists are fused by reciprocal rank fusion (``steward.embed.fusion``); the caller gives equal
fused scores to the more recently updated item.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from steward.embed.fusion import RRF_K, fuse
from steward.store.schema import memory_items

#: Candidates taken from each list before fusion.
CANDIDATES = 50
#: Keyword matches ranked before the scope's filter, per item wanted (more only when it falls short).
OVERFETCH = 4
#: Words of a query that are searched (a 10 k-character query is cut here, not sent whole).
MAX_TERMS = 32

_WORD = re.compile(r"\w+", re.UNICODE)


# English function words: in a query they match nearly every item, so BM25 would rank the whole
# store for them (153 ms for one question on 42 k items, 0.7 ms without) while they add nearly
# nothing to the order. PostgreSQL's 'english' configuration drops the same kind of words. A query
# made only of them is searched as it is.
_STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves""".split()  # noqa: SIM905 (reads as prose)
)


def query_terms(query: str) -> list[str]:
    """The distinct words of ``query``, case-folded, in order, at most ``MAX_TERMS``; function
    words are left out unless nothing else is there."""
    words = _WORD.findall(query.casefold())
    content = [word for word in words if word not in _STOP_WORDS]
    terms: list[str] = []
    for word in content or words:
        if word not in terms:
            terms.append(word)
            if len(terms) == MAX_TERMS:
                break
    return terms


def fts5_match(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression: each word a quoted string, OR-ed. A word holds no quote
    (``\\w`` only), so quoting cannot be escaped from; quotes are still doubled, in case."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


async def keyword_rows(
    conn: AsyncConnection,
    query: str,
    where: Sequence[sa.ColumnElement[bool]],
    columns: Sequence[sa.ColumnElement[Any]],
    *,
    limit: int = CANDIDATES,
) -> list[sa.RowMapping]:
    """The ``columns`` of the items matching ``query``'s words under ``where`` (scope,
    visibility, filters), best first."""
    terms = query_terms(query)
    if not terms:
        return []
    items = memory_items
    if conn.dialect.name == "sqlite":
        terms, bounded = await _keyword_plan(conn, terms)
        fts = sa.table("memory_fts", sa.column("rowid", sa.Integer))
        match = sa.literal_column("memory_fts").op("MATCH")(fts5_match(terms))
        rank = sa.func.bm25(sa.literal_column("memory_fts"))  # lower is better
        ranked = sa.select(fts.c.rowid.label("item_id"), rank.label("score")).where(match)
        if bounded:  # rank the newest RANK_LIMIT matches: FTS5 seeks to the rowid, scores no more
            newest = fts.alias("newest")
            floor = (
                sa.select(newest.c.rowid)
                .where(sa.literal_column("newest.memory_fts").op("MATCH")(fts5_match(terms)))
                .order_by(newest.c.rowid.desc())
                .limit(1)
                .offset(RANK_LIMIT - 1)
                .scalar_subquery()
            )
            ranked = ranked.where(fts.c.rowid >= sa.func.coalesce(floor, 0))
        # Ranked inside FTS5 first, then joined: joining every match to its item before sorting
        # cost twice the ranking itself (100 k items: 26 ms against 10 ms at the median). The
        # best OVERFETCH x limit matches usually hold ``limit`` items of the scope; when the
        # scope and filters leave fewer, every match is joined and ranked as before.
        for fetch in (limit * OVERFETCH, None):
            top = (ranked.order_by(rank) if fetch is None else ranked.order_by(rank).limit(fetch)).subquery()
            select = (
                sa.select(*columns)
                .select_from(top.join(items, items.c.id == top.c.item_id))
                .where(*where)
                .order_by(top.c.score, items.c.updated_at.desc(), items.c.id.desc())
                .limit(limit)
            )
            rows = list((await conn.execute(select)).mappings().all())
            if len(rows) >= limit:
                break
        return rows
    from steward.memory.pgsearch import SCORED, keyword_select

    # As on SQLite: the best OVERFETCH x limit matches of the store, then every match when the
    # scope and filters leave fewer than ``limit`` of them, unless the first pass ranked them all
    # already (a question of rare words: one statement, not the same ranking twice).
    rows = []
    for best in (limit * OVERFETCH, None):
        select = keyword_select(terms, where, columns, top=best).limit(limit)
        rows = list((await conn.execute(select)).mappings().all())
        if len(rows) >= limit or (best is not None and rows and rows[0][SCORED] < best):
            break
    return rows


#: A word found in more than this share of the items is left out of the keyword query when
#: rarer words are there: BM25 gives it little weight, yet FTS5 must score every item it matches
#: (one question on 100 k items: 90 ms with such words, under 1 ms without).
COMMON_SHARE = 0.05
#: When the searched words match more items than this (every word common), BM25 ranks only the
#: newest this many of them: scoring 175 k matches took 0.3-1.5 s at 100 k items, 5 k ~35 ms
#: on a loaded machine. Such a query's words say little about which older item is meant.
RANK_LIMIT = 5000


async def _selective_terms(conn: AsyncConnection, terms: list[str]) -> list[str]:
    """``terms`` without the words too common to tell items apart (all of them when every word is
    common)."""
    return (await _keyword_plan(conn, terms))[0]


async def _keyword_plan(conn: AsyncConnection, terms: list[str]) -> tuple[list[str], bool]:
    """The words to search (``_selective_terms``) and whether they match more than
    ``RANK_LIMIT`` items (counted word by word: a bound the union never passes). A word's items
    are counted from the index only, and only up to what decides: counting a word found in every
    item would cost as much as ranking it."""
    total = (await conn.execute(sa.select(sa.func.max(memory_items.c.id)))).scalar_one_or_none() or 0
    if total < 200:  # a small store: every word is cheap to rank
        return terms, False
    cap = int(total * COMMON_SHARE) + 1  # a word with this many items is common
    upto = max(cap, RANK_LIMIT + 1)  # enough to know whether the words pass RANK_LIMIT
    store = str(conn.engine.url)
    known = {term: _known_count(store, term, total, upto) for term in terms}
    missing = [term for term, count in known.items() if count is None]
    if missing:
        counts = [
            sa.select(sa.func.count())
            .select_from(
                sa.select(sa.literal(1))
                .select_from(sa.table("memory_fts"))
                .where(sa.literal_column("memory_fts").op("MATCH")(fts5_match([term])))
                .limit(upto)
                .subquery()
            )
            .scalar_subquery()
            for term in missing
        ]
        for term, count in zip(missing, (await conn.execute(sa.select(*counts))).one(), strict=True):
            known[term] = count
            _remember_count(store, term, total, upto, count)
    found = [known[term] or 0 for term in terms]
    rare = [(term, count) for term, count in zip(terms, found, strict=True) if count < cap]
    if rare:
        return [term for term, _ in rare], sum(count for _, count in rare) > RANK_LIMIT
    return terms, sum(found) > RANK_LIMIT


# How many items hold a word, by store and word: (count, items in the store then, the count's
# bound). Counting a common word reads thousands of index entries, and common words are the ones
# that come back query after query; whether a word is common changes only as the store grows.
_COUNTS: dict[tuple[str, str], tuple[int, int, int]] = {}
_MAX_COUNTS = 20_000
#: A count is reused while the store is within this factor of its size when the word was counted.
_COUNT_DRIFT = 1.2


def _known_count(store: str, term: str, total: int, upto: int) -> int | None:
    """A word's remembered count, when still good for deciding at ``total`` items, else None."""
    entry = _COUNTS.get((store, term))
    if entry is None:
        return None
    count, then, bound = entry
    if not then / _COUNT_DRIFT <= total <= then * _COUNT_DRIFT:
        return None
    if count >= bound and bound < upto:  # "at least bound" no longer decides
        return None
    return min(count, upto)


def _remember_count(store: str, term: str, total: int, upto: int, count: int) -> None:
    if len(_COUNTS) >= _MAX_COUNTS:
        _COUNTS.clear()  # bounded; the common words are counted again at once
    _COUNTS[(store, term)] = (int(count), total, upto)


@dataclass(frozen=True, slots=True)
class Ranked:
    """One item of the fused list and why it is there."""

    id: int
    score: float
    keyword_rank: int | None
    vector_rank: int | None
    similarity: float | None


def fuse_lists(
    keyword: Sequence[int],
    vector: Sequence[tuple[int, float]],
    *,
    k: int = RRF_K,
    keyword_weight: float = 1.0,
) -> list[Ranked]:
    """The keyword ids and the (id, cosine) vector hits, fused by RRF, best first (the caller
    breaks equal scores by recency). ``[memory] rrf_k`` and ``keyword_weight`` set ``k`` and
    the keyword list's share."""
    similarity = dict(vector)
    fused = fuse(list(keyword), [item for item, _ in vector], k=k, weights=(keyword_weight, 1.0))
    return [Ranked(f.key, f.score, f.ranks[0], f.ranks[1], similarity.get(f.key)) for f in fused]
