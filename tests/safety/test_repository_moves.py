"""Repository metadata during a command: a moved repository keeps its history where it now is,
a new repository's metadata is undone, and so is a submodule's git directory that a command
made under ``.git/modules`` (git would take it up at the next ``git submodule update``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from steward.safety.checkpoints.around_calls import Checkpointer
from steward.safety.checkpoints.shadow import CheckpointSettings
from steward.safety.sandbox.bubblewrap import BubblewrapSandbox

from .conftest import RunBash, git

pytestmark = [
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"),
]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A project with a nested repository at vendor/lib and a submodule at vendor/sub."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git(upstream, "init", "-q")
    (upstream / "up.txt").write_text("up\n")
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "upstream history")
    ws = tmp_path / "ws"
    (ws / "vendor" / "lib").mkdir(parents=True)
    git(ws, "init", "-q")
    (ws / "top.txt").write_text("top\n")
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "top")
    git(ws, "submodule", "add", "-q", str(upstream), "vendor/sub")
    git(ws, "commit", "-q", "-m", "submodule")
    lib = ws / "vendor" / "lib"
    git(lib, "init", "-q")
    (lib / "lib.py").write_text("x = 1\n")
    git(lib, "add", "-A")
    git(lib, "commit", "-q", "-m", "lib history")
    return ws


MODULES = {
    "hooks and fsmonitor, no HEAD": (
        "mkdir -p .git/modules/evil/hooks && printf '#!/bin/sh\\ntouch /tmp/pwn\\n' > "
        ".git/modules/evil/hooks/post-checkout && printf '[core]\\n\\tfsmonitor = touch /tmp/pwn\\n' > "
        ".git/modules/evil/config"
    ),
    "a name with a slash": "mkdir -p .git/modules/vendor/new && git init -q --bare .git/modules/vendor/new",
    "nested in an existing submodule": (
        "mkdir -p .git/modules/vendor/sub/modules/inner/hooks && "
        "printf '[core]\\n\\tfsmonitor = touch /tmp/pwn\\n' > .git/modules/vendor/sub/modules/inner/config"
    ),
}


@pytest.mark.parametrize("spelling", sorted(MODULES))
async def test_a_submodule_git_directory_made_by_a_command_is_undone(
    sandbox: BubblewrapSandbox, workspace: Path, checkpointed_bash: RunBash, spelling: str
) -> None:
    modules = workspace / ".git" / "modules"

    def files() -> list[str]:  # (an empty folder a command made may stay: git reads nothing there)
        return sorted(p.relative_to(modules).as_posix() for p in modules.rglob("*") if not p.is_dir())

    before = files()
    result = await checkpointed_bash(sandbox, workspace, MODULES[spelling])
    assert result.is_error and "removed" in result.content
    assert files() == before
    assert git(workspace / "vendor" / "sub", "log", "--format=%s") == "upstream history\n"


async def test_a_repository_moved_away_and_replaced_by_a_fresh_one(
    sandbox: BubblewrapSandbox, workspace: Path, state_dir: Path, checkpointed_bash: RunBash
) -> None:
    lib, old = workspace / "vendor" / "lib", workspace / "vendor" / "old"
    result = await checkpointed_bash(sandbox, workspace, "mv vendor/lib vendor/old && git init -q vendor/lib")
    assert result.is_error and "new vendor/lib/.git removed" in result.content
    assert git(old, "log", "--format=%s") == "lib history\n"  # the history moved with it
    assert not (lib / ".git").exists()
    cp = Checkpointer(workspace, CheckpointSettings(state_dir=state_dir))
    cp.rewind("test-run", cp.checkpoints("test-run")[0])
    assert git(lib, "log", "--format=%s") == "lib history\n" and (lib / "lib.py").read_text() == "x = 1\n"
    assert not old.exists()


async def test_a_moved_submodule_keeps_its_git_directory(
    sandbox: BubblewrapSandbox, workspace: Path, checkpointed_bash: RunBash
) -> None:
    result = await checkpointed_bash(sandbox, workspace, "mv vendor/sub vendor/sub2")
    assert not result.is_error, result.content
    assert not (workspace / "vendor" / "sub").exists()
    assert (workspace / "vendor" / "sub2" / ".git").read_text().startswith("gitdir:")
    gitdir = str(workspace / ".git" / "modules" / "vendor" / "sub")
    worktree = str(workspace / "vendor" / "sub2")
    assert (
        git(workspace, "--git-dir", gitdir, "--work-tree", worktree, "log", "--format=%s")
        == "upstream history\n"
    )


async def test_a_moved_repository_is_still_watched_where_it_now_is(
    sandbox: BubblewrapSandbox, workspace: Path, checkpointed_bash: RunBash
) -> None:
    command = "mv vendor/lib vendor/lib2 && printf '#!/bin/sh\\ntouch /tmp/pwn\\n' > vendor/lib2/.git/hooks/pre-commit"
    result = await checkpointed_bash(sandbox, workspace, command)
    assert result.is_error
    assert not (workspace / "vendor" / "lib2" / ".git" / "hooks" / "pre-commit").exists()
    assert git(workspace / "vendor" / "lib2", "log", "--format=%s") == "lib history\n"
    assert not (workspace / "vendor" / "lib").exists()
