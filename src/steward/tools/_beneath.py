"""Open a path beneath a directory in one step, so a symlink swapped in meanwhile cannot lead out.

Checking a path with ``Path.resolve()`` and then opening it by name leaves a window: another
process can turn a directory on the path into a symlink to somewhere else in between. Here
the path is resolved and opened together, relative to a file descriptor of the root:

* ``openat2(2)`` with ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`` (Linux 5.6+): the kernel
  refuses any step out of the root while it resolves.
* A walk, when the kernel lacks ``openat2`` or refuses what we allow (an absolute symlink that
  points inside the root): one component at a time, each opened with ``O_NOFOLLOW`` relative
  to the fd of the directory before it; a symlink is read and the walk continues with its
  target; ``..`` returns to the fd of the parent and never climbs above the root.

Every step holds an fd, so nothing is looked up again by name. What neither can prevent: a
process that *moves* a directory we hold open out of the root (the sandbox mounts protected
directories, and a mount point cannot be moved).

Exceptions: ``LeadsOutside`` when a path would leave the root, ``NotRegularFile`` for pipes,
sockets and devices, ``OSError`` (``ELOOP`` after ``MAX_LINK_HOPS`` symlinks) otherwise.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import platform
import stat
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Self, TypeVar

MAX_LINK_HOPS = 40
"""Symlinks followed while resolving one path, as many as the kernel follows (then ELOOP)."""

USE_OPENAT2 = True
"""Try ``openat2`` before the walk; tests turn it off to exercise the walk on any kernel."""

_MAX_STEPS = 100_000
"""Components processed for one path (links and created parents add steps): the walk's bound."""

# openat2 has the same number on every architecture with the unified syscall table; only the
# ones we run on are listed, others take the walk.
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437}
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_AT_FDCWD = -100
# EXDEV: a step out (or an absolute link); ELOOP: a loop or a magic link; EAGAIN: a rename raced
# a '..'; ENOSYS/EPERM: a seccomp filter that does not know the call. The walk decides all of them.
_FALL_BACK = frozenset({errno.EXDEV, errno.ELOOP, errno.EAGAIN, errno.ENOSYS, errno.EPERM})
_PATH_NOFOLLOW = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_NOT_REGULAR = "not a regular file (a pipe, socket or device)"

_Result = TypeVar("_Result")


class LeadsOutside(Exception):  # noqa: N818 - it names the situation, like FileNotFoundError
    """The path leaves the root: through a symlink, or a '..' above it."""


class NotRegularFile(Exception):  # noqa: N818
    """The path names a pipe, socket or device, which the file tools neither read nor replace."""


