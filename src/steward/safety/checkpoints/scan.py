"""A complete walk of a workspace that finds repository metadata and secret files, fast.

Checkpoints compare what this walk finds before and after every call that can change files,
so it must miss nothing: there is no depth limit, no skipped directory and no cap on the
number of files. What keeps it cheap is what git's untracked cache does: a directory's entries
change only when its ``ctime`` changes (a name added, removed or renamed updates it, and no
call can set it back), so each walk costs one ``lstat`` per directory and lists only the
directories whose ``ctime`` moved since the last walk.

What it finds:

* every entry named ``.git`` (a directory, a ``gitdir:`` file or a symlink), anywhere, inside
  other repositories' git directories included;
* every *git-directory layout*: a directory holding ``HEAD`` and either ``objects/`` and
  ``refs/`` or a ``commondir`` file: what git would take for a repository (a bare one, a
  submodule's under ``.git/modules``, a linked worktree's under ``.git/worktrees``);
* secret files by name (``steward.safety.secrets.values``);
* files sealed by what they are (``steward.safety.sealed``: a site directory's ``.pth`` files,
  ``.envrc``, ``.vscode/tasks.json`` ...), made before or during the run, wherever they are.

Timestamps are coarse (the kernel stamps with a clock that ticks every few milliseconds), so a
directory changed in the same tick as it was listed could keep the ``ctime`` seen then: a
directory whose ``ctime`` is that close to its listing is listed again next time.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from steward.safety.sealed import is_site_dir, sealed_in_dir
from steward.secret_paths import DEFAULT_SECRET_FILES, NOT_SECRET

_RACY_NS = 50_000_000
"""How close (ns) a directory's ctime may be to its listing before the listing is not trusted."""

MAX_DIRS = 2_000_000
"""A guard against a runaway walk (a directory loop the kernel would not allow anyway)."""


@dataclass(slots=True, frozen=True)
class Marker:
    """A piece of repository metadata: a ``.git`` entry or a git-directory layout."""

    #: Workspace-relative, '/'-separated; a layout is named by its directory.
    path: str
    #: ``dotgit`` (an entry named .git) or ``layout``.
    kind: str
    #: What tells one such entry from another: ("dir", dev, ino), ("file", ino, size,
    #: mtime_ns, ctime_ns) or ("link", target); layouts: ("dir", dev, ino).
    ident: tuple[object, ...]


@dataclass(slots=True)
class _Dir:
    ino: int
    ctime_ns: int
    listed_ns: int
    subdirs: tuple[str, ...]
    dotgit: bool
    layout: bool
    secrets: tuple[str, ...]
    unreadable: bool = False
    sealed: tuple[str, ...] = ()
    site: bool = False


@dataclass(slots=True)
class Scan:
    """What one walk found."""

    root: Path
    markers: dict[str, Marker] = field(default_factory=dict)
    #: Secret files, workspace-relative.
    secrets: list[str] = field(default_factory=list)
    #: Directories that could not be listed (their contents are unknown).
    unreadable: list[str] = field(default_factory=list)
    #: Files sealed by what they are (``steward.safety.sealed.sealed_in_dir``), workspace-relative.
    sealed: list[str] = field(default_factory=list)
    #: Site directories of Python environments (``steward.safety.sealed.is_site_dir``).
    sites: list[str] = field(default_factory=list)
    dirs: int = 0
    listed: int = 0
    #: Directories listed anew by this walk (their entries changed since the last one).
    relisted: list[str] = field(default_factory=list)

    @property
    def repositories(self) -> list[str]:
        """Directories holding a ``.git`` entry ('' for the workspace root), outside git dirs."""
        found = []
        for marker in self.markers.values():
            if marker.kind == "dotgit" and not _inside_git_dir(marker.path):
                parent = marker.path.rpartition("/")[0]
                found.append(parent)
        return sorted(found)

    def dotgits(self) -> dict[str, Marker]:
        return {p: m for p, m in self.markers.items() if m.kind == "dotgit"}

    def layouts(self) -> dict[str, Marker]:
        return {p: m for p, m in self.markers.items() if m.kind == "layout"}


def _inside_git_dir(path: str) -> bool:
    """Whether ``path`` lies inside (not at) a ``.git`` directory."""
    parts = path.split("/")
    return ".git" in parts[:-1]


def _join(base: str, name: str) -> str:
    return f"{base}/{name}" if base else name


