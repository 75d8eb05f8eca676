"""Placeholders: empty files and directories made in a workspace as mount points for protected
paths that do not exist yet (see :mod:`steward.safety.sandbox.bubblewrap`), and the ledger
(``.steward/placeholders``) that lets the next process remove those a killed one left.

All of it happens on the host, in a folder that sandboxed commands write to (another worker's
command may run there while this one sets up or cleans up). So nothing is looked up again by a
path string: the workspace is opened once (its own path is trusted, as everywhere), and every
step below it is opened relative to the fd of the directory before it, with ``O_NOFOLLOW``;
files are made, read and removed with ``*at`` calls on the fd of the directory that holds them.
A symlink, a FIFO or a directory put where a placeholder, a folder on its way, ``.steward`` or
the ledger was is therefore never followed, never waited on and never emptied: at worst a
placeholder stays behind. A ledger line naming a path that is not below the workspace is
dropped, never acted on.

Across processes, the ledger's lock (an flock of ``.steward/placeholders.lock``) orders every
change: each process notes a placeholder before making it, and notes one another live process
made before relying on it, so a placeholder goes only when no live process has it noted.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from steward._proc import pid_alive, process_start
from steward.state_dir import GITIGNORE, STATE_DIR

COMMONDIR_HERE = b".\n"
"""A ``commondir`` placeholder's content: git reads it as "this directory", so git (inside
and on the host) works as if there were none, while nothing else can be written there."""

_LEDGER = "placeholders"
_LOCK = "placeholders.lock"
_MAX_LINES = 10_000
_MAX_LEDGER_BYTES = 4 << 20

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO put in a file's place neither waits for a writer nor blocks reads.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(slots=True, frozen=True)
class Claimed:
    """What ``acquire`` claimed for one command, and the existing protected paths that have
    gone since the workspace was scanned (the scan is stale: scan again)."""

    paths: list[Path]
    vanished: list[Path]


@dataclass(slots=True, frozen=True)
class _Line:
    """One ledger line: who noted the placeholder (pid and start time) and where it is."""

    pid: int
    start: str | None
    path: Path

    def render(self) -> str:
        who = f"{self.pid}:{self.start}" if self.start else str(self.pid)
        return f"{who} {self.path}\n"

    @classmethod
    def parse(cls, line: str) -> _Line | None:
        who, _, path = line.partition(" ")
        pid, _, start = who.partition(":")
        if not pid.isdigit() or not path.startswith("/"):
            return None
        return cls(int(pid), start or None, Path(path))

    def mine(self) -> bool:
        return self.pid == os.getpid()

    def alive(self) -> bool:
        """Noted by a process that still runs (not one that reused its pid)."""
        return self.mine() or pid_alive(self.pid, self.start)


@functools.cache
def _own_start(pid: int) -> str | None:
    """This process's start time (keyed by pid: a forked child is another process)."""
    return process_start(pid)


class _Kind(Enum):
    MISSING = "missing"
    PRESENT = "present"
    #: A link, a file or something unreadable on the way: the path is not below the workspace.
    OFF = "off"


