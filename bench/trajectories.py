"""Trajectory export: how fast a store's runs become training records, and what a record weighs.

    .venv/bin/python bench/trajectories.py [--runs 200]

Records ``--runs`` scripted runs (plan, a write, a failing read, reflect, an act step, verify, an
answer: 8 model replies each) in a scratch SQLite store, then times what ``steward runs export``
does for each format over all of them (the store's reads included), and the cost the recording
adds to a run's start: listing the tools offered and the system prompt for its ``run_start``.
With the train extra installed it also times ``datasets.load_dataset`` over the chat export.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from steward.agent import Agent
from steward.config import Config, Limits
from steward.models.base import AssistantMessage, ModelRequest, ToolCall
from steward.models.scripted import FunctionModel
from steward.offered import offered
from steward.store.events import EventStore, open_store
from steward.trajectories._export import FORMATS, Format, Selection, lines, selected

PLAN = {"goal": "notes", "sub_tasks": [{"id": 1, "title": "write", "depends_on": []}]}
SCRIPT: list[list[tuple[str, dict[str, Any]]] | str] = [
    [("agent_step", {"phase": "plan", "summary": "plan", "plan": PLAN})],
    [("write_file", {"path": "notes.txt", "content": "alpha\nbeta\n" * 20})],
    [("read_file", {"path": "missing.txt"})],
    [("agent_step", {"phase": "reflect", "summary": "wrong file"})],
    [("agent_step", {"phase": "act", "summary": "read", "action": {"tool_name": "read_file",
                                                                   "tool_input": {"path": "notes.txt"}}})],
    [("agent_step", {"phase": "verify", "summary": "ok", "sub_task_outcome": "done"})],
    "notes.txt holds alpha and beta.",
]  # fmt: skip


def _reply(request: ModelRequest) -> AssistantMessage:
    n = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
    entry = SCRIPT[min(n, len(SCRIPT) - 1)]
    if isinstance(entry, str):
        return AssistantMessage(text=entry)
    return AssistantMessage(tool_calls=tuple(ToolCall(f"c{n}-{k}", t, a) for k, (t, a) in enumerate(entry)))


async def _record(store: EventStore, root: Path, runs: int) -> list[float]:
    """``runs`` runs recorded; the time each ``offered`` (the run_start's system and tools) took."""
    agent = Agent(
        FunctionModel(_reply), config=Config(limits=Limits(max_steps=20)), sandbox=False, store=store
    )
    costs = []
    for n in range(runs):
        workspace = root / f"ws{n}"
        workspace.mkdir()
        run = agent.start("write notes.txt and say what it holds", workspace=workspace)
        started = time.perf_counter()
        await offered(run._loop)  # what run.py adds to a run's start, measured on its own
        costs.append((time.perf_counter() - started) * 1000)
        await run.result()
    return costs


async def _export(store: EventStore, fmt: Format, target: Path) -> tuple[float, int]:
    rows, _ = await selected(store, Selection(every=True))
    started, size = time.perf_counter(), 0
    with target.open("w", encoding="utf-8") as out:
        async for line in lines(store, rows, fmt):
            size += out.write(line + "\n")
    return time.perf_counter() - started, size


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="steward-bench-traj-") as scratch:
        root = Path(scratch)
        async with await open_store(f"sqlite:///{root / 'steward.db'}") as store:
            costs = await _record(store, root, runs)
            print(f"runs recorded: {runs}")
            print(
                f"run_start's system prompt and tools (offered): median {statistics.median(costs):.3f} ms per run"
            )
            for fmt in FORMATS:
                took, size = await _export(store, fmt, root / f"{fmt}.jsonl")
                print(
                    f"export --format {fmt:<6}: {took * 1000 / runs:7.2f} ms per run, {size / runs / 1024:6.1f} KiB per run"
                )
        chat = root / "chat.jsonl"
        record = json.loads(chat.read_text().splitlines()[0])
        print(f"one chat record: {len(record['messages'])} messages, {len(record['tools'])} tools, "
              f"tools {len(json.dumps(record['tools'])) / 1024:.1f} KiB")  # fmt: skip
        try:
            datasets = importlib.import_module("datasets")
        except ImportError:
            print("datasets: not installed (pip install '.[train]'), load not timed")
            return
        started = time.perf_counter()
        loaded = datasets.load_dataset(
            "json", data_files=str(chat), split="train", cache_dir=str(root / "hf")
        )
        print(f"datasets.load_dataset over {loaded.num_rows} records: {time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    asyncio.run(main(parser.parse_args().runs))
    sys.exit(0)
