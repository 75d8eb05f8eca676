"""Instructions per loop step, counted by valgrind's callgrind: a figure the machine's load leaves
alone (CPU time on a shared machine wanders by more than the few percent a bench looks for).

A bench runs one way of a run in a child python under callgrind at two step counts; the
difference divided by the steps between them is what one step costs, start-up and imports
cancelled out:

    per_step(lambda n: [sys.executable, __file__, "--child", mode, str(n)])

The child must run exactly ``n`` steps of the way being measured and exit. Python's hash seed is
fixed in the child, and BLAS kept to one thread, so that two counts of the same command agree to
within a few in a million.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

LOW, HIGH = 50, 550  # the two step counts: far enough apart that a step's share dwarfs the noise


def available() -> bool:
    """Whether valgrind is installed."""
    return shutil.which("valgrind") is not None


def count(command: Sequence[str], *, timeout_s: float = 1800) -> int:
    """The instructions ``command`` executes (its whole process, under callgrind)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        # One BLAS thread: numpy's OpenBLAS (imported along the way) otherwise starts worker
        # threads whose spinning, counted with the process, varies from count to count by
        # millions of instructions with the machine's load.
        env = {**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *command],
            check=True, env=env, timeout=timeout_s, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        return total(out.read_text(errors="replace"))


def total(callgrind_out: str) -> int:
    """The total instruction count a callgrind out file states (its ``summary:`` or ``totals:``)."""
    for line in callgrind_out.splitlines():
        key, _, value = line.partition(":")
        if key in ("summary", "totals") and value.strip():
            return int(value.split()[0])
    raise ValueError("no summary or totals line in the callgrind output")


def per_step(
    command: Callable[[int], Sequence[str]], low: int = LOW, high: int = HIGH, *, counts: int = 1
) -> float:
    """Instructions one step costs: ``(I(high) - I(low)) / (high - low)`` for ``command(n)``,
    the command that runs ``n`` steps. With ``counts`` above 1, each I is the least of that many
    counts: what still varies (now and then a count a few million higher, from waits on the
    loaded machine) only ever adds instructions."""
    least = [min(count(command(n)) for _ in range(max(1, counts))) for n in (high, low)]
    return (least[0] - least[1]) / (high - low)
