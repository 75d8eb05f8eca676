"""Sandbox start-up cost per command: median wall time, sandboxed vs. direct.

    .venv/bin/python bench/sandbox_startup.py [--reps 50] [--workspace DIR]

Each sample is one whole command as the bash tool runs it: for the sandboxed case that is
``BubblewrapSandbox.command()`` (protected-path scan, placeholders, the pids cgroup under
root, the bwrap argv), starting the process, reading its output to the end, and the clean-up
after it. Samples of the variants are interleaved so that drift of a noisy machine hits them
alike. The default workspace is a fresh git repository; ``--workspace`` measures a real
project (the nested-repository walk grows with it). Target: at most 15 ms added per command.

Under root the process limit needs a pids cgroup, and moving a process into a cgroup v1
waits for an RCU grace period; the extra row without a process limit shows that share.

The last line is Steward's own share alone: ``command()`` entered and left without starting
anything (the scan, placeholders and their ledger, the cgroup's creation and removal). It
varies far less than a whole command, so a change of a tenth of a millisecond there shows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings

COMMANDS = {"true": ["true"], "bash -c 'echo hi'": ["bash", "-c", "echo hi"]}

Variant = Callable[[list[str]], Awaitable[None]]


async def run_once(argv: list[str], workspace: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=workspace, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    output, _ = await process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"{argv[-1]!r} failed ({process.returncode}): {output.decode(errors='replace')}")


def sandboxed(box: BubblewrapSandbox, workspace: Path) -> Variant:
    async def run(argv: list[str]) -> None:
        async with box.command(argv, workspace=workspace, network=False, writable=True) as wrapped:
            await run_once(wrapped, workspace)

    return run


async def medians_ms(variants: dict[str, Variant], argv: list[str], reps: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for run in variants.values():
        await run(argv)  # warm-up: page cache, the probe, the scratch files
    for _ in range(reps):
        for name, run in variants.items():
            started = time.perf_counter()
            await run(argv)
            samples[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) * 1000 for name, values in samples.items()}


async def measure(boxes: dict[str, BubblewrapSandbox], workspace: Path, reps: int) -> None:
    async def direct(argv: list[str]) -> None:
        await run_once(argv, workspace)

    variants: dict[str, Variant] = {"direct": direct}
    variants.update({name: sandboxed(box, workspace) for name, box in boxes.items()})
    print(f"| command | {' | '.join(f'{name}, ms' for name in variants)} | added, ms (median of {reps}) |")
    print(f"|---|{'---|' * len(variants)}---|")
    for label, argv in COMMANDS.items():
        medians = await medians_ms(variants, argv, reps)
        cells = " | ".join(f"{value:.1f}" for value in medians.values())
        added = " / ".join(f"{medians[name] - medians['direct']:.1f}" for name in boxes)
        print(f"| {label} | {cells} | {added} |")
    shares = [f"{name} {await setup_only_ms(box, workspace, reps * 4):.2f}" for name, box in boxes.items()]
    print(f"set-up and clean-up alone (no process), ms (median of {reps * 4}): {' / '.join(shares)}")


async def setup_only_ms(box: BubblewrapSandbox, workspace: Path, reps: int) -> float:
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        async with box.command(["true"], workspace=workspace, network=False, writable=True):
            pass
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--workspace", type=Path, default=None)
    args = parser.parse_args()
    boxes = {"sandboxed": BubblewrapSandbox(SandboxSettings())}
    status = boxes["sandboxed"].probe()
    if not status.ok:
        raise SystemExit(status.render())
    if os.geteuid() == 0 and "cgroup" in status.details.get("processes", ""):
        boxes["sandboxed, no process limit"] = BubblewrapSandbox(SandboxSettings(max_processes=None))
    with tempfile.TemporaryDirectory(prefix="steward-bench-") as scratch:
        workspace = args.workspace.resolve() if args.workspace else Path(scratch)
        if args.workspace is None:
            subprocess.run(["git", "init", "-q", str(workspace)], check=False)
        print(f"workspace: {workspace}; uid {os.geteuid()}; processes: {status.details.get('processes')}")
        asyncio.run(measure(boxes, workspace, args.reps))


if __name__ == "__main__":
    main()
