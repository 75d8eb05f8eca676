"""A rewind restores what it can and reports what it could not, whatever is in the way.

A command leaves things a checkpoint cannot hold or a plain write would trip on: a folder
swapped for a symlink, a FIFO (which blocks whoever opens it to read), a socket or a device
where a file was, names that are not UTF-8. Checkpoints go on being taken (a FIFO does not
fail every later one), and ``steward rewind`` (the command and the Python API alike) puts the
files back, exits cleanly and prints no traceback. Every check looks at the disk.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from steward.safety.checkpoints.around_calls import Checkpointer
from steward.safety.checkpoints.shadow import CheckpointSettings

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

NOT_UTF8 = os.fsdecode(b"caf\xe9.txt")
NEW_NOT_UTF8 = os.fsdecode(b"new-\xff\xfe.txt")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "app.py").write_text("outside\n")
    return home


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "app.py").write_text("print('app')\n")
    for name in ("fifo.txt", "socket.txt", "device.txt", "plain.txt"):
        (ws / name).write_text(f"{name} content\n")
    (ws / NOT_UTF8).write_bytes(b"latin-1 name\n")
    subprocess.run(["git", "-C", str(ws), "init", "-q"], check=True)
    return ws


def put_obstacles(ws: Path, outside: Path) -> socket.socket:
    """What a command may leave: returns the bound socket (kept open while the test runs)."""
    shutil.rmtree(ws / "src")
    (ws / "src").symlink_to(outside)  # a folder replaced by a symlink out of the workspace
    (ws / "fifo.txt").unlink()
    os.mkfifo(ws / "fifo.txt")
    (ws / "socket.txt").unlink()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(ws / "socket.txt"))
    (ws / "device.txt").unlink()
    if os.geteuid() == 0:
        os.mknod(ws / "device.txt", 0o600 | 0o020000, os.makedev(1, 3))  # like /dev/null
    else:
        os.mkfifo(ws / "device.txt")
    (ws / NOT_UTF8).unlink()
    (ws / NEW_NOT_UTF8).write_text("new\n")
    (ws / "plain.txt").write_text("changed\n")
    return server


def assert_restored(ws: Path, outside: Path) -> None:
    assert (ws / "src" / "pkg" / "app.py").read_text() == "print('app')\n"
    assert not (ws / "src").is_symlink()
    assert (outside / "app.py").read_text() == "outside\n" and sorted(os.listdir(outside)) == ["app.py"]
    for name in ("fifo.txt", "socket.txt", "device.txt", "plain.txt"):
        assert (ws / name).is_file() and not (ws / name).is_symlink()
        assert (ws / name).read_text() == f"{name} content\n"
    assert (ws / NOT_UTF8).read_bytes() == b"latin-1 name\n"
    assert not (ws / NEW_NOT_UTF8).exists()


def test_checkpoints_go_on_past_a_fifo_and_a_rewind_clears_every_obstacle(
    workspace: Path, outside: Path, tmp_path: Path
) -> None:
    cp = Checkpointer(workspace, CheckpointSettings(state_dir=tmp_path / "state"))
    first = cp.before("r1")
    assert first.checkpoint is not None
    with put_obstacles(workspace, outside):
        later = cp.before("r1", step=2)  # the call after the one that made the FIFO
        assert later.checkpoint is not None
        assert "fifo.txt" in later.checkpoint.special and "socket.txt" in later.checkpoint.special
        assert cp.after(later).items == []
        report = cp.rewind("r1", first.checkpoint)
    assert report.failed == []
    assert_restored(workspace, outside)
    assert NEW_NOT_UTF8 in report.removed and "src/pkg/app.py" in report.restored
    again = cp.before("r1", step=3)  # and the workspace can be recorded after all that
    assert again.checkpoint is not None and again.checkpoint.special == []


def test_steward_rewind_clears_every_obstacle_and_prints_names_escaped(
    workspace: Path, outside: Path, tmp_path: Path, run_cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    state = tmp_path / "xdg-state"
    cp = Checkpointer(workspace, CheckpointSettings(state_dir=state / "steward"))
    first = cp.before("run-obstacles")
    assert first.checkpoint is not None
    with put_obstacles(workspace, outside):
        cp.before("run-obstacles", step=2)
        done = run_cli("rewind", "run-obstacles", "--checkpoint", "1", "-w", str(workspace), state=state)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "\\xe9" in done.stdout and "\\xff" in done.stdout  # the names, escaped
    assert_restored(workspace, outside)
    listed = run_cli("checkpoints", "run-obstacles", "-w", str(workspace), state=state)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr


def lock(directory: Path) -> Callable[[], None]:
    """Make ``directory`` unwritable (immutable for root, whom modes do not stop); the undo."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        return lambda: directory.chmod(0o755)
    if shutil.which("chattr") is None:
        pytest.skip("needs chattr to lock a directory against root")
    if subprocess.run(["chattr", "+i", str(directory)], capture_output=True, check=False).returncode:
        pytest.skip("this file system cannot make a directory immutable")

    def unlock() -> None:
        subprocess.run(["chattr", "-i", str(directory)], check=True)

    return unlock


def test_what_cannot_be_restored_is_reported_and_the_rest_restored(
    workspace: Path, tmp_path: Path, run_cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    state = tmp_path / "xdg-state"
    (workspace / "locked").mkdir()
    (workspace / "locked" / "kept.txt").write_text("kept\n")
    cp = Checkpointer(workspace, CheckpointSettings(state_dir=state / "steward"))
    cp.before("run-locked")
    (workspace / "locked" / "kept.txt").unlink()
    unlock = lock(workspace / "locked")
    (workspace / "plain.txt").write_text("changed\n")
    try:
        done = run_cli("rewind", "run-locked", "--checkpoint", "1", "-w", str(workspace), state=state)
    finally:
        unlock()
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "could not restore 1: locked/kept.txt" in done.stdout
    assert "enabled = false" not in done.stdout + done.stderr  # nothing suggests turning them off
    assert (workspace / "plain.txt").read_text() == "plain.txt content\n"  # the rest is restored
    assert not (workspace / "locked" / "kept.txt").exists()


@pytest.fixture
def run_cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEWARD_")}
        env.update(
            XDG_STATE_HOME=str(state), XDG_CONFIG_HOME=str(tmp_path / "config"), PYTHONIOENCODING="utf-8"
        )
        return subprocess.run(
            [sys.executable, "-m", "steward", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            errors="surrogateescape",
            timeout=120,
        )

    return run


def test_a_fifo_named_like_a_repository_does_not_block_a_checkpoint(workspace: Path, tmp_path: Path) -> None:
    (workspace / "d").mkdir()
    os.mkfifo(workspace / "d" / ".git")  # a reader of it would wait for a writer forever
    cp = Checkpointer(workspace, CheckpointSettings(state_dir=tmp_path / "state"))
    finished = threading.Event()

    def record() -> None:
        cp.before("r1")
        finished.set()

    threading.Thread(target=record, daemon=True).start()
    assert finished.wait(120)  # a bound on a hang, not a measure of speed
