"""Git hooks wherever git looks for them: a ``core.hooksPath`` folder and the scripts its hooks run
(husky's ``.husky/_`` runs ``.husky/*``) are sealed, in the workspace's repository and in nested ones.

Each attack is a real bash call with the checkpoint before and the comparison after, with and
without the sandbox; then the user commits on the host, and whether a planted hook ran is read
off the disk.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings

from .conftest import RunBash

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"),
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]

RUNNER = '#!/usr/bin/env sh\nn=$(basename "$0")\ns=$(dirname "$(dirname "$0")")/$n\n[ -f "$s" ] || exit 0\nsh -e "$s"\n'
STUB = '#!/usr/bin/env sh\n. "$(dirname "$0")/h"\n'
USER_HOOK = "echo checking\n"


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    return BubblewrapSandbox(SandboxSettings(cpu_s=20, max_processes=64, tmpfs_mb=64))


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=u", "-c", "user.email=u@example.com", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty repository."""
    ws = tmp_path / "ws"
    ws.mkdir()
    git(ws, "init", "-q")
    return ws


def husky_repo(repo: Path) -> None:
    """A repository set up as husky does it: hooksPath ``.husky/_``, stubs that run ``.husky/NAME``."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q")
    hooks = repo / ".husky" / "_"
    hooks.mkdir(parents=True)
    (hooks / "h").write_text(RUNNER)
    for name in ("pre-commit", "post-commit", "pre-push"):
        (hooks / name).write_text(STUB)
        (hooks / name).chmod(0o755)
    (hooks / "h").chmod(0o755)
    (repo / ".husky" / "pre-commit").write_text(USER_HOOK)
    git(repo, "config", "core.hooksPath", ".husky/_")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "husky")


def attacks(prefix: str, marker: Path) -> list[str]:
    touch = f"touch {marker}"
    return [
        f"echo '{touch}' >> {prefix}.husky/pre-commit",
        f"printf '%s\\n' '{touch}' > {prefix}.husky/post-commit",
        f"cd {prefix}.husky/_ && echo '{touch}' > pre-commit.tmp && mv pre-commit.tmp pre-commit",
        f"sed -i 's/^sh -e/{touch}; sh -e/' {prefix}.husky/_/h",
        f"python3 -c \"open('{prefix}.husky/_/post-merge', 'w').write('#!/bin/sh\\n{touch}\\n')\"; "
        f"chmod +x {prefix}.husky/_/post-merge",
    ]


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandbox", "no-sandbox"])
@pytest.mark.parametrize("where", ["", "vendor/lib/"], ids=["root", "nested"])
async def test_a_hook_planted_where_husky_points_git_never_runs(
    tmp_path: Path,
    sandbox: BubblewrapSandbox,
    checkpointed_bash: RunBash,
    sandboxed: bool,
    where: str,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    if where:
        git(workspace, "init", "-q")
    repo = workspace / where if where else workspace
    husky_repo(repo)
    marker = tmp_path / "hook-ran"
    for attack in attacks(where, marker):
        await checkpointed_bash(sandbox if sandboxed else None, workspace, attack)
    (repo / "change.txt").write_text("x\n")
    git(repo, "add", "change.txt")
    committed = git(repo, "commit", "-q", "-m", "user's own commit")
    assert committed.returncode == 0, committed.stderr
    git(repo, "merge", "--no-edit", "HEAD")
    assert not marker.exists()
    assert (repo / ".husky" / "pre-commit").read_text() == USER_HOOK
    assert (repo / ".husky" / "_" / "h").read_text() == RUNNER
    assert not (repo / ".husky" / "post-commit").exists()
    assert not (repo / ".husky" / "_" / "post-merge").exists()


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandbox", "no-sandbox"])
async def test_a_plain_hooks_path_folder_takes_no_new_hook(
    tmp_path: Path, workspace: Path, sandbox: BubblewrapSandbox, checkpointed_bash: RunBash, sandboxed: bool
) -> None:
    (workspace / "tools" / "githooks").mkdir(parents=True)
    git(workspace, "config", "core.hooksPath", "tools/githooks")
    marker = tmp_path / "hook-ran"
    await checkpointed_bash(
        sandbox if sandboxed else None,
        workspace,
        f"printf '#!/bin/sh\\ntouch {marker}\\n' > tools/githooks/pre-commit; chmod +x tools/githooks/pre-commit",
    )
    committed = git(workspace, "commit", "-q", "--allow-empty", "-m", "x")
    assert committed.returncode == 0, committed.stderr
    assert not marker.exists()
    assert not (workspace / "tools" / "githooks" / "pre-commit").exists()


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandbox", "no-sandbox"])
async def test_programs_and_included_files_the_git_config_names_are_not_changed(
    tmp_path: Path, workspace: Path, sandbox: BubblewrapSandbox, checkpointed_bash: RunBash, sandboxed: bool
) -> None:
    (workspace / "tools").mkdir()
    monitor = "#!/bin/sh\nexit 0\n"
    (workspace / "tools" / "fsmon.sh").write_text(monitor)
    (workspace / "tools" / "fsmon.sh").chmod(0o755)
    (workspace / "local.gitconfig").write_text("[user]\n\tname = u\n")
    git(workspace, "config", "core.fsmonitor", "tools/fsmon.sh")
    git(workspace, "config", "include.path", "../local.gitconfig")
    marker = tmp_path / "ran"
    for attack in (
        f"echo 'touch {marker}' >> tools/fsmon.sh",
        f"printf '[core]\\n\\thooksPath = evil-hooks\\n[alias]\\n\\tst = !touch {marker}\\n' >> local.gitconfig",
    ):
        await checkpointed_bash(sandbox if sandboxed else None, workspace, attack)
    git(workspace, "status")
    git(workspace, "st")
    assert not marker.exists()
    assert (workspace / "tools" / "fsmon.sh").read_text() == monitor
    assert (workspace / "local.gitconfig").read_text() == "[user]\n\tname = u\n"
