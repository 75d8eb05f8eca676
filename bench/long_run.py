"""Long runs: per-step cost, request size and memory as the run grows (issue 12).

    .venv/bin/python bench/long_run.py [--steps 50,1000,10000] [--size 200] [--budget 32000] [--no-sqlite]

The trajectory plans, records a key fact, hits one tool error, then calls a tool N times with
S-char outputs, then ends. It runs with the default request budget, once in memory and once
recorded in a SQLite store. Printed per N: ms per step (the loop's own time between model calls)
by step-index bucket, the ratio of the last bucket to the first N's median, the largest request in
characters and estimated tokens, requests over budget, whether every request kept the plan,
the key fact, the error and the three newest outputs verbatim, and the process's RSS after the run.
Must hold: the run completes, 0 requests over budget, the last fifth of every N within 1.5x
of the N=50 run (the first N given) on the same store.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steward import Agent, FunctionModel, Limits, tool
from steward.memory.budget import DEFAULT_CHARS_PER_TOKEN, budget_chars
from steward.models.base import AssistantMessage, ModelRequest, ToolCall, ToolResultMessage
from steward.store.events import open_store


def chars(request: ModelRequest) -> int:
    total = len(request.system) + len(request.context)
    total += sum(len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in request.tools)
    for m in request.messages:
        if isinstance(m, AssistantMessage):
            total += len(m.text) + sum(len(c.name) + len(c.arguments_json()) for c in m.tool_calls)
        else:
            total += len(m.content)
    return total


def output(i: int, size: int) -> str:
    head = f"[out {i}] "
    return head + ("abcdefghij" * (size // 10 + 1))[: size - len(head)]


def step(k: int, **arguments: Any) -> AssistantMessage:
    return AssistantMessage(tool_calls=(ToolCall(f"s{k}", "agent_step", arguments),))


@dataclass
class Trace:
    n: int
    size: int
    stamps: list[float] = field(default_factory=list)  # when each model call began
    model_s: list[float] = field(default_factory=list)  # time spent inside the model, per call
    sizes: list[int] = field(default_factory=list)
    complete: int = 0
    checked: int = 0
    reads: int = 0


def make_agent(trace: Trace, budget: int) -> Agent:
    n, size = trace.n, trace.size

    def reply(request: ModelRequest) -> AssistantMessage:
        entered = time.perf_counter()
        trace.stamps.append(entered)
        k = len(trace.stamps)
        trace.sizes.append(chars(request))
        if k > 6:  # plan, bad call, fact, and three outputs are in place
            outputs = [
                m.content
                for m in request.messages
                if isinstance(m, ToolResultMessage) and m.name == "read" and not m.is_error
            ]
            newest = all(o.startswith("[out ") and len(o) == size for o in outputs[-3:]) and len(outputs) >= 3
            kept = (
                "[PLAN v1]" in request.context
                and "outputs are ASCII" in request.context
                and "read:" in request.context.split("[Errors]", 1)[-1]
            )
            trace.checked += 1
            trace.complete += newest and kept
        if k == 1:
            plan = {"goal": "read everything", "sub_tasks": [{"id": 1, "title": "read"}]}
            message = step(k, phase="plan", summary="plan", plan=plan)
        elif k == 2:
            message = AssistantMessage(tool_calls=(ToolCall("bad", "read", {"i": "one"}),))
        elif k == 3:
            message = step(k, phase="verify", summary="noted", key_facts=["outputs are ASCII"])
        elif trace.reads < n:
            trace.reads += 1
            message = AssistantMessage(tool_calls=(ToolCall(f"c{k}", "read", {"i": trace.reads}),))
        else:
            message = step(k, phase="end", summary="done", end_status="solved", end_message=f"Read {n}.")
        trace.model_s.append(time.perf_counter() - entered)
        return message

    @tool
    async def read(i: int) -> str:
        """Return output number i."""
        return output(i, size)

    return Agent(
        FunctionModel(reply),
        tools=[read],
        builtin_tools=False,
        limits=Limits(max_steps=n + 10, request_token_budget=budget),
    )


async def one_run(n: int, size: int, budget: int, url: str | None, workspace: str) -> Trace:
    trace = Trace(n, size)
    agent = make_agent(trace, budget)
    agent.store = await open_store(url) if url else None
    try:
        result = await agent.run("Read every output, then answer.", workspace=workspace)
    finally:
        if agent.store is not None:
            await agent.store.close()
    if not result.solved:
        raise SystemExit(f"N={n}: the run did not complete: {result.output}")
    return trace


def buckets(trace: Trace) -> list[tuple[int, float]]:
    """(first step of the bucket, median ms per step) over ~5 buckets of the tool-calling steps."""
    gaps = [
        (b - a - m) * 1000
        for a, b, m in zip(trace.stamps[3:], trace.stamps[4:], trace.model_s[3:], strict=False)
    ]
    width = max(1, len(gaps) // 5)
    starts = range(0, len(gaps) - width + 1, width)
    return [(start + 4, statistics.median(gaps[start : start + width])) for start in starts]


def rss_mib() -> float:
    """The process's resident memory now (peak RSS would hide whether a run gave it back)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", default="50,1000,10000")
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--budget", type=int, default=32_000)
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    workspace = tempfile.mkdtemp(prefix="steward-long-")
    stores: list[tuple[str, str | None]] = [("memory", None)]
    if not args.no_sqlite:
        stores.append(("SQLite", f"sqlite:///{Path(workspace) / 'long.db'}"))
    print(
        "| N | store | ms/step by step index (median per fifth) | last fifth / first N's | "
        "request chars, last fifth (largest, ~tokens) | over budget | plan, fact, error, 3 newest verbatim "
        "| RSS after, MiB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    base: dict[str, float] = {}
    for n in (int(x) for x in args.steps.split(",")):
        for name, url in stores:
            gc.collect()
            trace = await one_run(n, args.size, args.budget, url, workspace)
            curve = buckets(trace)
            shown = ", ".join(f"@{at}: {ms:.3f}" for at, ms in curve)
            overall = statistics.median(ms for _, ms in curve)
            ratio = curve[-1][1] / base.setdefault(name, overall)
            largest = max(trace.sizes)
            late = int(statistics.median(trace.sizes[-max(1, len(trace.sizes) // 5) :]))
            over = sum(1 for s in trace.sizes if s > budget_chars(args.budget))
            print(
                f"| {n:,} | {name} | {shown} | {ratio:.2f} | {late:,} ({largest:,}, "
                f"~{largest / DEFAULT_CHARS_PER_TOKEN:,.0f}) | {over} | {trace.complete} of {trace.checked} "
                f"| {rss_mib():.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
