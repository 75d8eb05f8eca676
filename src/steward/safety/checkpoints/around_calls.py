"""Checkpoints around calls, and complete change detection after them.

``Checkpointer.before`` records the workspace (``steward.safety.checkpoints.shadow``) and a complete
scan of its repository metadata (``steward.safety.checkpoints.scan``); ``Checkpointer.after`` scans again and
compares. What a call may never leave behind is reverted from the checkpoint, whatever the
call was and however it was spelled:

* a ``.git`` entry or a git-directory layout that was not there before (anywhere: no depth
  limit, no skipped directory, a fresh one where a moved one was) is removed, and so is a
  submodule's git directory made under a ``modules/`` folder; a repository that was *moved*
  keeps its history where it now is (moving is legitimate) and is watched there;
* an existing repository's ``.git`` that is gone, swapped or rewritten is put back (its history
  comes from the checkpoint);
* a changed or new file that decides which programs git runs (``config``, ``config.worktree``,
  ``commondir``, ``gitdir``, anything in ``hooks/``) of any existing git directory is restored;
* a changed protected file of the workspace root (``steward.toml``, shell start-up files);
* a new, changed or removed file that the host runs later, sealed by what it is wherever it is
  (``steward.safety.checkpoints.sealed_files``: Python start-up files, hooks folders, editor
  tasks, a home's dotfiles and Steward's user configuration).

Every write here goes beneath the workspace's fd with no symlink followed
(``steward.tools._beneath.StrictTree``): nothing a command left can lead it out.

The sandbox already keeps the existing ones of these read-only while a command runs; this is
what holds for everything else (new paths, tools that run outside the sandbox, a sandbox turned
off).
"""

from __future__ import annotations

import functools
import os
import stat
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from steward.safety.checkpoints.scan import Marker, Scan, WorkspaceScanner, scanner_for
from steward.safety.checkpoints.sealed_files import SealedFiles, SealedState
from steward.safety.checkpoints.shadow import (
    Checkpoint,
    CheckpointError,
    CheckpointSettings,
    RewindReport,
    Shadow,
    gitdir_key,
)
from steward.safety.protected import PROJECT_CONFIG, RC_FILES
from steward.secret_paths import DEFAULT_SECRET_FILES
from steward.text import shown
from steward.tools._beneath import StrictTree

if TYPE_CHECKING:
    from steward.config import Config

PROGRAM_FILES = ("config", "config.worktree", "commondir", "gitdir")
"""Files of a git directory that decide where git looks and which programs it runs."""

_ROOT_FILES = (PROJECT_CONFIG, *sorted(RC_FILES))
_NAMEABLE = 3000  # characters: a path this long can still be handed to the system calls
_DEEP = 8  # directories: a tree too long to name starts at least this deep (names are <= 255)


@dataclass(slots=True)
class Before:
    """What ``before`` saw: the checkpoint and the scan it was taken with."""

    checkpoint: Checkpoint | None
    scan: Scan
    sensitive: dict[str, tuple[object, ...]]
    run_id: str
    #: Files the host runs later, as they were (``steward.safety.checkpoints.sealed_files``).
    sealed: SealedState | None = None
    #: What was below each git directory's ``modules/`` (``Checkpointer._modules_of``).
    modules: frozenset[str] = frozenset()


@dataclass(slots=True)
class Undone:
    """What ``after`` reverted, for the message the call fails with."""

    items: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.items)

    def message(self) -> str:
        # Names escaped: a file named with terminal control sequences is shown, not obeyed.
        listed = ", ".join(shown(item) for item in self.items[:12]) + (
            f" and {len(self.items) - 12} more" if len(self.items) > 12 else ""
        )
        return (
            f"Undone after the call: {listed}. Repository metadata (a .git, a bare repository, hooks, git "
            "configuration, pointers), Steward's protected files and files the host runs later may not be "
            "created or changed by an agent: programs on the host would obey them. The rest of the call's "
            "changes were kept."
        )


