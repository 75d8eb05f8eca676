"""Built-in file tools: read, write, edit, list, glob and grep, all confined to the workspace.

Formats the model sees (pinned by the schema snapshots and the tests):

* ``read_file`` numbers lines like ``cat -n``: the 1-based line number right-aligned in six
  columns, a tab, then the text. A notice in square brackets ends output that is not the whole
  file, naming the ``start_line`` to continue from.
* ``list_dir``, ``glob`` and ``grep`` show workspace-relative '/'-separated paths, directories
  with a trailing '/'; ``grep`` prints ``path:line: text``. Every cap ends in a notice.

Every path is checked (``check_path``) and then opened again beneath a file descriptor of the
workspace (``workspace_fd``), and the I/O goes through the fds obtained there: a directory
swapped for a symlink by another process between the check and the use cannot lead out.
Walks (glob, grep) descend through directory fds with ``O_NOFOLLOW``.
"""

from __future__ import annotations

import asyncio
import codecs
import difflib
import errno
import io
import os
import re
import stat
from collections.abc import Generator, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from steward.errors import ToolError
from steward.secret_paths import is_secret_path
from steward.tools._beneath import LeadsOutside, Located, NotRegularFile, Root, locate_beneath
from steward.tools._paths import (
    Checked,
    check_path,
    display_path,
    locate_checked,
    open_checked,
    read_checked,
    workspace_fd,
    workspace_root,
    write_checked,
)
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
# O_NONBLOCK: a FIFO put where a file was must not hang the tool; O_NOFOLLOW: a name opened in
# a held directory is never a symlink followed by surprise.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC


# --- shared helpers -----------------------------------------------------------------------


def _shown(ctx: ToolContext, path: Path) -> str:
    return display_path(ctx.workspace, path)


def _looks_binary(fd: int) -> bool:
    # pread leaves the file position where it was, at the start.
    return b"\x00" in os.pread(fd, _SNIFF_BYTES, 0)


def _open_text_file(root: Root, checked: Checked, shown: str) -> BinaryIO:
    """The checked file opened for reading if it is text, or a ToolError naming what to do."""
    try:
        fd = read_checked(root, checked)
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(f"File {shown!r} not found. Use list_dir or glob to find the right path.") from None
    except IsADirectoryError:
        raise ToolError(
            f"{shown!r} is a directory, not a file; use list_dir to see what it contains."
        ) from None
    except NotRegularFile:
        raise ToolError(
            f"{shown!r} is not a regular file (a pipe, socket or device); it cannot be read."
        ) from None
    except OSError as exc:
        raise ToolError(f"Could not read {shown!r}: {exc.strerror or exc}.") from exc
    handle = os.fdopen(fd, "rb")
    if _looks_binary(fd):
        handle.close()
        raise ToolError(
            f"{shown!r} looks like a binary file (it contains NUL bytes); these tools handle text only. "
            "Use bash (e.g. `file PATH` or `xxd PATH | head`) to inspect it."
        )
    return handle


def _existing(root: Root, checked: Checked) -> int | None:
    """An ``O_PATH`` fd of the checked path, or None when nothing is there; the caller closes it."""
    try:
        return open_checked(root, checked, os.O_PATH)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _open_directory(root: Root, checked: Checked) -> int | None:
    """A listable fd of the checked directory, None when nothing is there; the caller closes it.

    Raises NotADirectoryError when something else is there.
    """
    fd = _existing(root, checked)
    if fd is None:
        return None
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        # The O_PATH fd cannot be listed; '.' beneath it is the same directory, not a name again.
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)


def _beneath_path(directory: str, relative: str) -> str:
    """A path found ``relative`` below the checked ``directory``, relative to the workspace root."""
    return relative if directory == "." else f"{directory}/{relative}"


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


