"""Which host files to mask so that a program a deny rule forbids cannot run under any name.

A deny rule that forbids a whole program (:func:`steward.safety.policy.rules.whole_program`:
``bash(rm *)``, ``bash(rm*)``, ``bash(/usr/bin/rm *)``) is enforced by the policy where the
program is named, and by the sandbox everywhere else: the sandbox mounts an empty read-only
file over the program's file, so an alias, ``hash -p``, a trap, an interpreter's ``system()``,
a wrapper the parser does not know, a script, or a copy made inside the sandbox all find
nothing to run. :func:`plan_masks` works out what to mount over, for each such program:

* every ``PATH`` entry of that name (absolute entries only), and the real file it resolves to;
* the other names of that file in the standard binary directories (:data:`BINARY_DIRS`) and in
  the program's own directories (``/usr/lib/NAME``, ``/usr/lib/NAME-core``,
  ``/usr/libexec/NAME`` …): symlinks to it, hard links of it, and byte-identical copies (git
  keeps one in ``/usr/lib/git-core``).

A symlink cannot be a mount point (mounting onto one mounts over its target), so the plan lists
real files, deduplicated, plus every name they cover (for ``steward doctor`` and messages).
Hard links are separate mount points, so each one found is listed; when a file has more links
than were found, a warning says so.

Not masked, with a warning, leaving the rule to the guard and the policy (where, with the
program absent from :attr:`MaskPlan.masked`, the rule fails closed on commands the guard
cannot read):

* a program the sandbox itself runs (:data:`SANDBOX_PROGRAMS`), or one whose file is the file
  of such a program (``dash`` where ``sh`` is dash, ``busybox`` where ``sh`` is busybox);
* a multi-call binary, whose file does other programs' work too: the file's own name (the end
  of the symlink chain, a version suffix aside) is not the program's (``rm`` → ``busybox``,
  ``unxz`` → ``xz``), or the file answers to more than :data:`MAX_NAMES` names in the binary
  directories (busybox installed with hard links). A name the distribution's alternatives
  system points at a file (``awk`` → ``/etc/alternatives/awk`` → ``mawk``) counts as that
  file's own;
* a program not found on ``PATH``: there is no file to mask.

When the program *is* the file's own name, its other names are modes of the same program
(``xz`` and ``unxz``) and are masked with it. Masking stops the program's file, not other
programs that can do the same job (``gzip -d`` for ``gunzip``, a downloaded binary).

Pure computation over the file system (stat, readlink, directory listings, reading files of
equal size to find copies); nothing is mounted here.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from steward.safety.policy.rules import Policy, Rule, whole_program

__all__ = [
    "BINARY_DIRS",
    "LIBRARY_DIRS",
    "MAX_NAMES",
    "SANDBOX_PROGRAMS",
    "MaskPlan",
    "MaskedProgram",
    "plan_masks",
]

#: Programs the sandbox runs commands with: masking them would break every command.
SANDBOX_PROGRAMS: tuple[str, ...] = ("bash", "sh", "env", "prlimit")
#: Where other names of a program are looked for.
BINARY_DIRS: tuple[str, ...] = ("/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/local/sbin")
#: Parents of a program's own directories (``/usr/lib/git-core`` for git).
LIBRARY_DIRS: tuple[str, ...] = ("/usr/lib", "/usr/libexec", "/usr/local/lib", "/usr/local/libexec")
#: A file with more names than this in the binary directories is a multi-call binary.
MAX_NAMES = 32
#: Most entries read from one directory.
MAX_ENTRIES = 20_000
#: Most files of equal size compared byte by byte with a program's file.
MAX_COPY_CHECKS = 64
#: Longest symlink chain followed (the kernel's own limit is 40).
_MAX_LINKS = 40
_CHUNK = 1 << 16

_Key = tuple[int, int]


@dataclass(slots=True, frozen=True)
class MaskedProgram:
    """One program the sandbox masks."""

    #: As the deny rule names it (``rm``, or ``/usr/bin/rm``).
    program: str
    rule: Rule
    #: Real files to mount an empty read-only file over (no symlinks among them).
    files: tuple[str, ...]
    #: Every path found that runs it: PATH entries, symlinks, hard links, copies.
    names: tuple[str, ...]


@dataclass(slots=True, frozen=True)
class MaskPlan:
    """What the sandbox masks, what it cannot, and why."""

    programs: tuple[MaskedProgram, ...] = ()
    #: Programs a whole-program deny rule names that are not masked (see the warnings).
    unmasked: tuple[str, ...] = ()
    #: What the user should know: programs left to the policy, links outside the search.
    warnings: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        """Every file to mount over, once."""
        return tuple(sorted({f for p in self.programs for f in p.files}))

    @property
    def masked(self) -> frozenset[str]:
        """The programs masked, for :attr:`steward.safety.policy.rules.Policy.masked`."""
        return frozenset(p.program for p in self.programs)


def plan_masks(
    policy: Policy,
    path_env: str,
    *,
    binary_dirs: Sequence[str] = BINARY_DIRS,
    library_dirs: Sequence[str] = LIBRARY_DIRS,
) -> MaskPlan:
    """The host files to mask for the policy's whole-program deny rules, given ``PATH``."""
    entries = [d for d in path_env.split(os.pathsep) if d]
    absolute = tuple(Path(d) for d in entries if Path(d).is_absolute())
    disk = _Disk(absolute, tuple(map(Path, binary_dirs)), tuple(map(Path, library_dirs)))
    programs: list[MaskedProgram] = []
    unmasked: list[str] = []
    warnings = list(_shape_warnings(policy))
    if len(absolute) < len(entries):
        relative = ", ".join(d for d in entries if not Path(d).is_absolute())
        warnings.append(
            f"PATH holds relative entries ({relative}); programs found through them are not masked"
        )
    seen: set[str] = set()
    for rule in policy.rules:
        program = whole_program(rule)
        if program is None or program in seen:
            continue
        seen.add(program)
        found = _plan_one(program, rule, disk)
        if isinstance(found, str):
            unmasked.append(program)
            warnings.append(found)
        else:
            programs.append(found[0])
            warnings.extend(found[1])
    return MaskPlan(tuple(programs), tuple(unmasked), tuple(warnings))


