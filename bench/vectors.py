"""Vector search of long-term memory on SQLite (``NumPyIndex``): exact against partitioned.

    .venv/bin/python bench/vectors.py [--sizes 1000,10000,100000] [--data hash,clustered]
        [--queries 200] [--sqlite 100000] [--skip-memory]

Part one, in memory (``ScopeMatrix``, no database), for each data set and size:

* ``group s``: time to train the partition (k-means on a sample) and reorder the rows, paid once
  after a load and again when the scope has doubled (``-`` while the scope is searched exactly);
* exact and partitioned query p50/p95 (ms) for the 50 nearest, and recall@50: the share of the
  exact top 50 the partitioned search returns (mean over the queries);
* ``near/s``: new items checked per second by ``nearest_older`` (the merge of near-duplicates
  during a bulk import: the last 2,000 rows against the older ones), and how often its best
  match is the exact best.

Data: ``hash`` is the test embedder's vectors (``steward.testing.fake_embed``, 384 values:
texts that share words are close) of generated sentences over a Zipf vocabulary; ``clustered``
is 384-dim unit vectors drawn around 2,000 random centres (structure like a real embedder's,
without a model). Queries are new texts / new draws, not stored rows.

Part two (``--sqlite N``): N items (the same sentences) written to a SQLite file in bulk, their
hash vectors stored, then, in this process, the first hybrid recall (it loads the scope's
vectors and groups them) and recall p50/p95 (ms) keyword-only and hybrid through
``LongTermMemory.recall`` (k=10; query vectors embedded beforehand). Figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from steward.embed.base import Vectors, content_hash
from steward.memory import vectors as vec
from steward.memory.longterm import LongTermMemory, Scope
from steward.memory.vectors import ScopeMatrix, VectorQuery
from steward.testing.fake_embed import HashEmbedder, hash_vectors

DIM = 384
TOP = 50
SCOPE = Scope(user="bench", persona="", workspace="vectors")
_SYLLABLES = ("ka", "lo", "mi", "ren", "to", "sa", "vel", "dor", "an", "is", "por", "chu", "bel", "tri", "ox")
_FUNCTION = ("the", "a", "of", "to", "and", "in", "for", "with", "on", "at", "my", "is", "was")


def vocabulary(rng: np.random.Generator, size: int = 20_000) -> list[str]:
    words = {"".join(rng.choice(_SYLLABLES, size=int(rng.integers(2, 5)))) for _ in range(size * 2)}
    return sorted(words)[:size]


def sentences(count: int, rng: np.random.Generator, words: Sequence[str]) -> list[str]:
    """Sentences of 6-24 content words drawn by a Zipf law, with function words between."""
    out: list[str] = []
    for _ in range(count):
        length = int(rng.integers(6, 25))
        picks = np.minimum(rng.zipf(1.2, size=length), len(words)) - 1
        parts = [f"{rng.choice(_FUNCTION)} {words[i]}" if rng.random() < 0.4 else words[i] for i in picks]
        out.append(" ".join(parts) + ".")
    return out


def clustered(count: int, rng: np.random.Generator, centres: npt.NDArray[np.float32]) -> Vectors:
    picks = rng.integers(0, centres.shape[0], size=count)
    points = centres[picks] + rng.normal(0, 0.045, size=(count, DIM)).astype(np.float32)
    out: Vectors = (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)
    return out


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def exact_top(data: Vectors, ids: npt.NDArray[np.int64], vector: Vectors, limit: int) -> list[int]:
    sims = data @ vector
    part = np.argpartition(-sims, limit - 1)[:limit]
    return [int(ids[i]) for i in part[np.lexsort((-ids[part], -sims[part]))]]


def query(vector: Vectors, limit: int = TOP) -> VectorQuery:
    return VectorQuery(
        key="bench", scope_where=(), where=(), filtered=False, model="m", vector=vector, limit=limit, now=0.0,
        generation=1,
    )  # fmt: skip


def plant_duplicates(data: Vectors, fresh: int, rng: np.random.Generator) -> Vectors:
    """``data`` with its last ``fresh`` rows made near-copies (cosine ~0.97) of earlier rows."""
    out = data.copy()
    n = data.shape[0]
    sources = rng.integers(0, n - fresh, size=fresh)
    noisy = data[sources] + rng.normal(0, 0.25 / DIM**0.5, size=(fresh, DIM)).astype(np.float32)
    out[n - fresh :] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
    return out


def in_memory(name: str, data: Vectors, queries: Vectors) -> str:
    n = data.shape[0]
    fresh = min(2000, n // 2)
    data = plant_duplicates(data, fresh, np.random.default_rng(n))
    ids = np.arange(1, n + 1, dtype=np.int64)
    matrix = ScopeMatrix(1, DIM)
    matrix.add(ids.tolist(), data, [np.inf] * n)
    started = time.perf_counter()
    part = matrix.fresh_partition()
    group = f"{time.perf_counter() - started:.2f}" if part is not None else "-"
    exact_ms: list[float] = []
    part_ms: list[float] = []
    overlap: list[float] = []
    for vector in queries:
        started = time.perf_counter()
        truth = exact_top(data, ids, vector, TOP)
        exact_ms.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        found = matrix.search(query(vector), None)
        part_ms.append((time.perf_counter() - started) * 1000)
        overlap.append(len(set(truth) & {i for i, _ in found}) / len(truth))
    new_ids = ids[-fresh:].tolist()
    started = time.perf_counter()
    near = matrix.nearest_older(query(data[-fresh:], 3), new_ids)
    rate = fresh / (time.perf_counter() - started)
    agree = 0  # the planted duplicate (or a row as close) found
    for row, hits in zip(range(n - fresh, n), near, strict=True):
        best = float(np.max(data[:row] @ data[row]))
        agree += bool(hits) and hits[0][1] >= best - 1e-6
    return (
        f"| {name} | {n:,} | {group} | {pct(exact_ms, 0.5):.2f} / {pct(exact_ms, 0.95):.2f} | "
        f"{pct(part_ms, 0.5):.2f} / {pct(part_ms, 0.95):.2f} | {statistics.fmean(overlap):.3f} | "
        f"{rate:,.0f} | {agree / fresh:.3f} |"
    )


async def sqlite_run(
    size: int, texts: Sequence[str], vectors: Vectors, questions: Sequence[str]
) -> list[str]:
    import sqlalchemy as sa

    from steward.store.engine import make_engine
    from steward.store.schema import memory_items, memory_scopes, memory_vectors, migrate

    out: list[str] = []
    with tempfile.TemporaryDirectory() as directory:
        engine = make_engine(f"sqlite:///{Path(directory) / 'memory.db'}")
        try:
            await migrate(engine)
            now = time.time()
            scope = {
                "scope_user": SCOPE.user,
                "scope_persona": SCOPE.persona,
                "scope_workspace": SCOPE.workspace,
            }
            started = time.perf_counter()
            async with engine.begin() as conn:
                for start in range(0, size, 5000):
                    chunk = range(start, min(size, start + 5000))
                    await conn.execute(
                        memory_items.insert(),
                        [
                            {**scope, "kind": "fact", "text": texts[i], "tags": "", "created_at": now + i,
                             "updated_at": now + i, "content_hash": content_hash(texts[i])}
                            for i in chunk
                        ],
                    )  # fmt: skip
                    await conn.execute(
                        memory_vectors.insert().prefix_with("OR IGNORE"),
                        [
                            {"content_hash": content_hash(texts[i]), "model": f"hash:{DIM}", "dim": DIM,
                             "vector": vectors[i].astype("<f4").tobytes(), "created_at": now}
                            for i in chunk
                        ],
                    )  # fmt: skip
                await conn.execute(memory_scopes.insert().values(**scope, generation=1))
            out.append(f"| write {size:,} items in bulk | {time.perf_counter() - started:.1f} s |")
            embedder = HashEmbedder(DIM)
            hybrid = LongTermMemory(engine, embedder=embedder)
            keyword = LongTermMemory(engine)
            started = time.perf_counter()
            await hybrid.recall(SCOPE, questions[0], k=10)
            out.append(f"| first hybrid recall (loads {size:,} vectors, groups them) | {time.perf_counter() - started:.2f} s |")  # fmt: skip
            for label, memory in (("keyword", keyword), ("hybrid", hybrid)):
                timings: list[float] = []
                for question in questions:
                    started = time.perf_counter()
                    await memory.recall(SCOPE, question, k=10)
                    timings.append((time.perf_counter() - started) * 1000)
                out.append(
                    f"| {label} recall p50 / p95 | {pct(timings, 0.5):.1f} / {pct(timings, 0.95):.1f} ms |"
                )
            async with engine.connect() as conn:
                count = (
                    await conn.execute(sa.select(sa.func.count()).select_from(memory_items))
                ).scalar_one()
            out.append(f"| items stored | {count:,} |")
        finally:
            await engine.dispose()
    return out


def arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--data", default="hash,clustered")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--sqlite", type=int, default=100_000, help="items for part two (0: skip it)")
    parser.add_argument("--skip-memory", action="store_true", help="only part two")
    return parser.parse_args(argv)


async def main(argv: Sequence[str] | None = None) -> None:
    args = arguments(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    rng = np.random.default_rng(22)
    words = vocabulary(rng)
    largest = max([*sizes, args.sqlite]) if not args.skip_memory else args.sqlite
    started = time.perf_counter()
    texts = sentences(largest, rng, words)
    questions = [" ".join(s.split()[:6]) for s in sentences(args.queries, rng, words)]
    need_hash = "hash" in args.data or args.sqlite
    hashed = hash_vectors(texts, DIM) if need_hash else np.zeros((0, DIM), np.float32)
    print(f"data ready in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    print(
        f"exact up to {vec.EXACT_LIMIT:,} rows; a search reads {vec.PROBE_SHARE:.0%} of the lists, a near check {vec.NPROBE_NEAR}\n"
    )
    if not args.skip_memory:
        print("| data | rows | group s | exact p50 / p95 ms | partitioned p50 / p95 ms | recall@50 | near/s | duplicates found |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|")
        centres = rng.normal(size=(2000, DIM)).astype(np.float32)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        for kind in args.data.split(","):
            for size in sizes:
                if kind == "hash":
                    data, probe = hashed[:size], hash_vectors(questions, DIM)
                else:
                    data, probe = clustered(size, rng, centres), clustered(args.queries, rng, centres)
                print(in_memory(kind, data, probe), flush=True)
    if args.sqlite:
        print(f"\nSQLite, {args.sqlite:,} items, hash:{DIM} vectors, {len(questions)} questions\n")
        print("| measure | figure |\n|---|---|")
        for line in await sqlite_run(args.sqlite, texts, hashed[: args.sqlite], questions):
            print(line, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