@dataclass(slots=True)
class Root:
    """An open directory that paths are resolved beneath; ``Root.open`` it, close it when done."""

    fd: int
    #: Its real absolute path: absolute symlink targets below it are re-rooted at ``fd``.
    path: Path
    #: Other absolute spellings of it (the workspace as configured, before its own symlinks).
    aliases: tuple[Path, ...] = ()

    @classmethod
    def open(cls, path: Path) -> Self:
        """Open ``path`` (its own symlinks followed: the root itself is trusted)."""
        real = path.resolve(strict=True)
        given = Path(os.path.normpath(path.absolute()))
        fd = os.open(real, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        return cls(fd, real, (given,) if given != real else ())

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def inside(self, absolute: str) -> list[str] | None:
        """``absolute`` as components below the root, or None when it names a place elsewhere."""
        path = PurePosixPath(absolute)
        for base in map(PurePosixPath, (self.path, *self.aliases)):
            # Components, never string prefixes: /ws2 is not below /ws. '..' stays for the walk.
            if path == base or path.is_relative_to(base):
                return list(path.relative_to(base).parts)
        return None


@dataclass(slots=True)
class Located:
    """Where a path ends: the real directory holding it and the name in it; close it when done."""

    #: The directory (held open, an ``O_PATH`` fd); the caller closes it.
    dir_fd: int
    #: The name in it, not a symlink when looked at; "" when the path is the directory itself.
    name: str
    #: The real path below the root, to compare with what was checked.
    relative: PurePosixPath
    #: What the name was when looked at (not followed); None when it does not exist.
    stat: os.stat_result | None

    def close(self) -> None:
        os.close(self.dir_fd)


@dataclass(frozen=True, slots=True)
class _Link:
    """A symlink met at the end of the path: the walk continues with its target."""

    target: str


# --- openat2 --------------------------------------------------------------------------------


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


_Openat2 = Callable[[int, str, int, int, int], int]


@functools.cache
def _openat2_call() -> _Openat2 | None:
    """The raw call (fd, or -errno), or None when this system cannot make it; probed once."""
    number = _SYS_OPENAT2.get(platform.machine())
    if number is None or not sys.platform.startswith("linux"):
        return None
    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long
    syscall.argtypes = (ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)

    def call(dir_fd: int, path: str, flags: int, mode: int, resolve: int) -> int:
        how = _OpenHow(flags, mode if flags & (os.O_CREAT | os.O_TMPFILE) else 0, resolve)
        result = int(syscall(number, dir_fd, os.fsencode(path), ctypes.addressof(how), ctypes.sizeof(how)))
        return result if result >= 0 else -ctypes.get_errno()

    # Containers' seccomp filters answer ENOSYS or EPERM for calls they do not know.
    probe = call(_AT_FDCWD, ".", os.O_PATH | os.O_CLOEXEC, 0, _RESOLVE_BENEATH)
    if probe < 0:
        return None
    os.close(probe)
    return call


def openat2_available() -> bool:
    """Whether ``openat2`` works here (else every open takes the walk)."""
    return _openat2_call() is not None


def _openat2(dir_fd: int, path: str, flags: int, mode: int, resolve: int) -> int | None:
    """An fd, None when the walk must decide, or the OSError of a plain failure (ENOENT...)."""
    call = _openat2_call() if USE_OPENAT2 else None
    if call is None:
        return None
    result = call(dir_fd, path or ".", flags, mode, resolve)
    if result >= 0:
        return result
    if -result in _FALL_BACK:
        return None
    raise OSError(-result, os.strerror(-result), path)


# --- the walk -------------------------------------------------------------------------------


def _parts(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _loop() -> OSError:
    return OSError(errno.ELOOP, f"{os.strerror(errno.ELOOP)} (more than {MAX_LINK_HOPS} symlinks)")


class _Walk:
    """Resolves one path beneath ``root`` a component at a time, holding an fd for each directory."""

    __slots__ = ("fds", "hops", "names", "path", "pending", "root", "steps")

    def __init__(self, root: Root, path: str) -> None:
        self.root = root
        self.path = path
        #: Directories entered below the root, outermost first, and their names: the real path.
        self.fds: list[int] = []
        self.names: list[str] = []
        self.pending: deque[str] = deque()
        self.hops = 0
        self.steps = 0

    @property
    def here(self) -> int:
        return self.fds[-1] if self.fds else self.root.fd

    def run(self, last: Callable[[int, str], _Result | _Link], *, create: bool = False) -> _Result:
        """Walk to the last component and hand it to ``last``, which opens or inspects it.

        ``last`` gets the directory's fd and the name ("" when the path ends at a directory)
        and returns its result, or a ``_Link`` when the name is a symlink to follow.
        """
        try:
            self._start()
            while True:
                self.steps += 1
                if self.steps > _MAX_STEPS:
                    raise _loop()
                if not self.pending:
                    found = last(self.here, "")
                    assert not isinstance(found, _Link), "the directory itself is never a link"
                    return found
                name = self.pending.popleft()
                if name == "..":
                    self._up()
                elif self.pending:
                    self._enter(name, create=create)
                else:
                    found = last(self.here, name)
                    if not isinstance(found, _Link):
                        return found
                    self._follow(found.target)
        finally:
            for fd in self.fds:
                os.close(fd)
            self.fds.clear()

    def _start(self) -> None:
        if self.path.startswith("/"):
            parts = self.root.inside(self.path)
            if parts is None:
                raise LeadsOutside(self.path)
            self.pending.extend(parts)
        else:
            self.pending.extend(_parts(self.path))

    def _up(self) -> None:
        if not self.fds:
            raise LeadsOutside(self.path)
        os.close(self.fds.pop())
        self.names.pop()

    def _enter(self, name: str, *, create: bool) -> None:
        """Step into directory ``name``: a symlink is followed, a missing one made when ``create``."""
        try:
            fd = os.open(name, _PATH_NOFOLLOW, dir_fd=self.here)
        except FileNotFoundError:
            if not create:
                raise
            # Made meanwhile by someone else (FileExistsError): open whatever is there now.
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=self.here)
            self.pending.appendleft(name)
            return
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            self.fds.append(fd)
            self.names.append(name)
            return
        try:
            if not stat.S_ISLNK(mode):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), name)
            # Read through the fd: exactly the link that was opened, not whatever has the name now.
            target = os.readlink("", dir_fd=fd)
        finally:
            os.close(fd)
        self._follow(target)

    def _follow(self, target: str) -> None:
        """Continue with a symlink's target: relative from the directory holding the link,
        absolute only when it names a place below the root (re-rooted there)."""
        self.hops += 1
        if self.hops > MAX_LINK_HOPS:
            raise _loop()
        if target.startswith("/"):
            parts = self.root.inside(target)
            if parts is None:
                raise LeadsOutside(self.path)
            for fd in self.fds:
                os.close(fd)
            self.fds.clear()
            self.names.clear()
        else:
            parts = _parts(target)
        self.pending.extendleft(reversed(parts))

    def relative(self, name: str = "") -> PurePosixPath:
        return PurePosixPath(*self.names, *([name] if name else []))


