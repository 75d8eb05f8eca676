"""Checkpoints and complete change detection: every check looks at the disk, not at a message.

The wipes are spelled the ways a guard does not read (a path built at run time, a renamed copy
of rm, a script in another language, find with -delete); the repository tricks are placed
where a bounded walk does not look (deep, in skipped directories, after a flood of files).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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
    ws = tmp_path / "ws"
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "app.py").write_text("print('hello')\n")
    (ws / "README.md").write_text("# project\n")
    (ws / "run.sh").write_text("#!/bin/sh\necho run\n")
    (ws / "run.sh").chmod(0o755)
    (ws / "link").symlink_to("src/pkg/app.py")
    git(ws, "init", "-q")
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "first")
    return ws


def snapshot(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every file and link below ``root`` (not .git, not .steward) with its kind and content."""
    found: dict[str, tuple[str, bytes]] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if relative.split("/")[0] in (".git", ".steward"):
            continue
        if path.is_symlink():
            found[relative] = ("link", str(path.readlink()).encode())
        elif path.is_file():
            kind = "exec" if os.access(path, os.X_OK) else "file"
            found[relative] = (kind, path.read_bytes())
    return found


def checkpointer(workspace: Path, state_dir: Path, **settings: object) -> Checkpointer:
    return Checkpointer(workspace, CheckpointSettings(state_dir=state_dir, **settings))  # type: ignore[arg-type]


WIPES = {
    "path built at run time": 'd=sr; rm -rf "${d}c" README.md run.sh link',
    "renamed copy of rm": "cp /bin/rm ./zap && ./zap -rf src README.md run.sh link zap",
    "another language": (
        f'{sys.executable} -c "import os,shutil; '
        "[shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p) "
        "for p in os.listdir('.') if p not in ('.git', '.steward')]\""
    ),
    "find with -delete": "find src -delete; find . -maxdepth 1 ! -type d -delete",
}


@pytest.mark.parametrize("spelling", sorted(WIPES))
async def test_a_wiped_workspace_comes_back_with_one_rewind(
    sandbox: BubblewrapSandbox, workspace: Path, state_dir: Path, checkpointed_bash: RunBash, spelling: str
) -> None:
    before = snapshot(workspace)
    await checkpointed_bash(sandbox, workspace, WIPES[spelling] + "; echo junk > new.txt")
    assert not (workspace / "src").exists()
    cp = checkpointer(workspace, state_dir)
    found = cp.checkpoints("test-run")
    assert [c.tool for c in found] == ["bash"]
    report = cp.rewind("test-run", found[0])
    assert snapshot(workspace) == before  # content, executable bit and symlinks, byte for byte
    assert "src/pkg/app.py" in report.restored and "new.txt" in report.removed
    assert git(workspace, "status", "--porcelain").replace("?? .steward/\n", "") == ""


async def test_a_rewind_can_itself_be_undone(
    sandbox: BubblewrapSandbox, workspace: Path, state_dir: Path, checkpointed_bash: RunBash
) -> None:
    await checkpointed_bash(sandbox, workspace, "echo changed > README.md && echo new > new.txt")
    after = snapshot(workspace)
    cp = checkpointer(workspace, state_dir)
    report = cp.rewind("test-run", cp.checkpoints("test-run")[0])
    assert (workspace / "README.md").read_text() == "# project\n"
    cp.rewind("test-run", report.before)
    assert snapshot(workspace) == after


def test_an_unchanged_workspace_records_the_same_state(workspace: Path, state_dir: Path) -> None:
    cp = checkpointer(workspace, state_dir)
    first = cp.before("r1")
    second = cp.before("r1")
    assert first.checkpoint is not None and second.checkpoint is not None
    assert first.checkpoint.units == second.checkpoint.units
    assert first.checkpoint.gitdirs == second.checkpoint.gitdirs


def test_large_untracked_files_are_left_out_and_reported(workspace: Path, state_dir: Path) -> None:
    (workspace / "big.bin").write_bytes(b"x" * 2048)
    cp = checkpointer(workspace, state_dir, max_file_bytes=1024)
    before = cp.before("r1")
    assert before.checkpoint is not None and before.checkpoint.skipped == ["big.bin"]
    (workspace / "big.bin").unlink()
    (workspace / "README.md").unlink()
    report = cp.rewind("r1", before.checkpoint)
    assert (workspace / "README.md").exists()
    assert report.left == ["big.bin"]


