"""The job queue end to end with real worker processes, and its claim against raw SQL (issue 13).

    .venv/bin/python bench/jobs.py [--postgres URL] [--workers 1,2,4] [--jobs 200] [--rate 10]
        [--seconds 10] [--procs 6] [--claim-seconds 5] [--claims 50000] [--takeovers 5] [--skip-e2e]
        [--skip-claims] [--profile FILE]

End to end, per store and number of workers W: W `steward worker --concurrency 1` processes on a
fresh database, in a workspace whose persona `bench` runs the scripted model through a 3-step job:
`list_dir`, then `read_file`, then the answer. The tools are cheap and read-only on purpose: `bash`
starts the sandbox for every command and a tool that can change files takes a checkpoint of the
workspace (and its lock, shared by every worker in it), so with them the figure would measure the
sandbox and the checkpoints instead of the queue and the loop. Once every worker said it is up:

- submit-to-start: jobs are submitted through `JobStore.submit` at a steady rate (`--rate` per
  second for `--seconds`, after 2 s that are not counted and warm the workers up) while the workers
  idle between jobs; the figure is each job's `started_at - created_at`: how soon a worker notices
  a job. `--seconds 0` skips it.
- throughput: `--jobs` N jobs are queued in one transaction (the workers see the whole queue at
  once; on PostgreSQL it notifies them as a submit does); jobs/s is N over the span from the first job's `started_at` to the last one's
  `finished_at` (the jobs' own timestamps: worker start-up is not in it), "queued to last
  finish" is the wall time from that commit. Per job: the mean claim-to-finish, split (medians)
  with its run's events into claim -> `run_start` (opening the agent, its tools and the run), the
  three steps (`run_start` -> `done`) and `done` -> finished (settling the job); "between jobs" is
  a worker's mean time from one job's finish to its next claim (the claim's own work included).

Every job must end `done` with the script's answer, claimed once (fence 1, no attempt lost); the
jobs that did not are counted. `--profile FILE` runs worker 1 of the first end-to-end row under
cProfile (`python -m pstats FILE`).

Takeover: one idle `steward worker` on a fresh database; `--takeovers` T times, a job is
claimed by a worker that is then gone (a lease of 2 s nobody renews),
and the figure is how long after that lease ran out the worker took the job over (the job's
`updated_at` at the takeover, read every 10 ms). Every such job must end `done`. Target: under 1 s
on both engines (an idle worker waits no longer than the first lease of a running job).

Claims: `--procs` P processes (multiprocessing, spawn) start together on a queue of `--claims` jobs
and each loops claim -> finish for `--claim-seconds`: through `JobStore` (what a worker does),
through raw SQL on the store's own engine (SQLAlchemy `text()`, `BEGIN IMMEDIATE` on SQLite), and
through raw SQL on the bare driver (`sqlite3` with the store's pragmas, `asyncpg`), each on a fresh
database. The raw loop is the least a claim needs: in one write transaction, pick the best queued
job (`ORDER BY priority DESC, created_at, id LIMIT 1`; PostgreSQL `FOR UPDATE SKIP LOCKED`, SQLite
under `BEGIN IMMEDIATE`) and mark it running under a lease with the next fence; then one UPDATE that
finishes it, naming that fence. `JobStore.claim` does more in its transaction (it looks for an
expired lease first and fences the job's run) and reads the job back after the claim and after the
finish. Every claimed job must be finished exactly once (fence 1).

Targets: the queue adds under 10 % to a claim over raw SQL; 1,000 queued 3-step jobs finish in under
a minute with 4 workers on PostgreSQL (`--postgres URL --jobs 1000 --workers 4 --skip-claims`).
With `--postgres URL` (e.g. postgresql://postgres@127.0.0.1:5432/test) every measurement runs on a
fresh database `steward_bench_*`, dropped afterwards; SQLite is always measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import platform
import secrets
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg
import sqlalchemy as sa

from steward.jobs.store import ACTIVE, CHANNEL, Job, JobStore
from steward.store.engine import make_engine, write_transaction
from steward.store.events import open_store
from steward.store.schema import events as events_table
from steward.store.schema import jobs as jobs_table

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Barrier

    from sqlalchemy.ext.asyncio import AsyncEngine

ROLE = "bench"
ANSWER = "notes.txt has two lines."
SCRIPT = f"""\
- tool: list_dir
  args: {{path: .}}