@dataclass(slots=True)
class _Workspace:
    """A workspace held open (its fd) with its state folder's fd (None: no ledger there)."""

    root: Path
    fd: int
    state: int | None = None

    def parts(self, path: Path) -> tuple[str, ...] | None:
        """``path`` as names below the workspace; None when it is not strictly below it."""
        # Strings, not Path.relative_to (a tenth of the cost, and this runs for every path of
        # every command): both are absolute and normalised, so components compare as text.
        text, top = str(path), str(self.root).rstrip("/") + "/"
        if not text.startswith(top) or len(text) == len(top):
            return None
        parts = tuple(text[len(top) :].split("/"))
        return None if ".." in parts or "" in parts or "." in parts else parts

    def parent(self, parts: tuple[str, ...]) -> int:
        """An fd of the directory holding ``parts[-1]`` (close it): each directory on the way is
        opened with ``O_NOFOLLOW`` from the one before. ``OSError`` when one is missing, or is a
        link or a file."""
        fd = os.dup(self.fd)
        try:
            for name in parts[:-1]:
                child = os.open(name, _DIR, dir_fd=fd)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def kind(self, path: Path) -> _Kind:
        parts = self.parts(path)
        if parts is None:
            return _Kind.OFF
        try:
            parent = self.parent(parts)
        except FileNotFoundError:
            return _Kind.MISSING
        except OSError:
            return _Kind.OFF
        try:
            os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return _Kind.MISSING
        except OSError:
            return _Kind.OFF
        finally:
            os.close(parent)
        return _Kind.PRESENT

    def create(self, path: Path, kind: str) -> None:
        """Make the placeholder (nothing when the way there is not a plain directory: bwrap makes
        the mount point itself, from the empty source, or fails loudly)."""
        parts = self.parts(path)
        if parts is None:
            return
        try:
            parent = self.parent(parts)
        except OSError:
            return
        try:
            if kind == "dir":
                os.mkdir(parts[-1], 0o555, dir_fd=parent)
                return
            fd = os.open(parts[-1], _NEW, 0o444, dir_fd=parent)
            try:
                if kind == "commondir":
                    os.write(fd, COMMONDIR_HERE)
            finally:
                os.close(fd)
        except OSError:
            pass
        finally:
            os.close(parent)

    def remove(self, path: Path) -> bool:
        """Remove the placeholder if it is still as made: an empty directory, or a regular file
        holding nothing (a commondir's "this directory"). Whether it was removed."""
        parts = self.parts(path)
        if parts is None:
            return False
        try:
            parent = self.parent(parts)
        except OSError:
            return False  # a link on the way: nothing of the path is below the workspace now
        try:
            return _remove_at(parent, parts[-1])
        except OSError:
            return False
        finally:
            os.close(parent)

    # --- the ledger (held under the lock) ---------------------------------------------------

    def read(self) -> tuple[list[_Line], bool]:
        """The ledger's lines, and whether it holds others (malformed) that a rewrite drops."""
        if self.state is None:
            return [], False
        try:
            fd = os.open(_LEDGER, _READ, dir_fd=self.state)
        except OSError:
            return [], False
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return [], False
            data = _read_bounded(fd, _MAX_LEDGER_BYTES)
        finally:
            os.close(fd)
        text = data.decode("utf-8", errors="replace").splitlines()
        lines = [line for line in map(_Line.parse, text[:_MAX_LINES]) if line is not None]
        return lines, len(lines) != len(text)

    def write(self, lines: Sequence[_Line], *, append: bool = False) -> None:
        """Replace the ledger with ``lines`` (or add them); a ledger that is not a regular file
        of its own is left alone."""
        if self.state is None:
            return
        try:
            fd = os.open(_LEDGER, _WRITE | (os.O_APPEND if append else 0), 0o600, dir_fd=self.state)
        except OSError:
            return  # best effort: without the note a killed process leaves an empty placeholder behind
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
                return  # a hard link to a file elsewhere is not our ledger to rewrite
            if not append:
                os.ftruncate(fd, 0)
            _write_all(fd, "".join(line.render() for line in lines).encode())
        except OSError:
            pass
        finally:
            os.close(fd)


def _remove_at(parent: int, name: str) -> bool:
    info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if stat.S_ISDIR(info.st_mode):
        os.rmdir(name, dir_fd=parent)  # never follows a link; fails when something was put in it
        return True
    contents = (b"", COMMONDIR_HERE) if name == "commondir" else (b"",)
    longest = max(map(len, contents))
    if not stat.S_ISREG(info.st_mode) or info.st_size > longest:
        return False
    fd = os.open(name, _READ, dir_fd=parent)
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino) or not stat.S_ISREG(now.st_mode):
            return False
        data = os.read(fd, longest + 1)
    finally:
        os.close(fd)
    if data not in contents:
        return False
    os.unlink(name, dir_fd=parent)  # the name in this directory: never what a link points to
    return True