def test_ignore_rules_of_the_workspace_and_the_config_apply(workspace: Path, state_dir: Path) -> None:
    (workspace / ".gitignore").write_text("build/\n")
    (workspace / "build").mkdir()
    (workspace / "build" / "out.o").write_text("object")
    (workspace / "cache.tmp").write_text("cache")
    cp = checkpointer(workspace, state_dir, ignore=("*.tmp",))
    before = cp.before("r1")
    assert before.checkpoint is not None
    for name in ("build/out.o", "cache.tmp", "README.md"):
        (workspace / name).unlink()
    cp.rewind("r1", before.checkpoint)
    assert (workspace / "README.md").exists()
    assert not (workspace / "build" / "out.o").exists() and not (workspace / "cache.tmp").exists()


def test_content_is_kept_byte_for_byte_whatever_gitattributes_say(workspace: Path, state_dir: Path) -> None:
    marker = workspace.parent / "filter-ran"
    (workspace / ".gitattributes").write_text("* text eol=crlf filter=evil ident\n")
    with (workspace / ".git" / "config").open("a") as config:
        config.write(f'[filter "evil"]\n\tclean = touch {marker}\n\tsmudge = touch {marker}\n')
        config.write(f"[core]\n\tfsmonitor = touch {marker}\n")
    (workspace / "data.txt").write_bytes(b"line one\nline two\r\n$Id$\n")
    before = snapshot(workspace)
    cp = checkpointer(workspace, state_dir)
    recorded = cp.before("r1")
    assert recorded.checkpoint is not None
    (workspace / "data.txt").write_text("gone")
    cp.rewind("r1", recorded.checkpoint)
    assert snapshot(workspace) == before
    assert not marker.exists()  # Steward's own git ran no filter and no fsmonitor of the workspace


# --- complete change detection ------------------------------------------------------------


async def test_a_repository_is_found_and_removed_anywhere(
    sandbox: BubblewrapSandbox, workspace: Path, checkpointed_bash: RunBash
) -> None:
    deep = "node_modules/" + "/".join(f"d{i}" for i in range(15))
    command = (
        "mkdir -p flood && (cd flood && seq 1 3000 | xargs touch) && "
        f"mkdir -p {deep} && git init -q {deep}/r && "
        f"git -C {deep}/r config core.fsmonitor 'touch /tmp/x' && "
        "mkdir -p .venv/lib && git init -q .venv/lib/evil"
    )
    result = await checkpointed_bash(sandbox, workspace, command)
    assert result.is_error and "Undone" in result.content
    assert not (workspace / deep / "r" / ".git").exists()
    assert not (workspace / ".venv" / "lib" / "evil" / ".git").exists()
    assert (workspace / "flood" / "2999").exists()  # the rest of the call's work is kept


async def test_a_bare_repository_layout_is_disabled(
    sandbox: BubblewrapSandbox, workspace: Path, checkpointed_bash: RunBash
) -> None:
    result = await checkpointed_bash(sandbox, workspace, "git init -q --bare target/cache/tools.git")
    assert result.is_error
    bare = workspace / "target" / "cache" / "tools.git"
    assert not (bare / "HEAD").exists() and not (bare / "config").exists() and not (bare / "hooks").exists()
    probe = subprocess.run(["git", "-C", str(bare), "rev-parse", "--git-dir"], capture_output=True, text=True)
    assert probe.stdout.strip() != "."  # git no longer takes it for a repository


async def test_a_gitdir_pointer_file_is_removed(
    sandbox: BubblewrapSandbox, workspace: Path, checkpointed_bash: RunBash
) -> None:
    command = "mkdir -p evil/hooks other && git init -q --bare evil2 && echo 'gitdir: ../evil2' > other/.git"
    result = await checkpointed_bash(sandbox, workspace, command)
    assert result.is_error
    assert not (workspace / "other" / ".git").exists()
    assert not (workspace / "evil2" / "HEAD").exists()


@pytest.fixture
def nested(workspace: Path) -> Path:
    sub = workspace / "libs" / "sub"
    sub.mkdir(parents=True)
    git(sub, "init", "-q")
    (sub / "lib.py").write_text("x = 1\n")
    git(sub, "add", "-A")
    git(sub, "commit", "-q", "-m", "nested history")
    return sub