- tool: read_file
  args: {{path: notes.txt}}
- text: {ANSWER}
"""
WARMUP_S = 2.0  # of the steady submissions, not counted: by then each worker has run a job (imports done)
UP_TIMEOUT_S = 60.0


# --- databases -------------------------------------------------------------------------------


async def _pg_execute(server: str, statement: str) -> None:
    conn = await asyncpg.connect(server, timeout=5)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def fresh_database(kind: str, server: str | None, scratch: Path) -> AsyncIterator[str]:
    """A store URL on an empty database: a new SQLite file, or a new PostgreSQL database."""
    if kind == "SQLite":
        directory = Path(tempfile.mkdtemp(prefix="db-", dir=scratch))
        yield f"sqlite:///{directory / 'steward.db'}"
        return
    assert server is not None
    name = f"steward_bench_{uuid.uuid4().hex[:10]}"
    await _pg_execute(server, f'CREATE DATABASE "{name}"')
    try:
        yield sa.make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        await _pg_execute(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def job_rows(count: int, workspace: str, *, priorities: int = 1) -> list[dict[str, Any]]:
    """Queued jobs as ``JobStore.submit`` writes them, to insert in one transaction."""
    now = time.time()
    return [queued_job(n, workspace, n % priorities, now + n * 1e-6) for n in range(count)]


def queued_job(n: int, workspace: str, priority: int, now: float) -> dict[str, Any]:
    return {
        "id": secrets.token_hex(6), "role": ROLE, "goal": f"job {n}", "workspace": workspace,
        "priority": priority, "idempotency_key": None, "user_key": None, "parent_id": None,
        "status": "queued", "attempts": 0, "max_attempts": 3, "output_schema": None, "fence": 0,
        "cancel_requested": False, "created_at": now, "updated_at": now,
    }  # fmt: skip


async def insert_jobs(engine: AsyncEngine, rows: list[dict[str, Any]]) -> float:
    """Queue ``rows`` in one transaction, waking listening workers as a submit does; when it committed."""
    async with write_transaction(engine) as conn:
        await conn.execute(jobs_table.insert(), rows)
        if engine.dialect.name == "postgresql":
            await conn.execute(sa.select(sa.func.pg_notify(CHANNEL, f"queued:{ROLE}")))
    return time.time()


async def active_count(engine: AsyncEngine) -> int:
    query = sa.select(sa.func.count()).select_from(jobs_table).where(jobs_table.c.status.in_(ACTIVE))
    async with engine.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


async def wait_idle(engine: AsyncEngine, limit_s: float) -> None:
    """Until no job is queued, running or waiting."""
    for _ in range(round(limit_s * 10)):
        if not await active_count(engine):
            return
        await asyncio.sleep(0.1)
    left = await active_count(engine)
    if left:
        raise SystemExit(f"{left} jobs still active after {limit_s:.0f} s")


def done_once(job: Job, answer: str = ANSWER) -> bool:
    return job.status == "done" and job.result == answer and job.fence == 1 and job.attempts == 0


def first_problem(ended: Sequence[Job], answer: str = ANSWER) -> str:
    """The first job that did not end ``done`` exactly once, described; empty when there is none."""
    for job in ended:
        if not done_once(job, answer):
            detail = job.error or job.result or ""
            return f"job {job.id}: {job.status}, fence {job.fence}, attempts {job.attempts}: {detail[:300]}"
    return ""


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# --- end to end: worker processes ------------------------------------------------------------


def make_workspace(scratch: Path) -> Path:
    workspace = scratch / "ws"
    (workspace / "personas").mkdir(parents=True)
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    (workspace / "personas" / "script.yaml").write_text(SCRIPT)
    (workspace / "personas" / f"{ROLE}.toml").write_text(
        f'role = "{ROLE}"\ntools = ["list_dir", "read_file"]\nmodel = "scripted:script.yaml"\n'
    )
    return workspace


def environment(url: str, scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env.update(STEWARD_DB=url, XDG_STATE_HOME=str(scratch / "state"), XDG_CONFIG_HOME=str(scratch / "config"))
    return env


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    log: Path


def start_workers(
    count: int, url: str, workspace: Path, scratch: Path, profile: str | None
) -> list[WorkerProcess]:
    started = []
    for n in range(count):
        log = scratch / f"worker-{uuid.uuid4().hex[:8]}.log"
        command = [sys.executable]
        if profile and n == 0:
            command += ["-m", "cProfile", "-o", profile]
        command += ["-m", "steward", "worker", "--concurrency", "1", "--workspace", str(workspace)]
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, cwd=workspace, env=environment(url, scratch), stdout=out, stderr=subprocess.STDOUT
            )
        started.append(WorkerProcess(process, log))
    return started


async def until_up(workers: list[WorkerProcess]) -> None:
    """Until every worker said it takes jobs (its store is open and it polls the queue)."""
    deadline = time.monotonic() + UP_TIMEOUT_S
    for worker in workers:
        while "taking" not in worker.log.read_text(errors="replace"):
            if worker.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"a worker did not start:\n{worker.log.read_text(errors='replace')}")
            await asyncio.sleep(0.05)


async def stop_workers(workers: list[WorkerProcess]) -> None:
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            await asyncio.to_thread(worker.process.wait, 30)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            await asyncio.to_thread(worker.process.wait)


async def ended_jobs(jobs: JobStore, ids: Sequence[str]) -> list[Job]:
    found = {job.id: job for job in await jobs.list(limit=len(ids) + 100_000)}
    return [found[i] for i in ids]


@dataclass
class Latency:
    p50: float
    p95: float
    max: float
    jobs: int
    failed: int
    problem: str


@dataclass
class Drain:
    jobs: int
    workers: int
    rate: float  # jobs per second, first start to last finish
    wall: float  # queued (commit) to last finish, s
    job_ms: float  # mean claim -> finished
    phases: tuple[float, float, float]  # medians, ms: claim -> run_start, run_start -> done, done -> finished
    failed: int
    problem: str

    @property
    def between_ms(self) -> float:
        """A worker's mean time from one job's end to its next claim (the claim's own work included)."""
        return self.workers * 1000 / self.rate - self.job_ms


async def steady(
    jobs: JobStore, engine: AsyncEngine, workspace: Path, rate: float, seconds: float
) -> Latency:
    """Submit at ``rate`` per second while the workers idle; submit-to-start per job, in ms."""
    skip, total = round(WARMUP_S * rate), round((WARMUP_S + seconds) * rate)
    ids = []
    begin = time.monotonic()
    for n in range(total):
        await asyncio.sleep(max(0.0, begin + n / rate - time.monotonic()))
        job, _ = await jobs.submit(ROLE, f"steady {n}", workspace=str(workspace))
        ids.append(job.id)
    await wait_idle(engine, limit_s=60)
    ended = (await ended_jobs(jobs, ids))[skip:]
    waits = [((j.started_at or j.finished_at or 0) - j.created_at) * 1000 for j in ended]
    failed = sum(not done_once(j) for j in ended)
    return Latency(pct(waits, 50), pct(waits, 95), max(waits), len(ended), failed, first_problem(ended))


async def drain(jobs: JobStore, engine: AsyncEngine, workspace: Path, count: int, workers: int) -> Drain:
    rows = job_rows(count, str(workspace))
    committed = await insert_jobs(engine, rows)
    await wait_idle(engine, limit_s=max(120.0, count * 0.5))
    ended = await ended_jobs(jobs, [r["id"] for r in rows])
    starts = [j.started_at or 0.0 for j in ended]
    finishes = [j.finished_at or 0.0 for j in ended]
    return Drain(
        jobs=count,
        workers=workers,
        rate=count / (max(finishes) - min(starts)),
        wall=max(finishes) - committed,
        job_ms=statistics.mean(f - s for s, f in zip(starts, finishes, strict=True)) * 1000,
        phases=await phases(engine, ended),
        failed=sum(not done_once(j) for j in ended),
        problem=first_problem(ended),
    )


async def phases(engine: AsyncEngine, ended: list[Job]) -> tuple[float, float, float]:
    """Where a job's time goes, from its run's events: claim -> run_start (opening the agent, its
    tools, the run), run_start -> done (the three steps), done -> finished (settling the job)."""
    query = sa.select(events_table.c.run_id, events_table.c.type, events_table.c.ts).where(
        events_table.c.type.in_(["run_start", "done"]), events_table.c.run_id.in_([j.id for j in ended])
    )
    async with engine.connect() as conn:
        stamps = {(run, kind): ts for run, kind, ts in await conn.execute(query)}
    spans: list[list[float]] = [[], [], []]
    for job in ended:
        start, done = stamps.get((job.id, "run_start")), stamps.get((job.id, "done"))
        if start is None or done is None or job.started_at is None or job.finished_at is None:
            continue
        for span, (a, b) in zip(
            spans, ((job.started_at, start), (start, done), (done, job.finished_at)), strict=True
        ):
            span.append((b - a) * 1000)
    return (statistics.median(spans[0]), statistics.median(spans[1]), statistics.median(spans[2]))


async def end_to_end(
    kind: str, server: str | None, scratch: Path, workspace: Path, workers: int, args: argparse.Namespace
) -> tuple[Latency | None, Drain]:
    # The store is opened first: the schema exists before the workers race to make it.
    async with fresh_database(kind, server, scratch) as url, await open_store(url) as store:
        jobs = JobStore(store.engine)
        started = start_workers(workers, url, workspace, scratch, args.profile)
        args.profile = None  # one profile: the first row's first worker
        try:
            await until_up(started)
            latency = None
            if args.seconds > 0:
                latency = await steady(jobs, store.engine, workspace, args.rate, args.seconds)
            return latency, await drain(jobs, store.engine, workspace, args.jobs, workers)
        except SystemExit:
            for worker in started:  # the scratch directory goes away: show what the workers said
                print(
                    f"--- {worker.log.name}:\n{worker.log.read_text(errors='replace')[-3000:]}",
                    file=sys.stderr,
                )
            raise
        finally:
            await stop_workers(started)


async def e2e_table(kinds: list[str], server: str | None, scratch: Path, args: argparse.Namespace) -> None:
    workspace = make_workspace(scratch)
    print(
        f"\nEnd to end: 3-step scripted jobs (list_dir, read_file, answer), `steward worker "
        f"--concurrency 1` processes; submit-to-start at {args.rate:g} jobs/s for {args.seconds:g} s "
        f"while idle; throughput on {args.jobs:,} jobs queued at once\n"
    )
    print(
        "| store | workers | submit-to-start p50 / p95 (max), ms | jobs | jobs/s, first start to last finish "
        "| queued to last finish, s | per job, mean ms | claim -> run start / steps / done -> finished, "
        "p50 ms | between jobs, ms | not done exactly once |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind in kinds:
        for count in (int(w) for w in args.workers.split(",")):
            latency, result = await end_to_end(kind, server, scratch, workspace, count, args)
            waits = f"{latency.p50:,.0f} / {latency.p95:,.0f} ({latency.max:,.0f})" if latency else "-"
            failed = result.failed + (latency.failed if latency else 0)
            total = result.jobs + (latency.jobs if latency else 0)
            opening, steps, settling = result.phases
            print(
                f"| {kind} | {count} | {waits} | {result.jobs:,} | {result.rate:,.1f} | {result.wall:.2f} "
                f"| {result.job_ms:.1f} | {opening:.1f} / {steps:.1f} / {settling:.1f} "
                f"| {result.between_ms:.1f} | {failed} of {total} |",
                flush=True,
            )
            for problem in (latency.problem if latency else "", result.problem):
                if problem:
                    print(f"  first job not done exactly once: {problem}", flush=True)


# --- takeover: a job whose worker is gone ------------------------------------------------------

TAKEOVER_LEASE_S = 2.0


async def held_by_a_gone_worker(engine: AsyncEngine, workspace: str, n: int) -> tuple[str, float]:
    """A job claimed (as a worker does: PostgreSQL tells the others) under a lease that nobody
    renews; its id and when the lease runs out."""
    async with write_transaction(engine) as conn:  # queued quietly: the idle worker is not told
        await conn.execute(jobs_table.insert(), [queued_job(n, workspace, 0, time.time())])
    claim = await JobStore(engine).claim("gone-worker", lease_s=TAKEOVER_LEASE_S)
    if claim is None or claim.job.lease_expires_at is None:
        raise SystemExit("the idle worker claimed the job first; run again")
    return claim.job.id, claim.job.lease_expires_at


async def taken_over_at(jobs: JobStore, job_id: str) -> float:
    """When the job was taken over: its ``updated_at`` then (or when that was seen, if it moved on)."""
    for _ in range(round(UP_TIMEOUT_S * 100)):
        job = await jobs.get(job_id)
        if job.fence >= 2:
            return job.updated_at if job.status == "running" else time.time()
        await asyncio.sleep(0.01)
    raise SystemExit(f"job {job_id} was not taken over within {UP_TIMEOUT_S:.0f} s")


async def takeovers(kind: str, server: str | None, scratch: Path, workspace: Path, count: int) -> list[float]:
    async with fresh_database(kind, server, scratch) as url:
        store = await open_store(url)
        jobs = JobStore(store.engine)
        workers = start_workers(1, url, workspace, scratch, None)
        try:
            await until_up(workers)
            late = []
            for n in range(count):
                job_id, expiry = await held_by_a_gone_worker(store.engine, str(workspace), n)
                late.append(await taken_over_at(jobs, job_id) - expiry)
                await wait_idle(store.engine, UP_TIMEOUT_S)
                ended = await jobs.get(job_id)
                if ended.status != "done":
                    raise SystemExit(f"a taken-over job ended {ended.status}: {ended.error}")
            return late
        finally:
            await stop_workers(workers)
            await store.close()


async def takeover_table(
    kinds: list[str], server: str | None, scratch: Path, args: argparse.Namespace
) -> None:
    print(
        f"\nTakeover: a job held under a {TAKEOVER_LEASE_S:g} s lease by a worker that is gone, one idle "
        f"worker, {args.takeovers} times\n"
    )
    print("| store | taken over after the lease ran out: median | max |")
    print("|---|---|---|")
    (scratch / "takeover").mkdir()
    workspace = make_workspace(scratch / "takeover")
    for kind in kinds:
        late = await takeovers(kind, server, scratch, workspace, args.takeovers)
        print(
            f"| {kind} | {statistics.median(late) * 1000:,.0f} ms | {max(late) * 1000:,.0f} ms |", flush=True
        )


# --- claims: JobStore against raw SQL, P processes -------------------------------------------

PICK = "SELECT id, fence FROM jobs WHERE status = 'queued' ORDER BY priority DESC, created_at, id LIMIT 1"
CLAIM = (
    "UPDATE jobs SET status = 'running', lease_owner = :owner, lease_expires_at = :lease, fence = :fence, "
    "updated_at = :now, started_at = COALESCE(started_at, :now) WHERE id = :id AND fence = :old"
)
FINISH = (
    "UPDATE jobs SET status = 'done', result = 'ok', lease_owner = NULL, lease_expires_at = NULL, "
    "updated_at = :now, finished_at = :now WHERE id = :id AND fence = :fence AND status = 'running'"
)
PG_CLAIM = (
    "UPDATE jobs SET status = 'running', lease_owner = $1, lease_expires_at = $2, fence = $3, "
    "updated_at = $4, started_at = COALESCE(started_at, $4) WHERE id = $5 AND fence = $6"
)
PG_FINISH = (
    "UPDATE jobs SET status = 'done', result = 'ok', lease_owner = NULL, lease_expires_at = NULL, "
    "updated_at = $1, finished_at = $1 WHERE id = $2 AND fence = $3 AND status = 'running'"
)
LOOPS = ("JobStore", "raw SQL, store's engine", "raw SQL, driver")
LEASE_S = 30.0


def go(barrier: Barrier, seconds: float) -> float:
    """Wait for the other processes; the moment (monotonic) to stop claiming."""
    barrier.wait()
    return time.monotonic() + seconds


async def loop_jobstore(url: str, barrier: Barrier, seconds: float, owner: str) -> int:
    async with await open_store(url) as store:
        jobs = JobStore(store.engine)
        await jobs.list(limit=1)  # connected before the start
        until = go(barrier, seconds)
        count = 0
        while time.monotonic() < until and (claim := await jobs.claim(owner, lease_s=LEASE_S)):
            await jobs.finish(claim, "done", result="ok")
            count += 1
        return count


async def loop_engine(url: str, barrier: Barrier, seconds: float, owner: str) -> int:
    engine = make_engine(url)
    pick = sa.text(PICK + (" FOR UPDATE SKIP LOCKED" if engine.dialect.name == "postgresql" else ""))
    try:
        async with engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))
        until = go(barrier, seconds)
        count = 0
        while time.monotonic() < until:
            now = time.time()
            async with write_transaction(engine) as conn:
                row = (await conn.execute(pick)).first()
                if row is None:
                    break
                job_id, fence = row[0], row[1] + 1
                values = {"owner": owner, "lease": now + LEASE_S, "fence": fence, "now": now, "id": job_id}
                await conn.execute(sa.text(CLAIM), {**values, "old": row[1]})
            async with write_transaction(engine) as conn:
                await conn.execute(sa.text(FINISH), {"now": time.time(), "id": job_id, "fence": fence})
            count += 1
        return count
    finally:
        await engine.dispose()