class WorkspaceScanner:
    """Walks one workspace completely, remembering directory listings between walks.

    Thread-safe: walks of one scanner are serialised (they share the cache)."""

    def __init__(self, root: Path, secret_patterns: Sequence[str] = DEFAULT_SECRET_FILES) -> None:
        self.root = root.resolve(strict=False)
        self.secret_patterns = tuple(secret_patterns)
        self._secret = _name_matcher(self.secret_patterns)
        self._cache: dict[str, _Dir] = {}
        self._lock = threading.Lock()

    def scan(self) -> Scan:
        with self._lock:
            return self._scan()

    def _scan(self) -> Scan:
        found = Scan(self.root)
        seen: set[str] = set()
        stack: list[str] = [""]
        root = str(self.root)
        while stack:
            if found.dirs >= MAX_DIRS:
                found.unreadable.append(stack.pop())
                continue
            relative = stack.pop()
            absolute = _join(root, relative) if relative else root
            found.dirs += 1
            seen.add(relative)
            try:
                info = os.lstat(absolute)
            except FileNotFoundError:
                continue  # removed while we walked
            except OSError:
                # Deeper than a path may be (ENAMETOOLONG): its contents are unknown, and the
                # comparison removes such a tree when it is new.
                found.unreadable.append(relative)
                continue
            if not stat.S_ISDIR(info.st_mode):
                continue
            cached = self._cache.get(relative)
            if (
                cached is None
                or cached.ino != info.st_ino
                or cached.ctime_ns != info.st_ctime_ns
                or info.st_ctime_ns >= cached.listed_ns - _RACY_NS
                or cached.unreadable
            ):
                cached = self._list(absolute, info, relative)
                self._cache[relative] = cached
                found.listed += 1
                found.relisted.append(relative)
            self._collect(found, relative, absolute, info, cached)
            stack.extend(_join(relative, name) for name in cached.subdirs)
        for gone in [key for key in self._cache if key not in seen]:
            del self._cache[gone]
        found.secrets.sort()
        found.sealed.sort()
        return found

    def _collect(self, found: Scan, relative: str, absolute: str, info: os.stat_result, cached: _Dir) -> None:
        """Add what one directory's (cached) listing holds to ``found``."""
        if cached.unreadable:
            found.unreadable.append(relative)
        if cached.dotgit:
            marker = self._dotgit(_join(relative, ".git"), _join(absolute, ".git"))
            if marker is not None:
                found.markers[marker.path] = marker
        if cached.layout and relative.rpartition("/")[2] != ".git":
            found.markers[relative] = Marker(relative, "layout", ("dir", info.st_dev, info.st_ino))
        found.secrets.extend(_join(relative, name) for name in cached.secrets)
        found.sealed.extend(_join(relative, name) for name in cached.sealed)
        if cached.site:
            found.sites.append(relative)

    def _list(self, absolute: str, info: os.stat_result, relative: str) -> _Dir:
        listed_ns = time.time_ns()
        subdirs: list[str] = []
        secrets: list[str] = []
        names: set[str] = set()
        dotgit = False
        try:
            entries = _entries(absolute)
        except OSError:
            # Unreadable (mode 000, a path too long): reported as such and skipped. Steward never
            # changes a permission: the directory is the user's, and so is opening it up.
            return _Dir(info.st_ino, info.st_ctime_ns, listed_ns, (), False, False, (), True)
        for name, is_dir, is_file in entries:
            names.add(name)
            if name == ".git":
                dotgit = True
            if is_dir:
                subdirs.append(name)
            elif is_file and self._secret(name):
                secrets.append(name)
        layout = "HEAD" in names and (("objects" in names and "refs" in names) or "commondir" in names)
        parts = tuple(relative.split("/")) if relative else ()
        return _Dir(
            info.st_ino, info.st_ctime_ns, listed_ns, tuple(subdirs), dotgit, layout, tuple(secrets),
            sealed=sealed_in_dir(parts, names, subdirs), site=is_site_dir(parts),
        )  # fmt: skip

    def _dotgit(self, relative: str, absolute: str) -> Marker | None:
        try:
            info = os.lstat(absolute)
        except OSError:
            return None
        if stat.S_ISLNK(info.st_mode):
            try:
                target = str(Path(absolute).readlink())
            except OSError:
                target = ""
            return Marker(relative, "dotgit", ("link", target))
        if stat.S_ISDIR(info.st_mode):
            if _empty(absolute):
                # Git takes an empty .git for no repository: the sandbox's placeholder for a
                # missing one is such, and must not be taken for a repository to keep.
                return None
            return Marker(relative, "dotgit", ("dir", info.st_dev, info.st_ino))
        if stat.S_ISREG(info.st_mode) and info.st_size == 0:
            return None  # git stops at an empty .git file ("invalid gitfile"): the placeholder
        return Marker(
            relative, "dotgit", ("file", info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        )


@functools.lru_cache(maxsize=16)
def _name_matcher(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """``is_secret_name`` as one compiled match per name (the walk asks for every file)."""
    if not patterns:
        return lambda _name: False
    wanted = re.compile("|".join(fnmatch.translate(p) for p in patterns))
    safe = re.compile("|".join(fnmatch.translate(p) for p in NOT_SECRET))
    return lambda name: wanted.match(name) is not None and safe.match(name) is None


def _empty(directory: str) -> bool:
    try:
        with os.scandir(directory) as listing:
            return next(listing, None) is None
    except OSError:
        return False


def _entries(absolute: str) -> Iterable[tuple[str, bool, bool]]:
    """(name, is a real directory, is a regular file or a symlink) of each entry, from one listing
    (d_type). A symlink named like a secret file counts as one: it leads to the secret."""
    with os.scandir(absolute) as listing:
        return [
            (
                entry.name,
                entry.is_dir(follow_symlinks=False),
                entry.is_file(follow_symlinks=False) or entry.is_symlink(),
            )
            for entry in listing
        ]


_SCANNERS: dict[tuple[Path, tuple[str, ...]], WorkspaceScanner] = {}
_SCANNERS_LOCK = threading.Lock()


def scanner_for(root: Path, secret_patterns: Sequence[str] = DEFAULT_SECRET_FILES) -> WorkspaceScanner:
    """The process's scanner of ``root`` (one cache per workspace, shared by every run)."""
    key = (root.resolve(strict=False), tuple(secret_patterns))
    with _SCANNERS_LOCK:
        found = _SCANNERS.get(key)
        if found is None:
            found = _SCANNERS[key] = WorkspaceScanner(key[0], key[1])
        return found
