"""Reciprocal rank fusion: one ranking from several, by rank alone.

Scores of BM25 and of cosine similarity live on different scales; their ranks do not. An item
ranked r in a list earns 1 / (k + r) from it (r from 1), summed over the lists it appears in.
k = 60 is the constant of the method's paper and of most systems that use it; it keeps the top
of one list from outweighing agreement between lists.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

RRF_K = 60


@dataclass(frozen=True, slots=True)
class Fused(Generic[K]):
    key: K
    score: float
    ranks: tuple[int | None, ...]  # the key's 1-based rank in each list given, None where absent


def fuse(*rankings: Sequence[K], k: int = RRF_K, weights: Sequence[float] | None = None) -> list[Fused[K]]:
    """The keys of ``rankings`` (each best first) by fused score, best first. ``weights`` (one
    per list, default 1) scale each list's share. Ties keep the order in which keys were first
    met, list by list, so a caller that lists newer items first gets recency as the tie-breaker."""
    if weights is not None and len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    scale = list(weights) if weights is not None else [1.0] * len(rankings)
    ranks: dict[K, list[int | None]] = {}
    for which, ranking in enumerate(rankings):
        for position, key in enumerate(ranking, start=1):
            slot = ranks.setdefault(key, [None] * len(rankings))
            if slot[which] is None:  # a key listed twice keeps its better rank
                slot[which] = position
    scored = [
        Fused(key, sum(w / (k + r) for w, r in zip(scale, found, strict=True) if r is not None), tuple(found))
        for key, found in ranks.items()
    ]
    # sorted() is stable: equal scores stay in first-met order.
    return sorted(scored, key=lambda f: -f.score)