def loop_sqlite3(path: str, barrier: Barrier, seconds: float, owner: str) -> int:
    """The raw loop on the stdlib driver, with the store's pragmas (WAL, NORMAL, busy timeout)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=10)
    conn.execute("PRAGMA synchronous = NORMAL")
    until = go(barrier, seconds)
    count = 0
    try:
        while time.monotonic() < until:
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(PICK).fetchone()
            if row is None:
                conn.execute("COMMIT")
                break
            job_id, fence = row[0], row[1] + 1
            values = {"owner": owner, "lease": now + LEASE_S, "fence": fence, "now": now, "id": job_id}
            conn.execute(CLAIM, {**values, "old": row[1]})
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(FINISH, {"now": time.time(), "id": job_id, "fence": fence})
            conn.execute("COMMIT")
            count += 1
        return count
    finally:
        conn.close()


async def loop_asyncpg(url: str, barrier: Barrier, seconds: float, owner: str) -> int:
    conn = await asyncpg.connect(url, timeout=5)
    until = go(barrier, seconds)
    count = 0
    try:
        while time.monotonic() < until:
            now = time.time()
            async with conn.transaction():
                row = await conn.fetchrow(PICK + " FOR UPDATE SKIP LOCKED")
                if row is None:
                    break
                job_id, fence = row["id"], row["fence"] + 1
                await conn.execute(PG_CLAIM, owner, now + LEASE_S, fence, now, job_id, row["fence"])
            await conn.execute(PG_FINISH, time.time(), job_id, fence)
            count += 1
        return count
    finally:
        await conn.close()


def claim_process(
    loop: str, url: str, seconds: float, barrier: Barrier, results: Queue[tuple[int, float, str]]
) -> None:
    """One process of the claims measurement: (claims made, when it stopped, error)."""
    owner = f"bench:{os.getpid()}"
    try:
        if loop == "JobStore":
            count = asyncio.run(loop_jobstore(url, barrier, seconds, owner))
        elif loop == "raw SQL, store's engine":
            count = asyncio.run(loop_engine(url, barrier, seconds, owner))
        elif url.startswith("sqlite"):
            count = loop_sqlite3(sa.make_url(url).database or "", barrier, seconds, owner)
        else:
            count = asyncio.run(loop_asyncpg(url, barrier, seconds, owner))
        results.put((count, time.time(), ""))
    except Exception as exc:
        barrier.abort()
        results.put((0, time.time(), f"{type(exc).__name__}: {exc}"))


def run_processes(loop: str, url: str, procs: int, seconds: float) -> tuple[float, int]:
    """Start ``procs`` processes together; claims per second from the start to the last one's stop."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs + 1)
    results: Queue[tuple[int, float, str]] = ctx.Queue()
    processes = [
        ctx.Process(target=claim_process, args=(loop, url, seconds, barrier, results)) for _ in range(procs)
    ]
    for process in processes:
        process.start()
    with contextlib.suppress(Exception):
        barrier.wait(timeout=120)  # a broken barrier: the error comes back in the results
    started = time.time()
    outcomes = [results.get(timeout=600) for _ in processes]
    for process in processes:
        process.join()
    errors = [error for _, _, error in outcomes if error]
    if errors:
        raise SystemExit(f"{loop} on {url}: {errors[0]}")
    count = sum(n for n, _, _ in outcomes)
    return count / (max(end for _, end, _ in outcomes) - started), count


