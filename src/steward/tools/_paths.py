"""Confine every path a tool receives to the workspace.

The check is made on real paths: symlinks are resolved (for a path that does not exist
yet, through its deepest existing ancestor), and containment compares path components,
so ``/tmp/ws2`` is never taken to be inside ``/tmp/ws``.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from steward.errors import ToolError

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
    real = candidate.resolve(strict=False)
    if not _is_within(real, root):
        if _is_within(lexical, root) or _is_within(lexical, workspace.absolute()):
            raise ToolError(
                f"Path {path!r} leads through a symlink to a place outside the workspace; only files "
                "inside the workspace can be used, so use a path that does not go through that symlink."
            )
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