def _shape_warnings(policy: Policy) -> Iterator[str]:
    """``deny bash(rm)`` reads like "no rm" but forbids only ``rm`` without arguments."""
    for rule in policy.rules:
        pattern = rule.pattern
        if rule.action != "deny" or not rule.matches_tool("bash") or not pattern:
            continue
        if re.fullmatch(r"[\w./+-]+", pattern):
            yield (
                f"deny {rule} ({rule.source}) forbids only {pattern} without arguments; to forbid the "
                f"program, write {rule.tool}({pattern} *)"
            )


@dataclass(slots=True)
class _Disk:
    """The directories a plan looks at; listings are read once and bounded."""

    path_dirs: tuple[Path, ...]
    binary_dirs: tuple[Path, ...]
    library_dirs: tuple[Path, ...]
    listings: dict[Path, tuple[str, ...]] = field(default_factory=dict)
    protected: set[_Key] | None = None

    def entries(self, directory: Path) -> tuple[str, ...]:
        found = self.listings.get(directory)
        if found is None:
            names: list[str] = []
            try:
                with os.scandir(directory) as scan:
                    for entry in scan:
                        if len(names) >= MAX_ENTRIES:
                            break
                        names.append(entry.name)
            except OSError:
                pass  # a directory that is missing or unreadable holds nothing to mask
            found = self.listings[directory] = tuple(sorted(names))
        return found

    def sandbox_files(self) -> set[_Key]:
        """The files of the programs the sandbox runs, wherever PATH or the binary dirs find them."""
        if self.protected is None:
            found = (
                _key(d / name) for d in (*self.path_dirs, *self.binary_dirs) for name in SANDBOX_PROGRAMS
            )
            self.protected = {k for k in found if k is not None}
        return self.protected

    def own_dirs(self, base: str) -> Iterator[Path]:
        for parent in self.library_dirs:
            for suffix in ("", "-core"):
                candidate = parent / (base + suffix)
                if candidate.is_dir():
                    yield candidate


def _key(path: Path) -> _Key | None:
    """The identity of the file ``path`` leads to (symlinks followed), or None if it is none."""
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISREG(info.st_mode) else None