def _read_window(source: BinaryIO, first: int, last: int | None, cap: int) -> _Window:
    window = _Window(lines=[])
    size = 0
    # newline=None reads '\n', '\r\n' and '\r' as line ends, the same rule edit_file counts by.
    with io.TextIOWrapper(source, encoding="utf-8", errors="replace", newline=None) as handle:
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
    checked = check_path(ctx.workspace, path)
    shown = _shown(ctx, checked.real)
    with workspace_fd(ctx.workspace) as root:
        handle = _open_text_file(root, checked, shown)
    window = _read_window(handle, first, end_line, ctx.settings.read_cap_chars)
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
    checked = check_path(ctx.workspace, path)
    shown = _shown(ctx, checked.real)
    _check_may_write(ctx, path, shown)
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"content cannot be encoded as UTF-8 ({exc.reason} at index {exc.start}).") from exc
    try:
        with workspace_fd(ctx.workspace) as root:
            existed = write_checked(root, checked, data)
    except IsADirectoryError:
        raise ToolError(f"{shown!r} is a directory; pass a file path (e.g. '{shown}/name.txt').") from None
    except NotRegularFile:
        raise ToolError(
            f"{shown!r} is not a regular file (a pipe, socket or device); it cannot be written."
        ) from None
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


def _read_for_edit(ctx: ToolContext, checked: Checked, path: str, shown: str) -> tuple[os.stat_result, bytes]:
    """The file's bytes and identity (to make sure the same file is replaced), once it may be written."""
    with workspace_fd(ctx.workspace) as root, _open_text_file(root, checked, shown) as handle:
        _check_may_write(ctx, path, shown)
        return os.fstat(handle.fileno()), handle.read()


def _decode_for_edit(raw: bytes, shown: str) -> tuple[bool, str]:
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
    checked = check_path(ctx.workspace, path)
    shown = _shown(ctx, checked.real)
    identity, raw = _read_for_edit(ctx, checked, path, shown)
    bom, text = _decode_for_edit(raw, shown)
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
        data = (codecs.BOM_UTF8 if bom else b"") + out.encode("utf-8")
        with workspace_fd(ctx.workspace) as root:
            write_checked(root, checked, data, same_as=identity)
    except (OSError, UnicodeEncodeError, NotRegularFile) as exc:
        raise ToolError(f"Could not write {shown!r}: {exc}.") from exc
    start = _line_at(text, offset)
    old_span = _lines_label(start, _span_end(start, old_text))
    if not new_text:
        return f"Edited {shown}: removed {old_span}.\n{_snippet(edited, start, start)}"
    new_end = _span_end(start, new_text)
    summary = f"Edited {shown}: replaced {old_span} with {_lines_label(start, new_end)}."
    return f"{summary}\n{_snippet(edited, start, new_end)}"


# --- list_dir -----------------------------------------------------------------------------


def _describe_link(ctx: ToolContext, root: Root, relative: str, name: str) -> str:
    """Where the symlink ``relative`` leads, followed beneath the workspace like any open."""
    try:
        located = locate_beneath(root, relative)
    except LeadsOutside:
        return f"{name} -> (outside the workspace)"
    except OSError as exc:
        return f"{name} -> ({'a loop of symlinks' if exc.errno == errno.ELOOP else 'missing'})"
    located.close()
    is_dir = not located.name or (located.stat is not None and stat.S_ISDIR(located.stat.st_mode))
    slash = "/" if is_dir else ""
    return f"{name}{slash} -> {_shown(ctx, root.path / located.relative)}{slash}"


