"""Limits: processes, memory, CPU, file size, time; nothing survives a timeout or a cancel."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings, find_pids_cgroup
from steward.tools.base import ToolContext, ToolResult
from steward.tools.shell import bash

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)

SETTINGS = SandboxSettings(cpu_s=1, memory_mb=256, file_size_mb=1, max_processes=32, tmpfs_mb=64)


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    return BubblewrapSandbox(SETTINGS)


def marker() -> str:
    """A sleep duration no other process on the machine uses, to find ours by command line."""
    return f"{random.randint(1000, 9999)}.{random.randint(10**5, 10**6 - 1)}"


def processes_with(text: str) -> list[int]:
    """Running (not zombie) processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def none_left(text: str, within_s: float = 2.0) -> bool:
    deadline = time.monotonic() + within_s
    while processes_with(text):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def names_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def cgroups_of(pid: int) -> list[Path]:
    parent, _ = find_pids_cgroup()
    return [] if parent is None else list(parent.path.glob(f"steward-{pid}-*"))


async def run(box: BubblewrapSandbox, workspace: Path, command: str, timeout_s: float = 5) -> ToolResult:
    return await bash.call(
        {"command": command, "timeout_s": timeout_s}, ToolContext(workspace=workspace, sandbox=box)
    )


def exit_status(result: ToolResult) -> int:
    match = re.search(r"exit code: (-?\d+)", result.content.rsplit("\n", 1)[-1])
    assert match, result.content
    return int(match.group(1))


async def test_a_fork_bomb_is_contained_and_leaves_nothing(
    sandbox: BubblewrapSandbox, tmp_path: Path
) -> None:
    status = sandbox.probe()
    if "not enforced" in status.details.get("processes", ""):
        pytest.skip(f"process limits cannot be enforced on this host: {status.warnings}")
    token = f"bomb{marker()}"
    result = await run(sandbox, tmp_path, f":(){{ :|:& }};:; sleep 30 # {token}", timeout_s=1.0)
    assert "Resource temporarily unavailable" in result.content  # the limit was hit, not the machine
    assert "timed out" in result.content
    assert none_left(token)
    assert cgroups_of(os.getpid()) == []  # each command's cgroup is gone with it
    assert exit_status(await run(sandbox, tmp_path, "true")) == 0  # the host is fine


async def test_a_memory_bomb_dies_at_the_memory_limit(sandbox: BubblewrapSandbox, tmp_path: Path) -> None:
    result = await run(
        sandbox, tmp_path, f"{sys.executable} -c 'b = bytearray(4 * 1024**3); print(\"ALLOCATED\")'"
    )
    assert exit_status(result) != 0
    assert "MemoryError" in result.content
    assert "ALLOCATED" not in result.content


async def test_a_busy_loop_is_stopped_at_the_cpu_limit(sandbox: BubblewrapSandbox, tmp_path: Path) -> None:
    # A wall-clock timeout far past the CPU limit: the loop ends by SIGXCPU, however busy the host.
    result = await run(sandbox, tmp_path, "while :; do :; done", timeout_s=300)
    assert "timed out" not in result.content
    assert exit_status(result) == 128 + 24  # SIGXCPU


async def test_a_file_cannot_grow_past_the_file_size_limit(
    sandbox: BubblewrapSandbox, tmp_path: Path
) -> None:
    result = await run(sandbox, tmp_path, "head -c 5M /dev/zero > big")
    assert exit_status(result) != 0
    assert "File size limit exceeded" in result.content
    assert (tmp_path / "big").stat().st_size <= 1024 * 1024


async def test_a_timeout_stops_background_children_too(sandbox: BubblewrapSandbox, tmp_path: Path) -> None:
    token = marker()
    command = f"sleep {token}1 & setsid sleep {token}2 & (sleep {token}3 &); nohup sleep {token}4 >/dev/null 2>&1 & sleep {token}5"
    result = await run(sandbox, tmp_path, command, timeout_s=0.5)
    assert "timed out" in result.content
    assert none_left(f"sleep {token}")


async def test_background_children_end_with_the_command(sandbox: BubblewrapSandbox, tmp_path: Path) -> None:
    token = marker()
    result = await run(sandbox, tmp_path, f"setsid sleep {token} & echo started")
    assert exit_status(result) == 0
    assert none_left(f"sleep {token}")


async def test_cancelling_the_call_leaves_no_process_and_no_placeholder(
    sandbox: BubblewrapSandbox, tmp_path: Path
) -> None:
    token = marker()
    task = asyncio.create_task(run(sandbox, tmp_path, f"setsid sleep {token} & sleep {token}", timeout_s=30))
    for _ in range(150):
        if processes_with(f"sleep {token}"):
            break
        await asyncio.sleep(0.02)
    assert processes_with(f"sleep {token}")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert none_left(f"sleep {token}")
    assert not (tmp_path / ".bashrc").exists()
    assert cgroups_of(os.getpid()) == []  # each command's cgroup is gone with it


async def test_the_probe_names_how_each_limit_is_enforced(sandbox: BubblewrapSandbox) -> None:
    status = sandbox.probe()
    assert status.ok, status.render()
    assert status.details["memory"].startswith("256 MB")
    assert status.details["cpu"].startswith("1 s")
    assert status.details["file size"].startswith("1 MB")
    if os.geteuid() == 0:
        assert "cgroup" in status.details["processes"] or "not enforced" in status.details["processes"]
    else:
        assert "RLIMIT_NPROC" in status.details["processes"]


@pytest.mark.parametrize("yields", [0, 1, 3, 10])
async def test_cancelling_during_set_up_leaves_nothing_behind(
    sandbox: BubblewrapSandbox, tmp_path: Path, yields: int
) -> None:
    task = asyncio.create_task(run(sandbox, tmp_path, "true"))
    for _ in range(yields):
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert names_in(tmp_path) in ([], [".steward"])  # no placeholder is left
    assert cgroups_of(os.getpid()) == []
