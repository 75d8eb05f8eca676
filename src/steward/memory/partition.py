"""An inverted-file partition of a scope's vectors, so a search reads a few lists, not all rows.

An exact search over 100 k vectors of 384 floats reads 153 MB per query (~12 ms, memory-bound).
Here the rows are grouped by their nearest of ~sqrt(n) centroids (spherical k-means trained on a
sample), stored list after list in one matrix; a query scores the centroids, then exactly the
rows of its ``nprobe`` nearest lists. Rows added after the grouping (the *tail*) are always
scored exactly, so a new item is found at once; the tail is grouped in when it grows.

Pure NumPy, no I/O: the caller (``steward.memory.vectors``) owns the rows and their masks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]
Ints = npt.NDArray[np.int64]

#: k-means rounds over the training sample; quality stops improving noticeably after a few.
TRAIN_ROUNDS = 8
#: Training points per list (the sample is at most ``lists`` times this).
SAMPLE_PER_LIST = 40
#: Rows scored per matrix product when assigning rows to lists (bounds the temporary).
_ASSIGN_CHUNK = 8192


def list_count(rows: int) -> int:
    """How many lists for ``rows`` rows: about sqrt(n), so a list and the centroids cost alike."""
    return int(min(4096, max(16, round(rows**0.5))))


@dataclass(frozen=True, slots=True)
class Partition:
    """Lists over rows ``[0, packed)`` of the owner's matrix; list ``l`` is rows
    ``offsets[l]:offsets[l + 1]``. ``trained`` is how many rows the centroids were trained at."""

    centroids: Vector
    offsets: Ints
    packed: int
    trained: int

    def lists_for(self, share: float) -> int:
        """How many lists make ``share`` of them (at least one)."""
        return max(1, math.ceil(int(self.centroids.shape[0]) * share))

    def probe(self, vectors: Vector, nprobe: int) -> Ints:
        """For each row of ``vectors`` (2-D), the ``nprobe`` nearest lists, nearest first."""
        lists = self.centroids.shape[0]
        nprobe = min(nprobe, lists)
        sims = vectors @ self.centroids.T
        if nprobe < lists:
            top = np.argpartition(-sims, nprobe - 1, axis=1)[:, :nprobe]
        else:
            top = np.broadcast_to(np.arange(lists), sims.shape).copy()
        order = np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1)
        return np.take_along_axis(top, order, axis=1).astype(np.int64)

    def segments(self, lists: Ints) -> list[tuple[int, int]]:
        """The (start, end) rows of each of ``lists``, in order."""
        return list(zip(self.offsets[lists].tolist(), self.offsets[lists + 1].tolist(), strict=True))


def train(data: Vector, lists: int, *, rows: Ints | None = None, seed: int = 0) -> Vector:
    """``lists`` unit centroids by spherical k-means over a sample of ``data``'s (unit) rows, or
    of its ``rows`` only. Deterministic for a given ``data`` and ``seed``."""
    rng = np.random.default_rng(seed)
    pool = np.arange(data.shape[0]) if rows is None else rows
    n = pool.shape[0]
    lists = min(lists, n)
    take = min(n, lists * SAMPLE_PER_LIST)
    points = data[np.sort(pool[rng.choice(n, size=take, replace=False)])]
    centroids = points[rng.choice(points.shape[0], size=lists, replace=False)].copy()
    for _ in range(TRAIN_ROUNDS):
        labels = assign(points, centroids)
        order = np.argsort(labels, kind="stable")
        sorted_labels = labels[order]
        present, starts = np.unique(sorted_labels, return_index=True)
        sums = np.add.reduceat(points[order], starts, axis=0)
        centroids[present] = sums
        empty = np.setdiff1d(np.arange(lists), present)
        if empty.size:  # an empty list takes a random point: every list stays useful
            centroids[empty] = points[rng.choice(points.shape[0], size=empty.size, replace=False)]
        norms = np.linalg.norm(centroids, axis=1, keepdims=True)
        centroids /= np.where(norms > 0, norms, 1.0)
    out: Vector = centroids.astype(np.float32)
    return out


def assign(data: Vector, centroids: Vector) -> Ints:
    """The nearest centroid (highest dot product) of each row of ``data``."""
    out = np.empty(data.shape[0], dtype=np.int64)
    for start in range(0, data.shape[0], _ASSIGN_CHUNK):
        block = data[start : start + _ASSIGN_CHUNK] @ centroids.T
        out[start : start + block.shape[0]] = np.argmax(block, axis=1)
    return out


def layout(labels: Ints, lists: int) -> tuple[Ints, Ints]:
    """The row order that puts the lists one after another, and each list's start offset (plus
    the end): ``(order, offsets)``."""
    order = np.argsort(labels, kind="stable").astype(np.int64)
    offsets = np.zeros(lists + 1, dtype=np.int64)
    np.cumsum(np.bincount(labels, minlength=lists), out=offsets[1:])
    return order, offsets