def _link_target(dir_fd: int, name: str) -> str | None:
    """The target of the symlink ``name``, or None when it is not one (or is gone)."""
    try:
        fd = os.open(name, _PATH_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return os.readlink("", dir_fd=fd) if stat.S_ISLNK(os.fstat(fd).st_mode) else None
    finally:
        os.close(fd)


def _open_last(flags: int, mode: int) -> Callable[[int, str], int | _Link]:
    # The caller's O_NOFOLLOW means the last symlink is not followed; the walk's own O_NOFOLLOW
    # only makes a symlink show itself, so the walk can follow it beneath the root.
    follow = not flags & os.O_NOFOLLOW

    def last(dir_fd: int, name: str) -> int | _Link:
        if not name:
            return os.open(".", flags, mode, dir_fd=dir_fd)
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
        except OSError as exc:
            # O_NOFOLLOW answers ELOOP for a symlink (ENOTDIR with O_DIRECTORY): follow it.
            loop = follow and exc.errno in (errno.ELOOP, errno.ENOTDIR)
            target = _link_target(dir_fd, name) if loop else None
            if target is None:
                raise
            return _Link(target)
        if follow and flags & os.O_PATH and stat.S_ISLNK(os.fstat(fd).st_mode):  # O_PATH opens links
            try:
                return _Link(os.readlink("", dir_fd=fd))
            finally:
                os.close(fd)
        return fd

    return last


# --- what the file tools use ----------------------------------------------------------------


def open_beneath(root: Root, path: str, flags: int, mode: int = 0o666) -> int:
    """Open ``path`` (relative to the root, or absolute below it) beneath ``root``; close the fd.

    Symlinks are followed while they stay below the root (the last one not, with
    ``O_NOFOLLOW``). Raises ``LeadsOutside``, ``OSError`` with ``ELOOP`` after
    ``MAX_LINK_HOPS`` links, or the open's own ``OSError``.
    """
    flags |= os.O_CLOEXEC
    fd = _openat2(root.fd, path, flags, mode, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
    if fd is not None:
        return fd
    return _Walk(root, path).run(_open_last(flags, mode))


def open_regular(root: Root, path: str) -> int:
    """Open a regular file beneath ``root`` for reading, in blocking mode; close the fd.

    Raises ``IsADirectoryError`` and ``NotRegularFile`` besides what ``open_beneath`` raises.
    """
    try:
        # O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever.
        fd = open_beneath(root, path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket, or a device without its driver
            raise NotRegularFile(_NOT_REGULAR) from None
        raise
    try:
        _require_regular(os.fstat(fd).st_mode)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _require_regular(mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    if not stat.S_ISREG(mode):
        raise NotRegularFile(_NOT_REGULAR)


def locate_beneath(root: Root, path: str, *, create_parents: bool = False) -> Located:
    """Find where ``path`` ends beneath ``root``: its real directory (held open) and name.

    A symlink at the end is followed, so the name is a real file, a directory, or missing;
    ``create_parents`` makes missing directories on the way (beneath the root only).
    """
    fast = _locate_fast(root, path)
    if fast is not None:
        return fast
    walk = _Walk(root, path)

    def last(dir_fd: int, name: str) -> Located | _Link:
        try:
            fd = os.open(name or ".", _PATH_NOFOLLOW, dir_fd=dir_fd)
        except FileNotFoundError:
            return Located(os.dup(dir_fd), name, walk.relative(name), None)
        try:
            info = os.fstat(fd)
            if stat.S_ISLNK(info.st_mode):
                return _Link(os.readlink("", dir_fd=fd))
        finally:
            os.close(fd)
        return Located(os.dup(dir_fd), name, walk.relative(name), info)

    return walk.run(last, create=create_parents)


def _locate_fast(root: Root, path: str) -> Located | None:
    """``openat2`` the directory when no symlink is on the way (its real path is then ``path``)."""
    parts = _parts(path)
    if not parts or ".." in parts or path.startswith("/"):
        return None
    head = "/".join(parts[:-1])
    try:
        # RESOLVE_NO_SYMLINKS: then the directory's real path is the one written.
        fd = _openat2(
            root.fd,
            head,
            os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC,
            0,
            _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS,
        )
    except OSError:
        return None  # missing or not a directory: the walk creates it or says so
    if fd is None:
        return None
    try:
        info: os.stat_result | None = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        info = None
    except BaseException:
        os.close(fd)
        raise
    if info is not None and stat.S_ISLNK(info.st_mode):
        os.close(fd)
        return None
    return Located(fd, parts[-1], PurePosixPath(*parts), info)


def replace_contents(located: Located, data: bytes) -> bool:
    """Make ``data`` the content of ``located`` in one rename; True when the file existed.

    The bytes go to a new file in the same directory (by its fd), which then replaces the old
    name, so no reader ever sees half a file and a symlink put there meanwhile is replaced,
    not followed. An existing file keeps its permission bits.
    """
    info = located.stat
    if not located.name or (info is not None and stat.S_ISDIR(info.st_mode)):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise NotRegularFile(_NOT_REGULAR)
    if info is not None:
        # A rename needs only the directory's permission; like a write in place, a file we may
        # not write is not replaced. (No O_TRUNC: opening changes nothing.)
        probe = os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
        os.close(os.open(located.name, probe, dir_fd=located.dir_fd))
    temporary = f".steward-{os.urandom(6).hex()}.tmp"  # fixed length: fits any name limit
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    # Set-id bits are not carried over to a file we own. Created no more open than the file it
    # replaces (the umask may narrow it further; fchmod then restores the old bits exactly).
    mode = 0o666 if info is None else stat.S_IMODE(info.st_mode) & 0o777
    fd = os.open(temporary, flags, mode, dir_fd=located.dir_fd)
    try:
        with os.fdopen(fd, "wb") as out:
            if info is not None:
                os.fchmod(out.fileno(), mode)
            out.write(data)
        os.replace(temporary, located.name, src_dir_fd=located.dir_fd, dst_dir_fd=located.dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):  # never created, or already renamed
            os.unlink(temporary, dir_fd=located.dir_fd)
        raise
    return info is not None


# --- host-side writes: nothing followed -----------------------------------------------------

_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NOT_THERE = (errno.ENOENT, errno.ELOOP, errno.ENOTDIR)


class StrictTree:
    """A directory that Steward writes into from the host (checkpoint restores, rewinds).

    Unlike the file tools' walk, no symlink is ever followed, not even one that stays below
    the root: every component is opened with ``O_NOFOLLOW`` relative to the fd of the one
    before it. Whatever a command left in the workspace (a folder swapped for a link to the
    home directory, a FIFO where a file was) is therefore either removed as an entry of its
    own directory (when a directory or a file must be put there) or not there at all (when
    something is to be read or removed): a write never lands outside the root.

    Paths are relative, '/'-separated, as recorded (no '..'). Raises ``OSError``.
    """

    __slots__ = ("_last", "fd", "path")

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path
        #: The directory the last write went to, held open: files of one directory come in a
        #: row (a rewind of many), and each then costs no walk. Dropped by whatever removes.
        self._last: tuple[str, int] | None = None

    @classmethod
    def open(cls, path: Path) -> StrictTree:
        """Open ``path`` (its own symlinks followed: the workspace itself is trusted)."""
        return cls(os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), path)

    def close(self) -> None:
        self._forget()
        os.close(self.fd)

    def _forget(self) -> None:
        if self._last is not None:
            os.close(self._last[1])
            self._last = None

    def __enter__(self) -> StrictTree:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- directories ------------------------------------------------------------------------

    def open_dir(self, path: str, *, make: bool = False) -> int:
        """An fd of the directory ``path`` (close it). ``make``: missing directories are made,
        and what is in the way of one (a link, a file, a FIFO) is removed, never followed."""
        fd = os.dup(self.fd)
        try:
            for name in _split(path):
                child = _step(fd, name, make=make)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _parent(self, path: str, *, make: bool) -> tuple[int, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        if not _split(name):
            raise IsADirectoryError(errno.EISDIR, "the root itself", path)
        if self._last is not None and self._last[0] == head:
            return os.dup(self._last[1]), name
        fd = self.open_dir(head, make=make)
        self._forget()
        self._last = (head, os.dup(fd))
        return fd, name

    def _parent_if_there(self, path: str) -> tuple[int, str] | None:
        """``_parent`` without making anything: None when a directory on the way is missing or
        is a link (then nothing of ``path`` is in the tree)."""
        try:
            return self._parent(path, make=False)
        except OSError as exc:
            if exc.errno in _NOT_THERE:
                return None
            raise

    # --- reading ----------------------------------------------------------------------------

    def lstat(self, path: str) -> os.stat_result | None:
        """What ``path`` is, not followed; None when it is missing or a link is on the way."""
        if (found := self._parent_if_there(path)) is None:
            return None
        parent, name = found
        try:
            return os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(parent)

    def read(self, path: str, limit: int | None = None) -> bytes | None:
        """The content of the regular file ``path``; None for anything else (never blocks)."""
        if (found := self._parent_if_there(path)) is None:
            return None
        parent, name = found
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
                         dir_fd=parent)  # fmt: skip
        except OSError as exc:
            if exc.errno in (*_NOT_THERE, errno.ENXIO):
                return None
            raise
        finally:
            os.close(parent)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            return handle.read() if limit is None else handle.read(limit)

    def readlink(self, path: str) -> str | None:
        """The target of the symlink ``path``; None when it is not one (or a link is on the way)."""
        if (found := self._parent_if_there(path)) is None:
            return None
        parent, name = found
        try:
            return os.readlink(name, dir_fd=parent)
        except OSError:
            return None
        finally:
            os.close(parent)

    def listdir(self, path: str) -> list[str]:
        """The names in the directory ``path``, sorted; [] when it is not a directory."""
        try:
            fd = self.open_dir(path)
        except OSError:
            return []
        try:
            return sorted(name for name, _ in _entries_at(fd))
        finally:
            os.close(fd)

    def walk(self, path: str) -> list[tuple[str, os.stat_result]]:
        """Every non-directory below the directory ``path`` (relative to it, lstat), no link
        followed; [] when ``path`` is not a directory."""
        try:
            top = self.open_dir(path)
        except OSError as exc:
            if exc.errno in _NOT_THERE:
                return []
            raise
        found: list[tuple[str, os.stat_result]] = []
        stack: list[tuple[int, str]] = [(top, "")]
        while stack:
            fd, relative = stack.pop()
            try:
                for entry in _entries_at(fd):
                    name = f"{relative}/{entry[0]}" if relative else entry[0]
                    if stat.S_ISDIR(entry[1].st_mode):
                        with contextlib.suppress(OSError):
                            stack.append((os.open(entry[0], _DIR_NOFOLLOW, dir_fd=fd), name))
                    else:
                        found.append((name, entry[1]))
            finally:
                os.close(fd)
        return found

    # --- writing ----------------------------------------------------------------------------

    def write(self, path: str, data: bytes, *, executable: bool = False, mode: int | None = None) -> None:
        """Make ``data`` the content of the file ``path``.

        A regular file with other hard links is written in place (the same inode: its other
        names get the content back too); anything else there is replaced in one rename, a
        link or a FIFO included, never followed. A new file gets 0666/0777 less the umask, or
        ``mode`` exactly."""
        parent, name = self._parent(path, make=True)
        try:
            info = _lstat_at(parent, name)
            linked = info is not None and stat.S_ISREG(info.st_mode) and info.st_nlink > 1
            if linked and info is not None and _write_in_place(parent, name, info, data, executable, mode):
                return
            if info is not None and stat.S_ISDIR(info.st_mode):
                self._forget()
                _remove_tree_at(parent, name)
            if info is None:
                _create_at(parent, name, data, 0o777 if executable else 0o666, mode)
            else:
                _replace_at(parent, name, data, 0o777 if executable else 0o666, mode)
        finally:
            os.close(parent)

    def symlink(self, path: str, target: str) -> None:
        """Make ``path`` a symlink to ``target`` (whatever was there is replaced, not followed)."""
        parent, name = self._parent(path, make=True)
        try:
            info = _lstat_at(parent, name)
            if info is not None and stat.S_ISDIR(info.st_mode):
                self._forget()
                _remove_tree_at(parent, name)
            temporary = f".steward-{os.urandom(6).hex()}.tmp"
            os.symlink(target, temporary, dir_fd=parent)
            try:
                os.replace(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=parent)
                raise
        finally:
            os.close(parent)

    def remove(self, path: str) -> bool:
        """Remove the file, link or whole directory at ``path``; False when nothing was there
        (a link on the way means the path is not in the tree: nothing is removed through it)."""
        if (found := self._parent_if_there(path)) is None:
            return False
        parent, name = found
        try:
            info = _lstat_at(parent, name)
            if info is None:
                return False
            if stat.S_ISDIR(info.st_mode):
                self._forget()
                _remove_tree_at(parent, name)
            else:
                os.unlink(name, dir_fd=parent)
            return True
        finally:
            os.close(parent)

    def remove_empty_parents(self, path: str, stop: str = "") -> None:
        """Remove the directories above ``path`` that are left empty, up to ``stop`` (kept)."""
        parts = _split(path)[:-1]
        keep = len(_split(stop))
        self._forget()
        while len(parts) > keep:
            try:
                parent = self.open_dir("/".join(parts[:-1]))
            except OSError:
                return
            try:
                os.rmdir(parts[-1], dir_fd=parent)
            except OSError:
                return
            finally:
                os.close(parent)
            parts.pop()

    def rename(self, source: str, destination: str) -> None:
        """Move ``source`` to ``destination`` (missing parents made; neither end followed)."""
        self._forget()
        old_parent, old_name = self._parent(source, make=False)
        try:
            new_parent, new_name = self._parent(destination, make=True)
            try:
                os.rename(old_name, new_name, src_dir_fd=old_parent, dst_dir_fd=new_parent)
            finally:
                os.close(new_parent)
        finally:
            os.close(old_parent)


def _split(path: str) -> list[str]:
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise LeadsOutside(path)
    return parts


def _step(fd: int, name: str, *, make: bool) -> int:
    """An fd of the directory ``name`` in ``fd``, not followed (the caller closes ``fd``)."""
    try:
        return os.open(name, _DIR_NOFOLLOW, dir_fd=fd)
    except OSError as exc:
        if not make or exc.errno not in _NOT_THERE:
            raise
        if exc.errno != errno.ENOENT:
            os.unlink(name, dir_fd=fd)  # a link, file or FIFO where a directory belongs
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o777, dir_fd=fd)
    return os.open(name, _DIR_NOFOLLOW, dir_fd=fd)


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _entries_at(fd: int) -> list[tuple[str, os.stat_result]]:
    """(name, lstat) of each entry of the directory ``fd``."""
    found = []
    with os.scandir(os.dup(fd)) as listing:
        for entry in listing:
            with contextlib.suppress(OSError):
                found.append((entry.name, entry.stat(follow_symlinks=False)))
    return found


def _create_at(dir_fd: int, name: str, data: bytes, create_mode: int, mode: int | None) -> None:
    """A new file (nothing was there: no reader can see half of it, no rename needed)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, create_mode, dir_fd=dir_fd)
    except FileExistsError:  # made meanwhile: replaced as any existing file is
        _replace_at(dir_fd, name, data, create_mode, mode)
        return
    with os.fdopen(fd, "wb") as out:
        if mode is not None:
            os.fchmod(out.fileno(), mode)
        out.write(data)


def _replace_at(dir_fd: int, name: str, data: bytes, create_mode: int, mode: int | None) -> None:
    temporary = f".steward-{os.urandom(6).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, create_mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as out:
            if mode is not None:
                os.fchmod(out.fileno(), mode)
            out.write(data)
        os.replace(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise


def _write_in_place(
    dir_fd: int, name: str, info: os.stat_result, data: bytes, executable: bool, mode: int | None
) -> bool:
    """Truncate and write the same inode; False when it is not the file that was looked at."""
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        return False  # not writable as it is: replaced by a new file instead
    with os.fdopen(fd, "wb") as out:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino) or not stat.S_ISREG(now.st_mode):
            return False
        os.set_blocking(fd, True)
        out.truncate(0)
        out.write(data)
        bits = stat.S_IMODE(now.st_mode)
        wanted = mode if mode is not None else _exec_bits(bits, executable)
        if wanted != bits:
            os.fchmod(fd, wanted)
    return True


def _exec_bits(bits: int, executable: bool) -> int:
    if executable:
        return bits | ((bits & 0o444) >> 2) if not bits & 0o111 else bits
    return bits & ~0o111


def _remove_tree_at(dir_fd: int, name: str) -> None:
    """Remove the directory ``name`` of ``dir_fd`` and all below it, by fds, no link followed.
    Directories a command made read-only are opened up first (they are being removed)."""
    # (parent fd, name, whether its entries are gone): each entry owns its parent fd (a dup).
    stack: list[tuple[int, str, bool]] = [(os.dup(dir_fd), name, False)]
    try:
        while stack:
            parent, child, emptied = stack[-1]
            if emptied:
                os.rmdir(child, dir_fd=parent)
                stack.pop()
                os.close(parent)
                continue
            try:
                fd = os.open(child, _DIR_NOFOLLOW, dir_fd=parent)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                os.unlink(child, dir_fd=parent)  # no longer a directory: a link or a file
                stack.pop()
                os.close(parent)
                continue
            stack[-1] = (parent, child, True)
            try:
                bits = stat.S_IMODE(os.fstat(fd).st_mode)
                if bits & 0o700 != 0o700:
                    os.fchmod(fd, bits | 0o700)
                for entry, info in _entries_at(fd):
                    if stat.S_ISDIR(info.st_mode):
                        stack.append((os.dup(fd), entry, False))
                    else:
                        os.unlink(entry, dir_fd=fd)
            finally:
                os.close(fd)
    finally:
        for parent, _child, _emptied in stack:
            os.close(parent)
