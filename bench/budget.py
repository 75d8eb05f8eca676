"""The cost of budget accounting per loop step (issue 24).

    .venv/bin/python bench/budget.py [--steps 50,1000] [--repeats 7] [--no-store]
    .venv/bin/python bench/budget.py --instructions [--counts 3] [--no-store]

Each run calls a tiny tool at every step (the model is a function: no I/O), then ends. Without
a store, two ways, interleaved so the machine's load falls on each alike: no budget (nothing
wrapped) and a run budget in tokens and tool calls (the model and toolset wrappers and the
loop's step hooks, counting in memory). With a SQLite store, two more: a run that only records
what it spent (one small write when it ends) and one whose tree budget is kept in the store (a
lease of several calls' tokens and tool calls renewed when it runs out, one write transaction
every 16th step here, as the limits are never near). Printed per N: the median CPU
ms per step (CPU time, not wall time: on a loaded machine the other processes' share would
drown the difference) and what the budget adds per step (µs, and as a share of the loop's own
step). Target: the in-memory accounting costs <= 5 % of the loop's step.

``--instructions`` counts instructions instead (valgrind's callgrind, ``bench/_instructions.py``):
each way runs in a child python at 50 and 550 steps and a step costs the difference / 500, a
figure the machine's load does not move (CPU time on a shared machine wanders by +-25 µs a step,
more than the 5 % looked for). Each count is the least of ``--counts`` (default 3): now and then
one comes out a few million instructions higher (some 6k a step). Slow: a few minutes a way.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _instructions
from _agent import ping_agent
from steward.config import BudgetSettings, Config
from steward.store.events import open_store

MODES = ("off", "budget", "store", "store+tree")


def budget_of(mode: str) -> BudgetSettings:
    big = 10**12  # never reached: the accounting runs, the run is not stopped
    return {
        "off": BudgetSettings(),
        "budget": BudgetSettings(tokens=big, tool_calls=big),
        "store": BudgetSettings(),
        "store+tree": BudgetSettings(tree_tokens=big, tree_tool_calls=big),
    }[mode]


async def ms_per_step(steps: int, mode: str, workspace: Path) -> float:
    store = await open_store(f"sqlite:///{workspace / f'{mode}.db'}") if mode.startswith("store") else None
    try:
        run = ping_agent(steps, Config(budget=budget_of(mode)), store).start("ping", workspace=workspace)
        started = time.process_time()  # CPU time: the machine's load (other processes) stays out of it
        result = await run.result()
        took = time.process_time() - started
    finally:
        if store is not None:
            await store.close()
    assert result.solved, result.output
    return took * 1000 / (steps + 1)


def instructions(modes: tuple[str, ...], counts: int) -> None:
    """Print each way's instructions per step, and what the budget adds to the way without."""
    per: dict[str, float] = {}
    for mode in modes:

        def command(n: int, mode: str = mode) -> list[str]:
            return [sys.executable, __file__, "--child", mode, "--steps", str(n)]

        per[mode] = _instructions.per_step(command, counts=counts)
    low, high = _instructions.LOW, _instructions.HIGH
    print(
        f"python {sys.version.split()[0]}; instructions per step, callgrind, (I({high}) - I({low})) / "
        f"{high - low}, each I the least of {counts} counts"
    )
    for mode in modes:
        base = "store" if mode == "store+tree" else "off"
        added = (
            ""
            if mode == base
            else f"  +{per[mode] - per[base]:,.0f} ({(per[mode] - per[base]) / per[base]:.1%})"
        )
        print(f"{mode:>11} {per[mode]:>12,.0f}{added}")


async def child(mode: str, steps: int) -> None:
    """One run of ``steps`` steps the ``mode`` way (what ``--instructions`` counts)."""
    with tempfile.TemporaryDirectory() as tmp:
        await ms_per_step(steps, mode, Path(tmp))


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", default="50,1000")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-store", action="store_true", help="only the in-memory ways (quicker)")
    parser.add_argument("--instructions", action="store_true", help="count instructions (callgrind)")
    parser.add_argument(
        "--counts", type=int, default=3, help="callgrind counts per figure (the least is kept)"
    )
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)  # one run, under callgrind
    args = parser.parse_args()
    modes = MODES[:2] if args.no_store else MODES
    if args.child is not None:
        await child(args.child, int(args.steps))
    elif args.instructions:
        instructions(modes, args.counts)
    else:
        await timed(modes, args.steps, args.repeats)


async def timed(modes: tuple[str, ...], step_counts: str, repeats: int) -> None:
    """Print each way's median CPU ms per step, and what the budget adds."""
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        for mode in modes:
            await ms_per_step(20, mode, workspace)  # warm: imports, the price table, the schema
        print(f"python {sys.version.split()[0]}; median of {repeats} runs each, interleaved")
        print(
            f"{'steps':>6} {'off ms':>8} {'+µs budget':>11} {'%':>7} {'store ms':>9} {'+µs tree':>9} {'%':>7}"
        )
        for steps in (int(s) for s in step_counts.split(",")):
            got: dict[str, list[float]] = {m: [] for m in modes}
            for _ in range(repeats):
                for mode in modes:
                    got[mode].append(await ms_per_step(steps, mode, workspace))
            med = {m: statistics.median(v) for m, v in got.items()}
            med.setdefault("store", float("nan"))
            med.setdefault("store+tree", float("nan"))
            budget, tree = med["budget"] - med["off"], med["store+tree"] - med["store"]
            print(
                f"{steps:>6} {med['off']:>8.3f} {budget * 1000:>11.1f} {budget / med['off'] * 100:>6.1f}% "
                f"{med['store']:>9.3f} {tree * 1000:>9.1f} {tree / med['store'] * 100:>6.1f}%"
            )


if __name__ == "__main__":
    asyncio.run(main())