class Checkpointer:
    """Checkpoints and change detection for one workspace."""

    def __init__(
        self,
        workspace: Path,
        settings: CheckpointSettings | None = None,
        secret_patterns: tuple[str, ...] = DEFAULT_SECRET_FILES,
    ) -> None:
        self.workspace = workspace.resolve(strict=False)
        self.settings = settings or CheckpointSettings()
        self.shadow = Shadow(self.workspace, self.settings)
        self.scanner: WorkspaceScanner = scanner_for(self.workspace, secret_patterns)
        self.sealed = SealedFiles(self.workspace)

    # --- around a call ------------------------------------------------------------------

    def before(
        self, run_id: str, *, step: int = 0, call_id: str = "", tool: str = "", sandboxed: bool = False
    ) -> Before:
        """Record the workspace before a call; ``sandboxed``: the call runs in the sandbox."""
        from steward.safety.sandbox.bubblewrap import sweep_placeholders

        # The read-only placeholders a killed process left are no part of the workspace: gone
        # before it is recorded, or the call would be taken for one that changed them.
        sweep_placeholders(self.workspace)
        # git stats every file while we walk the directories: the two overlap.
        started = self.shadow.begin(run_id) if self.settings.enabled else None
        try:
            scan = self.scanner.scan()
        except BaseException:
            if started is not None:
                started.kill()
                started.communicate()
            raise
        checkpoint = None
        if self.settings.enabled:
            checkpoint = self.shadow.record(
                run_id,
                repositories=scan.repositories,
                dotgits={p: m.ident for p, m in scan.dotgits().items()},
                step=step,
                call_id=call_id,
                tool=tool,
                started=started,
            )
        sealed = self.sealed.snapshot(scan, tool=tool, sandboxed=sandboxed)
        return Before(checkpoint, scan, self._sensitive(scan), run_id, sealed, self._modules_of(scan))

    def after(self, before: Before) -> Undone:
        """Revert what may not change (see the module docstring); say what was reverted."""
        undone = Undone()
        now = self.scanner.scan()
        # Each stage on its own: whatever a command left in the way of one (a file where a
        # directory was) must not keep the others from running.
        for stage in (
            self._unwalkable,
            self._dotgits,
            self._layouts,
            self._new_modules,
            self._sensitive_files,
            self._sealed_files,
            self._lost_objects,
        ):
            try:
                stage(before, now, undone)
            except (OSError, CheckpointError) as exc:
                undone.items.append(f"could not finish checking ({type(exc).__name__}: {exc})")
            if undone and stage in (self._unwalkable, self._dotgits, self._layouts):
                now = self.scanner.scan()
        return undone

    def _lost_objects(self, before: Before, now: Scan, undone: Undone) -> None:
        """History deleted from an existing repository comes back from the checkpoint (see
        ``Shadow.restore_missing_history``). Only repositories whose git directory or object
        directories were listed anew are looked at: a deletion changes its directory."""
        checkpoint = before.checkpoint
        if checkpoint is None:
            return
        relisted = set(now.relisted)
        for dotgit, described in sorted(checkpoint.dotgits.items()):
            if described[0] != "dir" or not (self.workspace / dotgit).is_dir():
                continue
            objects = f"{dotgit}/objects"
            if dotgit not in relisted and not any(
                p == objects or p.startswith(objects + "/") for p in relisted
            ):
                continue
            restored = self.shadow.restore_missing_history(before.run_id, checkpoint, dotgit, described[1])
            if restored:
                undone.items.append(f"{restored} deleted files of the history in {dotgit} restored")

    # --- what cannot be walked ----------------------------------------------------------

    def _unwalkable(self, before: Before, now: Scan, undone: Undone) -> None:
        """A tree a call made too deep to walk (a path over the system's limit) could hide a
        repository from the scan: it is removed, from the deepest ancestor that can be named."""
        known = set(before.scan.unreadable)
        for relative in sorted(set(now.unreadable) - known):
            parts = relative.split("/")
            keep = 0
            while keep < len(parts) and len(str(self.workspace / "/".join(parts[: keep + 1]))) < _NAMEABLE:
                keep += 1
            if keep == len(parts):  # short enough to name: a folder that cannot be read (mode 000)
                undone.items.append(
                    f"{relative[:80]} could not be checked: it cannot be read (Steward changes no "
                    "permissions; make it readable to have it checked)"
                )
                continue
            if keep < _DEEP:  # no call makes a tree that deep by accident: leave it, say so
                undone.items.append(f"{relative[:80]}... could not be checked (its path is too long)")
                continue
            top = "/".join(parts[:keep])
            with self.shadow.tree() as tree:
                tree.remove(top)
            undone.items.append(f"{top[:80]}.../ removed (its paths were too long to check)")

    # --- .git entries -------------------------------------------------------------------

    def _dotgits(self, before: Before, now: Scan, undone: Undone) -> None:
        """Moving a repository is legitimate: its history goes with it and stays where it now
        is. A ``.git`` that is new (anywhere, an old path taken by a fresh one included) is
        removed; an existing one that is gone, swapped or rewritten comes back from the checkpoint."""
        old, new = before.scan.dotgits(), now.dotgits()
        moved = _moves(old, new)
        with self.shadow.tree() as tree:
            for path in sorted(new, key=lambda p: -p.count("/")):
                fresh = path not in old or (old[path].ident != new[path].ident and path in moved.values())
                if fresh and path not in moved and not _inside(path, old):
                    tree.remove(path)
                    undone.items.append(f"new {path} removed")
        for path, marker in sorted(old.items(), key=lambda item: item[0].count("/")):
            current = new.get(path)
            changed = current is None or current.ident != marker.ident
            checkpoint = before.checkpoint
            recorded = checkpoint is not None and path in checkpoint.dotgits
            if changed and recorded and checkpoint is not None and path not in moved.values():
                self.shadow.restore_gitdir(before.run_id, checkpoint, path, prune=False)
                undone.items.append(f"{path} restored")
                self._restore_missing_files(before, path, undone)

    def _restore_missing_files(self, before: Before, dotgit: str, undone: Undone) -> None:
        repo = dotgit.rpartition("/")[0]
        if before.checkpoint is not None and repo in before.checkpoint.units:
            failed = self.shadow.restore_unit_missing(before.run_id, repo, before.checkpoint)
            undone.items.extend(f"could not restore {item}" for item in failed[:20])

    # --- git-directory layouts ------------------------------------------------------------

    def _layouts(self, before: Before, now: Scan, undone: Undone) -> None:
        old = before.scan.layouts()
        for path, marker in sorted(now.layouts().items()):
            if path in old and old[path].ident == marker.ident:
                continue
            with self.shadow.tree() as tree:
                names = ("HEAD", *PROGRAM_FILES, "hooks")
                removed = [name for name in names if tree.remove(f"{path}/{name}" if path else name)]
            if removed:
                shown = f"{path}/" if path else "the workspace root"
                undone.items.append(f"new repository at {shown} disabled (removed {', '.join(removed)})")

    # --- submodules' git directories that did not exist -----------------------------------

    def _modules_of(self, scan: Scan) -> frozenset[str]:
        """Each entry below the ``modules/`` of every git directory, down to the submodules'
        own git directories (not into them: their files are judged as any git directory's),
        and each folder listed on the way, as ``path/``. A submodule's name may hold '/'
        (``modules/vendor/lib``): the folders on the way count."""
        found: set[str] = set()
        gitdirs = [p for p, m in scan.dotgits().items() if m.ident[0] == "dir"] + list(scan.layouts())
        with self.shadow.tree() as tree:
            stack = [f"{gitdir}/modules" if gitdir else "modules" for gitdir in gitdirs]
            while stack:
                directory = stack.pop()
                names = tree.listdir(directory)
                if "HEAD" in names and not directory.endswith("/modules"):
                    continue  # a submodule's git directory
                found.add(f"{directory}/")
                for name in names:
                    found.add(f"{directory}/{name}")
                    stack.append(f"{directory}/{name}")
        return frozenset(found)

    def _new_modules(self, before: Before, now: Scan, undone: Undone) -> None:
        """What git would take for a submodule's git directory, made by a command (hooks, a
        config with fsmonitor, waiting for ``git submodule update``), is removed whole; what
        appears inside an existing one is not this stage's (a lost ``HEAD`` comes back)."""
        with self.shadow.tree() as tree:
            for path in sorted(self._modules_of(now) - before.modules):
                listed_before = path.rpartition("/")[0] + "/" in before.modules
                if not path.endswith("/") and listed_before and tree.remove(path):
                    undone.items.append(f"new {path} removed")

    # --- files that decide what git runs, and the root's protected files ------------------

    def _sensitive(self, scan: Scan) -> dict[str, tuple[object, ...]]:
        """The identity of each file that decides what git runs (looked at beneath the
        workspace's fd: a folder swapped for a link shows as the link, not what it leads to)."""
        found: dict[str, tuple[object, ...]] = {}
        with self.shadow.tree() as tree:
            for name in (*_ROOT_FILES, *_host_links(self.workspace)):
                found[name] = _ident_at(tree, name)
            gitdirs = [p for p, m in scan.dotgits().items() if m.ident[0] == "dir"]
            gitdirs += list(scan.layouts())
            for gitdir in gitdirs:
                base = f"{gitdir}/" if gitdir else ""
                for name in PROGRAM_FILES:
                    found[f"{base}{name}"] = _ident_at(tree, f"{base}{name}")
                found[f"{base}hooks"] = _ident_at(tree, f"{base}hooks")
                for name in tree.listdir(f"{base}hooks"):  # every one: a cap is a hiding place
                    found[f"{base}hooks/{name}"] = _ident_at(tree, f"{base}hooks/{name}")
                for worktree in tree.listdir(f"{base}worktrees")[:200]:
                    for name in PROGRAM_FILES:
                        relative = f"{base}worktrees/{worktree}/{name}"
                        found[relative] = _ident_at(tree, relative)
        return found

    def _sensitive_files(self, before: Before, now: Scan, undone: Undone) -> None:
        # A moved git directory's files are judged where it now is, against what they were.
        moved = {origin: path for path, origin in _moves(before.scan.dotgits(), now.dotgits()).items()}
        back = {new: old for old, new in moved.items()}
        current = {_renamed(p, back): ident for p, ident in self._sensitive(now).items()}
        for path in sorted(set(before.sensitive) | set(current)):
            was = before.sensitive.get(path, ())
            at = _renamed(path, moved)
            if not was and current.get(path) and self._moved_placeholder(at):
                continue
            if path not in before.sensitive:
                # A program file of a git directory that did not exist before (a new hook).
                if current[path] and _within_known(path, before):
                    with self.shadow.tree() as tree:
                        tree.remove(at)
                    undone.items.append(f"new {at} removed")
                continue
            if current.get(path, ()) == was:
                continue
            if self._restore_file(before, path, was, at=at):
                undone.items.append(f"{at} restored" if was else f"new {at} removed")

    def _moved_placeholder(self, path: str) -> bool:
        """The sandbox's harmless ``commondir`` placeholder ("this directory"), moved along with
        its git directory by a command (its sandbox could then not remove it): removed quietly."""
        with self.shadow.tree() as tree:
            if path.endswith("/commondir") and tree.read(path, limit=3) == b".\n":
                return tree.remove(path)
        return False

    def _restore_file(
        self, before: Before, path: str, was: tuple[object, ...], *, at: str | None = None
    ) -> bool:
        """Put ``path`` back as ``was`` (its identity at the checkpoint), at ``at`` when it has
        moved since (with its git directory); whether anything was changed."""
        recorded, path = path, at or path
        with self.shadow.tree() as tree:
            if not was:
                return tree.remove(path)
            checkpoint = before.checkpoint
            # A hooks directory is judged by its files, one by one.
            content = None
            if was[0] != "dir" and checkpoint is not None:
                content = self._content_then(before.run_id, checkpoint, recorded)
            if content is None:
                return False
            if was[0] == "link":  # git keeps a link as its target's text
                tree.symlink(path, content.decode("utf-8", "surrogateescape"))
                return True
            mode = was[1]
            tree.write(path, content, mode=stat.S_IMODE(mode) if isinstance(mode, int) else None)
            return True

    def _content_then(self, run_id: str, checkpoint: Checkpoint, path: str) -> bytes | None:
        parts = path.split("/")
        if ".git" in parts:
            index = parts.index(".git")
            repo = "/".join(parts[:index])
            inner = "/".join(parts[index + 1 :])
            return self.shadow.gitdir_blob(run_id, checkpoint, gitdir_key(repo), inner)
        return self.shadow.blob(run_id, checkpoint, path)

    # --- files the host runs later, sealed by what they are --------------------------------

    def _sealed_files(self, before: Before, now: Scan, undone: Undone) -> None:
        """New sealed files removed, changed ones restored through the same restore as the root's
        protected files (``steward.safety.checkpoints.sealed_files``)."""
        if before.sealed is not None:
            restore = functools.partial(self._restore_file, before)
            undone.items.extend(self.sealed.check(before.sealed, now, restore, exclude=before.sensitive))

    # --- listing and rewinding ----------------------------------------------------------

    def checkpoints(self, run_id: str) -> list[Checkpoint]:
        return self.shadow.checkpoints(run_id)

    def changes_of(self, run_id: str, checkpoints: list[Checkpoint], index: int) -> list[tuple[str, str]]:
        """What changed from checkpoint ``index`` to the next one (or to now, for the last)."""
        current = checkpoints[index]
        if index + 1 < len(checkpoints):
            return self.shadow.changes(run_id, current, checkpoints[index + 1])
        return self.shadow.pending(run_id, current)

    def rewind(self, run_id: str, target: Checkpoint) -> RewindReport:
        scan = self.scanner.scan()
        return self.shadow.rewind(
            run_id,
            target,
            repositories=scan.repositories,
            dotgits={p: m.ident for p, m in scan.dotgits().items()},
        )


