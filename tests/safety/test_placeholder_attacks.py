"""What a command (or another worker's command) can leave in a workspace never turns the host-side
clean-up of placeholders against files outside it: whatever sits where a placeholder, a folder on
its way, ``.steward`` or the ledger was, what lies outside is still there, unchanged, afterwards.

Each attack is checked against both ways a placeholder goes: released by the process that made
it, and swept by the next process after the one that made it was killed."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from steward.safety.sandbox.placeholders import Placeholders

Tree = dict[str, tuple[str, bytes | None]]

KILLED = """
import os, sys
from pathlib import Path
from steward.safety.sandbox.placeholders import Placeholders

root = Path(sys.argv[1])
dirs = [root / p for p in sys.argv[2].split(",") if p]
files = [root / p for p in sys.argv[3].split(",") if p]
Placeholders().acquire(dirs, files, [], root)
os._exit(0)  # killed mid-command: nothing released
"""


def snapshot(top: Path) -> Tree:
    """Every entry below ``top``: its kind and, for a file, its bytes (links not followed)."""
    tree: Tree = {}
    for path in sorted(top.rglob("*")):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            tree[str(path.relative_to(top))] = ("link", os.readlink(path).encode())
        elif stat.S_ISDIR(info.st_mode):
            tree[str(path.relative_to(top))] = ("dir", None)
        else:
            tree[str(path.relative_to(top))] = ("file", path.read_bytes())
    return tree


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "conf").mkdir(parents=True)
    return ws


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """What a link may lead to: empty files and folders, as a placeholder is."""
    out = tmp_path / "outside"
    (out / "personas").mkdir(parents=True)
    (out / "conf" / "hooks").mkdir(parents=True)
    (out / "steward.toml").write_bytes(b"")
    (out / "conf" / "steward.toml").write_bytes(b"")
    (out / "ledger").write_text("hello\n")
    return out


def swap_for_link(path: Path, target: Path) -> None:
    path.rename(path.with_name(path.name + ".moved"))
    path.symlink_to(target)


def link_placeholder_file(ws: Path, out: Path) -> None:
    swap_for_link(ws / "steward.toml", out / "steward.toml")


def link_placeholder_dir(ws: Path, out: Path) -> None:
    swap_for_link(ws / "personas", out / "personas")


def link_parent(ws: Path, out: Path) -> None:
    swap_for_link(ws / "conf", out / "conf")


def fill_placeholders(ws: Path, out: Path) -> None:
    (ws / "steward.toml").unlink()
    (ws / "steward.toml").mkdir()
    (ws / "steward.toml" / "work.txt").write_text("kept\n")
    (ws / "personas").chmod(0o755)
    (ws / "personas" / "mine.md").write_text("kept\n")


def make_fifos(ws: Path, out: Path) -> None:
    (ws / "steward.toml").unlink()
    os.mkfifo(ws / "steward.toml")
    (ws / "conf" / "steward.toml").unlink()
    os.mkfifo(ws / "conf" / "steward.toml")


ATTACKS: dict[str, Callable[[Path, Path], None]] = {
    "placeholder file -> link to a file outside": link_placeholder_file,
    "placeholder folder -> link to a folder outside": link_placeholder_dir,
    "folder on the way -> link to a folder outside": link_parent,
    "placeholders -> folders with work in them": fill_placeholders,
    "placeholders -> FIFOs": make_fifos,
}
DIRS = ["personas", "conf/hooks"]
FILES = ["steward.toml", "conf/steward.toml"]


def made_then_removed(ws: Path, attack: Callable[[Path, Path], None], out: Path, way: str) -> None:
    """Make the placeholders, attack, then have them removed ``way`` (bounded: a FIFO opened for
    a blocking read would hang the clean-up)."""
    if way == "released":
        places = Placeholders()
        claimed = places.acquire([ws / d for d in DIRS], [ws / f for f in FILES], [], ws).paths
        assert len(claimed) == 4
        attack(ws, out)
        clean_up: Callable[[], None] = lambda: places.release(claimed)  # noqa: E731
    else:
        subprocess.run([sys.executable, "-c", KILLED, str(ws), ",".join(DIRS), ",".join(FILES)], check=True)
        assert (ws / "steward.toml").exists()  # the premise: left behind
        attack(ws, out)
        clean_up = lambda: Placeholders().sweep(ws)  # noqa: E731
    worker = threading.Thread(target=clean_up, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the clean-up hangs"


@pytest.mark.parametrize("way", ["released", "swept"])
@pytest.mark.parametrize("name", list(ATTACKS))
def test_nothing_outside_the_workspace_is_removed_or_changed(
    workspace: Path, outside: Path, name: str, way: str
) -> None:
    before = snapshot(outside)
    made_then_removed(workspace, ATTACKS[name], outside, way)
    assert snapshot(outside) == before


@pytest.mark.parametrize("way", ["released", "swept"])
def test_what_a_command_put_in_a_placeholder_s_place_stays(workspace: Path, outside: Path, way: str) -> None:
    made_then_removed(workspace, fill_placeholders, outside, way)
    assert (workspace / "steward.toml" / "work.txt").read_text() == "kept\n"
    assert (workspace / "personas" / "mine.md").read_text() == "kept\n"


@pytest.mark.parametrize("way", ["released", "swept"])
def test_a_fifo_in_a_placeholder_s_place_stays_and_holds_nothing_up(
    workspace: Path, outside: Path, way: str
) -> None:
    made_then_removed(workspace, make_fifos, outside, way)
    assert stat.S_ISFIFO((workspace / "steward.toml").lstat().st_mode)
    assert stat.S_ISFIFO((workspace / "conf" / "steward.toml").lstat().st_mode)


@pytest.mark.parametrize("way", ["released", "swept"])
def test_untouched_placeholders_are_removed(workspace: Path, outside: Path, way: str) -> None:
    """The control: with nothing swapped, every placeholder goes (the attacks can fail)."""
    made_then_removed(workspace, lambda _ws, _out: None, outside, way)
    left = {str(p.relative_to(workspace)) for p in workspace.rglob("*")}
    assert left == {
        "conf",
        ".steward",
        ".steward/.gitignore",
        ".steward/placeholders",
        ".steward/placeholders.lock",
    }
    assert (workspace / ".steward" / "placeholders").read_text() == ""


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_ledger_line_naming_a_path_outside_is_dropped_not_followed(workspace: Path, outside: Path) -> None:
    before = snapshot(outside)
    (workspace / ".steward").mkdir()
    pid = dead_pid()
    (workspace / ".steward" / "placeholders").write_text(
        f"{pid} {outside / 'steward.toml'}\n{pid} {outside / 'personas'}\n"
        f"{pid} {workspace / '..' / 'outside' / 'ledger'}\n"
    )
    Placeholders().sweep(workspace)
    assert snapshot(outside) == before
    assert (workspace / ".steward" / "placeholders").read_text() == ""


@pytest.mark.parametrize("kind", ["symlink", "hard link"])
def test_a_ledger_that_leads_outside_is_neither_written_nor_truncated(
    workspace: Path, outside: Path, kind: str
) -> None:
    (workspace / ".steward").mkdir()
    ledger = workspace / ".steward" / "placeholders"
    if kind == "symlink":
        ledger.symlink_to(outside / "ledger")
    else:
        os.link(outside / "ledger", ledger)
    before = snapshot(outside)
    places = Placeholders()
    places.sweep(workspace)  # the outside file's line is malformed: a rewrite would empty it
    claimed = places.acquire([], [workspace / "steward.toml"], [], workspace).paths
    places.release(claimed)
    places.sweep(workspace)
    assert snapshot(outside) == before


def test_a_steward_folder_that_is_a_link_gets_no_lock_or_ledger_outside(
    workspace: Path, outside: Path
) -> None:
    (workspace / ".steward").symlink_to(outside)
    before = snapshot(outside)
    places = Placeholders()
    claimed = places.acquire([], [workspace / "steward.toml"], [], workspace).paths
    assert (workspace / "steward.toml").exists()  # placeholders still work, unnoted
    places.release(claimed)
    places.sweep(workspace)
    assert snapshot(outside) == before
    assert not (workspace / "steward.toml").exists()


def test_no_placeholder_is_made_through_a_link(workspace: Path, outside: Path) -> None:
    (outside / "conf" / "steward.toml").unlink()
    (outside / "conf" / "hooks").rmdir()
    link_parent(workspace, outside)
    before = snapshot(outside)
    places = Placeholders()
    claimed = places.acquire(
        [workspace / "conf" / "hooks"], [workspace / "conf" / "steward.toml"], [], workspace
    ).paths
    assert snapshot(outside) == before
    places.release(claimed)
    assert snapshot(outside) == before


def test_harmless_folders_are_not_made_through_a_link(workspace: Path, outside: Path) -> None:
    """A nested repository's ``.git/hooks`` is made before each command; if a command of another
    worker swapped the repository's folder for a link since the scan, nothing is made outside."""
    from steward.safety.protected import find_protected
    from steward.safety.sandbox.bubblewrap import _create_harmless

    subprocess.run(["git", "init", "-q", str(workspace / "sub")], check=True)
    shutil.rmtree(workspace / "sub" / ".git" / "hooks")
    (outside / "sub").mkdir()
    protection = find_protected(workspace)
    hooks = workspace / "sub" / ".git" / "hooks"
    assert hooks in protection.to_create  # the premise
    swap_for_link(workspace / "sub", outside / "sub")
    before = snapshot(outside)
    _create_harmless(protection)
    assert snapshot(outside) == before
    assert hooks in protection.missing_dirs and (workspace / ".steward" / ".gitignore").is_file()
