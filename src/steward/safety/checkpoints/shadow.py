"""Workspace checkpoints in a shadow git repository: whatever a call does to files, one rewind undoes.

Before every call that can change files, the workspace's state is recorded in a *shadow*
repository that lives outside the workspace (``$XDG_STATE_HOME/steward/checkpoints/``, or
``[checkpoints] state_dir``), where no sandboxed command can reach it. Git's object store holds
the content; each run has its own index per *unit*, so recording an unchanged workspace costs
one ``git status`` (a stat of each file, with git's untracked cache for the directories).

Units. Git refuses paths with a ``.git`` component, and a nested repository stops its parent's
walk, so a workspace is recorded as:

* one unit per work tree: the workspace root, and each nested repository's directory (found by
  the complete scan of ``steward.safety.checkpoints.scan``, wherever it is) — ignore rules of the workspace
  apply, and untracked files above ``[checkpoints] max_file_mb`` are left out and reported;
* the git directories themselves (``.git`` folders and what ``.git`` files and links say),
  walked by us, every file kept whatever its size, under ``g/<key>/`` of one more tree: a
  repository's history survives whatever a command does to it.

Every git started here runs with the system and global configuration off, hooks pointed at
nothing, fsmonitor off, no filters or text conversion (``info/attributes`` unsets them, and it
outranks the workspace's ``.gitattributes``), and never looks at the workspace's own ``.git``:
``GIT_DIR`` is always the shadow's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from steward.atomic import write_atomic
from steward.errors import StewardError
from steward.tools._beneath import StrictTree

GIT_TIMEOUT_S = 300.0
"""A git that runs longer than this is stopped (a first checkpoint of a huge tree is slow)."""

_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_ZERO = "0" * 40
_IDENT = {
    "GIT_AUTHOR_NAME": "steward",
    "GIT_AUTHOR_EMAIL": "steward@localhost",
    "GIT_COMMITTER_NAME": "steward",
    "GIT_COMMITTER_EMAIL": "steward@localhost",
}

# What the shadow's git must never do: run a program named by anything, convert content, or
# refuse a file name a Linux workspace may hold.
_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=true",
    "status.showUntrackedFiles=all",
    "status.renames=false",
    "diff.renames=false",
    "core.quotePath=false",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.symlinks=true",
    "core.fileMode=true",
    "core.ignoreCase=false",
    "core.precomposeUnicode=false",
    "core.protectNTFS=false",
    "core.protectHFS=false",
    "core.splitIndex=false",
    "core.sshCommand=false",
    "core.pager=cat",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
    "safe.bareRepository=all",
)
_ATTRIBUTES = "* -text -eol -filter -ident -working-tree-encoding -diff -merge -crlf\n"
_GITDIRS = "gitdirs"
_STATUS = ("status", "--porcelain=v2", "-z", "--no-renames", "--ignore-submodules=all")
_TREE_ONLY = frozenset({"cat-file", "commit-tree", "diff-tree", "ls-tree", "rev-parse", "write-tree"})
_SENSITIVE_FILES = frozenset({"config", "config.worktree", "commondir", "gitdir"})


class CheckpointError(StewardError):
    """A checkpoint could not be recorded or restored."""


@dataclass(slots=True, frozen=True)
class CheckpointSettings:
    """How checkpoints are kept (the ``[checkpoints]`` section)."""

    enabled: bool = True
    ignore: tuple[str, ...] = ()
    max_file_bytes: int = 20 * 1024 * 1024
    state_dir: Path | None = None


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "steward"


def _run_dir_name(run_id: str) -> str:
    """A run id as a directory name: letters, digits, '-' and '_' kept, the rest dropped."""
    return "".join(c for c in run_id if c.isalnum() or c in "-_")


def workspace_holding(run_id: str, state_dir: Path | None = None) -> str | None:
    """The workspace whose checkpoints hold ``run_id`` (the first by shadow name), if any."""
    safe = _run_dir_name(run_id)
    if not safe:
        return None
    base = state_dir or default_state_dir()
    for runs in sorted((base / "checkpoints").glob(f"*/runs/{safe}"))[:1]:
        named = runs.parent.parent / "workspace"
        return named.read_text(encoding="utf-8").strip() if named.is_file() else None
    return None


@dataclass(slots=True)
class Checkpoint:
    """One recorded state of the workspace, taken before a call (or before a rewind)."""

    n: int
    step: int
    call_id: str
    tool: str
    ts: float
    #: Work-tree units ('' for the root) -> commit of the unit's tree.
    units: dict[str, str] = field(default_factory=dict)
    #: Tree of the git directories (``g/<key>/...``), '' when there are none.
    gitdirs: str = ""
    #: Each ``.git`` entry: path -> ["dir", key] | ["file", text] | ["link", target].
    dotgits: dict[str, list[str]] = field(default_factory=dict)
    #: Files left out (larger than the cap), workspace-relative.
    skipped: list[str] = field(default_factory=list)
    #: What is neither a file, a link nor a directory (a FIFO, a socket, a device): left out.
    special: list[str] = field(default_factory=list)
    #: "call", or "rewind" for the state recorded just before a rewind (so it can be undone).
    kind: str = "call"

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Checkpoint:
        data = json.loads(text)
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass(slots=True)
class RewindReport:
    """What a rewind did to the workspace."""

    to: Checkpoint
    #: The state just before the rewind, recorded so the rewind itself can be undone.
    before: Checkpoint
    restored: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    #: Files the checkpoint could not hold (too large, or not a file), left as they are.
    left: list[str] = field(default_factory=list)
    #: What could not be restored, each with the reason ("path (permission denied)").
    failed: list[str] = field(default_factory=list)


def gitdir_key(repo: str) -> str:
    """The name of a repository's git directory inside the git-dirs tree."""
    return hashlib.sha1(repo.encode(), usedforsecurity=False).hexdigest()[:16]