def _host_links(workspace: Path) -> list[str]:
    """Symlinks in the workspace on the way to what the host runs: the Python running Steward,
    Steward's own code and the directories on PATH. Their targets are read-only in the sandbox,
    but a link itself can be replaced there; the comparison puts it back."""
    import steward

    candidates = [
        sys.prefix,
        sys.exec_prefix,
        str(Path(sys.executable).parent),
        str(Path(steward.__file__).parent),
    ]
    candidates += os.environ.get("PATH", "").split(os.pathsep)
    found: list[str] = []
    for candidate in candidates:
        # Not resolved: the links on the way are what is looked for.
        path = Path(os.path.normpath(candidate)) if candidate and Path(candidate).is_absolute() else None
        if path is None or not path.is_relative_to(workspace):
            continue
        current = workspace
        for part in path.relative_to(workspace).parts:
            current = current / part
            if current.is_symlink():
                found.append(current.relative_to(workspace).as_posix())
    return sorted(set(found))


def _inside(path: str, gitdirs: dict[str, Marker]) -> bool:
    """Whether ``path`` lies inside one of the ``.git`` directories (not at it)."""
    return any(path.startswith(g + "/") for g, m in gitdirs.items() if m.ident[0] == "dir")


def _moves(old: dict[str, Marker], new: dict[str, Marker]) -> dict[str, str]:
    """``.git`` entries found at a new path that are the very one gone from an old path (the
    same inode: a directory, or a ``gitdir:`` file as it was): new path -> old path."""
    gone = {_identity(m): p for p, m in old.items() if p not in new or new[p].ident != m.ident}
    moved = {}
    for path, marker in new.items():
        origin = gone.get(_identity(marker)) if path not in old or old[path].ident != marker.ident else None
        if origin is not None and origin != path:
            moved[path] = origin
    return moved