async def test_a_moved_nested_repository_keeps_its_history_where_it_now_is(
    sandbox: BubblewrapSandbox, workspace: Path, state_dir: Path, nested: Path, checkpointed_bash: RunBash
) -> None:
    result = await checkpointed_bash(sandbox, workspace, "mv libs/sub libs/elsewhere")
    assert not result.is_error, result.content  # moving a repository is legitimate
    moved = workspace / "libs" / "elsewhere"
    assert git(moved, "log", "--format=%s") == "nested history\n"
    assert not nested.exists()
    await checkpointed_bash(sandbox, workspace, "echo 2 > libs/elsewhere/lib.py")
    cp = checkpointer(workspace, state_dir)
    cp.rewind("test-run", cp.checkpoints("test-run")[0])  # and a rewind puts it all back
    assert git(nested, "log", "--format=%s") == "nested history\n"
    assert (nested / "lib.py").read_text() == "x = 1\n" and not moved.exists()
    cp.rewind("test-run", cp.checkpoints("test-run")[-1])  # undone: where it was moved, as it was
    assert git(moved, "log", "--format=%s") == "nested history\n" and not nested.exists()
    assert (moved / "lib.py").read_text() == "2\n"


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf libs/sub/.git; git init -q libs/sub; echo 'touch /tmp/pwn' > libs/sub/.git/hooks/post-checkout",
        "mv libs/sub/.git /tmp/stolen; mkdir libs/sub/.git",
        "rm -rf libs/sub",
        "cd libs/sub && git update-ref -d HEAD; rm -rf .git/objects",
    ],
)
async def test_a_swapped_or_deleted_nested_repository_keeps_its_history(
    sandbox: BubblewrapSandbox,
    workspace: Path,
    state_dir: Path,
    nested: Path,
    checkpointed_bash: RunBash,
    command: str,
) -> None:
    head = git(nested, "rev-parse", "HEAD").strip()
    await checkpointed_bash(sandbox, workspace, command)
    # The history is there right after the call, whatever the call did...
    assert git(nested, "cat-file", "-t", head) == "commit\n"
    assert git(nested, "log", "--format=%s", head) == "nested history\n"
    assert not (nested / ".git" / "hooks" / "post-checkout").exists()
    # ...and what the call did to the files is one rewind away.
    cp = checkpointer(workspace, state_dir)
    cp.rewind("test-run", cp.checkpoints("test-run")[0])
    assert (nested / "lib.py").read_text() == "x = 1\n"
    assert git(nested, "log", "--format=%s") == "nested history\n"


async def test_new_program_files_in_an_existing_git_directory_are_removed(
    sandbox: BubblewrapSandbox, workspace: Path, nested: Path, checkpointed_bash: RunBash
) -> None:
    command = (
        "printf '[core]\\n\\tfsmonitor = touch /tmp/p\\n' > .git/config.worktree; "
        "mkdir -p .git/modules/m && git init -q --bare .git/modules/m; "
        "echo ../evil > libs/sub/.git/commondir; true"
    )
    result = await checkpointed_bash(sandbox, workspace, command)
    assert result.is_error
    assert not (workspace / ".git" / "config.worktree").exists()
    assert not (workspace / ".git" / "modules" / "m" / "HEAD").exists()
    assert not (nested / ".git" / "commondir").exists()
    git(workspace, "status", "--porcelain")  # git on the host still works (it would raise)


async def test_checkpoints_are_out_of_the_sandbox_reach(
    sandbox: BubblewrapSandbox, workspace: Path, state_dir: Path, checkpointed_bash: RunBash
) -> None:
    await checkpointed_bash(sandbox, workspace, "true")
    assert state_dir.is_dir()
    command = f"ls {state_dir}; rm -rf {state_dir}; find / -name checkpoints.jsonl 2>/dev/null | head -3"
    result = await checkpointed_bash(sandbox, workspace, command)
    assert "checkpoints.jsonl" not in result.content.replace(str(state_dir), "")
    assert len(checkpointer(workspace, state_dir).checkpoints("test-run")) == 2


