"""Cold start: `python -c "import steward"` and `steward --help`, median of N fresh processes.

    .venv/bin/python bench/startup.py [--reps 7]

Targets: import ≤ 150 ms, --help ≤ 300 ms (peers import in 0.35-1.4 s).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def median_seconds(cmd: list[str], reps: int) -> float:
    subprocess.run(cmd, check=True, capture_output=True)  # warm-up: writes .pyc files
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    py = sys.executable
    rows = [
        ("python -c pass (interpreter alone)", [py, "-c", "pass"]),
        ('python -c "import steward"', [py, "-c", "import steward"]),
        ('python -c "from steward import Agent"', [py, "-c", "from steward import Agent"]),
        ("steward --help", [py, "-m", "steward", "--help"]),
    ]
    print(f"| command | median of {args.reps}, ms |")
    print("|---|---|")
    for label, cmd in rows:
        print(f"| {label} | {median_seconds(cmd, args.reps) * 1000:.0f} |")


if __name__ == "__main__":
    main()
