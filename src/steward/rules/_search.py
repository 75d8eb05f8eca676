"""Rank documents for a topic: SQLite FTS5 with bm25 over title, path and content.

The query is tokenized here and every term is quoted, so characters that mean something to
FTS5 (quotes, ``*``, ``-``, ``:``, parentheses, ``NEAR``) cannot break it. Each term matches
as a prefix ("test" finds "testing"). Python builds without FTS5 fall back to counting terms.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

MAX_TERMS = 16
_TERM_CHARS = 64
# FTS5's default tokenizer (unicode61) splits on everything but letters and digits; so do we.
_TERM = re.compile(r"[^\W_]+")
# How much a match counts per column: a hit in the title says most about what a document is.
_WEIGHTS = (10.0, 5.0, 1.0)


@dataclass(slots=True, frozen=True)
class Entry:
    title: str
    path: str
    content: str


def query_terms(topic: str) -> list[str]:
    """The distinct lower-case words of ``topic``, in order, at most ``MAX_TERMS``."""
    terms: list[str] = []
    for found in _TERM.findall(topic.lower()):
        word = found[:_TERM_CHARS]
        if word not in terms:
            terms.append(word)
    return terms[:MAX_TERMS]


def rank(entries: Sequence[Entry], topic: str) -> list[int]:
    """Indices of the entries matching any word of ``topic``, best first (ties: input order)."""
    terms = query_terms(topic)
    if not terms or not entries:
        return []
    import sqlite3  # only when a topic is looked up

    try:
        return _rank_fts(entries, terms)
    except sqlite3.OperationalError:  # no FTS5 in this SQLite build
        return _rank_plain(entries, terms)


def _rank_fts(entries: Sequence[Entry], terms: list[str]) -> list[int]:
    import sqlite3

    query = " OR ".join(f'"{term}"*' for term in terms)
    connection = sqlite3.connect(":memory:")
    try:
        connection.execute(
            "CREATE VIRTUAL TABLE docs USING "
            "fts5(title, path, content, tokenize='unicode61 remove_diacritics 2')"
        )
        connection.executemany(
            "INSERT INTO docs(rowid, title, path, content) VALUES (?, ?, ?, ?)",
            [(n, e.title, e.path, e.content) for n, e in enumerate(entries)],
        )
        rows = connection.execute(
            "SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY bm25(docs, ?, ?, ?), rowid",
            (query, *_WEIGHTS),
        ).fetchall()
    finally:
        connection.close()
    return [int(row[0]) for row in rows]


def _rank_plain(entries: Sequence[Entry], terms: list[str]) -> list[int]:
    scored: list[tuple[float, int]] = []
    for n, entry in enumerate(entries):
        columns = (entry.title.lower(), entry.path.lower(), entry.content.lower())
        score = 0.0
        for term in terms:
            pattern = re.compile(rf"(?<![^\W_]){re.escape(term)}")
            score += sum(w * len(pattern.findall(text)) for w, text in zip(_WEIGHTS, columns, strict=True))
        if score:
            scored.append((-score, n))
    return [n for _, n in sorted(scored)]
