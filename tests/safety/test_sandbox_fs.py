"""The sandbox's file system: the workspace is writable, the host is not, secrets are not there.

Every attack asserts both the refusal (the exit status) and the absence of its effect on the host.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from steward.safety.sandbox.bubblewrap import SANDBOX_HOME, BubblewrapSandbox, SandboxSettings
from steward.tools.base import ToolContext
from steward.tools.shell import bash

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)

SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- planted"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    return tmp_path / "ws"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text(SECRET)
    return tmp_path / "outside"


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    return BubblewrapSandbox(SandboxSettings(cpu_s=10, memory_mb=1024, max_processes=64, tmpfs_mb=64))


def exists(path: str) -> bool:
    return Path(path).exists()


def python_ways_through_root() -> set[str]:
    """The names in /root that lead to the Python running Steward (e.g. '.pyenv'), if it lives there."""
    prefixes = (Path(p).resolve() for p in (sys.prefix, sys.base_prefix))
    return {p.relative_to("/root").parts[0] for p in prefixes if p.is_relative_to("/root")}


async def sh(
    box: BubblewrapSandbox, workspace: Path, command: str, *, writable: bool = True
) -> tuple[int, str]:
    """Run ``command`` with the bash tool in the sandbox: (exit status, output)."""
    ctx = ToolContext(workspace=workspace, sandbox=box, writable=writable)
    result = await bash.call({"command": command, "timeout_s": 10}, ctx)
    match = re.search(r"exit code: (-?\d+)", result.content.rsplit("\n", 1)[-1])
    assert match, result.content
    return int(match.group(1)), result.content


async def test_the_workspace_is_writable(sandbox: BubblewrapSandbox, workspace: Path) -> None:
    status, _ = await sh(sandbox, workspace, "echo ok > made.txt && mkdir -p sub && echo deep > sub/f")
    assert status == 0
    assert (workspace / "made.txt").read_text() == "ok\n"
    assert (workspace / "sub" / "f").read_text() == "deep\n"


async def test_commands_run_in_the_workspace_as_an_unprivileged_user(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    status, output = await sh(sandbox, workspace, "pwd; id -u; id -un")
    assert status == 0
    assert output.splitlines()[:3] == [str(workspace), "1000", "steward"]


async def test_writing_outside_the_workspace_fails(
    sandbox: BubblewrapSandbox, workspace: Path, outside: Path
) -> None:
    status, _ = await sh(sandbox, workspace, f"touch {outside}/x")
    assert status != 0
    assert not (outside / "x").exists()


async def test_a_recreated_outside_path_is_private_to_the_sandbox(
    sandbox: BubblewrapSandbox, workspace: Path, outside: Path
) -> None:
    # /tmp inside is a fresh tmpfs: making the directory there succeeds, the host never sees it.
    status, _ = await sh(sandbox, workspace, f"mkdir -p {outside} && echo x > {outside}/x && cat {outside}/x")
    assert status == 0
    assert not (outside / "x").exists()


@pytest.mark.parametrize("target", ["/usr/steward-probe", "/etc/steward-probe", "/steward-probe"])
async def test_system_directories_are_read_only(
    sandbox: BubblewrapSandbox, workspace: Path, target: str
) -> None:
    status, output = await sh(sandbox, workspace, f"touch {target}")
    assert status != 0
    assert "Read-only file system" in output
    assert not exists(target)


async def test_a_symlink_to_outside_cannot_be_written_through(
    sandbox: BubblewrapSandbox, workspace: Path, outside: Path
) -> None:
    (workspace / "link").symlink_to(outside)
    status, _ = await sh(sandbox, workspace, "echo x > link/f")
    assert status != 0
    assert not (outside / "f").exists()


async def test_a_symlink_to_a_secret_outside_cannot_be_read(
    sandbox: BubblewrapSandbox, workspace: Path, outside: Path
) -> None:
    (workspace / "leak").symlink_to(outside / "secret.txt")
    status, output = await sh(sandbox, workspace, "cat leak")
    assert status != 0
    assert SECRET not in output


async def test_a_hard_link_to_a_system_file_cannot_be_made(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    # Linking across mounts fails (EXDEV), so no writable name for a read-only file can be made.
    status, output = await sh(sandbox, workspace, "ln /usr/bin/env myenv")
    assert status != 0
    assert "Invalid cross-device link" in output
    assert not (workspace / "myenv").exists()


async def test_a_planted_secret_in_the_home_directory_is_not_visible(
    sandbox: BubblewrapSandbox, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(SECRET)
    monkeypatch.setenv("HOME", str(home))
    for command in (f"cat {home}/.ssh/id_rsa", "cat ~/.ssh/id_rsa", f"ls -A {home}"):
        status, output = await sh(sandbox, workspace, command)
        assert status != 0, command
        assert SECRET not in output
    _, output = await sh(sandbox, workspace, "echo $HOME")
    assert output.splitlines()[0] == SANDBOX_HOME


async def test_the_sandbox_home_is_empty_and_private(sandbox: BubblewrapSandbox, workspace: Path) -> None:
    status, output = await sh(sandbox, workspace, "ls -A ~ && echo note > ~/n && cat ~/n")
    assert status == 0
    assert output.splitlines()[0] == "note"


async def test_the_real_root_home_is_not_visible(sandbox: BubblewrapSandbox, workspace: Path) -> None:
    status, output = await sh(sandbox, workspace, "ls -A /root 2>/dev/null; ls -A /home")
    assert status == 0
    shown = set(output.splitlines()[:-1])
    # Only the way to the Python that runs Steward (e.g. a pyenv install in a home directory) may appear, nothing else.
    assert shown <= python_ways_through_root() | {"steward"}
    if exists("/root/.bashrc"):
        assert ".bashrc" not in shown


async def test_credential_files_of_the_system_are_not_visible(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    status, output = await sh(
        sandbox,
        workspace,
        "for p in /etc/shadow /etc/ssh /etc/sudoers /etc/pip.conf /etc/npmrc; do test -e $p && echo SEEN $p; done; true",
    )
    assert status == 0
    assert "SEEN" not in output


async def test_a_read_only_workspace_cannot_be_changed(sandbox: BubblewrapSandbox, workspace: Path) -> None:
    (workspace / "kept.txt").write_text("original\n")
    status, output = await sh(sandbox, workspace, "cat kept.txt; echo changed > kept.txt", writable=False)
    assert status != 0
    assert output.startswith("original")
    assert (workspace / "kept.txt").read_text() == "original\n"


async def test_extra_paths_are_visible_as_configured(tmp_path: Path, workspace: Path) -> None:
    readable, writable = tmp_path / "tools", tmp_path / "cache"
    readable.mkdir()
    writable.mkdir()
    (readable / "tool.txt").write_text("tool\n")
    box = BubblewrapSandbox(SandboxSettings(readable=(readable,), writable=(writable,)))
    status, output = await sh(
        box, workspace, f"cat {readable}/tool.txt; touch {readable}/x; echo c > {writable}/c"
    )
    assert status == 0
    assert output.startswith("tool\n")
    assert "Read-only file system" in output
    assert not (readable / "x").exists()
    assert (writable / "c").read_text() == "c\n"


async def test_python_runs_inside(sandbox: BubblewrapSandbox, workspace: Path) -> None:
    status, output = await sh(
        sandbox, workspace, f"{sys.executable} -c 'import json; print(json.dumps(1))'; python -V"
    )
    assert status == 0
    assert output.startswith("1\nPython 3.")


async def test_the_workspace_gains_nothing_but_the_state_directory(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    # Placeholders for missing protected paths (.git, .bashrc, ...) are removed afterwards.
    status, _ = await sh(sandbox, workspace, "true")
    assert status == 0
    assert sorted(os.listdir(workspace)) == [".steward"]