def _identity(marker: Marker) -> tuple[object, ...]:
    # A rename changes a file's ctime, not its inode, size or mtime.
    return marker.ident[:4] if marker.ident[0] == "file" else marker.ident


def _renamed(path: str, moves: dict[str, str]) -> str:
    """``path`` with the first of ``moves``' prefixes it lies under replaced."""
    for origin, target in moves.items():
        if path.startswith(origin + "/"):
            return target + path[len(origin) :]
    return path


def _within_known(path: str, before: Before) -> bool:
    """A new program file inside a git directory that existed before the call."""
    gitdir = path.split("/hooks/", maxsplit=1)[0] if "/hooks/" in path else path.rpartition("/")[0]
    if "/worktrees/" in gitdir:
        gitdir = gitdir.split("/worktrees/")[0]
    return f"{gitdir}/config" in before.sensitive or gitdir in before.scan.markers


def _ident(path: Path) -> tuple[object, ...]:
    """What tells whether a file changed: () when missing; ctime cannot be set back by a command."""
    try:
        info = os.lstat(path)
    except OSError:
        return ()
    return _ident_of(info)


def _ident_at(tree: StrictTree, path: str) -> tuple[object, ...]:
    """``_ident`` of ``path`` beneath the tree: () when missing or when a link is on the way."""
    try:
        info = tree.lstat(path)
    except OSError:
        return ()
    return () if info is None else _ident_of(info)


