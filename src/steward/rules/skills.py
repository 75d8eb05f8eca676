"""Skills: folders holding a ``SKILL.md`` whose front matter names and describes them.

Only each skill's name and description go into the prompt; the body of ``SKILL.md`` and the
other files of the folder are loaded when the agent asks (``load_skill``). Skill directories
are searched in the configured order (project before user) and the first skill of a name wins.
A skill that cannot be used is skipped with a warning naming the file and the fix.

A skill folder must really lie inside its skill directory, and a project skill directory inside
the workspace: a symlink leading elsewhere is ignored, so a repository cannot point the agent
at files outside it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from steward.errors import ToolError
from steward.rules._read import StampedCache, Watch, inside, read_text
from steward.tools._paths import workspace_root

if TYPE_CHECKING:
    from steward.config import RulesSettings

SKILL_MD = "SKILL.md"
MAX_SKILLS_PER_DIR = 200
MAX_LISTED_FILES = 100
_SKILL_MD_CHARS = 100_000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_DESCRIPTION_CHARS = 1_000
_SKIP = frozenset({"__pycache__", "node_modules"})


@dataclass(slots=True, frozen=True)
class Skill:
    name: str
    description: str
    #: The skill's folder as a real path; every file it loads must lie inside it.
    folder: Path


@dataclass(slots=True, frozen=True)
class SkillScan:
    """The usable skills, in prompt order, and what was wrong with the others."""

    skills: tuple[Skill, ...] = ()
    warnings: tuple[str, ...] = ()

    def get(self, name: str) -> Skill | None:
        return next((s for s in self.skills if s.name == name), None)


def _shown(path: Path, root: Path) -> str:
    """A path for a warning: workspace-relative, or under ``~``, or as it is."""
    if inside(path, root):
        return PurePosixPath(*path.relative_to(root).parts).as_posix()
    home = Path.home()
    return f"~/{path.relative_to(home).as_posix()}" if path.is_relative_to(home) else str(path)


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """The YAML front matter between the opening and closing ``---`` lines, and the body.

    Raises ``ValueError`` saying what is wrong and how to write it instead.
    """
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        raise ValueError("it does not start with front matter; begin the file with a line '---'")
    end = next((n for n, line in enumerate(lines[1:], start=1) if line.strip() in ("---", "...")), None)
    if end is None:
        raise ValueError("the front matter is never closed; end it with a line '---'")
    import yaml  # only needed when skills exist

    try:
        data = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())[:200]
        raise ValueError(f"the front matter is not valid YAML ({problem}); fix its syntax") from None
    if not isinstance(data, dict):
        # A problem of the file like the others (not a caller's type error): same exception.
        raise ValueError(  # noqa: TRY004
            "the front matter is not a mapping; write it as 'name: ...' and 'description: ...'"
        )
    return data, "\n".join(lines[end + 1 :]).strip("\n")


def _skill_from(data: dict[str, Any], folder: Path) -> Skill:
    name, description = data.get("name"), data.get("description")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"the front matter has no 'name'; add 'name: {folder.name}'")
    if not _NAME.match(name.strip()):
        raise ValueError(
            f"the name {name!r} is not usable; use letters, digits, '-', '_' or '.' (at most 64), e.g. "
            f"'name: {folder.name}'"
        )
    if not isinstance(description, str) or not description.strip():
        raise ValueError("the front matter has no 'description'; add 'description: <when to use this skill>'")
    return Skill(name.strip(), " ".join(description.split())[:_DESCRIPTION_CHARS], folder)


def _expand(raw: str) -> Path:
    try:
        return Path(raw).expanduser()
    except RuntimeError:  # no home directory known: '~' stays as written, and matches nothing
        return Path(raw)


def _skill_dirs(root: Path, configured: list[str]) -> list[tuple[Path, bool]]:
    """Each configured directory as (path, whether it belongs to the workspace)."""
    dirs = []
    for raw in configured:
        expanded = _expand(raw)
        dirs.append((expanded, False) if expanded.is_absolute() else (root / expanded, True))
    return dirs


def _scan_dir(base: Path, in_workspace: bool, root: Path, watch: Watch) -> tuple[list[Skill], list[str]]:
    watch.add(base)
    try:
        real_base = base.resolve(strict=True)
        entries = sorted(e.name for e in os.scandir(real_base) if not e.name.startswith("."))
    except (OSError, RuntimeError):
        return [], []  # a directory that does not exist holds no skills; that is normal
    if in_workspace and not inside(real_base, root):
        return [], [f"{_shown(base, root)}: it leads outside the workspace, so its skills are ignored"]
    skills: list[Skill] = []
    warnings: list[str] = []
    for name in entries[:MAX_SKILLS_PER_DIR]:
        folder = real_base / name
        try:
            real_folder = folder.resolve(strict=True)
            if not real_folder.is_dir():
                continue
        except (OSError, RuntimeError):
            continue
        if not inside(real_folder, real_base):
            warnings.append(f"{_shown(folder, root)}: a symlink to a folder outside {base.name}; ignored")
            continue
        watch.add(real_folder)  # a SKILL.md created later changes the folder
        watch.add(real_folder / SKILL_MD)
        try:
            skill = _read_skill(real_folder)
        except ValueError as exc:
            warnings.append(f"{_shown(real_folder / SKILL_MD, root)}: skipped: {exc}")
            continue
        if skill is not None:
            skills.append(skill)
    return skills, warnings


def _read_skill(folder: Path) -> Skill | None:
    """The skill defined by ``folder``'s SKILL.md; None without one; ``ValueError`` if broken."""
    skill_md = folder / SKILL_MD
    found = read_text(skill_md, folder, _SKILL_MD_CHARS)
    if found is None:
        if skill_md.exists() or skill_md.is_symlink():
            raise ValueError("it is not a readable text file inside the skill folder; replace it")
        return None  # a folder without SKILL.md is not a skill
    data, _ = split_front_matter(found.text)
    return _skill_from(data, folder)


