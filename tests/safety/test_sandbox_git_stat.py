"""Git typed into bash in the sandbox trusts the index the host's git wrote.

Inside the sandbox the workspace's files show another owner than the host's git recorded in the
index; with git's default checks every file would look changed until read again (on 10,000
files, 0.3 s a command). The sandbox's git config sets ``core.checkStat=minimal``, as the typed
git tools do on the host. ``git diff-files`` compares the index's stat data without refreshing
it, so a file whose recorded owner differs shows up there: none must.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings
from steward.tools.base import ToolContext
from steward.tools.shell import bash

pytestmark = [
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"),
]

_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def host_git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=_ENV
    )
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    for n in range(20):
        (root / "src" / f"f{n}.txt").write_text(f"file {n}\n")
    host_git(root, "init", "-q", "-b", "main")
    host_git(root, "add", "-A")
    host_git(root, "-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-q", "-m", "one")
    return root


async def sandboxed(repo: Path, command: str) -> str:
    ctx = ToolContext(workspace=repo, sandbox=BubblewrapSandbox(SandboxSettings()))
    result = await bash.call({"command": command}, ctx)
    assert not result.is_error, result.content
    return result.content


async def test_git_in_the_sandbox_compares_only_size_mode_and_time(repo: Path) -> None:
    shown = await sandboxed(repo, "git config core.checkStat; id -u; git diff-files --name-only; echo END")
    lines = shown.splitlines()
    assert lines[0] == "minimal"
    assert int(lines[1]) != os.getuid()  # the premise: inside, the files have another owner
    assert lines[2] == "END", shown  # no file looks changed to the index


async def test_a_real_change_is_still_seen(repo: Path) -> None:
    (repo / "src" / "f3.txt").write_text("changed, and longer than before\n")
    shown = await sandboxed(repo, "git status --porcelain")
    assert shown.splitlines()[0] == " M src/f3.txt"


async def test_the_repository_s_own_setting_wins(repo: Path) -> None:
    host_git(repo, "config", "core.checkStat", "default")
    shown = await sandboxed(repo, "git config core.checkStat")
    assert shown.splitlines()[0] == "default"
