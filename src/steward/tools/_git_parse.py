"""Reading git's machine formats into what the git tools show the model."""

from __future__ import annotations

from dataclasses import dataclass, field

from steward.text import shown

SHOWN_PER_SECTION = 200
"""Entries listed per section of ``git_status``; the rest are counted."""

_KINDS = {
    "M": "modified",
    "T": "type changed",
    "A": "added",
    "D": "deleted",
    "R": "renamed",
    "C": "copied",
}
_CONFLICTS = {
    "DD": "both deleted",
    "AU": "added by us",
    "UD": "deleted by them",
    "UA": "added by them",
    "DU": "deleted by us",
    "AA": "both added",
    "UU": "both modified",
}


@dataclass(slots=True)
class Status:
    """``git status --porcelain=v2 --branch -z``, read."""

    commit: str = ""
    branch: str = ""
    upstream: str = ""
    ahead: int = 0
    behind: int = 0
    staged: list[str] = field(default_factory=list)
    unstaged: list[str] = field(default_factory=list)
    untracked: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    #: Lines that are not porcelain (warnings git printed on stderr).
    other: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [self._branch_line()]
        if self.commit:
            lines.append(f"commit: {self.commit[:12]}" if self.commit != "(initial)" else "commit: none yet")
        sections = (
            ("conflicts", self.conflicts),
            ("staged", self.staged),
            ("unstaged", self.unstaged),
            ("untracked", self.untracked),
        )
        for title, entries in sections:
            if entries:
                lines.append(f"{title} ({len(entries)}):")
                lines.extend(f"  {entry}" for entry in entries[:SHOWN_PER_SECTION])
                if len(entries) > SHOWN_PER_SECTION:
                    lines.append(f"  ... and {len(entries) - SHOWN_PER_SECTION} more")
        if not any(entries for _, entries in sections):
            lines.append("working tree clean")
        lines.extend(f"git: {line}" for line in self.other[:20])
        return "\n".join(lines)

    def _branch_line(self) -> str:
        if self.branch == "(detached)":
            return "branch: none (detached HEAD): switch to a branch (git_branch) before committing"
        line = f"branch: {shown(self.branch)}"
        if self.upstream:
            line += f" (upstream {shown(self.upstream)}: ahead {self.ahead}, behind {self.behind})"
        else:
            line += " (no upstream)"
        return line


def parse_status(output: str) -> Status:
    """Read porcelain v2 records (NUL-terminated); a rename's record is followed by its old path."""
    status = Status()
    records = output.split("\0")
    i = 0
    while i < len(records):  # bounded: i grows by at least one each turn
        record = records[i]
        i += 1
        if not record:
            continue
        if record.startswith("# "):
            _header(status, record[2:])
        elif record.startswith("1 "):
            _changed(status, record.split(" ", 8), None)
        elif record.startswith("2 "):
            original = records[i] if i < len(records) else ""
            i += 1
            _changed(status, record.split(" ", 9), original)
        elif record.startswith("u "):
            parts = record.split(" ", 10)
            if len(parts) == 11:
                status.conflicts.append(f"{_CONFLICTS.get(parts[1], parts[1])}: {shown(parts[10])}")
        elif record.startswith("? "):
            status.untracked.append(shown(record[2:]))
        elif not record.startswith("! "):
            status.other.extend(line for line in record.splitlines() if line.strip())
    return status


def _header(status: Status, header: str) -> None:
    key, _, value = header.partition(" ")
    if key == "branch.oid":
        status.commit = value
    elif key == "branch.head":
        status.branch = value
    elif key == "branch.upstream":
        status.upstream = value
    elif key == "branch.ab":
        ahead, _, behind = value.partition(" ")
        status.ahead = abs(int(ahead or 0))
        status.behind = abs(int(behind or 0))


def _changed(status: Status, parts: list[str], original: str | None) -> None:
    if len(parts) < 9:
        status.other.append(" ".join(parts))
        return
    xy, path = parts[1], parts[-1]
    name = shown(path) if original is None else f"{shown(original)} -> {shown(path)}"
    if xy[0] != ".":
        status.staged.append(f"{_KINDS.get(xy[0], xy[0])}: {name}")
    if xy[1] != ".":
        # A rename is staged; in the working tree only the new path's own change shows.
        status.unstaged.append(f"{_KINDS.get(xy[1], xy[1])}: {shown(path)}")


FIELD = "\x1f"
RECORD = "\x1e"
LOG_FORMAT = "%H%x1f%an%x1f%ad%x1f%s%x1e"


@dataclass(slots=True, frozen=True)
class Commit:
    hash: str
    author: str
    date: str
    subject: str


def parse_log(output: str) -> tuple[list[Commit], list[str]]:
    """Commits from ``git log --format=LOG_FORMAT``, and any other lines git printed."""
    commits: list[Commit] = []
    other: list[str] = []
    for record in output.split(RECORD):
        text = record.strip("\n")
        if not text:
            continue
        parts = text.split(FIELD)
        if len(parts) == 4 and len(parts[0]) >= 40:
            commits.append(Commit(*parts))
        else:
            other.extend(line for line in text.splitlines() if line.strip())
    return commits, other


def render_log(commits: list[Commit]) -> str:
    return "\n".join(f"{c.hash[:12]}  {c.date}  {shown(c.author)}  {shown(c.subject)}" for c in commits)


BRANCH_FORMAT = "%(HEAD)%1f%(refname:short)%1f%(upstream:short)%1f%(objectname:short)%1f%(contents:subject)"


def render_branches(output: str) -> str:
    """``git branch --list --format=BRANCH_FORMAT`` as one line per branch, the current one starred."""
    rows: list[tuple[str, str, str]] = []
    other: list[str] = []
    for line in output.splitlines():
        parts = line.split(FIELD)
        if len(parts) != 5:
            if line.strip():
                other.append(f"git: {line}")
            continue
        head, name, upstream, commit, subject = parts
        tracking = f" [{shown(upstream)}]" if upstream else ""
        rows.append(("*" if head == "*" else " ", f"{shown(name)}{tracking}", f"{commit}  {shown(subject)}"))
    if not rows and not other:
        return "no branches yet (the first commit makes one)"
    width = max((len(name) for _, name, _ in rows), default=0)
    return "\n".join([*(f"{mark} {name.ljust(width)}  {rest}" for mark, name, rest in rows), *other])
