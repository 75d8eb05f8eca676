"""Built-in file tools: read, write, edit, list, glob and grep, all confined to the workspace.

Formats the model sees (pinned by the schema snapshots and the tests):

* ``read_file`` numbers lines like ``cat -n``: the 1-based line number right-aligned in six
  columns, a tab, then the text. A notice in square brackets ends output that is not the whole
  file, naming the ``start_line`` to continue from.
* ``list_dir``, ``glob`` and ``grep`` show workspace-relative '/'-separated paths, directories
  with a trailing '/'; ``grep`` prints ``path:line: text``. Every cap ends in a notice.
"""

from __future__ import annotations

import asyncio
import codecs
import difflib
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from steward.errors import ToolError
from steward.tools._paths import display_path, resolve_in_workspace, workspace_root
from steward.tools.base import Tool, ToolContext, tool

SKIP_DIRS = frozenset({".git", "node_modules", ".venv", "__pycache__", ".steward"})
"""Directories glob and grep do not descend into unless asked for by name."""

LIST_CAP = 500
GLOB_CAP = 500
GREP_DEFAULT_RESULTS = 100
GREP_MAX_RESULTS = 1000
GREP_LINE_CHARS = 300
GREP_MAX_FILE_BYTES = 20 * 1024 * 1024
SCAN_LIMIT = 200_000
_SNIFF_BYTES = 8192
_SNIPPET_LINES = 30
_GLOB_MAGIC = frozenset("*?[{")


# --- shared helpers -----------------------------------------------------------------------


def _shown(ctx: ToolContext, path: Path) -> str:
    return display_path(ctx.workspace, path)


def _looks_binary(path: Path) -> bool:
    with path.open("rb") as handle:
        return b"\x00" in handle.read(_SNIFF_BYTES)


def _existing_text_file(ctx: ToolContext, path: str) -> Path:
    """The real path of a readable text file, or a ToolError that tells the model what to do."""
    target = resolve_in_workspace(ctx.workspace, path)
    shown = _shown(ctx, target)
    if not target.exists():
        raise ToolError(f"File {shown!r} not found. Use list_dir or glob to find the right path.")
    if target.is_dir():
        raise ToolError(f"{shown!r} is a directory, not a file; use list_dir to see what it contains.")
    if not target.is_file():
        # Opening a FIFO would block forever; devices and sockets are not text either.
        raise ToolError(f"{shown!r} is not a regular file (a pipe, socket or device); it cannot be read.")
    if _looks_binary(target):
        raise ToolError(
            f"{shown!r} looks like a binary file (it contains NUL bytes); these tools handle text only. "
            "Use bash (e.g. `file PATH` or `xxd PATH | head`) to inspect it."
        )
    return target


