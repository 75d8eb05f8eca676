"""Paths of a workspace that agents may not change, even when they do not exist yet.

Some files in a workspace are obeyed later by programs that run on the host, outside any
sandbox: git runs ``.git/hooks/*`` and follows ``.git/config`` (``core.hooksPath``, aliases,
filters, ``core.fsmonitor``); a shell reads its start-up files; direnv runs ``.envrc``; the
runtime keeps its database and logs in ``.steward/``. Writing one of them is a way out of the
sandbox, so they stay read-only for the sandbox (``steward.safety.sandbox.bubblewrap`` mounts them
read-only) and for the file tools (``protected_reason``).

What is protected, for the workspace and every nested repository (found by the complete,
cached scan of ``steward.safety.checkpoints.scan``: no depth limit, no skipped directory):

* the git directory's ``hooks/``, ``config``, ``config.worktree`` and ``commondir`` (a
  ``commondir`` file redirects git to another directory's hooks and config), the directory
  named by ``core.hooksPath`` when it lies in the workspace, and the hooks and config of
  submodules kept in ``.git/modules``;
* a ``.git`` *file* (``gitdir: PATH``, used by worktrees and submodules) and the git
  directory it names; a *symlinked* ``.git`` is followed to its target;
* ``.steward/``, ``steward.toml`` and the shell start-up files at the workspace root
  (``RC_FILES``);
* files the host runs later, sealed by what they are wherever they are
  (``steward.safety.sealed``): Python start-up files of every environment, editor tasks and
  ``.envrc``, a home directory's dotfiles and Steward's user configuration. The file tools ask
  before writing those (the guard flags them) instead of refusing; the user configuration is
  refused like ``steward.toml``.

A protected path that does not exist yet gets a read-only placeholder for the command's
duration, so nothing can be created there *while* it runs (another Steward process or git on
the host reads these paths at any time): ``steward.toml`` an empty file (an empty
configuration), a git directory's ``commondir`` a file saying ``.`` (git reads it as "this
directory", so git on the host works unchanged), a missing ``.git`` an empty directory (not a
repository to git). Shell start-up files get one only when the workspace is a home directory,
the one place a shell reads them; elsewhere a new one is removed after the command.

Known limits (what mounts cannot express): a symlink cannot be a mount point, so a symlinked
``.git`` or start-up file can itself be replaced (its target stays read-only); a hard link
made *before* the run to a protected file shares its content (the file tools check for it,
the sandbox cannot). What a command changes anyway is compared with the checkpoint after it
(``steward.safety.checkpoints.around_calls``) and reverted.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from steward.safety.sealed import (
    HOME_PLACEHOLDER_DIRS,
    HOME_PLACEHOLDER_FILES,
    HOME_REASON,
    PYTHON_REASON,
    STARTUP_MODULES,
    USER_CONFIG_REASON,
    home_dot_entries,
    homes_within,
    startup_paths,
    user_config_dir,
)
from steward.safety.sealed import reason_by_name as sealed_reason_by_name
from steward.state_dir import STATE_DIR  # the runtime's own state directory, protected

PERSONAS_DIR = "personas"
"""The workspace's persona files (``steward.personas``): an agent that could edit one could
widen its own tools and policy the next time that persona runs."""

PROJECT_CONFIG = "steward.toml"
"""The project's configuration: an agent that could edit it could turn its own sandbox off."""

RC_FILES = frozenset(
    {
        ".bashrc",
        ".bash_profile",
        ".bash_login",
        ".bash_logout",
        ".profile",
        ".zshrc",
        ".zshenv",
        ".zprofile",
        ".zlogin",
        ".envrc",
    }
)
"""Shell start-up files (and direnv's ``.envrc``) protected at the workspace root."""

GIT_CONFIG_FILES = ("config", "config.worktree", "commondir")
"""Files in a git directory that decide which hooks and programs git runs."""

_MODULES_DEPTH = 2
_GITDIR_LINE = re.compile(r"^gitdir:\s*(.+?)\s*$", re.MULTILINE)
_SECTION = re.compile(r"^\s*\[\s*([^\]\s\"]+)[^\]]*\]", re.MULTILINE)
_VALUE = re.compile(r"^\s*([A-Za-z][\w-]*)\s*=\s*(.*?)\s*$", re.MULTILINE)
_INCLUDE_DEPTH = 3
_READ_CAP = 64 * 1024