def _plan_one(program: str, rule: Rule, disk: _Disk) -> tuple[MaskedProgram, list[str]] | str:
    """The mask for one program and notes about it, or why it is not masked."""
    base = PurePosixPath(program).name
    candidates = [Path(program)] if "/" in program else [d / program for d in disk.path_dirs]
    entries = [e for e in candidates if _key(e) is not None]
    reals = sorted({e.resolve() for e in entries})
    keys = {k for k in map(_key, reals) if k is not None}
    why = _not_maskable(program, entries, keys, disk)
    if why is None:
        names, files, links = _other_names(base, reals, keys, disk)
        why = _multi_call(base, reals[0], names, links, disk)
        if why is None:
            sorted_names = tuple(sorted({*map(str, entries), *map(str, names)}))
            masked = MaskedProgram(program, rule, tuple(sorted(map(str, files))), sorted_names)
            return masked, _link_notes(reals, files)
    return f"deny {rule} ({rule.source}) is enforced by the guard and the policy only: {why}"


def _not_maskable(program: str, entries: list[Path], keys: set[_Key], disk: _Disk) -> str | None:
    base = PurePosixPath(program).name
    if base in SANDBOX_PROGRAMS:
        return f"the sandbox runs every command with {base}, so it cannot be masked"
    if not entries:
        return f"{program} is not on PATH, so there is no file to mask"
    if keys & disk.sandbox_files():
        return f"{program} is the same file as a program the sandbox runs ({', '.join(SANDBOX_PROGRAMS)})"
    foreign = next((e for e in entries if not _is_own_name(base, e)), None)
    if foreign is not None:
        return (
            f"{foreign} is {foreign.resolve()}, a multi-call binary that also runs other programs; "
            "masking it would remove them too"
        )
    return None


def _multi_call(base: str, real: Path, names: set[Path], links: set[Path], disk: _Disk) -> str | None:
    shared = sorted({link.name for link in links if not _own(base, link.name)})
    if shared:
        return (
            f"{real} is also {', '.join(shared)} (hard links of one multi-call file); masking it would "
            "remove them too, and masking only some of its names would leave the program running"
        )
    in_binary_dirs = {n.name for n in names if n.parent in disk.binary_dirs}
    if len(in_binary_dirs) > MAX_NAMES:
        return (
            f"{real} answers to {len(in_binary_dirs)} names, a multi-call binary; masking it would "
            "remove the other programs too"
        )
    return None


def _is_own_name(base: str, entry: Path) -> bool:
    """Whether the file ``entry`` leads to is the program ``base`` itself, not a multi-call binary."""
    path = entry
    for _ in range(_MAX_LINKS):
        if not path.is_symlink():
            break
        path = path.parent / path.readlink()
        if "alternatives" in path.parts:
            return True  # the distribution made this name point at this implementation of it
    return _own(base, entry.resolve().name)


def _own(base: str, name: str) -> bool:
    """``name`` is the program ``base``, perhaps with a version: ``python3`` → ``python3.11``."""
    return name == base or re.fullmatch(re.escape(base) + r"[-.]?\d[\w.]*", name) is not None


def _other_names(
    base: str, reals: list[Path], keys: set[_Key], disk: _Disk
) -> tuple[set[Path], set[Path], set[Path]]:
    """Other names of the same file and copies of it; the files to mask; the hard links."""
    names: set[Path] = set()
    links: set[Path] = set()
    files = set(reals)
    sizes = {r.stat().st_size for r in reals}
    checks = 0
    for directory in dict.fromkeys((*disk.binary_dirs, *disk.own_dirs(base))):
        for name in disk.entries(directory):
            path = directory / name
            try:
                info = path.lstat()
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode):
                if _key(path) in keys:
                    names.add(path)  # the mount over its target covers it
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            if (info.st_dev, info.st_ino) in keys:
                names.add(path)  # a hard link: a mount point of its own
                links.add(path)
                files.add(path.resolve())
            elif info.st_size in sizes and checks < MAX_COPY_CHECKS:
                checks += 1
                if any(_same_bytes(path, r) for r in reals):
                    names.add(path)  # a copy: the same program under a name of its own
                    files.add(path.resolve())
    return names, files, links


def _link_notes(reals: list[Path], files: set[Path]) -> list[str]:
    notes = []
    for real in reals:
        links = real.stat().st_nlink
        found = sum(1 for f in files if _key(f) == _key(real))
        if links > found:
            notes.append(
                f"{real} has {links - found} more hard link(s) outside the directories searched; "
                "running it through them is not masked"
            )
    return notes


def _same_bytes(a: Path, b: Path) -> bool:
    """Whether two files of equal size hold the same bytes (read in chunks, so bounded by the size)."""
    try:
        with a.open("rb") as first, b.open("rb") as second:
            while True:
                left, right = first.read(_CHUNK), second.read(_CHUNK)
                if left != right:
                    return False
                if not left:
                    return True
    except OSError:
        return False
