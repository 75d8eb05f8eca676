"""NumPy vector search above the exact size: the partition finds what it must, filters stay exact,
removed and expired rows never come back, new rows are found at once, and a bulk import's
near-duplicate check uses the same lists. The exact size is lowered so small data exercises it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from steward.config import MemorySettings
from steward.memory import vectors
from steward.memory.longterm import LongTermMemory, Scope
from steward.memory.partition import list_count
from steward.memory.vectors import NumPyIndex, ScopeMatrix, Tuning, VectorQuery
from steward.store.engine import make_engine
from steward.store.schema import migrate
from steward.testing.fake_embed import HashEmbedder

DIM = 32
Vectors = npt.NDArray[np.float32]


#: ``[memory] exact_limit`` lowered (its least) so that a few hundred rows go through the partition.
SMALL = Tuning(exact_limit=200)


@pytest.fixture(autouse=True)
def small_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vectors, "TAIL_LIMIT", 100)


def _clustered(count: int, seed: int) -> Vectors:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, DIM))
    points = centres[rng.integers(0, 40, size=count)] + rng.normal(0, 0.3, size=(count, DIM))
    out: Vectors = (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)
    return out


def _matrix(data: Vectors, expires: float = np.inf) -> ScopeMatrix:
    matrix = ScopeMatrix(1, DIM, SMALL)
    matrix.add(list(range(1, data.shape[0] + 1)), data, [expires] * data.shape[0])
    return matrix


def _query(vector: Vectors, limit: int = 10, now: float = 0.0) -> VectorQuery:
    return VectorQuery(
        key="s", scope_where=(), where=(), filtered=False, model="m", vector=vector, limit=limit, now=now,
        generation=1,
    )  # fmt: skip


def _exact(data: Vectors, vector: Vectors, limit: int, ids: set[int] | None = None) -> list[int]:
    sims = data @ vector
    order = sorted(range(len(sims)), key=lambda i: (-sims[i], -i))
    return [i + 1 for i in order if ids is None or i + 1 in ids][:limit]


def test_a_scope_up_to_the_exact_limit_is_searched_exactly() -> None:
    data = _clustered(200, seed=1)
    matrix = _matrix(data)
    for vector in _clustered(20, seed=2):
        assert [i for i, _ in matrix.search(_query(vector), None)] == _exact(data, vector, 10)
    assert matrix.partition is None


def test_above_the_limit_rows_are_grouped_and_each_stored_vector_finds_itself() -> None:
    data = _clustered(3000, seed=3)
    matrix = _matrix(data)
    for row in range(0, 3000, 150):
        assert matrix.search(_query(data[row], limit=1), None)[0][0] == row + 1
    part = matrix.partition
    assert part is not None and part.centroids.shape[0] == list_count(3000) and part.packed == 3000
    assert sorted(matrix.ids[: matrix.count].tolist()) == list(range(1, 3001))  # every row in one list


def test_the_partitioned_top_ten_mostly_matches_exact_on_clustered_data() -> None:
    data = _clustered(3000, seed=4)
    matrix = _matrix(data)
    overlap = [
        len(set(_exact(data, v, 10)) & {i for i, _ in matrix.search(_query(v), None)}) / 10
        for v in _clustered(50, seed=5)
    ]
    assert matrix.partition is not None
    assert float(np.mean(overlap)) >= 0.9


def test_filters_stay_exact_whether_few_or_many_items_are_allowed() -> None:
    data = _clustered(3000, seed=6)
    matrix = _matrix(data)
    few = set(range(1, 3001, 20))  # 150: scored one by one, exactly
    many = set(range(1, 3001, 2))  # 1500: through the lists, then masked
    for vector in _clustered(10, seed=7):
        assert [i for i, _ in matrix.search(_query(vector), few)] == _exact(data, vector, 10, few)
        found = matrix.search(_query(vector), many)
        assert found and {i for i, _ in found} <= many


def test_removed_and_expired_rows_are_never_returned() -> None:
    data = _clustered(3000, seed=8)
    matrix = _matrix(data)
    target = data[41]
    assert matrix.search(_query(target, limit=1), None)[0][0] == 42
    matrix.remove(42)
    assert 42 not in {i for i, _ in matrix.search(_query(target, limit=50), None)}
    matrix.expires[matrix.row[43]] = 5.0
    assert 43 not in {i for i, _ in matrix.search(_query(data[42], limit=50, now=10.0), None)}
    assert 43 in {i for i, _ in matrix.search(_query(data[42], limit=50, now=1.0), None)}


def test_rows_added_after_grouping_are_found_then_grouped_in_then_trained_again() -> None:
    data = _clustered(6000, seed=9)
    matrix = _matrix(data[:1000])
    first = matrix.fresh_partition()
    assert first is not None and first.trained == 1000
    matrix.add([1001], data[1000:1001], [np.inf])  # in the tail: scored exactly
    assert matrix.search(_query(data[1000], limit=1), None)[0][0] == 1001
    matrix.add(list(range(1002, 1201)), data[1001:1200], [np.inf] * 199)  # past TAIL_LIMIT
    assert matrix.search(_query(data[1100], limit=1), None)[0][0] == 1101
    grouped = matrix.partition
    assert grouped is not None and grouped.packed == 1200 and grouped.trained == 1000
    assert grouped.centroids is first.centroids  # grouped in, not trained again
    matrix.add(list(range(1201, 3001)), data[1200:3000], [np.inf] * 1800)  # more than doubled
    assert matrix.search(_query(data[2500], limit=1), None)[0][0] == 2501
    retrained = matrix.partition
    assert retrained is not None and retrained.trained == 3000


def test_a_replaced_row_is_found_under_its_new_vector_only() -> None:
    data = _clustered(3000, seed=10)
    matrix = _matrix(data)
    matrix.fresh_partition()
    matrix.add([7], data[2000:2001], [np.inf])  # item 7 re-embedded: now close to row 2001
    found = matrix.search(_query(data[6], limit=50), None)
    assert 7 not in {i for i, _ in found[:1]}
    assert {i for i, _ in matrix.search(_query(data[2000], limit=2), None)} == {7, 2001}


def test_nearest_older_finds_planted_duplicates_among_older_rows_only() -> None:
    data = _clustered(3000, seed=11)
    rng = np.random.default_rng(12)
    sources = rng.integers(0, 2500, size=300)
    noisy = data[sources] + rng.normal(0, 0.02, size=(300, DIM)).astype(np.float32)
    data[2700:] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
    matrix = _matrix(data)
    new_ids = list(range(2701, 3001))
    near = matrix.nearest_older(_query(data[2700:], limit=3), new_ids)
    assert matrix.partition is not None
    assert all(hits and hits[0][0] == source + 1 for hits, source in zip(near, sources, strict=True))
    assert all(i < new for hits, new in zip(near, new_ids, strict=True) for i, _ in hits)


def test_nearest_older_agrees_with_exact_below_the_limit() -> None:
    data = _clustered(150, seed=13)
    matrix = _matrix(data)
    near = matrix.nearest_older(_query(data[100:], limit=3), list(range(101, 151)))
    for row, hits in zip(range(100, 150), near, strict=True):
        assert [i for i, _ in hits] == _exact(data[:row], data[row], 3)


async def test_recall_through_the_partition_and_after_another_processs_change(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/m.db"
    engine, other_engine = make_engine(url), make_engine(url)
    try:
        await migrate(engine)
        scope = Scope("ada", "", "/app")
        settings = MemorySettings(merge_similarity=1.0, exact_limit=SMALL.exact_limit)
        memory = LongTermMemory(engine, embedder=HashEmbedder(), settings=settings)
        for n in range(400):
            await memory.remember(scope, f"routine log line {n} from worker {n % 7} about queue {n % 13}")
        target = await memory.remember(scope, "the staging database password rotates every ninety days")
        found = await memory.recall(scope, "staging database password rotation", k=3)
        assert found[0].item.id == target.item.id and found[0].vector_rank is not None
        backend = memory._backend  # [memory] exact_limit reached the search: it went through lists
        assert isinstance(backend, NumPyIndex) and [
            m.partition is not None for m in backend._cache.values()
        ] == [True]
        other = LongTermMemory(other_engine, embedder=HashEmbedder(), settings=settings)  # another process
        added = await other.remember(scope, "the kiosk printer jams on glossy paper")
        await other.index_pending()
        assert await other.forget(scope, target.item.id)
        found = await memory.recall(scope, "kiosk printer glossy paper jams", k=3)
        assert found[0].item.id == added.item.id and found[0].vector_rank == 1
        after = await memory.recall(scope, "staging database password rotation", k=50)
        assert target.item.id not in {f.item.id for f in after}
    finally:
        await engine.dispose()
        await other_engine.dispose()
