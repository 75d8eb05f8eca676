"""Time a checkpoint and the change detection add to each call that can change files.

    .venv/bin/python bench/checkpoints.py [--sizes 1000,10000,100000] [--calls 30]

For each workspace size (files of 10-3,000 bytes in directories of 50, a git repository at the
root with one commit, as a real project has), it measures per call:

* ``before``: the complete scan plus the checkpoint (``Checkpointer.before``): for an unchanged
  workspace one ``git status`` (a stat of every file) and the git directories' stat walk;
* ``after``: the scan again and the comparison (``Checkpointer.after``);
* the same with one file changed by each call (the checkpoint then writes a tree and a commit);
* the first checkpoint of the run (a cold index: every file is hashed once);
* a rewind (``Checkpointer.rewind``, every file written beneath the workspace's fd): of one
  changed file, and of a deleted directory of 500 files.

Printed as p50 / p95 in milliseconds. Target (issue 11): p50 of before + after <= 20 ms at
10,000 unchanged files. Figures, not assertions: machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from steward.safety.checkpoints.around_calls import Checkpointer
from steward.safety.checkpoints.shadow import CheckpointSettings


def make_workspace(root: Path, files: int) -> None:
    rng = random.Random(files)
    for index in range(files):
        directory = root / f"d{index // 500}" / f"s{(index // 50) % 10}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{index}.txt").write_bytes(b"x" * rng.randint(10, 3000))
    git = ["git", "-C", str(root), "-c", "user.email=b@example.com", "-c", "user.name=b"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "bench"], check=True)


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(len(ordered) * 0.95))]
    return f"{statistics.median(ordered):7.1f} / {p95:7.1f}"


def measure(files: int, calls: int) -> None:
    with tempfile.TemporaryDirectory(prefix="steward-bench-") as temporary:
        base = Path(temporary)
        workspace = base / "ws"
        workspace.mkdir()
        make_workspace(workspace, files)
        checkpointer = Checkpointer(workspace, CheckpointSettings(state_dir=base / "state"))
        started = time.perf_counter()
        checkpointer.after(checkpointer.before("bench"))
        cold = (time.perf_counter() - started) * 1000
        for label, change in (("unchanged", False), ("one file changed", True)):
            before_ms: list[float] = []
            after_ms: list[float] = []
            for call in range(calls):
                if change:
                    (workspace / "d0" / "s0" / "f0.txt").write_text(f"change {call}\n")
                t0 = time.perf_counter()
                recorded = checkpointer.before("bench", step=call)
                t1 = time.perf_counter()
                checkpointer.after(recorded)
                t2 = time.perf_counter()
                before_ms.append((t1 - t0) * 1000)
                after_ms.append((t2 - t1) * 1000)
            total = [a + b for a, b in zip(before_ms, after_ms, strict=True)]
            print(
                f"{files:>7} files  {label:<17} checkpoint {percentiles(before_ms)}   "
                f"detection {percentiles(after_ms)}   added per call {percentiles(total)}"
            )
        print(f"{files:>7} files  first checkpoint of a run (cold index): {cold:.0f} ms")
        print(f"{files:>7} files  rewind: {rewinds(workspace, checkpointer)}")


def rewinds(workspace: Path, checkpointer: Checkpointer) -> str:
    """A rewind of one changed file, and of a directory of 500 files deleted (ms)."""
    target = checkpointer.before("bench", step=1000).checkpoint
    assert target is not None
    (workspace / "d0" / "s0" / "f0.txt").write_text("changed again\n")
    checkpointer.before("bench", step=1001)
    t0 = time.perf_counter()
    checkpointer.rewind("bench", target)
    one = (time.perf_counter() - t0) * 1000
    shutil.rmtree(workspace / "d0")
    checkpointer.before("bench", step=1002)
    t0 = time.perf_counter()
    checkpointer.rewind("bench", target)
    folder = (time.perf_counter() - t0) * 1000
    return f"one changed file {one:.0f} ms, a deleted folder of 500 files {folder:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    print("ms per call, p50 / p95")
    for size in (int(s) for s in args.sizes.split(",")):
        measure(size, args.calls)


if __name__ == "__main__":
    main()