def _line_count(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _numbered(number: int, line: str) -> str:
    return f"{number:>6}\t{line}"


def _lines_label(first: int, last: int) -> str:
    return f"line {first}" if first == last else f"lines {first}-{last}"


def _check_may_write(ctx: ToolContext, path: str, shown: str) -> None:
    """Refuse when writing is switched off, or when ``path`` is protected (e.g. ``.git/hooks``)."""
    if not ctx.writable:
        raise ToolError(
            f"Writing is switched off for this run (read-only mode), so {shown!r} was not changed."
        )
    if ctx.protected is not None:
        # As written, not resolved: the check follows symlinks itself and needs the name used.
        given = Path(path)
        reason = ctx.protected(given if given.is_absolute() else workspace_root(ctx.workspace) / given)
        if reason is not None:
            raise ToolError(f"{reason} Nothing was written.")


# --- read_file ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Window:
    """The numbered lines of a file that fit in the size cap, and where the cap cut them."""

    lines: list[str]
    total: int = 0
    last_shown: int = 0
    cut_at: int | None = None
    long_line_chars: int = 0
    long_line_shown: int = 0


def _read_window(target: Path, first: int, last: int | None, cap: int) -> _Window:
    window = _Window(lines=[])
    size = 0
    # newline=None reads '\n', '\r\n' and '\r' as line ends, the same rule edit_file counts by.
    with target.open(encoding="utf-8", errors="replace", newline=None) as handle:
        for number, line in enumerate(handle, start=1):
            window.total = number
            if number < first or (last is not None and number > last) or window.cut_at is not None:
                continue
            content = line.removesuffix("\n")
            text = _numbered(number, content)
            if size + len(text) + 1 > cap:
                window.cut_at = number
                if not window.lines:  # one line longer than the cap: show its head
                    window.lines.append(text[:cap])
                    window.long_line_chars = len(content)
                    window.long_line_shown = len(text[:cap]) - (len(text) - len(content))
                    window.last_shown = number
                continue
            window.lines.append(text)
            size += len(text) + 1
            window.last_shown = number
    return window


def _long_line_notice(window: _Window) -> str:
    line = window.last_shown
    after = (
        f" call read_file with start_line={line + 1} for the lines after it;" if line < window.total else ""
    )
    return (
        f"[truncated: line {line} alone is {window.long_line_chars} chars, more than the size limit; "
        f"showing its first {window.long_line_shown}.{after} use bash "
        f"(e.g. sed -n '{line}p' FILE | cut -c START-END) to read the rest of the line]"
    )


@tool
def read_file(ctx: ToolContext, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
    """Read a text file in the workspace, with line numbers.

    Each output line is the 1-based line number, a tab, then the text; the number and the tab
    are not part of the file. Output longer than the size limit is cut at a line boundary and
    ends with a notice naming the start_line to continue from.

    Args:
        path: File path, relative to the workspace root.
        start_line: First line to show, 1-based. Default: 1.
        end_line: Last line to show, inclusive. Default: the end of the file.
    """
    if start_line is not None and start_line < 1:
        raise ToolError(f"start_line must be 1 or more (got {start_line}); lines are numbered from 1.")
    first = start_line or 1
    if end_line is not None and end_line < first:
        raise ToolError(f"end_line ({end_line}) is before start_line ({first}); pass end_line >= start_line.")
    target = _existing_text_file(ctx, path)
    shown = _shown(ctx, target)
    window = _read_window(target, first, end_line, ctx.settings.read_cap_chars)
    if window.total == 0:
        return f"[{shown} is empty]"
    if first > window.total:
        raise ToolError(f"start_line={first} is past the end of {shown!r}, which has {window.total} lines.")
    body = "\n".join(window.lines)
    if window.long_line_chars:
        return f"{body}\n{_long_line_notice(window)}"
    if window.cut_at is not None:
        return (
            f"{body}\n[truncated at the size limit: showing lines {first}-{window.last_shown} of "
            f"{window.total}; call read_file with start_line={window.last_shown + 1} to continue]"
        )
    if first > 1 or window.last_shown < window.total:
        return f"{body}\n[showing lines {first}-{window.last_shown} of {window.total}]"
    return body


# --- write_file ---------------------------------------------------------------------------


@tool
def write_file(ctx: ToolContext, path: str, content: str) -> str:
    """Create a file, or replace a file's whole content. Parent directories are created.

    To change part of an existing file, prefer edit_file.

    Args:
        path: File path, relative to the workspace root.
        content: The complete new content of the file, written as UTF-8 exactly as given.
    """
    target = resolve_in_workspace(ctx.workspace, path)
    shown = _shown(ctx, target)
    _check_may_write(ctx, path, shown)
    if target.is_dir():
        raise ToolError(f"{shown!r} is a directory; pass a file path (e.g. '{shown}/name.txt').")
    if target.exists() and not target.is_file():
        raise ToolError(f"{shown!r} is not a regular file (a pipe, socket or device); it cannot be written.")
    existed = target.exists()
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"content cannot be encoded as UTF-8 ({exc.reason} at index {exc.start}).") from exc
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    except OSError as exc:
        raise ToolError(f"Could not write {shown!r}: {exc.strerror or exc}.") from exc
    verb = "Overwrote" if existed else "Created"
    return f"{verb} {shown} ({_count(len(data), 'byte')}, {_count(_line_count(content), 'line')})."


# --- edit_file ----------------------------------------------------------------------------

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_NUMBERED_LINE = re.compile(r"^\s*\d+\t")


def _newline_style(text: str) -> str | None:
    """The file's one line ending ('\\n', '\\r\\n' or '\\r'), or None when it mixes them."""
    crlf = text.count("\r\n")
    kinds = [
        style
        for style, count in (("\r\n", crlf), ("\n", text.count("\n") - crlf), ("\r", text.count("\r") - crlf))
        if count
    ]
    if not kinds:
        return "\n"
    return kinds[0] if len(kinds) == 1 else None


def _to_lf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _find_all(haystack: str, needle: str) -> list[int]:
    found: list[int] = []
    index = haystack.find(needle)
    while index != -1:
        found.append(index)
        index = haystack.find(needle, index + 1)
    return found


def _line_at(text: str, offset: int) -> int:
    return len(_LINE_BREAK.findall(text, 0, offset)) + 1


def _lines_of(text: str, offsets: list[int]) -> list[int]:
    """Line numbers of ascending ``offsets``, counted in one pass (a match may occur 10^5 times)."""
    lines: list[int] = []
    line, counted_to = 1, 0
    for offset in offsets:
        line += len(_LINE_BREAK.findall(text, counted_to, offset))
        counted_to = offset
        if not lines or lines[-1] != line:
            lines.append(line)
    return lines


def _span_end(start: int, text: str) -> int:
    """The last line a piece of text starting on line ``start`` reaches."""
    return start + max(0, len(_LINE_BREAK.findall(text)) - (1 if text.endswith(("\n", "\r")) else 0))


def _miss_hint(text: str, old: str) -> str:
    """A cheap clue why ``old`` did not match: line numbers pasted in, whitespace, or the closest line."""
    old_lines = [line for line in _LINE_BREAK.split(old) if line.strip()]
    if old_lines and all(_NUMBERED_LINE.match(line) for line in old_lines):
        return "old_text seems to include the line-number prefixes read_file adds; pass only the file's text."
    file_lines = _LINE_BREAK.split(text)
    first = old_lines[0].strip() if old_lines else old.strip()
    if " ".join(old.split()) in " ".join(text.split()):
        for number, line in enumerate(file_lines, start=1):
            if first and first in line.strip():
                return (
                    f"It would match near line {number} if whitespace were ignored: copy the exact "
                    "indentation (spaces or tabs) and line breaks from read_file."
                )
        return "It would match if whitespace were ignored: copy the exact whitespace from read_file."
    stripped = [line.strip() for line in file_lines[:20_000]]
    close = difflib.get_close_matches(first, stripped, n=1, cutoff=0.6) if first else []
    if close:
        number = stripped.index(close[0]) + 1
        return f"The closest line is {number}: {file_lines[number - 1].strip()!r}."
    return ""


def _snippet(text: str, first: int, last: int) -> str:
    lines = _LINE_BREAK.split(text)
    start = max(1, first - 2)
    end = min(len(lines), last + 2, start + _SNIPPET_LINES - 1)
    return "\n".join(_numbered(n, lines[n - 1]) for n in range(start, end + 1))


def _decode_for_edit(target: Path, shown: str) -> tuple[bool, str]:
    raw = target.read_bytes()
    bom = raw.startswith(codecs.BOM_UTF8)
    try:
        return bom, raw[len(codecs.BOM_UTF8) if bom else 0 :].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{shown!r} is not valid UTF-8 (bad byte at offset {exc.start}); edit_file edits UTF-8 text "
            "only. Use write_file to replace the whole file, or bash to edit it."
        ) from exc


