"""Batch throughput: `steward batch` on the shipped example set with the scripted model (issue 24).

    .venv/bin/python bench/batch.py [--postgres URL] [--workers 1,2,4] [--attempts 2] [--skip-processes]

Per store and number of workers W, on a fresh database, `steward batch examples/tasks.jsonl
--model scripted --attempts K` runs the 11 example tasks K times each (every attempt a real run
in a fresh copy of its template: edits, `bash` in the sandbox, then the task's verifier in the
sandbox) in two ways:

- in-process: the command's own worker with W slots (`--workers W`, what it does by default);
- processes: W `steward worker` processes started first (told apart from the command), the
  command queueing and following only (`--workers 0`), as with a fleet.

The figures: wall time of the command (process start to exit: planning, copying the templates,
queueing, the runs, the verifiers, the report and trajectories), runs per second (attempts over
that wall time), and the mean of an attempt's own time (its job's first claim to its end). Every
attempt must pass (the scripted solutions are right); a row that does not says how many failed.
With `--postgres URL` each row runs on a fresh database `steward_bench_*`, dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "examples" / "tasks.jsonl"


async def _pg_execute(server: str, statement: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(server, timeout=10)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def _env(scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    return env | {"XDG_STATE_HOME": str(scratch / "state"), "XDG_CONFIG_HOME": str(scratch / "config")}


def _workers(env: dict[str, str], url: str, count: int, cwd: Path) -> list[subprocess.Popen[bytes]]:
    argv = [sys.executable, "-m", "steward", "worker", "--role", "coder"]
    fleet_env = env | {"STEWARD_DB": url}
    return [
        subprocess.Popen(argv, cwd=cwd, env=fleet_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(count)
    ]


def _stop(workers: list[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def one_row(url: str, scratch: Path, workers: int, attempts: int, processes: bool) -> dict[str, object]:
    """One batch; its figures."""
    env = _env(scratch)
    out = scratch / f"report-{uuid.uuid4().hex[:6]}"
    fleet = _workers(env, url, workers, scratch) if processes else []
    try:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "steward", "batch", str(TASKS), "--model", "scripted", "--attempts",
             str(attempts), "--store", url, "--workers", "0" if processes else str(workers), "-o", str(out)],
            check=False, cwd=scratch, env=env, capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        wall = time.perf_counter() - started
    finally:
        _stop(fleet)
    if done.returncode != 0:
        raise SystemExit(f"the batch failed ({done.returncode}): {done.stderr[-2000:]}")
    report = json.loads((out / "report.json").read_text())
    runs = report["attempts"]
    seconds = [a["seconds"] for a in runs if a["seconds"] is not None]
    return {
        "runs": len(runs),
        "failed": sum(not a["passed"] for a in runs),
        "wall_s": wall,
        "runs_per_s": len(runs) / wall,
        "attempt_s": sum(seconds) / len(seconds) if seconds else float("nan"),
    }


def store_url(kind: str, server: str | None, scratch: Path) -> tuple[str, str | None]:
    """A fresh database: its URL, and the PostgreSQL database's name to drop afterwards."""
    if kind == "sqlite":
        return f"sqlite:///{scratch / f'queue-{uuid.uuid4().hex[:6]}.db'}", None
    assert server is not None
    name = f"steward_bench_{uuid.uuid4().hex[:10]}"
    asyncio.run(_pg_execute(server, f'CREATE DATABASE "{name}"'))
    import sqlalchemy as sa

    return sa.make_url(server).set(database=name).render_as_string(hide_password=False), name


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--postgres", help="a PostgreSQL server URL: measure it too")
    parser.add_argument("--workers", default="1,2,4", help="numbers of workers, comma-separated")
    parser.add_argument("--attempts", type=int, default=2, help="attempts per task (11 tasks)")
    parser.add_argument("--skip-processes", action="store_true", help="only the command's own worker")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    kinds = ["sqlite"] + (["postgresql"] if args.postgres else [])
    ways = [False] if args.skip_processes else [False, True]
    print(f"steward batch on {TASKS.relative_to(ROOT)}, --model scripted, --attempts {args.attempts}")
    print(
        f"{'store':<11} {'workers':<22} {'runs':>5} {'wall s':>8} {'runs/s':>7} {'attempt s':>10} {'failed':>7}"
    )
    for kind in kinds:
        for processes in ways:
            for workers in counts:
                scratch = Path(tempfile.mkdtemp(prefix="steward-bench-batch-"))
                url, pg_name = store_url(kind, args.postgres, scratch)
                try:
                    row = one_row(url, scratch, workers, args.attempts, processes)
                finally:
                    if pg_name is not None:
                        asyncio.run(
                            _pg_execute(args.postgres, f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')
                        )
                    shutil.rmtree(scratch, ignore_errors=True)
                how = f"{workers} {'processes' if processes else 'in-process slots'}"
                print(
                    f"{kind:<11} {how:<22} {row['runs']:>5} {row['wall_s']:>8.1f} {row['runs_per_s']:>7.2f} "
                    f"{row['attempt_s']:>10.2f} {row['failed']:>7}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
