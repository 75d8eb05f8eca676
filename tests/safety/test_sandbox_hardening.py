"""Ways out found in review: an agent must not change Steward's own configuration, leave a new
repository behind, or redirect a worktree; each check asserts the side effect is gone."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from steward.safety.protected import protected_reason
from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings
from steward.tools.base import ToolContext
from steward.tools.files import write_file
from steward.tools.shell import bash

from .conftest import RunBash

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    return BubblewrapSandbox(SandboxSettings(cpu_s=10, max_processes=64, tmpfs_mb=64))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    return tmp_path / "ws"


async def sh(box: BubblewrapSandbox, workspace: Path, command: str) -> tuple[int | None, str]:
    result = await bash.call(
        {"command": command, "timeout_s": 20}, ToolContext(workspace=workspace, sandbox=box)
    )
    match = re.search(r"exit code: (-?\d+)$", result.content)
    return (int(match.group(1)) if match else None), result.content


async def test_an_existing_steward_toml_cannot_be_changed(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    (workspace / "steward.toml").write_text("[sandbox]\nenabled = true\n")
    code, _ = await sh(sandbox, workspace, "printf '[sandbox]\\nenabled = false\\n' > steward.toml")
    assert code != 0
    assert (workspace / "steward.toml").read_text() == "[sandbox]\nenabled = true\n"


async def test_a_new_steward_toml_cannot_be_written(sandbox: BubblewrapSandbox, workspace: Path) -> None:
    # Held by an empty read-only placeholder while the command runs (another Steward starting
    # meanwhile reads an empty configuration, the same as none), removed afterwards.
    code, output = await sh(sandbox, workspace, "printf '[sandbox]\\nenabled = false\\n' > steward.toml")
    assert code != 0 and "steward.toml" in output
    assert not (workspace / "steward.toml").exists()


async def test_the_file_tools_refuse_steward_toml(workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace, protected=lambda p: protected_reason(workspace, p))
    result = await write_file.call({"path": "steward.toml", "content": "[sandbox]\nenabled=false\n"}, ctx)
    assert result.is_error and "protected" in result.content
    assert not (workspace / "steward.toml").exists()


async def test_a_repository_created_by_a_command_is_removed(
    sandbox: BubblewrapSandbox, workspace: Path, checkpointed_bash: RunBash
) -> None:
    command = 'mkdir sub && cd sub && git init -q && git config core.fsmonitor "$PWD/../fsm.sh" && echo made'
    result = await checkpointed_bash(sandbox, workspace, command)
    assert result.is_error and "new sub/.git removed" in result.content
    assert not (workspace / "sub" / ".git").exists()
    assert (workspace / "sub").is_dir()  # only the repository goes; the agent's other files stay


async def test_a_missing_start_up_file_leaves_no_placeholder_behind(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    code, output = await sh(sandbox, workspace, "ls -A")
    assert code == 0 and ".bashrc" not in output  # nothing for `git add -A` to pick up
    assert sorted(p.name for p in workspace.iterdir()) == [".steward"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
async def test_a_linked_worktrees_pointers_stay_read_only(sandbox: BubblewrapSandbox, tmp_path: Path) -> None:
    repo = tmp_path / "ws"
    repo.mkdir()
    run = ["git", "-C", str(repo)]
    subprocess.run([*run, "init", "-q"], check=True)
    subprocess.run([*run, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "x"],
                   check=True)  # fmt: skip
    subprocess.run([*run, "worktree", "add", "-q", str(tmp_path / "wt")], check=True)
    commondir = repo / ".git" / "worktrees" / "wt" / "commondir"
    before = commondir.read_text()
    code, _ = await sh(sandbox, repo, f"echo {tmp_path}/evil > .git/worktrees/wt/commondir")
    assert code != 0 and commondir.read_text() == before