@tool
def edit_file(ctx: ToolContext, path: str, old_text: str, new_text: str) -> str:
    """Replace one exact piece of text in a file.

    old_text must occur exactly once in the file, character for character (indentation
    included, read_file's line-number prefixes excluded); otherwise nothing is changed and the
    error says why. new_text is inserted literally: no regex, no escapes. The file's line
    endings and UTF-8 encoding are kept.

    Args:
        path: File path, relative to the workspace root.
        old_text: The exact text to replace. Include enough surrounding lines to make it unique.
        new_text: The replacement text. Empty to delete old_text.
    """
    if not old_text:
        raise ToolError(
            "old_text is empty; pass the exact text to replace, or use write_file to write a whole file."
        )
    if old_text == new_text:
        raise ToolError("old_text and new_text are identical; there is nothing to change.")
    target = _existing_text_file(ctx, path)
    shown = _shown(ctx, target)
    _check_may_write(ctx, path, shown)
    bom, text = _decode_for_edit(target, shown)
    newline = _newline_style(text)
    if newline is not None:
        # A consistent file is edited in '\n' form, so text copied from read_file matches CRLF files.
        text, old_text, new_text = _to_lf(text), _to_lf(old_text), _to_lf(new_text)
    matches = _find_all(text, old_text)
    if not matches:
        hint = _miss_hint(text, old_text)
        raise ToolError(
            f"old_text was not found in {shown!r}; the file was not changed. {hint}".rstrip()
            + " Read the file again and copy the text exactly."
        )
    if len(matches) > 1:
        lines = _lines_of(text, matches)
        listed = ", ".join(str(n) for n in lines[:20]) + (", ..." if len(lines) > 20 else "")
        raise ToolError(
            f"old_text occurs {len(matches)} times in {shown!r} (lines {listed}); it must occur exactly "
            "once. The file was not changed. Include more surrounding lines in old_text to pick one."
        )
    offset = matches[0]
    edited = text[:offset] + new_text + text[offset + len(old_text) :]
    out = edited if newline in (None, "\n") else edited.replace("\n", newline)
    try:
        target.write_bytes((codecs.BOM_UTF8 if bom else b"") + out.encode("utf-8"))
    except (OSError, UnicodeEncodeError) as exc:
        raise ToolError(f"Could not write {shown!r}: {exc}.") from exc
    start = _line_at(text, offset)
    old_span = _lines_label(start, _span_end(start, old_text))
    if not new_text:
        return f"Edited {shown}: removed {old_span}.\n{_snippet(edited, start, start)}"
    new_end = _span_end(start, new_text)
    summary = f"Edited {shown}: replaced {old_span} with {_lines_label(start, new_end)}."
    return f"{summary}\n{_snippet(edited, start, new_end)}"