def _unit_key(unit: str) -> str:
    return "root" if not unit else "u-" + gitdir_key(unit)


class _Git:
    """Runs git for one unit of one run: its own small git dir, the shared object store."""

    def __init__(self, shadow: Shadow, gitdir: Path, worktree: Path) -> None:
        self.shadow = shadow
        self.gitdir = gitdir
        self.worktree = worktree

    def env(self) -> dict[str, str]:
        return {
            "GIT_DIR": str(self.gitdir),
            "GIT_OBJECT_DIRECTORY": str(self.shadow.objects),
            "GIT_WORK_TREE": str(self.worktree),
            "GIT_INDEX_FILE": str(self.gitdir / "index"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "HOME": str(self.shadow.path),
            "XDG_CONFIG_HOME": str(self.shadow.path),
            "LC_ALL": "C",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            **_IDENT,
        }

    def argv(self, *args: str) -> list[str]:
        return [
            self.shadow.git,
            *(x for c in (*_CONFIG, *self.shadow.extra_config) for x in ("-c", c)),
            *args,
        ]

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        """Start git without waiting (see ``collect``): the caller works meanwhile."""
        try:
            return subprocess.Popen(
                self.argv(*args),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env(),
                cwd=self.worktree if self.worktree.is_dir() else self.shadow.path,
            )
        except OSError as exc:
            raise CheckpointError(f"git {args[0]} failed: {exc}") from None

    def collect(self, process: subprocess.Popen[bytes], what: str) -> bytes:
        try:
            out, err = process.communicate(timeout=GIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise CheckpointError(f"git {what} took longer than {GIT_TIMEOUT_S:g} s") from None
        if process.returncode != 0:
            message = err.decode(errors="replace").strip().splitlines()
            raise CheckpointError(f"git {what} failed: {message[-1] if message else process.returncode}")
        return out

    def run(self, *args: str, stdin: bytes | None = None, check: bool = True) -> bytes:
        argv = self.argv(*args)
        env, cwd = self.env(), self.worktree if self.worktree.is_dir() else self.shadow.path
        if args[0] in _TREE_ONLY:
            # Not given the work tree at all: whatever a command made of it (a folder on its
            # path swapped for a link) cannot make git refuse to start.
            del env["GIT_WORK_TREE"]
            cwd = self.shadow.path
        try:
            done = subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                env=env,
                cwd=cwd,
                timeout=GIT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CheckpointError(f"git {args[0]} failed: {exc}") from None
        if check and done.returncode != 0:
            message = done.stderr.decode(errors="replace").strip().splitlines()
            raise CheckpointError(f"git {args[0]} failed: {message[-1] if message else done.returncode}")
        return done.stdout


class Shadow:
    """The shadow repository of one workspace."""

    def __init__(self, workspace: Path, settings: CheckpointSettings | None = None) -> None:
        self.workspace = workspace.resolve(strict=False)
        self.settings = settings or CheckpointSettings()
        base = self.settings.state_dir or default_state_dir()
        digest = hashlib.sha256(str(self.workspace).encode()).hexdigest()[:16]
        name = "".join(c if c.isalnum() or c in "-_" else "_" for c in self.workspace.name)[:40] or "root"
        self.path = base / "checkpoints" / f"{name}-{digest}"
        self.objects = self.path / "objects"
        self.git = _find_git()
        self.extra_config: tuple[str, ...] = (f"core.excludesFile={self.path / 'exclude'}",)
        self._lock = threading.Lock()
        self._ready = False
        self._gitdir_states: dict[str, _GitdirState] = {}
        self._counts: dict[str, int] = {}
        self._trees: dict[Path, tuple[str, str]] = {}  # a unit's git dir -> (its head, that tree)

    # --- layout -------------------------------------------------------------------------

    def ensure(self) -> None:
        """Create the shadow repository (once); private to this user."""
        with self._lock:
            if self._ready:
                return
            if not os.access(self.git, os.X_OK) and shutil.which(self.git) is None:
                raise CheckpointError(
                    "git is not installed; install it (apt-get install git) to use checkpoints"
                )
            old = os.umask(0o077)
            try:
                for directory in (
                    self.path,
                    self.objects / "info",
                    self.objects / "pack",
                    self.path / "runs",
                ):
                    directory.mkdir(parents=True, exist_ok=True)
                # Renamed into place: another process of this workspace may read them meanwhile
                # (an empty ``workspace`` file would read as a shadow of no workspace).
                write_atomic(self.path / "workspace", f"{self.workspace}\n", mode=0o600)
                ignored = "".join(f"{p}\n" for p in self.settings.ignore)
                write_atomic(self.path / "exclude", ignored, mode=0o600)
            finally:
                os.umask(old)
            _prune_orphans(self.path.parent, keep=self.path)
            self._ready = True

    def run_dir(self, run_id: str) -> Path:
        safe = _run_dir_name(run_id)
        if not safe:
            raise CheckpointError(f"not a run id: {run_id!r}")
        return self.path / "runs" / safe

    def _unit(self, run_id: str, unit: str) -> _Git:
        gitdir = self._git_dir(run_id, _unit_key(unit), exclude=self._own_paths(unit))
        return _Git(self, gitdir, self.workspace / unit if unit else self.workspace)

    def _git_dir(self, run_id: str, name: str, *, exclude: str | None = None) -> Path:
        """A run's small git directory (``HEAD``, refs; objects are the shadow's), made once.
        With ``exclude``: one over a work tree, with our attributes and those ignore patterns."""
        gitdir = self.run_dir(run_id) / name
        if not (gitdir / "HEAD").exists():
            (gitdir / "refs" / "heads").mkdir(parents=True, exist_ok=True)
            if exclude is not None:
                (gitdir / "info").mkdir(exist_ok=True)
                (gitdir / "info" / "attributes").write_text(_ATTRIBUTES, encoding="utf-8")
                (gitdir / "info" / "exclude").write_text(exclude, encoding="utf-8")
            (gitdir / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
        return gitdir

    def _own_paths(self, unit: str) -> str:
        """Exclude patterns for what is Steward's, not the workspace's: its state directory,
        and the shadow itself when it lies in the workspace (a workspace that is a home)."""
        patterns = ["/.steward/"] if not unit else []
        base = self.workspace / unit if unit else self.workspace
        if self.path.is_relative_to(base):
            patterns.append("/" + self.path.relative_to(base).as_posix() + "/")
        return "".join(f"{p}\n" for p in patterns)

    def _gitdirs(self, run_id: str) -> _Git:
        """The git directories' own index: trees of ``g/<key>/...`` built from our stat walk."""
        return _Git(self, self._git_dir(run_id, _GITDIRS), self.path)

    # --- the record ---------------------------------------------------------------------

    def checkpoints(self, run_id: str) -> list[Checkpoint]:
        path = self.run_dir(run_id) / "checkpoints.jsonl"
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return []
        found = []
        for line in lines:
            with contextlib.suppress(ValueError, TypeError):
                found.append(Checkpoint.from_json(line))
        return found

    def _append(self, run_id: str, checkpoint: Checkpoint) -> None:
        path = self.run_dir(run_id) / "checkpoints.jsonl"
        # Not fsynced, like git's own objects: a crashed process loses nothing written here,
        # only a crashed machine could.
        with path.open("a", encoding="utf-8") as out:
            out.write(checkpoint.to_json() + "\n")

    # --- recording ----------------------------------------------------------------------

    def begin(self, run_id: str) -> subprocess.Popen[bytes]:
        """Start the root unit's ``git status`` (a stat of every file: the longest part of a
        checkpoint), so the caller can scan the workspace meanwhile; pass it to ``record``."""
        self.ensure()
        self.run_dir(run_id).mkdir(parents=True, exist_ok=True)
        return self._unit(run_id, "").start(*_STATUS)

    def record(
        self,
        run_id: str,
        *,
        repositories: Sequence[str],
        dotgits: Mapping[str, tuple[object, ...]],
        step: int = 0,
        call_id: str = "",
        tool: str = "",
        kind: str = "call",
        started: subprocess.Popen[bytes] | None = None,
    ) -> Checkpoint:
        """Record the workspace now. ``repositories`` and ``dotgits`` come from a complete scan
        (``Scan.repositories`` and the ``.git`` markers' identities); ``started``: from ``begin``."""
        self.ensure()
        self.run_dir(run_id).mkdir(parents=True, exist_ok=True)
        with self._lock:
            number = self._counts.get(run_id)
            if number is None:  # once per run and process: later ones count in memory
                number = len(self.checkpoints(run_id))
            self._counts[run_id] = number + 1
        checkpoint = Checkpoint(number + 1, step, call_id, tool, time.time(), kind=kind)
        for unit in ["", *(r for r in repositories if r)]:
            commit, found = self._snapshot(run_id, unit, started if not unit else None)
            checkpoint.units[unit] = commit
            checkpoint.skipped.extend(f"{unit}/{p}" if unit else p for p in found.skipped)
            checkpoint.special.extend(f"{unit}/{p}" if unit else p for p in found.special)
        checkpoint.gitdirs, checkpoint.dotgits = self._snapshot_gitdirs(run_id, dotgits)
        self._append(run_id, checkpoint)
        return checkpoint

    def _snapshot(
        self, run_id: str, unit: str, started: subprocess.Popen[bytes] | None = None
    ) -> tuple[str, _Status]:
        """Bring the unit's index up to the work tree; return the commit of its tree."""
        git = self._unit(run_id, unit)
        if not git.worktree.is_dir():
            if started is not None:
                started.kill()
                started.communicate()
            return self._commit(git, _EMPTY_TREE), _Status()
        status = git.collect(started, "status") if started is not None else git.run(*_STATUS)
        found = self._classify(status, unit, git.worktree)
        for option, paths in (("--remove", found.paths), ("--force-remove", [*found.gone, *found.special])):
            if paths:
                listed = b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in paths)
                git.run("update-index", "--add", option, "--replace", "-z", "--stdin", stdin=listed)
        head = _head(git)
        if not (found.paths or found.gone or found.special or found.staged) and head is not None:
            return head, found
        tree = git.run("write-tree").decode().strip()
        return self._commit(git, tree), found

    def _classify(self, status: bytes, unit: str, worktree: Path) -> _Status:
        """From a unit's status: the paths to update (changed first, then new), whether the
        index holds changes not yet committed, new files too large to record, and what git
        cannot hold (a FIFO, socket or device where a file was: left out, never opened)."""
        found = _Status()
        added: list[str] = []
        changed: list[str] = []
        for kind, path, xy in _status_entries(status):
            if not unit and (path == ".steward/" or path.startswith(".steward/")):
                continue  # the runtime's own state: never recorded, never restored
            if kind == "?" and not path.endswith("/"):  # a trailing '/': a nested repository
                try:
                    info = os.lstat(worktree / path)
                except OSError:
                    continue
                if not _recordable(info.st_mode):
                    found.special.append(path)
                    continue
                (found.skipped if info.st_size > self.settings.max_file_bytes else added).append(path)
            elif kind in ("1", "u"):
                if xy[1] != ".":
                    changed.append(path)
                found.staged = found.staged or xy[0] != "."
        if changed:
            # Not followed: a tracked file below a folder now swapped for a link is gone.
            with StrictTree.open(worktree) as tree:
                for path in changed:
                    now = tree.lstat(path)
                    if now is None:
                        found.gone.append(path)
                    else:
                        (found.paths if _recordable(now.st_mode) else found.special).append(path)
        found.paths.extend(added)
        return found

    def _commit(self, git: _Git, tree: str) -> str:
        head = _head(git)
        known = self._trees.get(git.gitdir)
        if head is not None and (
            known == (head, tree) or (known is None and self._tree_of(git, head) == tree)
        ):
            self._trees[git.gitdir] = (head, tree)
            return head
        args = ["commit-tree", tree, "-m", "checkpoint"]
        if head is not None:
            args[2:2] = ["-p", head]
        commit = git.run(*args).decode().strip()
        write_atomic(git.gitdir / "refs" / "heads" / "main", commit + "\n", mode=0o600)  # read by others
        self._trees[git.gitdir] = (commit, tree)
        return commit

    def _tree_of(self, git: _Git, commit: str) -> str:
        return git.run("rev-parse", f"{commit}^{{tree}}").decode().strip()

    # --- git directories ----------------------------------------------------------------

    def _snapshot_gitdirs(
        self, run_id: str, dotgits: Mapping[str, tuple[object, ...]]
    ) -> tuple[str, dict[str, list[str]]]:
        described, dirs = self._describe(dotgits)
        if not dirs:
            return "", described
        git = self._gitdirs(run_id)
        state = self._gitdir_state(run_id, git)
        walked, to_hash, gone = _stat_gitdirs(dirs, state)
        shas = _hash_objects(git, [(path, mode) for _, _, path, mode in to_hash])
        lines = []
        for (directory, name, _, _), sha in zip(to_hash, shas, strict=True):
            marks = walked[directory][name]
            marks[5] = sha
            if sha:
                lines.append(f"{marks[4]} {sha}\t{directory}/{name}")
        lines += [f"0 {_ZERO}\t{n}" for n in gone]
        state.files = walked
        if lines or not state.tree:
            if lines:
                listed = "".join(x + "\0" for x in lines).encode("utf-8", "surrogateescape")
                git.run("update-index", "-z", "--index-info", stdin=listed)
            state.tree = git.run("write-tree").decode().strip()
            state.save(git.gitdir / "stat.json")
        return state.tree, described

    def _gitdir_state(self, run_id: str, git: _Git) -> _GitdirState:
        """The run's record of its git directories' files, kept in memory (read once)."""
        with self._lock:
            state = self._gitdir_states.get(run_id)
            if state is None:
                state = self._gitdir_states[run_id] = _GitdirState.load(git.gitdir / "stat.json")
            return state

    def _describe(
        self, dotgits: Mapping[str, tuple[object, ...]]
    ) -> tuple[dict[str, list[str]], dict[str, Path]]:
        """How each ``.git`` entry is recorded, and the git directories to walk (by key)."""
        described: dict[str, list[str]] = {}
        dirs: dict[str, Path] = {}
        for path, ident in sorted(dotgits.items()):
            absolute = self.workspace / path
            if ident and ident[0] == "link":
                described[path] = ["link", str(ident[1])]
            elif ident and ident[0] == "file":
                text = self._read_text(path)
                described[path] = ["file", text]
                target = _gitdir_from_file(absolute, text)
                if target is not None and target.is_relative_to(self.workspace) and target.is_dir():
                    # The directory it points to, when it is in the workspace and not inside a
                    # .git folder (recorded with it: submodules keep theirs in .git/modules).
                    relative = target.relative_to(self.workspace).as_posix()
                    if ".git" not in relative.split("/"):
                        dirs[gitdir_key(relative)] = target
            else:
                key = gitdir_key(path.rpartition("/")[0])
                described[path] = ["dir", key]
                dirs[key] = absolute
        return described, dirs

    # --- reading ------------------------------------------------------------------------

    def _read_text(self, path: str) -> str:
        """The start of a workspace file ('' when it is not a regular file: a FIFO is never
        opened to be read, it would block the checkpoint)."""
        try:
            with self.tree() as tree:
                data = tree.read(path, limit=65536)
        except OSError:
            return ""
        return "" if data is None else data.decode("utf-8", "surrogateescape")

    def changes(self, run_id: str, older: Checkpoint, newer: Checkpoint) -> list[tuple[str, str]]:
        """(status letter, path) of the files that differ between two checkpoints of a run."""
        found: list[tuple[str, str]] = []
        for unit in sorted(set(older.units) | set(newer.units)):
            git = self._unit(run_id, unit)
            # A unit missing on one side is the empty tree (git knows it without storing it).
            a = older.units.get(unit) or _EMPTY_TREE
            b = newer.units.get(unit) or _EMPTY_TREE
            if a == b:
                continue
            out = git.run("diff-tree", "-r", "-z", "--no-renames", "--name-status", a, b)
            parts = out.split(b"\0")
            for letter, raw in zip(parts[0::2], parts[1::2], strict=False):
                if letter:
                    name = raw.decode("utf-8", "surrogateescape")
                    found.append((letter.decode(), f"{unit}/{name}" if unit else name))
        gitdirs = self._gitdirs(run_id) if older.gitdirs != newer.gitdirs else None
        for path in sorted(set(older.dotgits) | set(newer.dotgits)):
            was, now = older.dotgits.get(path), newer.dotgits.get(path)
            if was is None or now is None:
                found.append(("A" if was is None else "D", path))
            elif was != now or (
                gitdirs is not None
                and was[0] == "dir"
                and _subtree(gitdirs, older.gitdirs, was[1]) != _subtree(gitdirs, newer.gitdirs, now[1])
            ):
                found.append(("M", path))
        return found

    def blob(self, run_id: str, checkpoint: Checkpoint, path: str) -> bytes | None:
        """The content of ``path`` (workspace-relative) at ``checkpoint``, None if it was not there."""
        unit = max((u for u in checkpoint.units if not u or path.startswith(u + "/")), key=len, default="")
        if unit not in checkpoint.units:
            return None
        inner = path[len(unit) + 1 :] if unit else path
        git = self._unit(run_id, unit)
        if not self._exists(git, checkpoint.units[unit], inner):
            return None
        return git.run("cat-file", "blob", f"{checkpoint.units[unit]}:{inner}")

    def gitdir_blob(self, run_id: str, checkpoint: Checkpoint, key: str, inner: str) -> bytes | None:
        """The content of ``inner`` in the git directory ``key`` at ``checkpoint``, if it was there."""
        if not checkpoint.gitdirs:
            return None
        git = self._gitdirs(run_id)
        spec = f"{checkpoint.gitdirs}:g/{key}/{inner}"
        if not self._exists(git, "", spec):
            return None
        return git.run("cat-file", "blob", spec)

    def pending(self, run_id: str, checkpoint: Checkpoint) -> list[tuple[str, str]]:
        """(status letter, path) of what changed in the work trees since ``checkpoint``, the run's
        newest (each unit's index holds it, so this is one ``git status`` per unit)."""
        found: list[tuple[str, str]] = []
        for unit in sorted(checkpoint.units):
            git = self._unit(run_id, unit)
            if not git.worktree.is_dir():
                found.append(("D", f"{unit}/" if unit else "./"))
                continue
            out = git.run("status", "--porcelain=v2", "-z", "--no-renames", "--ignore-submodules=all",
                          "--untracked-files=all")  # fmt: skip
            for kind, path, xy in _status_entries(out):
                if path.endswith("/"):
                    continue
                letter = "A" if kind == "?" else xy[1]
                if letter != ".":
                    found.append((letter, f"{unit}/{path}" if unit else path))
        return found

    def _exists(self, git: _Git, commit: str, path: str) -> bool:
        try:
            git.run("cat-file", "-e", f"{commit}:{path}" if commit else path)
        except CheckpointError:
            return False
        return True

    # --- restoring ----------------------------------------------------------------------
    # Whatever is written into the workspace goes through a ``StrictTree``: beneath the
    # workspace's fd, component by component, no symlink followed. Git never writes there
    # itself (it follows links in a work tree's leading directories): blobs come out of the
    # shadow with ``cat-file`` and are written by us.

    def tree(self) -> StrictTree:
        """The workspace, to write into beneath its fd (close it)."""
        return StrictTree.open(self.workspace)

    def restore_unit_missing(self, run_id: str, unit: str, checkpoint: Checkpoint) -> list[str]:
        """Write the unit's files of ``checkpoint`` that are missing now (existing ones stay);
        return what could not be written."""
        commit = checkpoint.units.get(unit)
        if not commit:
            return []
        git = self._unit(run_id, unit)
        failed: list[str] = []
        with self.tree() as tree:
            present = {p for p, _ in tree.walk(unit)}
            missing = [e for e in _tree_entries(git, commit) if e.path not in present]
            _write_entries(git, tree, unit, missing, failed)
        return failed

    def restore_gitdir(self, run_id: str, checkpoint: Checkpoint, path: str, *, prune: bool = True) -> None:
        """Put the ``.git`` entry at ``path`` back as it was at ``checkpoint``.

        ``prune``: also remove files of that git directory that did not exist then (objects
        excepted: keeping them costs nothing and keeps any history made since)."""
        with self.tree() as tree:
            self._restore_gitdir(tree, run_id, checkpoint, path, prune=prune)

    def _restore_gitdir(
        self, tree: StrictTree, run_id: str, checkpoint: Checkpoint, path: str, *, prune: bool
    ) -> None:
        entry = checkpoint.dotgits.get(path)
        if entry is None:
            tree.remove(path)
            return
        kind, detail = entry[0], entry[1]
        if kind == "link":
            if tree.readlink(path) != detail:
                tree.symlink(path, detail)
            return
        if kind == "file":
            content = detail.encode("utf-8", "surrogateescape")
            if tree.read(path) != content:
                tree.write(path, content)
            return
        info = tree.lstat(path)
        if info is not None and not stat.S_ISDIR(info.st_mode):
            tree.remove(path)
        self._write_tree(tree, run_id, checkpoint.gitdirs, f"g/{detail}/", path, prune=prune)

    def restore_missing_history(self, run_id: str, checkpoint: Checkpoint, dotgit: str, key: str) -> int:
        """Write back what a git directory lost of its history since ``checkpoint``; how many files.

        Objects that are gone always come back (an extra object costs git nothing). When the
        repository lost its ``HEAD`` too (the directory was emptied), its refs, logs and index
        come back as well; otherwise deleted refs stay deleted (``git branch -d`` is work)."""
        git = self._gitdirs(run_id)
        with self.tree() as tree:
            info = tree.lstat(dotgit)
            if not checkpoint.gitdirs or info is None or not stat.S_ISDIR(info.st_mode):
                return 0
            present = {p for p, _ in tree.walk(dotgit)}
            core: tuple[str, ...] = ("objects/",)
            if "HEAD" not in present:
                core = ("objects/", "refs/", "logs/", "HEAD", "packed-refs", "index", "info/", "description")
            prefix = f"g/{key}/"
            missing = [
                _Entry(e.path[len(prefix) :], e.mode, e.sha)
                for e in _tree_entries(git, checkpoint.gitdirs, prefix)
                if e.path[len(prefix) :] not in present
                and any(
                    e.path[len(prefix) :] == c or (c.endswith("/") and e.path[len(prefix) :].startswith(c))
                    for c in core
                )
            ]
            failed: list[str] = []
            _write_entries(git, tree, dotgit, missing, failed, exact=_gitdir_mode)
        return len(missing) - len(failed)

    def _write_tree(
        self, tree: StrictTree, run_id: str, gitdirs: str, prefix: str, target: str, *, prune: bool
    ) -> None:
        git = self._gitdirs(run_id)
        wanted = {e.path[len(prefix) :]: e for e in _tree_entries(git, gitdirs, prefix)} if gitdirs else {}
        os.close(tree.open_dir(target, make=True))
        present = dict(tree.walk(target))
        for relative in present:
            if relative not in wanted and prune and not relative.startswith("objects/"):
                tree.remove(f"{target}/{relative}")
        changed = [
            _Entry(relative, entry.mode, entry.sha)
            for relative, entry in wanted.items()
            if relative not in present or _file_sha(tree, f"{target}/{relative}", entry.mode) != entry.sha
        ]
        failed: list[str] = []
        _write_entries(git, tree, target, changed, failed, exact=_gitdir_mode)
        if failed:
            raise CheckpointError(f"could not write {', '.join(failed[:5])}")

    def rewind(
        self,
        run_id: str,
        target: Checkpoint,
        *,
        repositories: Sequence[str],
        dotgits: Mapping[str, tuple[object, ...]],
    ) -> RewindReport:
        """Restore the workspace as it was at ``target``; the state before is recorded first.
        What cannot be restored (a directory a command made unwritable) is reported, the rest
        restored all the same."""
        before = self.record(run_id, repositories=repositories, dotgits=dotgits, tool="rewind", kind="rewind")
        report = RewindReport(target, before)
        for letter, path in self.changes(run_id, target, before):
            (report.removed if letter == "A" else report.restored).append(path)
        with self.tree() as tree:
            for unit in sorted(set(before.units) | set(target.units), key=len):
                self._rewind_unit(tree, run_id, unit, before.units.get(unit), target.units.get(unit), report)
            for path in sorted(
                set(before.dotgits) | set(target.dotgits), key=lambda p: p.count("/"), reverse=True
            ):
                try:
                    if path not in target.dotgits:
                        tree.remove(path)
                    elif before.gitdirs != target.gitdirs or before.dotgits.get(path) != target.dotgits[path]:
                        self._restore_gitdir(tree, run_id, target, path, prune=True)
                except (OSError, CheckpointError) as exc:
                    report.failed.append(f"{path} ({_reason(exc)})")
            for unit in set(before.units) - set(target.units):  # a repository that was not there
                with contextlib.suppress(OSError):
                    tree.remove_empty_parents(f"{unit}/.git")
        report.left = [*target.skipped, *target.special]
        return report

    def _rewind_unit(
        self,
        tree: StrictTree,
        run_id: str,
        unit: str,
        now: str | None,
        then: str | None,
        report: RewindReport,
    ) -> None:
        """Bring one work tree from ``now`` (just recorded) to ``then``: only what differs."""
        a, b = now or _EMPTY_TREE, then or _EMPTY_TREE
        if a == b:
            return
        git = self._unit(run_id, unit)
        gone: list[str] = []
        wanted: list[_Entry] = []
        for mode, sha, letter, path in _raw_diff(git.run("diff-tree", "-r", "-z", "--no-renames", a, b)):
            if letter == "D":
                gone.append(path)
            else:
                wanted.append(_Entry(path, mode, sha))
        for path in gone:
            full = f"{unit}/{path}" if unit else path
            try:
                tree.remove(full)
                tree.remove_empty_parents(full, stop=unit)
            except OSError as exc:
                report.failed.append(f"{full} ({_reason(exc)})")
        _write_entries(git, tree, unit, wanted, report.failed)


# --- helpers --------------------------------------------------------------------------------


_PRUNED: set[Path] = set()


def _prune_orphans(base: Path, *, keep: Path) -> None:
    """Once per process: remove the shadows of workspaces that no longer exist (a demo's
    temporary directory, a deleted checkout); their checkpoints could restore nothing."""
    if base in _PRUNED:
        return
    _PRUNED.add(base)
    with contextlib.suppress(OSError):
        for shadow in list(base.iterdir())[:10_000]:
            named = shadow / "workspace"
            if shadow == keep or not named.is_file():
                continue
            workspace = Path(named.read_text(encoding="utf-8").strip())
            if workspace.is_absolute() and not workspace.exists():
                shutil.rmtree(shadow, ignore_errors=True)


def _find_git() -> str:
    """git on PATH, else where systems install it (Steward's PATH may be a narrow one)."""
    found = shutil.which("git")
    if found is not None:
        return found
    for candidate in ("/usr/bin/git", "/usr/local/bin/git", "/opt/homebrew/bin/git"):
        if os.access(candidate, os.X_OK):
            return candidate
    return "git"


def _head(git: _Git) -> str | None:
    try:
        text = (git.gitdir / "refs" / "heads" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def _status_entries(output: bytes) -> Iterable[tuple[str, str, str]]:
    """(kind, path, XY) from ``git status --porcelain=v2 -z`` (no renames)."""
    for record in output.split(b"\0"):
        if not record:
            continue
        text = record.decode("utf-8", "surrogateescape")
        kind = text[0]
        if kind in ("?", "!"):
            yield kind, text[2:], ".."
        elif kind == "1":
            fields = text.split(" ", 8)
            if len(fields) == 9:
                yield kind, fields[8], fields[1]
        elif kind == "u":
            fields = text.split(" ", 10)
            if len(fields) == 11:
                yield kind, fields[10], fields[1]


def _subtree(git: _Git, tree: str, key: str) -> str:
    if not tree:
        return ""
    out = git.run("ls-tree", tree, "--", f"g/{key}", check=False).decode().split()
    return out[2] if len(out) >= 3 else ""


Marks = list[object]
"""[size, mtime_ns, ctime_ns, ino, mode, sha] of one file of a git directory."""


@dataclass(slots=True)
class _Status:
    """What a unit's ``git status`` found to record."""

    paths: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    staged: bool = False
    skipped: list[str] = field(default_factory=list)
    special: list[str] = field(default_factory=list)


def _recordable(mode: int) -> bool:
    """A file, a link or a directory: what git can hold (a FIFO would fail the whole update)."""
    return stat.S_ISREG(mode) or stat.S_ISLNK(mode) or stat.S_ISDIR(mode)


@dataclass(slots=True)
class _GitdirState:
    """What the last checkpoint of a run recorded of its git directories."""

    #: Directory (``g/<key>/<path>``) -> its files' names -> their marks.
    files: dict[str, dict[str, Marks]] = field(default_factory=dict)
    tree: str = ""
    #: Directories holding only objects, which git never changes in place: while a directory's
    #: entries stay the same (its ctime), its files need no stat. dir -> (ino, ctime, listed)
    dirs: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    saved_at: float = 0.0

    @classmethod
    def load(cls, path: Path) -> _GitdirState:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(files={k: dict(v) for k, v in data["files"].items()}, tree=str(data["tree"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return cls()

    def save(self, path: Path) -> None:
        """Kept for a later process of the same run (a stale copy only costs it re-hashing);
        written at most every few seconds, the objects of a big repository being many."""
        if time.monotonic() - self.saved_at < _SAVE_EVERY_S and sum(map(len, self.files.values())) > 2000:
            return
        self.saved_at = time.monotonic()
        write_atomic(path, json.dumps({"files": self.files, "tree": self.tree}, separators=(",", ":")))


_RACY_NS = 50_000_000
_SAVE_EVERY_S = 10.0


def _stat_gitdirs(
    dirs: Mapping[str, Path], state: _GitdirState
) -> tuple[dict[str, dict[str, Marks]], list[tuple[str, str, Path, str]], list[str]]:
    """The git directories' files by directory with their stat marks; the files that changed
    (directory, name, path, mode) to hash; the names of files gone."""
    walked: dict[str, dict[str, Marks]] = {}
    to_hash: list[tuple[str, str, Path, str]] = []
    seen_dirs: dict[str, tuple[int, int, int]] = {}
    for key, root in sorted(dirs.items()):
        _walk_gitdir(root, f"g/{key}", state, seen_dirs, walked, to_hash)
    gone = [
        f"{directory}/{name}"
        for directory, files in state.files.items()
        if walked.get(directory) is not files
        for name in files
        if name not in walked.get(directory, {})
    ]
    state.dirs = seen_dirs
    return walked, to_hash, gone


def _walk_gitdir(
    root: Path,
    prefix: str,
    state: _GitdirState,
    seen_dirs: dict[str, tuple[int, int, int]],
    walked: dict[str, dict[str, Marks]],
    to_hash: list[tuple[str, str, Path, str]],
) -> None:
    """Stat every file of one git directory; an objects directory whose entries are as the
    last walk saw them is taken as it was (same dict), without a stat per file."""
    stack: list[str] = [""]
    base = str(root)
    while stack:
        relative = stack.pop()
        directory = f"{base}/{relative}" if relative else base
        key = f"{prefix}/{relative}" if relative else prefix
        if _objects_dir(relative):
            try:
                info = os.lstat(directory)
            except OSError:
                continue
            known = state.dirs.get(key)
            unchanged = known is not None and known[:2] == (info.st_ino, info.st_ctime_ns)
            if (
                unchanged
                and known is not None
                and info.st_ctime_ns < known[2] - _RACY_NS
                and key in state.files
            ):
                seen_dirs[key] = known
                walked[key] = state.files[key]
                continue
            seen_dirs[key] = (info.st_ino, info.st_ctime_ns, time.time_ns())
        old = state.files.get(key, {})
        files: dict[str, Marks] = {}
        for name, info in _listing(directory):
            if stat.S_ISDIR(info.st_mode):
                stack.append(f"{relative}/{name}" if relative else name)
                continue
            mode = (
                "120000" if stat.S_ISLNK(info.st_mode) else ("100755" if info.st_mode & 0o111 else "100644")
            )
            mark: Marks = [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, mode]
            known_marks = old.get(name)
            if known_marks is not None and known_marks[:5] == mark:
                files[name] = known_marks
            else:
                files[name] = [*mark, ""]
                to_hash.append((key, name, Path(directory) / name, mode))
        walked[key] = files


def _listing(directory: str) -> list[tuple[str, os.stat_result]]:
    """(name, lstat) of the files, links and directories in ``directory`` (not ``.git``)."""
    found = []
    try:
        with os.scandir(directory) as listing:
            entries = list(listing)
    except OSError:
        return []
    for entry in entries:
        if entry.name == ".git":
            continue  # git refuses such paths; a .git inside a git dir is no part of it
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
            found.append((entry.name, info))
    return found


def _walk_files(root: Path) -> list[tuple[str, os.stat_result]]:
    """Every file and symlink below ``root`` (relative path, lstat), without following links."""
    found: list[tuple[str, os.stat_result]] = []
    stack: list[str] = [""]
    while stack:
        relative = stack.pop()
        for name, info in _listing(f"{root}/{relative}" if relative else str(root)):
            path = f"{relative}/{name}" if relative else name
            if stat.S_ISDIR(info.st_mode):
                stack.append(path)
            else:
                found.append((path, info))
    return found


def _objects_dir(relative: str) -> bool:
    """``objects/xx`` (loose objects) or ``objects/pack``: written once, never changed in place."""
    parts = relative.split("/")
    return len(parts) == 2 and parts[0] == "objects" and (len(parts[1]) == 2 or parts[1] == "pack")


def _hash_objects(git: _Git, files: Sequence[tuple[Path, str]]) -> list[str]:
    """Write each file (or symlink target) into the object store; their ids, in order."""
    if not files:
        return []
    regular = [(i, p) for i, (p, mode) in enumerate(files) if mode != "120000"]
    shas = [""] * len(files)
    if regular:
        paths = b"".join(str(p).encode("utf-8", "surrogateescape") + b"\n" for _, p in regular)
        out = git.run("hash-object", "-w", "--no-filters", "--stdin-paths", stdin=paths, check=False)
        for (i, _), sha in zip(regular, out.decode().split(), strict=False):
            shas[i] = sha
    for i, (path, mode) in enumerate(files):
        if mode == "120000":
            with contextlib.suppress(OSError, CheckpointError):
                target = str(path.readlink()).encode("utf-8", "surrogateescape")
                shas[i] = git.run("hash-object", "-w", "--stdin", stdin=target).decode().strip()
    return shas


def _read_blobs(git: _Git, shas: Sequence[str]) -> dict[str, bytes]:
    unique = sorted(set(shas))
    if not unique:
        return {}
    out = git.run("cat-file", "--batch", stdin="".join(f"{s}\n" for s in unique).encode())
    blobs: dict[str, bytes] = {}
    position = 0
    for _ in range(len(unique)):
        end = out.index(b"\n", position)
        header = out[position:end].decode().split()
        position = end + 1
        if len(header) < 3:
            continue
        size = int(header[2])
        blobs[header[0]] = out[position : position + size]
        position += size + 1
    return blobs


def _gitdir_from_file(dotgit: Path, text: str) -> Path | None:
    for line in text.splitlines():
        if line.startswith("gitdir:"):
            return (dotgit.parent / line.removeprefix("gitdir:").strip()).resolve(strict=False)
    return None


@dataclass(slots=True, frozen=True)
class _Entry:
    """A file of a recorded tree: its path (relative to where it is written), mode and blob."""

    path: str
    mode: str
    sha: str


def _tree_entries(git: _Git, treeish: str, prefix: str = "") -> list[_Entry]:
    args = ["ls-tree", "-r", "-z", treeish]
    if prefix:
        args += ["--", prefix.rstrip("/")]
    found = []
    for item in git.run(*args).split(b"\0"):
        meta, _, name = item.partition(b"\t")
        fields = meta.decode().split()
        if len(fields) == 3:
            found.append(_Entry(name.decode("utf-8", "surrogateescape"), fields[0], fields[2]))
    return found


def _raw_diff(output: bytes) -> Iterable[tuple[str, str, str, str]]:
    """(new mode, new blob, status letter, path) from ``diff-tree -r -z`` (raw, no renames)."""
    parts = output.split(b"\0")
    for meta, raw in zip(parts[0::2], parts[1::2], strict=False):
        fields = meta.decode().lstrip(":").split()
        if len(fields) == 5:
            yield fields[1], fields[3], fields[4][:1], raw.decode("utf-8", "surrogateescape")


_BLOB_BATCH = 512
"""Blobs read from the shadow at once: a rewind of a big tree never holds all of it in memory."""


def _write_entries(
    git: _Git,
    tree: StrictTree,
    base: str,
    entries: Sequence[_Entry],
    failed: list[str],
    *,
    exact: Callable[[_Entry], int] | None = None,
) -> None:
    """Write each entry below ``base`` of the tree from the shadow's blobs; what cannot be
    written goes to ``failed`` (path and reason) and the others are written all the same.
    ``exact``: the permission bits to give (a git directory's files), else git's own."""
    files = [e for e in entries if e.mode != "160000"]  # a gitlink is no file to write
    for start in range(0, len(files), _BLOB_BATCH):
        chunk = files[start : start + _BLOB_BATCH]
        blobs = _read_blobs(git, [e.sha for e in chunk])
        for entry in chunk:
            path = f"{base}/{entry.path}" if base else entry.path
            content = blobs.get(entry.sha)
            if content is None:
                failed.append(f"{path} (its content is missing from the checkpoints)")
                continue
            try:
                if entry.mode == "120000":
                    tree.symlink(path, content.decode("utf-8", "surrogateescape"))
                else:
                    mode = exact(entry) if exact is not None else None
                    tree.write(path, content, executable=entry.mode == "100755", mode=mode)
            except OSError as exc:
                failed.append(f"{path} ({_reason(exc)})")


def _gitdir_mode(entry: _Entry) -> int:
    if entry.path.startswith("objects/"):
        return 0o444  # as git makes them
    return 0o755 if entry.mode == "100755" else 0o644


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


def _file_sha(tree: StrictTree, path: str, mode: str) -> str:
    """The blob id of what is at ``path`` now as ``mode`` would hold it; '' when it is not such."""
    try:
        if mode == "120000":
            target = tree.readlink(path)
            data = None if target is None else target.encode("utf-8", "surrogateescape")
        else:
            data = tree.read(path)
    except OSError:
        return ""
    if data is None:
        return ""
    header = f"blob {len(data)}\0".encode()
    return hashlib.sha1(header + data, usedforsecurity=False).hexdigest()
