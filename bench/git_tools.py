"""The git tools against ``git`` itself on a repository of 10,000 files.

    .venv/bin/python bench/git_tools.py [--files 10000] [--calls 10]

A repository with ``--files`` files (10-3,000 bytes, 50 to a directory, one commit) and one
modified file. Per operation, milliseconds per call (p50 / p95) for:

* ``git``: git itself on the host, as a user would type it (``git status --porcelain=v2
  --branch``, ``git diff --stat``, ``git log -20``, and ``git add`` + ``git commit --only`` of
  one changed file);
* ``tool, sandbox``: the git tool with git in the bubblewrap sandbox, as the agent runs it;
* ``tool, no sandbox``: the same tool with the sandbox turned off (what the sandbox costs is
  the difference);
* ``commit, checkpointed``: ``git_commit`` as the agent's toolset runs it, with the checkpoint
  before and the comparison after (``CheckpointToolset``);
* ``bash git status``: ``git status`` typed into ``bash`` in the sandbox, right after git on the
  host touched the index (as when the user and the agent take turns): the sandbox shows the
  files with other owners than the index holds, which ``core.checkStat=minimal`` (set in the
  sandbox's git config) does not compare; beside it the same with ``checkStat=default`` (as it
  was before) and ``bash true`` (what starting the sandbox costs).

Figures, not assertions: machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from steward.safety.checkpoints.around_calls import Checkpointer
from steward.safety.checkpoints.shadow import CheckpointSettings
from steward.safety.checkpoints.wrapper import CheckpointToolset
from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings
from steward.tools.base import ToolContext
from steward.tools.git import git_commit, git_diff, git_log, git_status, git_toolset
from steward.tools.shell import bash

_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=_ENV)


def make_repository(root: Path, files: int) -> None:
    rng = random.Random(files)
    for index in range(files):
        directory = root / f"d{index // 500}" / f"s{(index // 50) % 10}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{index}.txt").write_bytes(b"x" * rng.randint(10, 3000))
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Bench")
    git(root, "config", "user.email", "bench@example.com")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "Initial")
    for n in range(30):
        git(root, "commit", "-q", "--allow-empty", "-m", f"Commit {n}")


def figures(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered):8.1f} / {p95:8.1f}"


async def timed(calls: int, once: Callable[[int], Awaitable[Any]]) -> list[float]:
    samples = []
    for n in range(calls):
        started = time.perf_counter()
        await once(n)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def touch(repo: Path, n: int) -> str:
    path = "d0/s0/f0.txt"
    (repo / path).write_text(f"change {n}\n")
    return path


async def bench(repo: Path, calls: int) -> None:
    sandbox = BubblewrapSandbox(SandboxSettings())
    boxed = ToolContext(workspace=repo, sandbox=sandbox)
    bare = ToolContext(workspace=repo, sandbox=None)
    await git_status.call({}, boxed)  # the sandbox's first-use probe is not a call's cost
    touch(repo, -1)

    async def host(*args: str) -> None:
        await asyncio.to_thread(git, repo, *args)

    async def host_commit(n: int) -> None:
        path = touch(repo, n)
        await host("add", "--", path)
        await host("commit", "-q", "-m", f"Host {n}", "--only", "--", path)

    def tool_commit(ctx: ToolContext) -> Callable[[int], Awaitable[Any]]:
        async def once(n: int) -> None:
            path = touch(repo, n)
            result = await git_commit.call({"message": f"Tool {n}", "paths": [path]}, ctx)
            assert not result.is_error, result.content

        return once

    state = Path(tempfile.mkdtemp(prefix="steward-bench-state-"))
    checkpointer = Checkpointer(repo, CheckpointSettings(state_dir=state))
    checkpointed = CheckpointToolset(git_toolset(), lambda _workspace: checkpointer)

    async def agent_commit(n: int) -> None:
        path = touch(repo, n)
        arguments = {"message": f"Agent {n}", "paths": [path]}
        result = await checkpointed.call_tool(
            "git_commit", arguments, ToolContext(workspace=repo, sandbox=sandbox)
        )
        assert not result.is_error, result.content

    bash_times: dict[str, list[float]] = {}

    def bash_status(how: str, command: str) -> Callable[[int], Awaitable[Any]]:
        async def once(n: int) -> None:
            touch(repo, n)
            await host("add", "-A")  # the host's git writes the index with its own view of the files
            started = time.perf_counter()
            result = await bash.call({"command": command}, boxed)
            assert not result.is_error, result.content
            bash_times.setdefault(how, []).append((time.perf_counter() - started) * 1000)

        return once

    rows: list[tuple[str, str, Callable[[int], Awaitable[Any]]]] = [
        ("status", "git", lambda _n: host("status", "--porcelain=v2", "--branch")),
        ("status", "tool, sandbox", lambda _n: git_status.call({}, boxed)),
        ("status", "tool, no sandbox", lambda _n: git_status.call({}, bare)),
        ("diff --stat", "git", lambda _n: host("diff", "--stat")),
        ("diff --stat", "tool, sandbox", lambda _n: git_diff.call({"stat": True}, boxed)),
        ("diff --stat", "tool, no sandbox", lambda _n: git_diff.call({"stat": True}, bare)),
        ("log (20)", "git", lambda _n: host("log", "-20")),
        ("log (20)", "tool, sandbox", lambda _n: git_log.call({}, boxed)),
        ("log (20)", "tool, no sandbox", lambda _n: git_log.call({}, bare)),
        ("commit (1 file)", "git", host_commit),
        ("commit (1 file)", "tool, sandbox", tool_commit(boxed)),
        ("commit (1 file)", "tool, no sandbox", tool_commit(bare)),
        ("commit (1 file)", "commit, checkpointed", agent_commit),
    ]
    print(f"{'operation':<17} {'how':<22} {'p50 ms':>8} / {'p95 ms':>8}")
    for operation, how, once in rows:
        print(f"{operation:<17} {how:<22} {figures(await timed(calls, once))}")
    shell_rows = {
        "bash git status": "git status --porcelain",
        "bash, checkStat=default": "git -c core.checkStat=default status --porcelain",  # as before
        "bash true": "true",  # what starting bash in the sandbox costs
    }
    for how, command in shell_rows.items():  # only the bash call is timed, not the host's git before
        await timed(calls, bash_status(how, command))
        print(f"{'status':<17} {how:<22} {figures(bash_times[how])}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=10)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="steward-bench-git-") as directory:
        repo = Path(directory) / "repo"
        repo.mkdir()
        started = time.perf_counter()
        make_repository(repo, options.files)
        print(
            f"repository: {options.files} files, 31 commits (made in {time.perf_counter() - started:.1f} s)"
        )
        asyncio.run(bench(repo, options.calls))


if __name__ == "__main__":
    main()