# --- list_dir -----------------------------------------------------------------------------


def _describe_entry(ctx: ToolContext, root: Path, entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        real = Path(entry.path).resolve(strict=False)
        if real != root and not real.is_relative_to(root):
            return f"{entry.name} -> (outside the workspace)"
        slash = "/" if real.is_dir() else ""
        return f"{entry.name}{slash} -> {_shown(ctx, real)}{slash}"
    if entry.is_dir():
        return f"{entry.name}/"
    if entry.is_file():
        return f"{entry.name} ({_count(entry.stat().st_size, 'byte')})"
    return f"{entry.name} (special file)"


@tool
def list_dir(ctx: ToolContext, path: str = ".") -> str:
    """List one directory of the workspace (not recursive).

    Entries are sorted by name, one per line: directories end with '/', files show their size,
    symlinks show their target. Use glob to find files in subdirectories.

    Args:
        path: Directory path, relative to the workspace root. Default: the root.
    """
    target = resolve_in_workspace(ctx.workspace, path)
    shown = _shown(ctx, target)
    if not target.exists():
        raise ToolError(f"Directory {shown!r} not found. List its parent to see what exists.")
    if not target.is_dir():
        raise ToolError(f"{shown!r} is a file, not a directory; use read_file to read it.")
    root = workspace_root(ctx.workspace)
    with os.scandir(target) as scan:
        entries = sorted(scan, key=lambda entry: entry.name)
    if not entries:
        return f"[{shown}/ is empty]"
    lines = [_describe_entry(ctx, root, entry) for entry in entries[:LIST_CAP]]
    if len(entries) > LIST_CAP:
        lines.append(
            f"[truncated: showing the first {LIST_CAP} of {len(entries)} entries; "
            "use glob with a pattern to narrow the list]"
        )
    return "\n".join(lines)


# --- glob ---------------------------------------------------------------------------------


def _part_regex(part: str) -> str:
    """Regex for one path component of a glob: * ? [abc] [!abc] {a,b}; '/' is never matched."""
    out: list[str] = []
    i = 0
    while i < len(part):
        char = part[i]
        if char == "*":
            out.append("[^/]*")
            while i + 1 < len(part) and part[i + 1] == "*":
                i += 1
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (close := part.find("]", i + 2)) != -1:
            negate = part[i + 1] in "!^"
            body = part[i + 1 + negate : close]
            # Escape what Python's re would read as nested sets or set operations.
            escaped = "".join("\\" + c if c in "\\[]&~|^" else c for c in body)
            out.append(f"[{'^' if negate else ''}{escaped}]")
            i = close
        elif char == "{" and (close := part.find("}", i)) != -1:
            options = part[i + 1 : close].split(",")
            out.append("(?:" + "|".join(_part_regex(option) for option in options) + ")")
            i = close
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def glob_regex(parts: Sequence[str]) -> re.Pattern[str]:
    """Regex for '/'-joined relative paths matching the glob ``parts``; '**' spans directories."""
    pieces: list[str] = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            pieces.append(".*" if last else "(?:[^/]+/)*")
        else:
            pieces.append(_part_regex(part) + ("" if last else "/"))
    return re.compile("".join(pieces))


@dataclass(slots=True)
class _Walk:
    """Walks a tree in name order without following symlinks, pruning SKIP_DIRS, bounded by SCAN_LIMIT."""

    base: Path
    keep: frozenset[str] = frozenset()
    scanned: int = 0
    hit_limit: bool = False
    unreadable: int = 0

    def _listing(self, directory: str) -> Iterator[os.DirEntry[str]]:
        try:
            with os.scandir(directory) as scan:
                return iter(sorted(scan, key=lambda entry: entry.name))
        except OSError:
            self.unreadable += 1
            return iter(())

    def entries(self) -> Iterator[tuple[str, os.DirEntry[str]]]:
        """Yield (path relative to base, entry); a directory's contents follow it directly."""
        # An explicit stack rather than recursion: trees can be deeper than Python's recursion limit.
        stack = [("", self._listing(str(self.base)))]
        while stack:
            prefix, listing = stack[-1]
            entry = next(listing, None)
            if entry is None:
                stack.pop()
                continue
            self.scanned += 1
            if self.scanned > SCAN_LIMIT:
                self.hit_limit = True
                return
            relative = prefix + entry.name
            yield relative, entry
            if entry.is_dir(follow_symlinks=False) and (
                entry.name not in SKIP_DIRS or entry.name in self.keep
            ):
                stack.append((relative + "/", self._listing(entry.path)))

    def notes(self) -> list[str]:
        notes = []
        if self.hit_limit:
            notes.append(f"[stopped after scanning {SCAN_LIMIT} entries; narrow the path or pattern]")
        if self.unreadable:
            notes.append(f"[skipped directories that could not be read: {self.unreadable}]")
        return notes


def _under(prefix: str, relative: str) -> str:
    """A path found below a directory shown as ``prefix``, as the model sees it."""
    return relative if prefix == "." else f"{prefix}/{relative}"


def _skipped_dirs(keep: frozenset[str] = frozenset()) -> str:
    return ", ".join(sorted(SKIP_DIRS - keep))


def _glob_sync(ctx: ToolContext, pattern: str, path: str) -> str:
    if not pattern.strip():
        raise ToolError("The pattern is empty; pass a glob such as '**/*.py'.")
    if "\x00" in pattern:
        raise ToolError("The pattern contains a NUL byte; remove it.")
    parts = PurePosixPath(pattern).parts
    if ".." in parts:
        raise ToolError(
            f"Pattern {pattern!r} contains '..'; glob only searches inside the workspace. "
            "Use path to choose the directory to search from."
        )
    literal = 0
    while literal < len(parts) and not _GLOB_MAGIC & set(parts[literal]):
        literal += 1
    # The wildcard-free head of the pattern narrows where the walk starts (and is checked like a path).
    base = resolve_in_workspace(ctx.workspace, str(Path(path).joinpath(*parts[:literal])))
    rest = parts[literal:]
    if not rest:  # no wildcards: the pattern names one path
        if not base.exists():
            return f"No paths match {pattern!r}."
        return _shown(ctx, base) + ("/" if base.is_dir() else "")
    if not base.is_dir():
        return f"No paths match {pattern!r} ({_shown(ctx, base)!r} is not a directory)."
    matcher = glob_regex(rest)
    walk = _Walk(base, keep=frozenset(parts) & SKIP_DIRS)
    prefix = _shown(ctx, base)
    found = [
        _under(prefix, relative) + ("/" if entry.is_dir() else "")
        for relative, entry in walk.entries()
        if matcher.fullmatch(relative)
    ]
    found.sort()
    lines = found[:GLOB_CAP] or [
        f"No paths match {pattern!r} "
        f"(directories named {_skipped_dirs(walk.keep)} are not searched unless the pattern names them)."
    ]
    if len(found) > GLOB_CAP:
        lines.append(
            f"[truncated: showing {GLOB_CAP} of {len(found)} matches; use a narrower pattern or path]"
        )
    return "\n".join(lines + walk.notes())


@tool(name="glob")
async def glob_paths(ctx: ToolContext, pattern: str, path: str = ".") -> str:
    """Find files and directories whose path matches a glob pattern.

    '*' matches within one path component, '**' across directories, '?' one character,
    '[abc]' a set, '{a,b}' alternatives. Results are workspace-relative paths sorted by name,
    directories ending with '/'. .git, node_modules, .venv, __pycache__ and .steward are not
    searched unless the pattern names them.

    Args:
        pattern: Glob relative to path, e.g. '**/*.py' or 'src/*/test_*.py'.
        path: Directory to search from, relative to the workspace root. Default: the root.
    """
    return await asyncio.to_thread(_glob_sync, ctx, pattern, path)


# --- grep ---------------------------------------------------------------------------------


def _compile_grep(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise ToolError(
            f"Invalid regex {pattern!r}: {exc.msg}{where}. This is a Python regular expression: escape "
            "special characters such as ( ) [ ] { } . * + ? with a backslash to match them literally."
        ) from exc


def _grep_candidates(
    base: Path, file_glob: str | None
) -> tuple[_Walk | None, Iterator[tuple[str, Path, bool]]]:
    """The files to search as (path relative to base, path, is a symlink)."""
    if base.is_file():
        return None, iter([("", base, False)])
    walk = _Walk(base)
    matcher = glob_regex(PurePosixPath(file_glob).parts) if file_glob else None
    by_name = file_glob is not None and "/" not in file_glob  # '*.py' filters names, 'src/**' paths
    return walk, (
        (relative, Path(entry.path), entry.is_symlink())
        for relative, entry in walk.entries()
        if not entry.is_dir() and (matcher is None or matcher.fullmatch(entry.name if by_name else relative))
    )


@dataclass(slots=True)
class _GrepRun:
    """One grep: the matches collected so far against their caps, and what was skipped why."""

    ctx: ToolContext
    regex: re.Pattern[str]
    max_results: int
    root: Path
    hits: list[str] = field(default_factory=list)
    size: int = 0
    more: bool = False
    binary: int = 0
    large: int = 0
    outside: int = 0

    def searchable(self, full: Path, is_symlink: bool) -> Path | None:
        # Only a symlink can lead out: the walk never descends into linked directories.
        real = full.resolve(strict=False) if is_symlink else full
        if not real.is_relative_to(self.root):
            self.outside += 1
        elif not real.is_file():
            pass  # a dangling link, pipe, socket or device: nothing to read
        elif real.stat().st_size > GREP_MAX_FILE_BYTES:
            self.large += 1
        elif _looks_binary(real):
            self.binary += 1
        else:
            return real
        return None

    def search(self, real: Path, shown: str) -> None:
        with real.open(encoding="utf-8", errors="replace", newline=None) as handle:
            for number, line in enumerate(handle, start=1):
                if not self.regex.search(line):
                    continue
                text = line.rstrip("\n")
                if len(text) > GREP_LINE_CHARS:
                    text = text[:GREP_LINE_CHARS] + "…"
                hit = f"{shown}:{number}: {text}"
                if (
                    len(self.hits) >= self.max_results
                    or self.size + len(hit) + 1 > self.ctx.settings.output_cap_chars
                ):
                    self.more = True
                    return
                self.hits.append(hit)
                self.size += len(hit) + 1

    def notes(self) -> list[str]:
        notes = []
        if self.more:
            notes.append(
                f"[truncated: showing the first {len(self.hits)} matches; more exist. Narrow the pattern, "
                f"path or glob, or raise max_results (up to {GREP_MAX_RESULTS})]"
            )
        megabytes = GREP_MAX_FILE_BYTES // (1024 * 1024)
        skipped = [
            f"{_count(count, noun)}{rest}"
            for count, noun, rest in (
                (self.binary, "binary file", ""),
                (self.large, "file", f" over {megabytes} MB"),
                (self.outside, "symlink", " to outside the workspace"),
            )
            if count
        ]
        if skipped:
            notes.append(f"[skipped {', '.join(skipped)}]")
        return notes


def _grep_sync(ctx: ToolContext, pattern: str, path: str, file_glob: str | None, run: _GrepRun) -> str:
    base = resolve_in_workspace(ctx.workspace, path)
    if not base.exists():
        raise ToolError(f"Path {_shown(ctx, base)!r} not found. Use list_dir or glob to find it.")
    walk, candidates = _grep_candidates(base, file_glob)
    prefix = _shown(ctx, base)
    for relative, full, is_symlink in candidates:
        real = run.searchable(full, is_symlink)
        if real is not None:
            run.search(real, _under(prefix, relative) if relative else prefix)
        if run.more:
            break
    lines = run.hits or [
        f"No matches for {pattern!r} in {_shown(ctx, base)!r} "
        f"(binary files and directories named {_skipped_dirs()} are skipped)."
    ]
    return "\n".join(lines + run.notes() + (walk.notes() if walk else []))


@tool
async def grep(
    ctx: ToolContext,
    pattern: str,
    path: str = ".",
    *,
    glob: str | None = None,
    ignore_case: bool = False,
    max_results: int = GREP_DEFAULT_RESULTS,
) -> str:
    """Search text files for lines matching a Python regular expression.

    Prints one match per line as 'path:line: text', files in name order. Binary files and the
    .git, node_modules, .venv, __pycache__ and .steward directories are skipped.

    Args:
        pattern: Python regex, e.g. 'def \\w+_tool' or 'TODO|FIXME'.
        path: File or directory to search, relative to the workspace root. Default: the root.
        glob: Only search files matching this glob, e.g. '*.py' (file name) or 'src/**/*.ts' (path).
        ignore_case: Match letters case-insensitively.
        max_results: Stop after this many matching lines (1-1000).
    """
    if not 1 <= max_results <= GREP_MAX_RESULTS:
        raise ToolError(f"max_results must be between 1 and {GREP_MAX_RESULTS} (got {max_results}).")
    run = _GrepRun(ctx, _compile_grep(pattern, ignore_case), max_results, workspace_root(ctx.workspace))
    return await asyncio.to_thread(_grep_sync, ctx, pattern, path, glob, run)


def file_tools() -> list[Tool]:
    """The file tools: read_file, write_file, edit_file, list_dir, glob, grep."""
    return [read_file, write_file, edit_file, list_dir, glob_paths, grep]