def _scan(root: Path, configured: list[str], watch: Watch) -> SkillScan:
    skills: dict[str, Skill] = {}
    warnings: list[str] = []
    for base, in_workspace in _skill_dirs(root, configured):
        found, problems = _scan_dir(base, in_workspace, root, watch)
        warnings.extend(problems)
        for skill in found:
            first = skills.setdefault(skill.name, skill)
            if first is not skill:
                warnings.append(
                    f"{_shown(skill.folder / SKILL_MD, root)}: skipped: the skill {skill.name!r} is already "
                    f"defined in {_shown(first.folder / SKILL_MD, root)}; rename one of them"
                )
    return SkillScan(tuple(skills.values()), tuple(warnings))


_cache: StampedCache[SkillScan] = StampedCache()


def find_skills(workspace: Path, settings: RulesSettings) -> SkillScan:
    """The skills of ``workspace`` (cached; rescanned when a skill directory or file changes)."""
    root = workspace_root(workspace)
    dirs = list(settings.skill_dirs)
    # The home directory is part of the key: '~' means another place for another HOME.
    key = (root, tuple(dirs), _expand("~"))
    return _cache.get(key, lambda watch: _scan(root, dirs, watch))


def skill_warnings(workspace: Path, settings: RulesSettings) -> list[str]:
    """Why skills were skipped: one line per problem, naming the file and the fix."""
    return list(find_skills(workspace, settings).warnings)


def skills_section(scan: SkillScan, *, limit: int = 50, description_chars: int = 250) -> str:
    if not scan.skills:
        return ""
    lines = []
    for skill in scan.skills[:limit]:
        text = skill.description
        if len(text) > description_chars:
            text = text[: description_chars - 1].rstrip() + "…"
        lines.append(f"- {skill.name}: {text}")
    if len(scan.skills) > limit:
        lines.append(f"- … and {len(scan.skills) - limit} more (load_skill lists them all)")
    return "Skills — load one with load_skill(name) when it fits the task:\n" + "\n".join(lines)


# --- loading ------------------------------------------------------------------------------


def _files(folder: Path) -> list[str]:
    """The skill's other files, folder-relative and sorted; links leading out are left out."""
    listed: list[str] = []
    for current, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP)
        here = Path(current)
        for name in sorted(names):
            path = here / name
            if name.startswith(".") or path == folder / SKILL_MD:
                continue
            try:
                if not inside(path.resolve(strict=True), folder):
                    continue
            except (OSError, RuntimeError):
                continue
            listed.append(PurePosixPath(*path.relative_to(folder).parts).as_posix())
            if len(listed) > MAX_LISTED_FILES:
                return listed
    return listed


def skill_text(skill: Skill, max_chars: int) -> str:
    """The body of the skill's SKILL.md, then the list of its other files."""
    found = read_text(skill.folder / SKILL_MD, skill.folder, max_chars)
    if found is None:
        raise ToolError(
            f"The SKILL.md of skill {skill.name!r} can no longer be read; it may have been removed."
        )
    try:
        _, body = split_front_matter(found.text)
    except ValueError as exc:
        raise ToolError(f"The SKILL.md of skill {skill.name!r} is broken now: {exc}.") from None
    parts = [f"# Skill: {skill.name}", body.strip() or "(SKILL.md has no body)"]
    if found.truncated:
        parts.append(f"[SKILL.md was cut at {max_chars} characters]")
    files = _files(skill.folder)
    if files:
        shown = files[:MAX_LISTED_FILES]
        more = "\n- …" if len(files) > MAX_LISTED_FILES else ""
        parts.append(
            f"Files in this skill — load one with load_skill(name={skill.name!r}, file=PATH):\n"
            + "\n".join(f"- {f}" for f in shown)
            + more
        )
    return "\n\n".join(parts)


def _check_relative(file: str) -> PurePosixPath:
    hint = "give a path relative to the skill folder, as listed by load_skill(name)"
    if not file.strip() or "\x00" in file:
        raise ToolError(f"The file name {file!r} is empty or not a name; {hint}.")
    relative = PurePosixPath(file.replace("\\", "/"))
    if relative.is_absolute() or file.startswith("~") or re.match(r"^[A-Za-z]:", file):
        raise ToolError(f"{file!r} is an absolute path; {hint}.")
    if ".." in relative.parts:
        raise ToolError(f"{file!r} goes up out of the skill folder with '..'; {hint}.")
    return relative


def skill_file(skill: Skill, file: str, max_chars: int) -> str:
    """The text of one file of the skill, confined to its folder."""
    relative = _check_relative(file)
    path = skill.folder.joinpath(*relative.parts)
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        listed = ", ".join(_files(skill.folder)[:20]) or "(none)"
        raise ToolError(f"Skill {skill.name!r} has no file {file!r}. Its files: {listed}.") from None
    if not inside(real, skill.folder):
        raise ToolError(
            f"{file!r} is a symlink leading out of the skill folder; only the skill's own files load."
        )
    if real.is_dir():
        raise ToolError(f"{file!r} is a folder; load one of the files listed by load_skill({skill.name!r}).")
    found = read_text(real, skill.folder, max_chars)
    if found is None:
        raise ToolError(f"{file!r} is not a readable text file (binary or special); it cannot be loaded.")
    text = found.text
    if found.truncated:
        text += f"\n[cut at {max_chars} characters; the rest of {file} is not shown]"
    return text