def _ident_of(info: os.stat_result) -> tuple[object, ...]:
    kind = "dir" if stat.S_ISDIR(info.st_mode) else ("link" if stat.S_ISLNK(info.st_mode) else "file")
    if kind == "dir":
        return ("dir", info.st_mode, info.st_ino)
    return (kind, info.st_mode, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


_CHECKPOINTERS: dict[tuple[Path, CheckpointSettings, tuple[str, ...]], Checkpointer] = {}
_CHECKPOINTERS_LOCK = threading.Lock()


def settings_from_config(config: Config) -> CheckpointSettings:
    section = config.checkpoints
    return CheckpointSettings(
        enabled=section.enabled,
        ignore=tuple(section.ignore),
        max_file_bytes=int(section.max_file_mb * 1024 * 1024),
        state_dir=Path(section.state_dir).expanduser() if section.state_dir else None,
    )


def checkpointer_for(workspace: Path, config: Config) -> Checkpointer:
    """The process's checkpointer of ``workspace`` under ``config`` (shared by its runs)."""
    settings = settings_from_config(config)
    patterns = tuple(config.sandbox.secret_files)
    key = (workspace.resolve(strict=False), settings, patterns)
    with _CHECKPOINTERS_LOCK:
        found = _CHECKPOINTERS.get(key)
        if found is None:
            found = _CHECKPOINTERS[key] = Checkpointer(key[0], settings, patterns)
        return found