_HOOKS_REASON = (
    "git hooks run on the host, outside the sandbox, whenever git is used in this repository, "
    "so agents may not create or change them"
)
_CONFIG_REASON = (
    "git configuration decides which programs git runs on the host (core.hooksPath, aliases, "
    "filters, fsmonitor), so agents may not change it"
)
_POINTER_REASON = (
    "a .git file or directory tells git where the repository and its hooks are; creating or changing "
    "it could make git run hooks planted by an agent"
)
_PROGRAM_REASON = (
    "the git configuration names it as a program to run (a filter, fsmonitor, alias or editor), so it "
    "would run on the host whenever git is used here"
)
_STATE_REASON = "it is the runtime's own state (its database and logs); agents may not change it"
_RC_REASON = "it is a shell start-up file that would run in a shell on the host, outside the sandbox"
_PROJECT_CONFIG_REASON = "it is Steward's own configuration (policy and sandbox); only the user changes it"
_PERSONAS_REASON = "it holds persona files (an agent's tools and policy); only the user changes them"
_SEALED_LINK_REASON = (
    "the path written leads there through a symlink, and that file is run by the host later; write it "
    "by its own name, so that the question asked names it"
)
_LINK_REASON = (
    "it is a hard link to a protected file (a git hook or git config), so writing it would change that file"
)


@dataclass(slots=True)
class Protection:
    """The protected paths of one workspace, as real absolute paths, found by ``find_protected``."""

    root: Path
    #: Existing files and directories to keep read-only.
    existing: list[Path] = field(default_factory=list)
    #: Missing directories that need a read-only placeholder (``.git`` when there is none).
    missing_dirs: list[Path] = field(default_factory=list)
    #: Missing files that need a read-only placeholder (start-up files, a missing git config).
    missing_files: list[Path] = field(default_factory=list)
    #: Missing directories that are harmless to create first (``.git/hooks``, ``.steward``).
    to_create: list[Path] = field(default_factory=list)
    #: Git directories that stay writable but must not be renamed or removed (a mount point
    #: cannot be), or the protection of their hooks would move away with them.
    pinned: list[Path] = field(default_factory=list)
    #: Missing ``commondir`` files: their placeholder says ``.`` (an empty one breaks git).
    missing_commondirs: list[Path] = field(default_factory=list)
    #: Why each path above is protected (a clause for messages).
    reasons: dict[Path, str] = field(default_factory=dict)
    #: The repositories found before the command (the root included).
    repositories: tuple[Path, ...] = ()
    #: Which of the paths above are sealed by what they are (``steward.safety.sealed``): the file
    #: tools ask before writing those (the guard flags them) rather than refuse.
    sealed: set[Path] = field(default_factory=set)


def find_protected(workspace: Path, *, home_like: bool = False) -> Protection:
    """Scan ``workspace`` (reads only) for what must stay read-only.

    ``home_like``: the workspace is a home directory, where shells read start-up files."""
    from steward.safety.checkpoints.scan import scanner_for

    root = workspace.resolve(strict=False)
    found = Protection(root)
    _add(found, root / STATE_DIR, "create_dir", _STATE_REASON)
    _add(found, root / PROJECT_CONFIG, "file", _PROJECT_CONFIG_REASON)
    _add(found, root / PERSONAS_DIR, "dir", _PERSONAS_REASON)
    for name in sorted(RC_FILES):
        # Outside a home directory no shell reads them: a new one is only removed afterwards,
        # and no empty placeholder shows up in `git status` for the agent to commit.
        _add(found, root / name, "file" if home_like else "existing", _RC_REASON)
    scan = scanner_for(root).scan()
    repos = [root / r if r else root for r in scan.repositories]
    if root not in repos:
        repos.insert(0, root)
    found.repositories = tuple(repos)
    for repo in repos:
        _protect_repository(found, repo, top=repo == root)
    for layout in scan.layouts():
        # A bare repository kept in the workspace (a test fixture, a mirror): git on the host
        # runs its hooks too (a push into it), so they stay read-only like any other's.
        if ".git" not in layout.split("/"):
            _protect_git_dir(found, root / layout if layout else root, worktree=None, depth=0)
    _protect_homes(found, root)
    _protect_sealed(found, root, scan.sealed, scan.sites)
    return found


