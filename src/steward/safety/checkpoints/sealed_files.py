"""Sealed files compared around a call: what the host would run later is put back as it was.

``SealedFiles.snapshot`` (before a call) notes the identity of every file sealed by what it is
(``steward.safety.sealed``) and keeps a copy of the small ones; ``SealedFiles.check`` (after
the call) compares, whatever the call was:

* a sealed file that is new (a ``.pth`` in any environment, one made during the call included;
  a ``.vscode/tasks.json``; a new dotfile or dot-folder of a home in the workspace; a new file
  in a hooks folder, in Steward's user configuration or, after a call made without the sandbox,
  in a home's ``HOME_WALKED`` folders) is removed;
* a changed or removed one is restored from the checkpoint, or from the copy kept here when the
  checkpoint does not hold it (an environment or editor folder the project's ignore rules leave
  out; a link's target); with neither, a changed one is removed (its content is the call's) and
  said so. A home's existing dot entries are not compared after a sandboxed call: they were
  read-only to it, so a change is the user's own programs' (a shell's history).

What is compared costs nothing more than the complete scan the checkpoint takes anyway (the
scan finds sealed files by name), plus a walk of the hooks folders and, when a home directory
is in the workspace, of its few ``HOME_WALKED`` folders. A file tool's own call is not
compared: the one path it writes has been through the policy, which asks about a sealed one.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from steward.safety.checkpoints.scan import Scan
from steward.safety.checkpoints.shadow import CheckpointError
from steward.safety.protected import git_run_paths, is_hooks_reason
from steward.safety.sealed import (
    HOME_REASON,
    HOME_WALKED,
    HOOK_SCRIPT_REASON,
    PYTHON_REASON,
    USER_CONFIG_REASON,
    home_dot_entries,
    homes_within,
    new_is_fine,
    read_head,
    reason_by_name,
    startup_paths,
    user_config_dir,
)

Ident = tuple[object, ...]
Restore = Callable[[str, Ident], bool]
"""Puts a workspace-relative path back as it was at the checkpoint (``()``: removes it); whether
it could (the checkpointer's own restore, beneath the workspace's fd)."""

FILE_TOOLS = frozenset({"write_file", "edit_file"})
_COPY_BYTES = 256 * 1024
_WALK_FILES = 200_000  # a guard against a runaway walk, far above any real folder of this kind


@dataclass(slots=True)
class SealedState:
    """What ``snapshot`` saw before a call."""

    idents: dict[str, Ident] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    #: Folders whose every file is sealed (hooks folders, a home's .config), workspace-relative.
    walked: tuple[tuple[str, str], ...] = ()
    #: Homes in the workspace ('' for the root): a new dot entry there is removed.
    homes: tuple[str, ...] = ()
    #: Start-up paths named by the environments' .pth files before the call.
    derived: dict[str, str] = field(default_factory=dict)
    #: A file tool's call: nothing to compare (see the module docstring).
    skip: bool = False
    #: The call ran in the sandbox: of a home's dot entries, only new ones are compared.
    sandboxed: bool = False


class SealedFiles:
    """Snapshot and comparison of one workspace's sealed files."""

    def __init__(self, workspace: Path) -> None:
        self.root = workspace.resolve(strict=False)
        self._copies: dict[str, tuple[Ident, bytes]] = {}
        self._lock = threading.Lock()

    def snapshot(self, scan: Scan, *, tool: str = "", sandboxed: bool = False) -> SealedState:
        """``sandboxed``: the call runs in the sandbox, where a home's existing dot entries are
        read-only: a change to one afterwards is the user's own programs' (a shell's history), so
        only new dot entries are compared."""
        if tool in FILE_TOOLS:
            return SealedState(skip=True)
        derived = startup_paths(self.root, [p for p in scan.sealed if p.endswith(".pth")])
        walked = [w for w in self._walked() if not (sandboxed and w[1] == HOME_REASON)]
        for path, reason in git_run_paths(self.root, scan.repositories).items():
            if is_hooks_reason(reason):
                walked.append((self._relative(path), HOOK_SCRIPT_REASON))
            elif path != self.root:
                derived[self._relative(path)] = reason  # an included config, a program git runs
        state = SealedState(derived=derived, walked=tuple(walked), homes=self._homes(), sandboxed=sandboxed)
        state.reasons = self._paths(scan, state)
        state.idents = {path: ident(self.root / path) for path in state.reasons}
        self._keep_copies(state)
        return state

    def check(
        self, state: SealedState, now: Scan, restore: Restore, *, exclude: Iterable[str] = ()
    ) -> list[str]:
        """Put back what the call changed; one line per path for the call's report."""
        if state.skip:
            return []
        skipped = set(exclude)
        current = self._paths(now, state)
        items: list[str] = []
        for path in sorted(set(state.reasons) | set(current), key=lambda p: (-p.count("/"), p)):
            if path in skipped:
                continue
            was, is_now = state.idents.get(path, ()), ident(self.root / path)
            if _same(was, is_now) or (not was and new_is_fine(path)):
                continue
            reason = state.reasons.get(path) or current[path]
            if was and state.sandboxed and reason in (HOME_REASON, USER_CONFIG_REASON):
                continue  # read-only in the sandbox: the user's own programs changed it
            try:
                items.append(self._put_back(path, was, is_now, restore, reason))
            except (OSError, CheckpointError) as exc:  # one in the way must not stop the others
                items.append(f"{path} could not be put back ({type(exc).__name__}: {exc}) ({reason})")
        return items

    # --- what is sealed -------------------------------------------------------------------

    def _walked(self) -> tuple[tuple[str, str], ...]:
        found: list[tuple[str, str]] = []
        config = user_config_dir().resolve(strict=False)
        if config.is_relative_to(self.root) and config != self.root:
            found.append((self._relative(config), USER_CONFIG_REASON))
        found += [(self._relative(h / n), HOME_REASON) for h in homes_within(self.root) for n in HOME_WALKED]
        return tuple(found)

    def _relative(self, path: Path) -> str:
        return "" if path == self.root else path.relative_to(self.root).as_posix()

    def _homes(self) -> tuple[str, ...]:
        return tuple(self._relative(home) for home in homes_within(self.root))

    def _paths(self, scan: Scan, state: SealedState) -> dict[str, str]:
        """Every sealed path as ``scan`` (and a walk of the sealed folders) finds them now, with
        the start-up paths the environments named *before* the call (a .pth the call wrote is
        itself undone, so what it names is not the user's)."""
        found = {path: reason_by_name(tuple(path.split("/"))) or PYTHON_REASON for path in scan.sealed}
        found.update(state.derived)
        for directory, reason in state.walked:
            for path in [directory, *_entries_under(self.root, directory)]:  # a new folder goes whole
                found.setdefault(path, reason)
        for home in state.homes:
            for name in home_dot_entries(self.root / home if home else self.root):
                found.setdefault(f"{home}/{name}" if home else name, HOME_REASON)
        return found

    # --- copies and restoring -------------------------------------------------------------

    def _keep_copies(self, state: SealedState) -> None:
        """A copy of each small sealed file outside a home's walked folders (those are in the
        checkpoint), read again only when its identity changed."""
        homes = {d for d, r in state.walked if r == HOME_REASON}
        with self._lock:
            for path, found in state.idents.items():
                if not found or found[0] == "dir" or any(path.startswith(h + "/") for h in homes):
                    continue
                kept = self._copies.get(path)
                if kept is not None and kept[0] == found:
                    continue
                size, mode = found[3], found[1]
                regular = isinstance(mode, int) and stat.S_ISREG(mode)  # never a FIFO or a device
                if found[0] == "link":  # a link's copy is its target (an environment's bin/python)
                    with contextlib.suppress(OSError):
                        self._copies[path] = (found, os.fsencode((self.root / path).readlink()))
                elif regular and isinstance(size, int) and size <= _COPY_BYTES:
                    data = read_head(self.root / path, _COPY_BYTES + 1)
                    if data is not None and len(data) <= _COPY_BYTES:
                        self._copies[path] = (found, data)

    def _put_back(self, path: str, was: Ident, is_now: Ident, restore: Restore, reason: str) -> str:
        if not was:
            restore(path, ())
            return f"new {path} removed ({reason})"
        if was[0] == "dir":
            # A folder is judged by the files in it; one that is gone comes back with a rewind.
            return f"{path} was removed or replaced; `steward rewind` brings it back ({reason})"
        if restore(path, was):
            return f"{path} restored ({reason})"
        kept = self._copies.get(path)
        if kept is not None and kept[0] == was and _write(self.root, path, kept[1], was):
            return f"{path} restored ({reason})"
        if is_now:
            restore(path, ())
            return f"{path} removed: it was changed and its earlier content was not recorded ({reason})"
        return f"{path} was removed and could not be restored ({reason})"


