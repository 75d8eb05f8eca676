"""What a client names on the server: workspaces and model scripts, only under its roots."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from steward.config import PROVIDERS
from steward.server.errors import ApiError
from steward.server.state import ServerOptions


def under_roots(options: ServerOptions, given: str, what: str) -> Path:
    """``given`` (relative to the first root) resolved, when it lies under one of the roots."""
    roots = options.roots()
    if "\x00" in given:
        raise ApiError(400, f"the {what} path has a NUL byte")
    path = Path(given.strip())
    try:
        resolved = (path if path.is_absolute() else roots[0] / path).resolve()
    except (OSError, RuntimeError):  # a symlink loop, a name too long for the file system
        raise ApiError(400, f"{what} {given!r} cannot be resolved on the server (a symlink loop?)") from None
    if not any(resolved == r or resolved.is_relative_to(r) for r in roots):
        raise ApiError(
            403, f"{what} {given!r} is not under the server's roots; allowed: "
            + ", ".join(r.name or "/" for r in roots) + " ([server] roots in its configuration)",
            "Forbidden",
        )  # fmt: skip
    return resolved


def _is(check: Callable[[], bool]) -> bool:
    try:
        return check()
    except OSError:  # a name longer than the file system allows, and the like
        return False


def workspace_for(options: ServerOptions, given: str | None) -> Path:
    """The folder a client named, when it lies under one of the server's roots."""
    if not given:
        return options.roots()[0]
    resolved = under_roots(options, given, "workspace")
    if not _is(resolved.is_dir):
        raise ApiError(400, f"workspace {given!r} is not a folder on the server; create it first")
    return resolved


def check_model(options: ServerOptions, model: str | None, workspace: Path) -> str | None:
    """The model a client asked for, a scripted one as the absolute path of its file (which
    must be a file under the roots: the worker then reads exactly what was checked)."""
    if not model:
        return None
    provider, _, name = model.partition(":")
    if provider not in (*PROVIDERS, "scripted") or not name.strip():
        raise ApiError(
            400, f"model {model!r} is not provider:model with provider one of {', '.join(PROVIDERS)}"
        )
    if provider != "scripted":
        return model
    script = under_roots(options, str(workspace / name.strip()), "model script")
    if not _is(script.is_file):
        raise ApiError(400, f"model script {name.strip()!r} is not a file in the workspace")
    return f"scripted:{script}"