def _read_bounded(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, min(65536, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    for _ in range(len(data) + 1):  # bounded: each write moves at least a byte or raises
        if not view:
            return
        view = view[os.write(fd, view) :]


def _state_dir(root_fd: int, *, make: bool) -> int | None:
    """An fd of ``.steward`` (made with its ``.gitignore`` when ``make``); None when there is
    none, or something else is in its place (a link is never followed)."""
    made = False
    for _ in range(2):
        try:
            return _made(os.open(STATE_DIR, _DIR, dir_fd=root_fd), made)
        except FileNotFoundError:
            if not make or made:
                return None
        except OSError:
            return None
        try:
            os.mkdir(STATE_DIR, 0o777, dir_fd=root_fd)
            made = True
        except FileExistsError:
            continue  # made meanwhile by another process
        except OSError:
            return None
    return None


def _made(fd: int, made: bool) -> int:
    if made:
        # Exclusive creation: one already there (another process was quicker) stays.
        with contextlib.suppress(OSError):
            out = os.open(".gitignore", _NEW, 0o666, dir_fd=fd)
            try:
                _write_all(out, GITIGNORE.encode())
            finally:
                os.close(out)
    return fd


@contextlib.contextmanager
def _locked(root: Path, *, make: bool) -> Iterator[_Workspace | None]:
    """The workspace held open, under its ledger's lock across processes (an flock: two
    workers share one workspace). Waits in the kernel: every holder only touches a few small
    files. None when the workspace cannot be opened; no lock when it has no ``.steward`` and
    ``make`` is false, or is read-only (no placeholders are made there)."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    with contextlib.ExitStack() as stack:
        stack.callback(os.close, fd)
        workspace = _Workspace(root, fd, _state_dir(fd, make=make))
        if workspace.state is not None:
            stack.callback(os.close, workspace.state)
            try:
                lock = os.open(_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                               dir_fd=workspace.state)  # fmt: skip
            except OSError:
                lock = None
            if lock is not None:
                stack.callback(os.close, lock)  # closing the descriptor releases the lock
                fcntl.flock(lock, fcntl.LOCK_EX)
        yield workspace


def make_dirs(root: Path, paths: Sequence[Path]) -> list[bool]:
    """Make each directory (``.steward`` with its ``.gitignore``, a ``.git/hooks``, a hooks
    path), missing folders on its way included, each step below ``root`` made and opened
    without following a link; whether each is a directory of its own now. A link put on the
    way (another worker's command swapping a folder for a link elsewhere) makes nothing."""
    real = root.resolve(strict=False)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return [False] * len(paths)
    try:
        workspace = _Workspace(real, fd)
        return [_make_dir(workspace, path) for path in paths]
    finally:
        os.close(fd)


def _make_dir(workspace: _Workspace, path: Path) -> bool:
    parts = workspace.parts(path)
    if parts is None:
        return False
    if parts == (STATE_DIR,):
        state = _state_dir(workspace.fd, make=True)
        if state is not None:
            os.close(state)
        return state is not None
    fd = os.dup(workspace.fd)
    try:
        for name in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=fd)
            child = os.open(name, _DIR, dir_fd=fd)  # a directory of its own, not a link to one
            os.close(fd)
            fd = child
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


class Placeholders:
    """The placeholders of this process, counted per path across its sandboxes, so that one
    command never removes a placeholder another still has mounted (the kernel would unmount it
    there); across processes, the ledger says who else has one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[Path, int] = {}
        self._roots: dict[Path, Path] = {}  # a placeholder held -> the workspace whose ledger notes it

    def acquire(
        self,
        dirs: Sequence[Path],
        files: Sequence[Path],
        others: Sequence[Path],
        root: Path,
        commondirs: Sequence[Path] = (),
    ) -> Claimed:
        """Claim each missing path (making it: an empty directory or file, far cheaper than bwrap
        making the mount point), each this process already holds, and each another live process
        made (``others``: protected paths that existed when the workspace was scanned)."""
        root = root.resolve(strict=False)
        wanted = [
            *((d, "dir") for d in dirs),
            *((f, "file") for f in files),
            *((c, "commondir") for c in commondirs),
            *((o, "") for o in others),
        ]
        claimed: list[Path] = []
        vanished: list[Path] = []
        with self._lock, _locked(root, make=True) as workspace:
            if workspace is None:
                return Claimed([], [])
            ledger, _ = workspace.read()
            theirs = {line.path for line in ledger if not line.mine() and line.alive()}
            noted = {line.path for line in ledger if line.mine()}
            to_make: list[tuple[Path, str]] = []
            for path, kind in wanted:
                if self._counts.get(path):
                    self._counts[path] += 1
                    claimed.append(path)
                    continue
                found = workspace.kind(path)
                if found is _Kind.PRESENT and path not in theirs:
                    continue  # a real file, or a placeholder no live process has: protected as it is
                if found is _Kind.OFF:
                    continue
                if found is _Kind.MISSING:
                    if not kind:
                        vanished.append(path)  # removed since the scan (another worker's placeholder)
                        continue
                    to_make.append((path, kind))
                self._counts[path] = 1
                self._roots[path] = root
                claimed.append(path)
            # Noted before any is made: a sweep never takes one for a dead process's.
            new = [_Line(os.getpid(), _own_start(os.getpid()), p) for p in claimed if p not in noted]
            if new:
                workspace.write(new, append=True)
            for path, kind in to_make:
                workspace.create(path, kind)
        return Claimed(claimed, vanished)

    def release(self, paths: Sequence[Path]) -> None:
        """Give back what ``acquire`` claimed; a placeholder no sandbox of this process and no
        other live process holds any more is removed, if still as it was made."""
        with self._lock:
            done: dict[Path, list[Path]] = {}
            for path in paths:
                left = self._counts.get(path, 1) - 1
                if left > 0:
                    self._counts[path] = left
                    continue
                self._counts.pop(path, None)
                root = self._roots.pop(path, None)
                if root is not None:
                    done.setdefault(root, []).append(path)
            for root, released in sorted(done.items()):
                with _locked(root, make=False) as workspace:
                    if workspace is not None:
                        _forget(workspace, set(released))

    def sweep(self, root: Path) -> None:
        """Remove the placeholders of processes now gone, and this process's own that none of
        its sandboxes holds: before every sandbox and every checkpoint, by whichever process
        comes next (a killed worker's are swept by the one that takes its job over)."""
        root = root.resolve(strict=False)
        with self._lock, _locked(root, make=False) as workspace:
            if workspace is None or workspace.state is None:
                return
            ledger, malformed = workspace.read()
            held = set(self._counts)
            kept: list[_Line] = []
            stale: set[Path] = set()
            for line in ledger:
                if workspace.parts(line.path) is None:
                    continue  # not below this workspace: dropped, never acted on
                # Ours while one of our sandboxes holds it; another process's while it runs.
                current = line.path in held if line.mine() else line.alive()
                if current:
                    kept.append(line)
                else:
                    stale.add(line.path)
            # A path a live process noted again is that process's placeholder now, whoever made it first.
            for path in sorted(stale - {line.path for line in kept}):
                workspace.remove(path)
            if malformed or len(kept) != len(ledger):
                workspace.write(kept)


def _forget(workspace: _Workspace, released: set[Path]) -> None:
    """Drop this process's lines for ``released`` and remove those no other live process noted."""
    ledger, _ = workspace.read()
    kept = [line for line in ledger if not (line.mine() and line.path in released)]
    if len(kept) != len(ledger):
        workspace.write(kept)
    still = {line.path for line in kept if line.alive()}
    for path in sorted(released - still):
        workspace.remove(path)