def _describe_entry(ctx: ToolContext, root: Root, directory: Checked, entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return _describe_link(ctx, root, _beneath_path(directory.relative, entry.name), entry.name)
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
    checked = check_path(ctx.workspace, path)
    shown = _shown(ctx, checked.real)
    with workspace_fd(ctx.workspace) as root:
        try:
            fd = _open_directory(root, checked)
        except NotADirectoryError:
            raise ToolError(f"{shown!r} is a file, not a directory; use read_file to read it.") from None
        if fd is None:
            raise ToolError(f"Directory {shown!r} not found. List its parent to see what exists.")
        try:
            # Listed by fd; the entries' stat() calls use the same fd, so it stays open meanwhile.
            with os.scandir(fd) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
            lines = [_describe_entry(ctx, root, checked, entry) for entry in entries[:LIST_CAP]]
        finally:
            os.close(fd)
    if not entries:
        return f"[{shown}/ is empty]"
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
    """Walks a tree in name order without following symlinks, pruning SKIP_DIRS, bounded by SCAN_LIMIT.

    It descends through directory fds, each opened with O_NOFOLLOW in its parent's fd, so a
    directory swapped for a symlink meanwhile is not entered. ``base_fd`` belongs to the caller.
    """

    base_fd: int
    keep: frozenset[str] = frozenset()
    scanned: int = 0
    hit_limit: bool = False
    unreadable: int = 0

    def _listing(self, dir_fd: int) -> Iterator[os.DirEntry[str]]:
        try:
            with os.scandir(dir_fd) as scan:
                return iter(sorted(scan, key=lambda entry: entry.name))
        except OSError:
            self.unreadable += 1
            return iter(())

    def _enter(self, dir_fd: int, name: str) -> int | None:
        try:
            return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except NotADirectoryError:
            return None  # replaced by a file or a symlink since it was listed: not a directory now
        except OSError:
            self.unreadable += 1
            return None

    def entries(self) -> Generator[tuple[str, int, os.DirEntry[str]]]:
        """Yield (path relative to base, fd of the directory holding it, entry); a directory's
        contents follow it directly. The fd is open until the walk leaves that directory."""
        # An explicit stack rather than recursion: trees can be deeper than Python's recursion limit.
        stack = [("", self.base_fd, self._listing(self.base_fd))]
        try:
            while stack:
                prefix, dir_fd, listing = stack[-1]
                entry = next(listing, None)
                if entry is None:
                    self._close(stack.pop()[1])
                    continue
                self.scanned += 1
                if self.scanned > SCAN_LIMIT:
                    self.hit_limit = True
                    return
                relative = prefix + entry.name
                yield relative, dir_fd, entry
                if entry.is_dir(follow_symlinks=False) and (
                    entry.name not in SKIP_DIRS or entry.name in self.keep
                ):
                    child = self._enter(dir_fd, entry.name)
                    if child is not None:
                        stack.append((relative + "/", child, self._listing(child)))
        finally:
            for _, dir_fd, _ in stack:
                self._close(dir_fd)

    def _close(self, dir_fd: int) -> None:
        if dir_fd != self.base_fd:
            os.close(dir_fd)

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


def _glob_one(root: Root, base: Checked, pattern: str, shown: str) -> str:
    """A pattern without wildcards: the one path it names, if something is there."""
    fd = _existing(root, base)
    if fd is None:
        return f"No paths match {pattern!r}."
    try:
        return shown + ("/" if stat.S_ISDIR(os.fstat(fd).st_mode) else "")
    finally:
        os.close(fd)


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
    base = check_path(ctx.workspace, str(Path(path).joinpath(*parts[:literal])))
    prefix = _shown(ctx, base.real)
    rest = parts[literal:]
    with workspace_fd(ctx.workspace) as root:
        if not rest:  # no wildcards: the pattern names one path
            return _glob_one(root, base, pattern, prefix)
        try:
            fd = _open_directory(root, base)
        except NotADirectoryError:
            fd = None
    if fd is None:
        return f"No paths match {pattern!r} ({prefix!r} is not a directory)."
    matcher = glob_regex(rest)
    walk = _Walk(fd, keep=frozenset(parts) & SKIP_DIRS)
    try:
        with closing(walk.entries()) as entries:
            found = [
                _under(prefix, relative) + ("/" if entry.is_dir() else "")
                for relative, _, entry in entries
                if matcher.fullmatch(relative)
            ]
    finally:
        os.close(fd)
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
    entries: Iterator[tuple[str, int, os.DirEntry[str]]], file_glob: str | None
) -> Iterator[tuple[str, int, os.DirEntry[str]]]:
    """The files to search among a walk's entries: (path relative to the base, fd of their
    directory, entry)."""
    matcher = glob_regex(PurePosixPath(file_glob).parts) if file_glob else None
    by_name = file_glob is not None and "/" not in file_glob  # '*.py' filters names, 'src/**' paths
    return (
        (relative, dir_fd, entry)
        for relative, dir_fd, entry in entries
        if not entry.is_dir() and (matcher is None or matcher.fullmatch(entry.name if by_name else relative))
    )