async def claims(
    kind: str, server: str | None, scratch: Path, loop: str, args: argparse.Namespace
) -> tuple[float, int, int]:
    """Claims per second of ``loop``, how many, and how many were not finished exactly once."""
    async with fresh_database(kind, server, scratch) as url:
        async with await open_store(url) as store:
            await insert_jobs(store.engine, job_rows(args.claims, "/w", priorities=5))
        rate, count = await asyncio.to_thread(run_processes, loop, url, args.procs, args.claim_seconds)
        async with await open_store(url) as store:
            claimed = [j for j in await JobStore(store.engine).list(limit=args.claims + 1) if j.fence]
        if len(claimed) == args.claims:
            print(
                f"note: the queue ran dry ({args.claims:,} jobs): the rate is over a shorter time", flush=True
            )
        return rate, count, sum(not done_once(j, "ok") for j in claimed) + abs(count - len(claimed))


async def claims_table(kinds: list[str], server: str | None, scratch: Path, args: argparse.Namespace) -> None:
    print(
        f"\nClaims: {args.procs} processes at once, each claiming and finishing jobs in a loop for "
        f"{args.claim_seconds:g} s from a queue of {args.claims:,}\n"
    )
    print(
        "| store | loop | claims/s | claims | ms per claim + finish, per process | JobStore adds to this loop "
        "| not done exactly once |"
    )
    print("|---|---|---|---|---|---|---|")
    for kind in kinds:
        queue_rate = 0.0
        for loop in LOOPS:
            rate, count, wrong = await claims(kind, server, scratch, loop, args)
            queue_rate = queue_rate or rate
            adds = "" if loop == "JobStore" else f"{(rate / queue_rate - 1) * 100:+,.0f} %"
            print(
                f"| {kind} | {loop} | {rate:,.0f} | {count:,} | {args.procs / rate * 1000:.2f} | {adds} "
                f"| {wrong} |",
                flush=True,
            )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--postgres", help="also measure PostgreSQL on fresh databases made at this server URL"
    )
    parser.add_argument("--workers", default="1,2,4", help="numbers of worker processes (default 1,2,4)")
    parser.add_argument("--jobs", type=int, default=200, help="jobs queued at once for throughput")
    parser.add_argument("--rate", type=float, default=10.0, help="steady submissions per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="of steady submissions (0: skip)")
    parser.add_argument("--procs", type=int, default=6, help="processes claiming at once")
    parser.add_argument("--claims", type=int, default=50_000, help="jobs queued for the claims measurement")
    parser.add_argument("--claim-seconds", type=float, default=5.0, help="each claims loop runs this long")
    parser.add_argument("--takeovers", type=int, default=5, help="takeovers of a gone worker's job (0: skip)")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--skip-claims", action="store_true")
    parser.add_argument("--profile", help="cProfile worker 1 of the first end-to-end row into this file")
    args = parser.parse_args()
    kinds = ["SQLite"] + (["PostgreSQL"] if args.postgres else [])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, Python {platform.python_version()}, load {load}"
    )
    with tempfile.TemporaryDirectory(prefix="steward-jobs-bench-") as directory:
        scratch = Path(directory)
        if not args.skip_e2e:
            await e2e_table(kinds, args.postgres, scratch, args)
        if args.takeovers:
            await takeover_table(kinds, args.postgres, scratch, args)
        if not args.skip_claims:
            await claims_table(kinds, args.postgres, scratch, args)
    print(f"\nload average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    asyncio.run(main())