def _protect_sealed(found: Protection, root: Path, sealed: Sequence[str], sites: Sequence[str]) -> None:
    """Files the host runs later, by what they are (``steward.safety.sealed``), wherever they are.
    A new one cannot be foreseen by name (a ``.pth``, a new environment): the comparison after the
    call removes it; the start-up modules of an existing environment get placeholders meanwhile."""
    for relative in sealed:
        reason = sealed_reason_by_name(tuple(relative.split("/"))) or PYTHON_REASON
        _add(found, root / relative, "existing", reason, sealed=True)
    for relative, reason in startup_paths(root, [p for p in sealed if p.endswith(".pth")]).items():
        _add(found, root / relative, "existing", reason, sealed=True)
    for site in sites:
        for name in sorted(STARTUP_MODULES):
            _add(found, root / site / name, "file", PYTHON_REASON, sealed=True)


def _protect_homes(found: Protection, root: Path) -> None:
    """A home directory in the workspace: Steward's user configuration (refused to the file
    tools), then every dotfile and dot-folder (asked about), with placeholders for the ones that
    matter most when missing (``.config``, ``.local``, start-up files)."""
    config_dir = user_config_dir().resolve(strict=False)
    if _within(config_dir, found.root) and config_dir.parent.exists():
        _add(found, config_dir, "dir", USER_CONFIG_REASON)
    for home in homes_within(root):
        for name in home_dot_entries(home):
            _add(found, home / name, "existing", HOME_REASON, sealed=True)
        for name in HOME_PLACEHOLDER_DIRS:
            _add(found, home / name, "dir", HOME_REASON, sealed=True)
        for name in (*HOME_PLACEHOLDER_FILES, *sorted(RC_FILES)):
            _add(found, home / name, "file", HOME_REASON, sealed=True)