def ident(path: Path) -> Ident:
    """What tells whether a file changed, in the checkpointer's form: () when missing."""
    try:
        info = os.lstat(path)
    except OSError:
        return ()
    kind = "dir" if stat.S_ISDIR(info.st_mode) else ("link" if stat.S_ISLNK(info.st_mode) else "file")
    if kind == "dir":
        return ("dir", info.st_mode, info.st_ino)
    return (kind, info.st_mode, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _same(was: Ident, is_now: Ident) -> bool:
    if was and is_now and was[0] == "dir" and is_now[0] == "dir":
        return True  # a folder's files are compared one by one
    return was == is_now


def _entries_under(root: Path, relative: str) -> list[str]:
    """Every entry below a folder of the workspace, no symlink followed (a new folder is removed
    whole; an existing one is judged by what is in it)."""
    found: list[str] = []
    stack = [relative]
    while stack and len(found) < _WALK_FILES:
        current = stack.pop()
        try:
            with os.scandir(root / current) as listing:
                entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in listing]
        except OSError:
            continue
        for name, is_dir in entries:
            found.append(f"{current}/{name}")
            if is_dir:
                stack.append(f"{current}/{name}")
    return found


def _write(root: Path, relative: str, data: bytes, was: Ident) -> bool:
    """Write a kept copy back beneath the workspace's fd: each folder opened with no symlink
    followed (a missing one is made), whatever is at the file's name replaced."""
    parts = relative.split("/")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        fd = os.open(root, flags)
    except OSError:
        return False
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(part, 0o755, dir_fd=fd)
                inner = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = inner
        with contextlib.suppress(FileNotFoundError):
            os.unlink(parts[-1], dir_fd=fd)
        if was[0] == "link":
            os.symlink(data, parts[-1], dir_fd=fd)
            return True
        mode = stat.S_IMODE(was[1]) if isinstance(was[1], int) else 0o644
        out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=fd)
        try:
            os.write(out, data)
        finally:
            os.close(out)
    except OSError:
        return False
    else:
        return True
    finally:
        os.close(fd)
