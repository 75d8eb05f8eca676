"""Grouping a large scope's vectors runs in a worker thread, not on the event loop, one grouping
at a time; a change made while it runs evicts the matrix instead of editing it under the thread."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from steward.memory import vectors
from steward.memory.partition import Partition
from steward.memory.vectors import CacheChange, NumPyIndex, ScopeMatrix, Tuning

DIM = 16


SMALL = Tuning(exact_limit=200)  # a few hundred rows are grouped


@pytest.fixture(autouse=True)
def small_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vectors, "TAIL_LIMIT", 100)


class _Watched(ScopeMatrix):
    """Records the threads it was grouped on; can be held mid-grouping until released."""

    def __init__(self) -> None:
        super().__init__(1, DIM, SMALL)
        self.threads: list[int] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def fresh_partition(self) -> Partition | None:
        if self.needs_grouping():
            self.threads.append(threading.get_ident())
            self.started.set()
            self.release.wait(timeout=60)
        return super().fresh_partition()


def _busy(matrix: ScopeMatrix) -> bool:
    return matrix.busy


def _filled(count: int = 600) -> _Watched:
    rng = np.random.default_rng(3)
    data = rng.normal(size=(count, DIM)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    matrix = _Watched()
    matrix.add(list(range(1, count + 1)), data, [np.inf] * count)
    return matrix


async def test_grouping_runs_off_the_event_loop_once() -> None:
    matrix = _filled()
    assert matrix.needs_grouping()
    await asyncio.gather(*(vectors._ready(matrix) for _ in range(3)))
    assert matrix.partition is not None and not matrix.needs_grouping()
    assert len(matrix.threads) == 1  # three searches waited for one grouping
    assert matrix.threads[0] != threading.get_ident()


async def test_a_change_during_grouping_evicts_the_matrix() -> None:
    index = NumPyIndex(SMALL)
    matrix = _filled()
    index._cache[("scope", "m")] = matrix
    matrix.release.clear()
    grouping = asyncio.ensure_future(vectors._ready(matrix))
    await asyncio.to_thread(matrix.started.wait, 60)  # the thread is mid-grouping
    assert _busy(matrix)
    index.note("scope", CacheChange(before=1, after=2, removed={5}))
    assert ("scope", "m") not in index._cache  # reloaded at the next search, not edited now
    assert 5 in matrix.row
    matrix.release.set()
    await grouping
    assert not _busy(matrix) and matrix.partition is not None