def test_shadows_of_workspaces_that_are_gone_are_pruned(tmp_path: Path, state_dir: Path) -> None:
    from steward.safety.checkpoints import shadow as module

    gone = tmp_path / "gone"
    gone.mkdir()
    checkpointer(gone, state_dir).before("r1")
    shadow = checkpointer(gone, state_dir).shadow.path
    assert shadow.is_dir()
    shutil.rmtree(gone)
    module._PRUNED.clear()
    kept = tmp_path / "kept"
    kept.mkdir()
    checkpointer(kept, state_dir).before("r1")
    assert not shadow.exists()
    assert checkpointer(kept, state_dir).shadow.path.is_dir()


# --- found in review (an attacker's spellings) ---------------------------------------------


async def test_a_bare_repository_made_at_the_workspace_root_is_disabled(
    sandbox: BubblewrapSandbox, tmp_path: Path, checkpointed_bash: RunBash
) -> None:
    bare_ws = tmp_path / "plain"
    bare_ws.mkdir()
    marker = tmp_path / "ran"
    command = (
        "git init -q --bare . 2>/dev/null; "
        f"printf '[core]\\n\\tfsmonitor = \"touch {marker}; false\"\\n\\tbare = false\\n\\tworktree = .\\n' >> config"
    )
    result = await checkpointed_bash(sandbox, bare_ws, command)
    assert result.is_error and "workspace root" in result.content
    assert not (bare_ws / "HEAD").exists() and not (bare_ws / "config").exists()
    subprocess.run(["git", "-C", str(bare_ws), "status"], capture_output=True, check=False)
    assert not marker.exists()


async def test_hooks_of_an_existing_bare_repository_stay_read_only_however_many(
    sandbox: BubblewrapSandbox, workspace: Path, checkpointed_bash: RunBash
) -> None:
    bare = workspace / "fixtures" / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    command = (
        "cd fixtures/remote.git/hooks && for i in $(seq -w 0 1100); do : > 0$i; done; "
        "printf '#!/bin/sh\\ntouch /tmp/x\\n' > update; chmod +x update"
    )
    await checkpointed_bash(sandbox, workspace, command)
    assert not (bare / "hooks" / "update").exists()
    assert not (bare / "hooks" / "01000").exists()


async def test_a_file_in_the_way_does_not_stop_the_comparison(
    sandbox: BubblewrapSandbox, workspace: Path, nested: Path, checkpointed_bash: RunBash
) -> None:
    command = (
        "git init -q --bare evil.git && git -C evil.git config core.fsmonitor 'touch /tmp/x'; "
        "mv libs/sub libs/sub2 && echo x > libs/sub"
    )
    result = await checkpointed_bash(sandbox, workspace, command)
    assert result.is_error
    assert not (workspace / "evil.git" / "HEAD").exists()
    assert git(workspace / "libs" / "sub2", "log", "--format=%s") == "nested history\n"  # moved with it
    assert (workspace / "libs" / "sub").read_text() == "x\n"


async def test_a_symlinked_python_in_the_workspace_is_put_back(
    sandbox: BubblewrapSandbox, workspace: Path, checkpointed_bash: RunBash, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = workspace / ".venvs" / "real"
    (real / "bin").mkdir(parents=True)
    (workspace / ".venv").symlink_to(".venvs/real")
    monkeypatch.setattr(sys, "prefix", str(workspace / ".venv"))
    command = (
        "mkdir -p evil/bin && printf '#!/bin/sh\\necho pwned\\n' > evil/bin/python && ln -sfn evil .venv"
    )
    result = await checkpointed_bash(sandbox, workspace, command)
    assert result.is_error and ".venv restored" in result.content
    assert (workspace / ".venv").readlink() == Path(".venvs/real")


async def test_a_repository_hidden_past_the_path_length_limit_is_removed(
    sandbox: BubblewrapSandbox, workspace: Path, checkpointed_bash: RunBash
) -> None:
    name = "d" * 200
    command = (
        f"for i in $(seq 1 25); do mkdir {name} && cd {name} || exit 1; done; "
        "git init -q . && git config core.fsmonitor 'touch /tmp/x'; true"
    )
    result = await checkpointed_bash(sandbox, workspace, command)
    assert result.is_error and "too long" in result.content
    depth = 0
    current = os.open(workspace, os.O_RDONLY)
    try:  # walk down by descriptor (the whole path is too long to name)
        while depth < 30:
            try:
                child = os.open(name, os.O_RDONLY, dir_fd=current)
            except FileNotFoundError:
                break
            os.close(current)
            current, depth = child, depth + 1
        assert ".git" not in os.listdir(current)
    finally:
        os.close(current)
    assert depth < 25
