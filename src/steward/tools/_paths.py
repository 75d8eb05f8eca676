"""Confine every path a tool receives to the workspace.

The check is made on real paths: symlinks are resolved (for a path that does not exist
yet, through its deepest existing ancestor), and containment compares path components,
so ``/tmp/ws2`` is never taken to be inside ``/tmp/ws``.

The check gives the messages and the path to show; it does not make the later open safe,
since another process can swap a directory for a symlink in between. So the tools open what
was checked again beneath a file descriptor of the workspace (``steward.tools._beneath``),
where no step can lead out, through ``workspace_fd`` and the ``*_checked`` helpers here.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from steward.errors import ToolError
from steward.tools._beneath import (
    MAX_LINK_HOPS,
    LeadsOutside,
    Located,
    Root,
    locate_beneath,
    open_beneath,
    open_regular,
    replace_contents,
)

_HINT = "use a path relative to the workspace root, e.g. 'src/app.py' or '.'"


def workspace_root(workspace: Path) -> Path:
    """The workspace as a real absolute path (the workspace itself may be reached via a symlink)."""
    return workspace.resolve(strict=False)


def resolve_in_workspace(workspace: Path, path: str, *, must_exist: bool = False) -> Path:
    """Return the real absolute path of ``path`` if it lies inside ``workspace``.

    ``path`` is relative to the workspace root, or absolute and inside it. Anything that
    leaves the workspace, directly or through a symlink, raises ``ToolError`` with a message
    for the model that names the rule and the fix.
    """
    if not path or not path.strip():
        raise ToolError(f"The path is empty; {_HINT}.")
    if "\x00" in path:
        raise ToolError(f"Path {path!r} contains a NUL byte, which no file name can hold; {_HINT}.")
    if path.startswith("~"):
        # The model almost always means a home directory; a literal '~' folder would only confuse.
        raise ToolError(
            f"Path {path!r} starts with '~': home directories are outside the workspace and '~' is "
            f"not expanded; {_HINT}."
        )
    root = workspace_root(workspace)
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = root / candidate
    # Lexical form first: it tells a plain '..' escape apart from an escape through a symlink.
    lexical = Path(os.path.normpath(candidate))
    # resolve(strict=False) follows every existing component (dangling links included) and
    # appends the rest, so a new file below a symlinked directory resolves to its real target.
    try:
        real = candidate.resolve(strict=False)
    except RuntimeError:  # Python 3.11 reports a symlink loop this way
        raise loop_error(path) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise loop_error(path) from None
        raise
    if not _is_within(real, root):
        if _is_within(lexical, root) or _is_within(lexical, workspace.absolute()):
            raise escape_error(path)
        raise ToolError(f"Path {path!r} is outside the workspace; {_HINT}.")
    if must_exist and not real.exists():
        raise ToolError(f"Path {display_path(workspace, real)!r} not found in the workspace.")
    return real


def _is_within(path: Path, root: Path) -> bool:
    # is_relative_to compares components, never string prefixes.
    return path == root or path.is_relative_to(root)


def display_path(workspace: Path, path: Path) -> str:
    """``path`` as the model should see it: relative to the workspace root, '/'-separated.

    A path outside the workspace (which tools never hand out) is shown by its name only, so
    no machine path leaks into tool output.
    """
    root = workspace_root(workspace)
    absolute = path if path.is_absolute() else root / path
    for base in (root, workspace.absolute()):
        if _is_within(absolute, base):
            relative = absolute.relative_to(base)
            return PurePosixPath(*relative.parts).as_posix() if relative.parts else "."
    return absolute.name


def escape_error(path: str) -> ToolError:
    """The refusal of a path that leads out of the workspace through a symlink."""
    return ToolError(
        f"Path {path!r} leads through a symlink to a place outside the workspace; only files "
        "inside the workspace can be used, so use a path that does not go through that symlink."
    )


def loop_error(path: str) -> ToolError:
    return ToolError(
        f"Path {path!r} goes through a loop of symlinks (or more than {MAX_LINK_HOPS} of them), so it "
        "leads nowhere; use a path that does not go through that symlink, or fix the link with bash."
    )


# --- opening what was checked -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Checked:
    """A path the model gave that passed the workspace rules (``check_path``)."""

    #: As the model wrote it, for messages.
    given: str
    #: The real absolute path when it was checked, for display (``display_path``).
    real: Path
    #: The real path below the workspace root, '/'-separated ('.' for the root): what is opened.
    relative: str


def check_path(workspace: Path, path: str) -> Checked:
    """Check ``path`` like ``resolve_in_workspace`` and keep what the opening helpers need."""
    real = resolve_in_workspace(workspace, path)
    relative = real.relative_to(workspace_root(workspace))
    return Checked(path, real, PurePosixPath(*relative.parts).as_posix() if relative.parts else ".")


@contextmanager
def workspace_fd(workspace: Path) -> Iterator[Root]:
    """The workspace opened as a directory fd, to open checked paths beneath; closed on exit."""
    try:
        root = Root.open(workspace)
    except OSError as exc:
        raise ToolError(
            f"The workspace cannot be opened ({exc.strerror or exc}); check that it exists and is readable."
        ) from exc
    with root:
        yield root


@contextmanager
def _refusals(checked: Checked) -> Iterator[None]:
    """Turn a path that leads out, or loops, into the ToolError the check would have given."""
    try:
        yield
    except LeadsOutside:
        raise escape_error(checked.given) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise loop_error(checked.given) from None
        raise


def open_checked(root: Root, checked: Checked, flags: int) -> int:
    """Open ``checked`` again beneath ``root`` with ``flags``; the caller closes the fd.

    Raises ``ToolError`` when a symlink now leads out, else the ``OSError`` of the open.
    """
    with _refusals(checked):
        return open_beneath(root, checked.relative, flags)


def read_checked(root: Root, checked: Checked) -> int:
    """Open the regular file ``checked`` for reading beneath ``root``; the caller closes the fd.

    Raises ``IsADirectoryError`` and ``NotRegularFile`` (``steward.tools._beneath``) besides
    what ``open_checked`` raises; a FIFO is refused without waiting for a writer.
    """
    with _refusals(checked):
        return open_regular(root, checked.relative)


def locate_checked(root: Root, checked: Checked) -> Located:
    """Where ``checked`` ends beneath ``root`` (a final symlink followed); the caller closes it."""
    with _refusals(checked):
        return locate_beneath(root, checked.relative)


def write_checked(
    root: Root, checked: Checked, data: bytes, *, same_as: os.stat_result | None = None
) -> bool:
    """Replace the content of ``checked`` with ``data`` (missing parents made); True if it existed.

    The file is written where the check found it or not at all: if another process moved or
    relinked a part of the path since (or replaced the file ``same_as`` describes), the write
    is refused. Raises ``IsADirectoryError`` and ``NotRegularFile`` besides ``OSError``.
    """
    with _refusals(checked):
        located = locate_beneath(root, checked.relative, create_parents=True)
    try:
        moved = located.relative != PurePosixPath(checked.relative)
        replaced = same_as is not None and (
            located.stat is None
            or (located.stat.st_dev, located.stat.st_ino) != (same_as.st_dev, same_as.st_ino)
        )
        if moved or replaced:
            raise ToolError(
                f"Path {checked.given!r} changed while it was being written (another process moved, "
                "replaced or relinked it), so nothing was written; look at it again and retry."
            )
        return replace_contents(located, data)
    finally:
        located.close()
