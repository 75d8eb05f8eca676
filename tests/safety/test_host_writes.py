"""What Steward writes into a workspace from the host never follows a link the agent made.

The attack: a nested repository whose ``.git`` is a ``gitdir:`` file (a submodule, a linked
worktree) is moved away during a call and a symlink to a folder outside the workspace (a
stand-in for the home directory) is put in its place. The check after the call restores the
repository's metadata and files, and a later rewind writes the recorded files: each of these
writes must land in the workspace or nowhere, never in the folder the link leads to. Every
test compares the outside folder byte for byte.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from steward.safety.checkpoints.around_calls import Checkpointer
from steward.safety.checkpoints.shadow import CheckpointSettings
from steward.safety.sandbox.bubblewrap import BubblewrapSandbox
from steward.tools._beneath import StrictTree

from .conftest import RunBash, git

pytestmark = [
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"),
]


def tree_of(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry below ``root``: kind, permission bits and content (a link's target)."""
    found: dict[str, tuple[str, int, bytes]] = {}
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(directory) / name
            info = path.lstat()
            relative = path.relative_to(root).as_posix()
            if stat.S_ISLNK(info.st_mode):
                found[relative] = ("link", 0, os.readlink(path).encode())
            elif stat.S_ISDIR(info.st_mode):
                found[relative] = ("dir", stat.S_IMODE(info.st_mode), b"")
            else:
                found[relative] = ("file", stat.S_IMODE(info.st_mode), path.read_bytes())
    return found


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the workspace, as a home directory is: files that must not change."""
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    (home / "victim.txt").write_text("precious\n")
    (home / ".bashrc").write_text("# the user's own\n")
    (home / "sub").mkdir()
    (home / "sub" / "victim.txt").write_text("precious too\n")
    return home


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A project with a submodule at vendor/sub (its .git a gitdir: file) and a linked worktree."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git(upstream, "init", "-q")
    (upstream / "lib.txt").write_text("lib\n")
    (upstream / "victim.txt").write_text("from upstream\n")
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "upstream")
    ws = tmp_path / "ws"
    ws.mkdir()
    git(ws, "init", "-q")
    (ws / "top.txt").write_text("top\n")
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "top")
    git(ws, "submodule", "add", "-q", str(upstream), "vendor/sub")
    git(ws, "commit", "-q", "-m", "submodule")
    git(ws, "worktree", "add", "-q", "wt")
    assert (ws / "vendor" / "sub" / ".git").read_text().startswith("gitdir:")
    assert (ws / "wt" / ".git").is_file()
    return ws


def checkpointer(workspace: Path, state_dir: Path) -> Checkpointer:
    return Checkpointer(workspace, CheckpointSettings(state_dir=state_dir))


# Each moves a repository away and leaves a link to the outside folder where it was.
SWAPS = {
    "absolute link in place of the repository": "mv vendor/sub vendor/moved && ln -s {outside} vendor/sub",
    "relative link": "mv vendor/sub vendor/moved && ln -s ../../home vendor/sub",
    "link to ..": "mv vendor/sub vendor/moved && ln -s ../.. vendor/sub",
    "link chain": "mv vendor/sub vendor/moved && ln -s {outside} hop && ln -s ../hop vendor/sub",
    "symlinked parent directory": "mv vendor vendor-moved && ln -s {outside} vendor",
    "linked worktree swapped": "mv wt wt-moved && ln -s {outside} wt",
    "the .git file itself a link": "rm vendor/sub/.git && ln -s {outside}/.bashrc vendor/sub/.git",
}


async def agent_calls(
    sandbox: BubblewrapSandbox | None, workspace: Path, outside: Path, run: RunBash, swap: str
) -> None:
    """Two calls that write the agent's text into the repositories (recorded by the
    checkpoints), then the call that swaps a repository for a link out."""
    await run(sandbox, workspace, "echo 'agent text 1' > vendor/sub/victim.txt; echo x > wt/victim.txt")
    await run(sandbox, workspace, "echo 'agent text 2' > vendor/sub/victim.txt; echo y > wt/victim.txt")
    await run(sandbox, workspace, swap.format(outside=outside))


@pytest.mark.parametrize("spelling", sorted(SWAPS))
async def test_a_repository_swapped_for_a_link_out_writes_nothing_there(
    sandbox: BubblewrapSandbox,
    workspace: Path,
    outside: Path,
    tmp_path: Path,
    state_dir: Path,
    checkpointed_bash: RunBash,
    spelling: str,
) -> None:
    kept = tree_of(outside)
    around = sorted(p.name for p in tmp_path.iterdir())
    await agent_calls(sandbox, workspace, outside, checkpointed_bash, SWAPS[spelling])
    assert tree_of(outside) == kept  # the check after the call wrote nothing through the link
    cp = checkpointer(workspace, state_dir)
    for checkpoint in reversed(cp.checkpoints("test-run")):
        cp.rewind("test-run", checkpoint)  # every state the agent's text was recorded in
        assert tree_of(outside) == kept
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({*around, "state"})
    # ...and the rewind did bring the workspace back, in the workspace.
    assert (workspace / "vendor" / "sub" / "victim.txt").read_text() == "from upstream\n"
    assert not (workspace / "vendor" / "sub").is_symlink()


async def test_unsandboxed_calls_write_nothing_through_a_link_either(
    workspace: Path, outside: Path, state_dir: Path, checkpointed_bash: RunBash
) -> None:
    kept = tree_of(outside)
    await agent_calls(
        None, workspace, outside, checkpointed_bash, SWAPS["absolute link in place of the repository"]
    )
    assert tree_of(outside) == kept
    cp = checkpointer(workspace, state_dir)
    cp.rewind("test-run", cp.checkpoints("test-run")[1])
    assert tree_of(outside) == kept
    assert (workspace / "vendor" / "sub" / "victim.txt").read_text() == "agent text 1\n"


async def test_a_new_repository_is_removed_without_following_its_links(
    sandbox: BubblewrapSandbox, workspace: Path, outside: Path, checkpointed_bash: RunBash
) -> None:
    kept = tree_of(outside)
    command = (
        "git init -q evil && rm -rf evil/.git/objects evil/.git/hooks && "
        f"ln -s {outside} evil/.git/objects && ln -s {outside}/.config evil/.git/hooks && "
        "git init -q --bare bare.git && rm -rf bare.git/hooks && ln -s ../../home bare.git/hooks"
    )
    result = await checkpointed_bash(sandbox, workspace, command)
    assert result.is_error
    assert not (workspace / "evil" / ".git").exists() and not (workspace / "bare.git" / "hooks").exists()
    assert tree_of(outside) == kept


def test_the_strict_tree_never_follows_a_link(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "out").symlink_to(outside)
    (root / "rel").symlink_to("../home")
    (root / "real" / "file").symlink_to(outside / "victim.txt")
    kept = tree_of(outside)
    with StrictTree.open(root) as tree:
        assert tree.read("out/victim.txt") is None and tree.lstat("rel/victim.txt") is None
        assert tree.read("real/file") is None  # a link is not read through
        assert tree.remove("out/victim.txt") is False and tree.remove("rel/sub") is False
        tree.write("real/file", b"mine")  # replaces the link, not its target
        tree.write("out/new.txt", b"mine")  # the link in the way is replaced by a directory
        tree.symlink("rel/x", "/etc/passwd")
        tree.rename("real", "out2/real")
        tree.remove("out2")
    assert tree_of(outside) == kept
    assert (root / "out" / "new.txt").read_bytes() == b"mine" and not (root / "out").is_symlink()
    assert (root / "rel" / "x").is_symlink() and not (root / "out2").exists()


async def test_placeholders_are_removed_without_following_a_link_out(
    sandbox: BubblewrapSandbox, tmp_path: Path, outside: Path, checkpointed_bash: RunBash
) -> None:
    ws = tmp_path / "plain"
    (ws / "lib").mkdir(parents=True)
    git(ws / "lib", "init", "-q")  # its missing commondir gets a placeholder during commands
    (outside / ".git").mkdir()
    (outside / ".git" / "commondir").write_text(".\n")  # what a placeholder holds, outside
    (outside / "steward.toml").write_text("")
    kept = tree_of(outside)
    await checkpointed_bash(sandbox, ws, f"mv lib lib2 && ln -s {outside} lib")
    assert tree_of(outside) == kept