def _within(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _add(found: Protection, path: Path, kind: str, reason: str, *, sealed: bool = False) -> None:
    """Record ``path`` (followed through symlinks) if it lies in the workspace.

    ``kind`` says what to do when it is missing: ``file`` / ``dir`` / ``commondir`` need a
    placeholder, ``create_dir`` may be created beforehand, ``existing`` is left alone.
    ``sealed``: a file sealed by what it is, which the file tools ask about rather than refuse.
    """
    real = path.resolve(strict=False)
    if not _within(real, found.root) or real == found.root or real in found.reasons:
        return  # outside the workspace it is neither writable nor visible in the sandbox
    exists = real.exists()
    if not exists and kind == "existing":
        return
    found.reasons[real] = reason
    if sealed:
        found.sealed.add(real)
    if exists:
        found.existing.append(real)
    elif kind == "create_dir":
        found.to_create.append(real)
    elif kind == "commondir":
        found.missing_commondirs.append(real)
    elif kind == "dir":
        found.missing_dirs.append(real)
    else:
        found.missing_files.append(real)


def _read_gitdir_file(dotgit: Path) -> Path | None:
    """The git directory a ``.git`` file (``gitdir: PATH``) points to, or None."""
    match = _GITDIR_LINE.search(_read_small(dotgit))
    if match is None:
        return None
    return (dotgit.parent / match.group(1)).resolve(strict=False)


def _protect_repository(found: Protection, repo: Path, *, top: bool) -> None:
    dotgit = repo / ".git"
    if not os.path.lexists(dotgit):
        if top:
            # No repository yet: nobody may create one (and plant its hooks) from inside. An empty
            # .git *file* is the placeholder: git stops at it ("invalid gitfile") instead of
            # looking further, so neither a parent repository nor a bare layout made at the root
            # during the command is obeyed meanwhile.
            _add(found, dotgit, "file", _POINTER_REASON)
        return
    real = dotgit.resolve(strict=False)
    if real.is_dir():
        _protect_git_dir(found, real, worktree=repo, depth=0)
    elif real.is_file():
        _add(found, real, "file", _POINTER_REASON)  # rewriting the pointer would redirect git
        gitdir = _read_gitdir_file(real)
        if gitdir is not None:
            _protect_git_dir(found, gitdir, worktree=repo, depth=0)
    elif not real.exists():  # a dangling symlink: its target must not be created from inside
        _add(found, real, "dir", _POINTER_REASON)


def _protect_git_dir(found: Protection, gitdir: Path, *, worktree: Path | None, depth: int) -> None:
    if not _within(gitdir, found.root) or not gitdir.is_dir() or gitdir in found.pinned:
        return
    found.pinned.append(gitdir)
    _add(found, gitdir / "hooks", "create_dir", _HOOKS_REASON)
    _add(found, gitdir / "config", "file", _CONFIG_REASON)
    if (gitdir / "config.worktree").exists():
        _add(found, gitdir / "config.worktree", "file", _CONFIG_REASON)
    # Linked worktrees keep their own pointers here; a rewritten ``commondir`` would send git in
    # that worktree to another directory's hooks and configuration.
    with contextlib.suppress(OSError):
        for entry in itertools.islice(sorted((gitdir / "worktrees").iterdir()), 50):
            for name in ("commondir", "gitdir", "config.worktree"):
                if (entry / name).exists():
                    _add(found, entry / name, "file", _CONFIG_REASON)
    commondir = gitdir / "commondir"
    if commondir.is_file():  # a linked worktree: hooks and config live in the common directory
        _add(found, commondir, "file", _CONFIG_REASON)
        common = _read_small(commondir).strip()
        if common:
            _protect_git_dir(found, (gitdir / common).resolve(strict=False), worktree=None, depth=depth + 1)
    elif not os.path.lexists(commondir):
        _add(found, commondir, "commondir", _CONFIG_REASON)
    _protect_config_references(found, gitdir / "config", worktree or gitdir, depth=0)
    if depth < _MODULES_DEPTH:
        for module in _submodule_git_dirs(gitdir / "modules"):
            _protect_git_dir(found, module, worktree=None, depth=depth + 1)


def _read_small(path: Path) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            return handle.read(_READ_CAP)
    except OSError:
        return ""


def _config_values(config: Path) -> list[tuple[str, str, str]]:
    """(section, key, value) of a git config file, lower-cased names, quotes removed."""
    text = _read_small(config)
    sections = [(m.start(), m.group(1).lower()) for m in _SECTION.finditer(text)]
    values = []
    for match in _VALUE.finditer(text):
        section = next((name for start, name in reversed(sections) if start < match.start()), "")
        values.append((section, match.group(1).lower(), match.group(2).strip().strip('"')))
    return values


def _protect_config_references(found: Protection, config: Path, worktree: Path, *, depth: int) -> None:
    """What a config file points git at inside the workspace is as good as the config itself:
    ``core.hooksPath``, included config files, and programs it runs (fsmonitor, filters,
    aliases, editors...) named by a path in the workspace."""
    for section, key, value in _config_values(config):
        if not value or value.startswith("~"):
            continue  # '~' is a home directory: outside the workspace
        if section == "core" and key == "hookspath":
            for directory in _hooks_and_their_scripts(worktree / value):
                _add(found, directory, "create_dir", _HOOKS_REASON)
        elif section in ("include", "includeif") and key == "path":
            included = config.parent / value
            _add(found, included, "file", _CONFIG_REASON)
            if depth < _INCLUDE_DEPTH:
                _protect_config_references(found, included, worktree, depth=depth + 1)
        elif words := value.lstrip("!").split():
            program = (worktree / words[0]).resolve(strict=False)
            if program.is_file() and _within(program, found.root):
                _add(found, program, "file", _PROGRAM_REASON)


def _hooks_and_their_scripts(hooks: Path) -> list[Path]:
    """A ``core.hooksPath`` directory, and the scripts its hooks run: husky's hooks path is
    ``.husky/_``, whose hooks run the scripts beside it (``.husky/pre-commit``)."""
    directories = [hooks]
    if hooks.name == "_" and hooks.parent.name:
        directories.append(hooks.parent)
    return directories


def git_run_paths(root: Path, repositories: Sequence[str]) -> dict[Path, str]:
    """What git on the host runs or obeys outside the git directories, as real paths with why:
    each repository's ``core.hooksPath`` folder (and the scripts husky's hooks run), the config
    files its configuration includes, and the programs it names (fsmonitor, filters...)."""
    found = Protection(root.resolve(strict=False))
    for repo in repositories:
        worktree = found.root / repo if repo else found.root
        dotgit = worktree / ".git"
        gitdir = _read_gitdir_file(dotgit) if dotgit.is_file() else dotgit
        if gitdir is not None and gitdir.is_dir():
            _protect_config_references(found, gitdir / "config", worktree, depth=0)
    return found.reasons


def is_hooks_reason(reason: str) -> bool:
    """Whether ``reason`` is that of a hooks folder (every file in it is one)."""
    return reason == _HOOKS_REASON


def _submodule_git_dirs(modules: Path, limit: int = 50) -> list[Path]:
    """Git directories of submodules (``.git/modules/NAME``, names may contain '/'), bounded."""
    if not modules.is_dir():
        return []
    found: list[Path] = []
    queue: deque[tuple[Path, int]] = deque([(modules, 0)])
    while queue and len(found) < limit:
        directory, depth = queue.popleft()
        try:
            children = sorted(p for p in directory.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError:
            continue
        for child in children:
            if (child / "HEAD").is_file():
                found.append(child)
            elif depth < 2:
                queue.append((child, depth + 1))
    return found[:limit]


# --- for the file tools ---------------------------------------------------------------------


def protected_reason(workspace: Path, path: Path) -> str | None:
    """Why ``path`` (in ``workspace``) may not be written, or None if it may.

    Checks the path as written and as resolved, so a symlinked ``.git``, a ``.git`` file, a
    configured ``core.hooksPath`` and a hard link to a protected file are all caught.
    """
    root = workspace.resolve(strict=False)
    absolute = path if path.is_absolute() else root / path
    real = absolute.resolve(strict=False)
    for candidate in (Path(os.path.normpath(absolute)), real):
        if _within(candidate, root) and candidate != root:
            reason = _pattern_reason(candidate.relative_to(root).parts)
            if reason is not None:
                return _message(root, candidate, reason)
    if not _within(real, root):
        return None  # outside the workspace: the path rules of the tools refuse it
    reason = _found_reason(root, real, Path(os.path.normpath(absolute)))
    return _message(root, real, reason) if reason is not None else None


def _found_reason(root: Path, real: Path, written: Path) -> str | None:
    """Why a path of the workspace (resolved, and as written) is protected, from what is there."""
    if _within(real, user_config_dir().resolve(strict=False)):  # whether or not it exists yet
        return USER_CONFIG_REASON
    found = find_protected(root)
    for protected, reason in found.reasons.items():
        # Sealed files are asked about (the guard flags them), not refused.
        if protected not in found.sealed and (real == protected or real.is_relative_to(protected)):
            return reason
    if _is_hard_link_to(real, _protected_files(found)):
        return _LINK_REASON
    if real != written and (real in found.sealed or sealed_reason_by_name(real.relative_to(root).parts)):
        # Asked about by the name written: a link must not carry the write to a sealed file unasked.
        return _SEALED_LINK_REASON
    return None


def _message(root: Path, path: Path, reason: str) -> str:
    shown = path.relative_to(root).as_posix()
    return f"{shown!r} is a protected path: {reason}."


def _pattern_reason(parts: tuple[str, ...]) -> str | None:
    """Reasons that follow from the path's names alone (whether or not anything exists)."""
    top = {STATE_DIR: _STATE_REASON, PERSONAS_DIR: _PERSONAS_REASON}.get(parts[0])
    if top is not None:
        return top
    if len(parts) == 1 and (parts[0] == PROJECT_CONFIG or parts[0] in RC_FILES):
        return _PROJECT_CONFIG_REASON if parts[0] == PROJECT_CONFIG else _RC_REASON
    for index, part in enumerate(parts):
        if part != ".git":
            continue
        rest = parts[index + 1 :]
        if not rest:
            return _POINTER_REASON
        if "hooks" in rest:
            return _HOOKS_REASON
        if rest[-1] in GIT_CONFIG_FILES:
            return _CONFIG_REASON
    return None


def _protected_files(found: Protection) -> list[Path]:
    files: list[Path] = []
    for path in found.existing:
        if path.is_file():
            files.append(path)
        elif found.reasons[path] == _HOOKS_REASON and path.is_dir():
            files.extend(p for p in sorted(path.iterdir())[:200] if p.is_file())
    return files


def _is_hard_link_to(real: Path, protected: list[Path]) -> bool:
    try:
        stat = real.stat()
    except OSError:
        return False
    if stat.st_nlink < 2 or not real.is_file():
        return False
    for path in protected:
        try:
            other = path.stat()
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (stat.st_dev, stat.st_ino):
            return True
    return False
