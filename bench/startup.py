"""Cold start: how long each command that runs no model takes, median of N fresh processes.

    .venv/bin/python bench/startup.py [--reps 7]

Each command runs in a scratch workspace (a git repository with one recorded run) and with its
own config and state directories, so the user's own are neither read nor touched. Exit codes
are not checked: `steward resume` with nothing to resume ends with 1, as it should.

Targets: import ≤ 150 ms, --help ≤ 300 ms, every command that runs no model ≤ 500 ms
(`steward doctor` aside: it starts a real sandbox on purpose).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_SCRIPT = "- text: Nothing to do.\n"


def median_seconds(
    cmd: list[str], reps: int, *, cwd: Path, env: dict[str, str], before: Path | None
) -> float:
    """``before``: a file removed before each start (the sandbox check's cache, for a cold start)."""
    subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, check=False)  # warm-up: .pyc files, caches
    times = []
    for _ in range(reps):
        if before is not None:
            before.unlink(missing_ok=True)
        started = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _scratch(root: Path) -> tuple[Path, dict[str, str]]:
    """A workspace with one finished run, and an environment pointing at private directories."""
    workspace = root / "workspace"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env["XDG_CONFIG_HOME"] = str(root / "config")
    env["XDG_STATE_HOME"] = str(root / "state")
    script = root / "script.yaml"
    script.write_text(_SCRIPT, encoding="utf-8")
    steward = [sys.executable, "-m", "steward"]
    subprocess.run([*steward, "run", "say hello", "--model", f"scripted:{script}"], cwd=workspace, env=env,
                   capture_output=True, check=True)  # fmt: skip
    return workspace, env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    py = sys.executable
    steward = [py, "-m", "steward"]
    root = Path(tempfile.mkdtemp(prefix="steward-startup-"))
    try:
        workspace, env = _scratch(root)
        cache = root / "state" / "steward" / "sandbox-check.json"
        # Runs a (scripted) model, so it has no target here: it shows what the remembered check saves.
        run = [*steward, "run", "say hello", "--model", f"scripted:{root / 'script.yaml'}"]
        rows: list[tuple[str, list[str], Path | None]] = [
            ("python -c pass (interpreter alone)", [py, "-c", "pass"], None),
            ('python -c "import steward"', [py, "-c", "import steward"], None),
            ('python -c "from steward import Agent"', [py, "-c", "from steward import Agent"], None),
            ("steward --help", [*steward, "--help"], None),
            ("steward --version", [*steward, "--version"], None),
            ("steward runs list", [*steward, "runs", "list"], None),
            ("steward runs show last", [*steward, "runs", "show", "last"], None),
            ("steward sessions list", [*steward, "sessions", "list"], None),
            ("steward resume (nothing to resume)", [*steward, "resume"], None),
            ("steward run, scripted one-reply model (sandbox check remembered)", run, None),
            ("steward run, scripted one-reply model (sandbox check not remembered)", run, cache),
            ("steward checkpoints last", [*steward, "checkpoints", "last"], None),
            ("steward mcp list (no servers)", [*steward, "mcp", "list"], None),
            ("steward doctor (re-checks the sandbox)", [*steward, "doctor"], None),
        ]
        print(f"| command | median of {args.reps}, ms |")
        print("|---|---|")
        for label, cmd, before in rows:
            seconds = median_seconds(cmd, args.reps, cwd=workspace, env=env, before=before)
            print(f"| {label} | {seconds * 1000:.0f} |", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