@dataclass(slots=True)
class _GrepRun:
    """One grep: the matches collected so far against their caps, and what was skipped why."""

    ctx: ToolContext
    regex: re.Pattern[str]
    max_results: int
    root: Root
    hits: list[str] = field(default_factory=list)
    size: int = 0
    more: bool = False
    binary: int = 0
    large: int = 0
    outside: int = 0
    secret: int = 0

    def _is_secret(self, name: str) -> bool:
        if is_secret_path(name, self.ctx.settings.secret_files):
            self.secret += 1
            return True
        return False

    def entry(self, dir_fd: int, entry: os.DirEntry[str], relative: str, shown: str) -> None:
        """Search a file the walk found; ``relative`` is its path below the workspace root."""
        if self._is_secret(entry.name):
            return
        if entry.is_symlink():
            # Followed only beneath the workspace: the walk itself never follows links.
            try:
                located = locate_beneath(self.root, relative)
            except LeadsOutside:
                self.outside += 1
                return
            except OSError:
                return  # a dangling link or a loop: nothing to read
            with closing(located):
                self.located(located, shown)
        elif entry.is_file(follow_symlinks=False):
            self._search_at(dir_fd, entry.name, shown)
        # else a pipe, socket or device: nothing to read (and not opened)

    def located(self, located: Located, shown: str) -> None:
        """Search the file at ``located``, where a path (or a symlink) ends."""
        info = located.stat
        if not located.name or info is None or not stat.S_ISREG(info.st_mode):
            return  # a directory, a dangling link, a pipe, socket or device
        if not self._is_secret(located.name):
            self._search_at(located.dir_fd, located.name, shown)

    def _search_at(self, dir_fd: int, name: str, shown: str) -> None:
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except OSError:
            return  # gone since it was listed, or now a symlink (O_NOFOLLOW refuses it)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return
            if info.st_size > GREP_MAX_FILE_BYTES:
                self.large += 1
            elif _looks_binary(fd):
                self.binary += 1
            else:
                os.set_blocking(fd, True)
                self.search(handle, shown)

    def search(self, source: BinaryIO, shown: str) -> None:
        with io.TextIOWrapper(source, encoding="utf-8", errors="replace", newline=None) as handle:
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
        if self.secret:
            were, their = ("was", "its name matches") if self.secret == 1 else ("were", "their names match")
            notes.append(f"[{_count(self.secret, 'secret file')} {were} not searched: {their} secret_files]")
        return notes


def _grep_tree(run: _GrepRun, walk: _Walk, base: Checked, prefix: str, file_glob: str | None) -> None:
    # closing(): a search stopped at a cap still closes the directory fds the walk holds.
    with closing(walk.entries()) as entries:
        for relative, dir_fd, entry in _grep_candidates(entries, file_glob):
            run.entry(dir_fd, entry, _beneath_path(base.relative, relative), _under(prefix, relative))
            if run.more:
                break


def _grep_start(run: _GrepRun, base: Checked, prefix: str) -> _Walk | None:
    """A walk over the directory ``base``; a file is searched right away (and None returned)."""
    try:
        fd = _open_directory(run.root, base)
    except NotADirectoryError:
        with closing(locate_checked(run.root, base)) as located:
            run.located(located, prefix)
        return None
    if fd is None:
        raise ToolError(f"Path {prefix!r} not found. Use list_dir or glob to find it.")
    return _Walk(fd)


def _grep_sync(
    ctx: ToolContext, pattern: str, path: str, file_glob: str | None, regex: re.Pattern[str], max_results: int
) -> str:
    base = check_path(ctx.workspace, path)
    prefix = _shown(ctx, base.real)
    with workspace_fd(ctx.workspace) as root:
        run = _GrepRun(ctx, regex, max_results, root)
        walk = _grep_start(run, base, prefix)
        if walk is not None:
            try:
                _grep_tree(run, walk, base, prefix, file_glob)
            finally:
                os.close(walk.base_fd)
    lines = run.hits or [
        f"No matches for {pattern!r} in {prefix!r} "
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
    regex = _compile_grep(pattern, ignore_case)
    return await asyncio.to_thread(_grep_sync, ctx, pattern, path, glob, regex, max_results)


def file_tools() -> list[Tool]:
    """The file tools: read_file, write_file, edit_file, list_dir, glob, grep."""
    return [read_file, write_file, edit_file, list_dir, glob_paths, grep]
