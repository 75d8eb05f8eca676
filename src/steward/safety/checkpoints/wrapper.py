"""The wrapper that records a checkpoint before every call that can change files.

It sits right inside the guard and the policy, so only calls that are going to run are
recorded, and it wraps every tool surface alike: built-in, user and MCP tools. After the call,
the workspace is compared with the checkpoint (``Checkpointer.after``) and whatever may not
change is reverted; the call then fails with a message naming what was undone.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from steward.models.base import ToolSpec
from steward.safety.checkpoints.around_calls import Before, Checkpointer, Undone
from steward.safety.checkpoints.shadow import CheckpointError
from steward.tools.base import ToolContext, ToolResult, Toolset, WrapperToolset

CHANGES_FILES = frozenset({"bash", "write_file", "edit_file", "git_commit", "git_branch"})
"""Built-in tools that can change files (MCP tools: every one not marked read-only).

``execute_code`` is not among them: in the sandbox its program sees the workspace read-only and
changes files only through the run's tools, each checkpointed as its own call. Only without
the sandbox can the program write the workspace itself; then the call is checkpointed too
(``PROGRAM``)."""

PROGRAM = "execute_code"


def changes_files(name: str, spec: ToolSpec | None, arguments: Mapping[str, Any] | None = None) -> bool:
    """Whether a call of this tool needs a checkpoint first (``execute_code``: see ``CHANGES_FILES``)."""
    if name == "git_branch" and arguments is not None:
        return bool(arguments.get("action", "list") != "list")  # listing branches changes nothing
    if name in CHANGES_FILES:
        return True
    return spec is not None and spec.origin.startswith("mcp:") and not spec.read_only


class CheckpointToolset(WrapperToolset):
    """Checkpoint, call, compare: see the module docstring."""

    def __init__(self, wrapped: Toolset, checkpointer: Callable[[Path], Checkpointer]) -> None:
        super().__init__(wrapped)
        self._checkpointer = checkpointer

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        spec = await self.wrapped.spec_of(name, ctx)
        unconfined = name == PROGRAM and ctx.sandbox is None  # a program that can write the workspace
        if not ctx.writable or not (unconfined or changes_files(name, spec, arguments)):
            return await self.wrapped.call_tool(name, arguments, ctx)
        checkpointer = self._checkpointer(ctx.workspace)
        if unconfined:  # not under the workspace's lock: the program's own calls each take it
            return await self._checkpointed(checkpointer, name, arguments, ctx)
        async with _one_at_a_time(
            checkpointer.shadow.path.with_name(checkpointer.shadow.path.name + ".lock")
        ):
            return await self._checkpointed(checkpointer, name, arguments, ctx)

    async def _checkpointed(
        self, checkpointer: Checkpointer, name: str, arguments: Mapping[str, Any], ctx: ToolContext
    ) -> ToolResult:
        try:
            before = await asyncio.to_thread(
                checkpointer.before,
                ctx.run_id or "adhoc",
                step=ctx.step,
                tool=name,
                sandboxed=_sandboxed(name, ctx),
            )
        except (CheckpointError, OSError) as exc:
            # Nothing that can change files runs unrecorded. (What a command may leave in the
            # way, a FIFO or an odd name, is left out of a checkpoint, not a reason to fail it.)
            return ToolResult(
                f"Not run: the workspace could not be checkpointed before {name} ({exc}). "
                "Fix the cause named here, then try again.",
                is_error=True,
                category="checkpoint",
            )
        noted: tuple[tuple[str, str], ...] = ()
        if before.checkpoint is not None:
            noted = (
                (
                    "checkpoint",
                    f"checkpoint {before.checkpoint.n} before {name} at step {ctx.step}; "
                    f"undo with: steward rewind {ctx.run_id}{_w(checkpointer.workspace)} --to {ctx.step}",
                ),
            )
        try:
            result = await self.wrapped.call_tool(name, arguments, ctx)
        finally:
            # Shielded: a cancelled call (timeout, Ctrl-C) is compared all the same.
            undone = await asyncio.shield(asyncio.to_thread(_after, checkpointer, before))
        if not undone:
            return replace(result, notes=noted + result.notes) if noted else result
        return ToolResult(
            f"{result.content}\n\n{undone.message()}",
            is_error=True,
            category="protected",
            notes=(*noted, *result.notes, ("undone", undone.message())),
        )


@contextlib.asynccontextmanager
async def _one_at_a_time(lock: Path) -> AsyncIterator[None]:
    """Hold the workspace's lock, across processes, from the checkpoint to the comparison.

    Two runs changing one workspace at once (two jobs of a worker, two workers) would each see
    the other's changes, and the other's read-only placeholders, as their own call's and undo
    them. One checkpointed call at a time per workspace makes every comparison its own call's.
    The wait is bounded by the call's own deadline (the wrapper outside cancels it).
    """
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        for _ in range(10**9):  # bounded by the call's deadline, which cancels the sleep
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(0.02)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _w(workspace: Path) -> str:
    """`` -w WORKSPACE`` in a printed command when the workspace is not where it is run from."""
    import shlex

    with contextlib.suppress(OSError):
        if workspace == Path.cwd().resolve():
            return ""
    return f" -w {shlex.quote(str(workspace))}"


_IN_SANDBOX = frozenset({"bash", "git_commit", "git_branch"})  # tools running a command in the sandbox


def _sandboxed(name: str, ctx: ToolContext) -> bool:
    """Whether the call runs its command in the sandbox (``bash`` with the sandbox on)."""
    settings = getattr(ctx.sandbox, "settings", None)
    return name in _IN_SANDBOX and ctx.sandbox is not None and bool(getattr(settings, "enabled", True))


def _after(checkpointer: Checkpointer, before: Before) -> Undone:
    """``checkpointer.after``, whose failure is reported as a failed call, never raised."""
    try:
        return checkpointer.after(before)
    except Exception as exc:  # the comparison must not crash a run; the call then fails
        return Undone([f"the comparison with the checkpoint failed ({type(exc).__name__}: {exc})"])
