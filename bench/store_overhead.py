"""Loop overhead per step with runs recorded in the event store, and raw append rate.

    .venv/bin/python bench/store_overhead.py [--n 50] [--runs 5] [--postgres URL]

The trajectory is the peer harness's (one tool call per step, 200-byte results, then an
answer), driven by a FunctionModel; every event is recorded as it happens, and the run waits
for durability before each tool runs and when it ends (the barriers of ``Run._recorded``).
Target (issue 4): under 1 ms per step with durable SQLite. Appends per second are measured
through a run's log, waiting for durability after every event (the worst case) and after
every 100 (group commit).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from steward import Agent, FunctionModel, Limits, tool
from steward.events import StepStart
from steward.models.base import AssistantMessage, ModelRequest, ToolCall, ToolResultMessage
from steward.store.events import open_store


def make_agent(n: int) -> Agent:
    def reply(request: ModelRequest) -> AssistantMessage:
        seen = sum(1 for m in request.messages if isinstance(m, ToolResultMessage))
        if seen < n:
            return AssistantMessage(tool_calls=(ToolCall(f"c{seen}", "read_chunk", {"i": seen + 1}),))
        return AssistantMessage(text=f"Done: read {n} chunks.")

    @tool
    async def read_chunk(i: int) -> str:
        """Return chunk i."""
        return f"[chunk {i}] " + "x" * 188

    return Agent(
        FunctionModel(reply), tools=[read_chunk], builtin_tools=False, limits=Limits(max_steps=n + 5)
    )


async def per_step(url: str | None, n: int, runs: int, workspace: str) -> float:
    agent = make_agent(n)
    agent.store = await open_store(url) if url else None
    times = []
    try:
        for _ in range(runs + 1):
            started = time.perf_counter()
            result = await agent.run("read the chunks", workspace=workspace)
            times.append((time.perf_counter() - started) / n * 1000)
            assert result.solved
    finally:
        if agent.store is not None:
            await agent.store.close()
    return statistics.median(times[1:])


async def append_rate(url: str, count: int, every: int) -> float:
    """Events per second through a run's log, waiting for durability every ``every`` events."""
    async with await open_store(url) as store:
        run_id = f"bench-append-{every}-{time.time_ns()}"
        await store.create_run(run_id, goal="append")
        log = store.log(run_id, session_id=None, last_seq=0)
        started = time.perf_counter()
        for seq in range(1, count + 1):
            log.add(StepStart(step=seq, max_steps=count, seq=seq, run_id=run_id))
            if seq % every == 0:
                await log.flush()
        await log.flush()
        return count / (time.perf_counter() - started)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--postgres", help="also measure PostgreSQL at this URL (tables are dropped first)")
    args = parser.parse_args()
    workspace = tempfile.mkdtemp(prefix="steward-bench-")
    sqlite_url = f"sqlite:///{Path(workspace) / 'bench.db'}"
    rows: list[tuple[str, float, float | None, float | None]] = [
        ("in memory (no store)", await per_step(None, args.n, args.runs, workspace), None, None)
    ]
    urls = [("SQLite (WAL)", sqlite_url)] + ([("PostgreSQL", args.postgres)] if args.postgres else [])
    for name, url in urls:
        ms = await per_step(url, args.n, args.runs, workspace)
        one: float | None = await append_rate(url, 2000, 1)  # None in the first row
        batched: float | None = await append_rate(url, 20000, 100)
        rows.append((name, ms, one, batched))
    print(
        f"| store | loop overhead, ms/step (N={args.n}, median of {args.runs}) "
        "| appends/s, each made durable | appends/s, durable every 100 |"
    )
    print("|---|---|---|---|")
    for name, ms, one, batched in rows:
        print(
            f"| {name} | {ms:.3f} | {f'{one:,.0f}' if one else ''} | {f'{batched:,.0f}' if batched else ''} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
