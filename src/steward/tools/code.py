"""``execute_code``: a Python program in the sandbox whose tool calls go through the run.

The program runs like ``bash`` (same sandbox, time limit and output cap) with the workspace
read-only: it changes files only through the tools. (With the sandbox turned off it can write
them itself; the call is then checkpointed like ``bash``: ``steward.safety.checkpoints.wrapper``.)
Inside it the run's tools are plain functions (``read_file(path="x")``, ``grep("TODO")``),
reached over a UNIX socket made for this call in a private directory bound into the sandbox
(which has no network): one length-prefixed, size-capped JSON frame per call and its answer.
The host trusts nothing the program sends: each frame names a tool and its arguments, and
``CodeToolset`` runs it through the same wrappers as the model's own calls (guard, policy,
approvals, checkpoints, redaction). Each is recorded as a call of the run, as it is made, with
the id ``<parent id>.<n>`` (``steward.tools._code_calls``).

A call that needs approval stops the program: the run waits for a human on that exact call
(``Allow read_file {...}? (execute_code calls it: ...)``), the calls the program made before it
recorded ahead of the question. Approved, the program runs again from the start with that one
call approved (good once), and the calls it made before get their recorded answers instead of
running twice, as long as it makes them again in the same order (``ProgramCalls``); the result
is ``execute_code``'s. Denied, the gated call is recorded as refused and the model is told.
(Pausing the program itself while a human decides is not possible: a waiting run may be resumed
by another process; the approval carries the program and its recorded calls, so it runs again
there the same way.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import struct
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from steward.errors import ApprovalRequired, ToolError
from steward.models.base import ToolSpec
from steward.tools._code_calls import NAME, WAITING, ProgramPaused, Waiting
from steward.tools._paths import workspace_root
from steward.tools.base import (
    NestedCall,
    ProgramTools,
    Tool,
    ToolContext,
    ToolResult,
    Toolset,
    WrapperToolset,
    tool,
)
from steward.tools.shell import MAX_TIMEOUT_S, CommandOutcome, run_command

RUNNER_SCRIPT = Path(__file__).with_name("_code_runner.py")
MOUNT = "/run/steward/code"
"""Where the call's private directory (program, tool list, socket) is seen inside the sandbox."""

MAX_REQUEST_BYTES = 1024 * 1024
"""A frame from the program larger than this ends its channel (arguments are small)."""

MAX_ANSWER_CHARS = 1024 * 1024
"""A tool's output sent back to the program is cut to this (tools cap their own output lower)."""

_HEADER = struct.Struct(">I")


class _Channel:
    """The host's end of one program's socket: one connection, one frame in, one frame out."""

    def __init__(self, tools: ProgramTools | None, stopped: asyncio.Event) -> None:
        self.tools, self.stopped = tools, stopped
        self.connected = False
        self.calls = 0
        #: What the channel refused on the way (a second connection, a huge frame).
        self.notes: list[tuple[str, str]] = []

    async def client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self.connected:  # a second connection could race the first's calls: refused
                self.notes.append(("code_channel", "a second connection to the channel was refused"))
                return
            self.connected = True
            limit = self.tools.limit if self.tools is not None else 0
            for _ in range(limit + 2):  # bounded: past the limit the channel closes
                if not await self._one(reader, writer, limit):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the program closed its end (or ended)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limit: int) -> bool:
        (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
        if size > MAX_REQUEST_BYTES:
            message = (
                f"a frame of {size} bytes is over the limit ({MAX_REQUEST_BYTES}); the channel is closed"
            )
            self.notes.append(("code_channel", message))
            await _answer(writer, False, message)
            return False
        request = _parse(await reader.readexactly(size))
        if isinstance(request, str):
            await _answer(writer, False, request)
            return True
        if self.tools is None:
            await _answer(writer, False, "No tools are available to this program.")
            return True
        if self.calls >= limit:
            message = f"the program made {limit} tool calls, the limit ([code] max_tool_calls)"
            self.notes.append(("code_channel", message))
            await _answer(writer, False, message)
            return False
        self.calls += 1
        result = await self.tools.call(*request)
        await _answer(writer, not result.is_error, result.content[:MAX_ANSWER_CHARS])
        if self.tools.halted:
            self.stopped.set()
            return False
        return True


def _parse(body: bytes) -> tuple[str, dict[str, Any]] | str:
    """The tool and arguments a frame asks for, or why it is refused (nothing else counts:
    a frame cannot claim an approval or another run)."""
    try:
        request = json.loads(body)
    except ValueError:
        return 'the frame is not JSON; send {"tool": NAME, "arguments": {...}}'
    if not isinstance(request, dict):
        return "the frame must be a JSON object"
    name, arguments = request.get("tool"), request.get("arguments", {})
    if not isinstance(name, str) or not name or not isinstance(arguments, dict):
        return 'the frame needs "tool" (a name) and "arguments" (an object)'
    return name, arguments


async def _answer(writer: asyncio.StreamWriter, ok: bool, output: str) -> None:
    body = json.dumps({"ok": ok, "output": output}).encode()
    writer.write(_HEADER.pack(len(body)) + body)
    await writer.drain()


def _needs_approval(name: str, arguments: Mapping[str, Any], reason: str) -> str:
    shown = json.dumps(dict(arguments), default=str)[:200]
    return (
        f"{name}({shown}) needs approval ({reason}): it has been asked for and the program is "
        "stopped; once approved it runs again from the start with that call approved"
    )


# --- running one program ----------------------------------------------------------------


@contextlib.asynccontextmanager
async def _private_dir(code: str, tools: Mapping[str, Sequence[str]]) -> AsyncIterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="steward-code-"))  # 0700: this user only
    try:
        (directory / "program.py").write_text(code, encoding="utf-8")
        # One a line: the name, a tab, the parameters (names a line cannot hold are left out:
        # call_tool still reaches those tools by name).
        listed = [f"{name}\t{','.join(params)}" for name, params in tools.items() if _plain(name, params)]
        (directory / "tools.txt").write_text("\n".join(listed), encoding="utf-8")
        shutil.copyfile(RUNNER_SCRIPT, directory / "runner.py")
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _plain(name: str, params: Sequence[str]) -> bool:
    return all(c not in text for text in (name, *params) for c in "\t\n\r,")


async def run_program(code: str, ctx: ToolContext, timeout_s: float) -> ToolResult:
    """Run ``code`` in the sandbox with its channel to ``ctx.program_tools``."""
    stopped = asyncio.Event()
    channel = _Channel(ctx.program_tools, stopped)
    cwd = workspace_root(ctx.workspace)
    tools = await _tool_parameters(ctx.program_tools)
    async with _private_dir(code, tools) as directory:
        server = await asyncio.start_unix_server(channel.client, path=str(directory / "channel.sock"))
        try:
            inside = MOUNT if ctx.sandbox is not None else str(directory)
            argv = [sys.executable, "-I", "-S", f"{inside}/runner.py", inside]
            sandboxed: contextlib.AbstractAsyncContextManager[list[str]] = (
                contextlib.nullcontext(argv)
                if ctx.sandbox is None
                else ctx.sandbox.command(
                    argv, workspace=cwd, network=False, writable=False, binds=((directory, MOUNT),)
                )
            )
            async with sandboxed as command:
                outcome = await _until_stopped(
                    run_command(command, cwd, timeout_s=timeout_s, cap_chars=ctx.settings.output_cap_chars),
                    stopped,
                )
        finally:
            server.close()  # calls after the program ended find no one listening
            with contextlib.suppress(Exception):
                await server.wait_closed()
    if outcome is None:
        return ToolResult("[stopped: a tool call needs approval]", is_error=True, notes=tuple(channel.notes))
    return _result(outcome, timeout_s, channel)


async def _until_stopped(running: Awaitable[CommandOutcome], stopped: asyncio.Event) -> CommandOutcome | None:
    """The program's outcome, or None when ``stopped`` is set first (the program is killed)."""
    run = asyncio.ensure_future(running)
    halt = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({run, halt}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        halt.cancel()
        if not run.done():  # stopped for an approval, or this call was cancelled: kill it
            run.cancel()
            await asyncio.wait({run})
    return None if run.cancelled() else run.result()


_LIMIT_SIGNALS = frozenset({signal.SIGKILL, signal.SIGXCPU})
"""Signals the sandbox's limits end a program with (memory, CPU time), as ``128 + n`` codes."""


def _result(outcome: CommandOutcome, timeout_s: float, channel: _Channel) -> ToolResult:
    lines = [outcome.output.removesuffix("\n")] if outcome.output.strip() else []
    code = outcome.returncode
    if outcome.timed_out:
        lines.append(
            f"[stopped after {timeout_s:g} s, its tool calls included; pass a larger timeout_s "
            f"(at most {MAX_TIMEOUT_S:g}) if it needs longer]"
        )
    elif code is not None and (code < 0 or code - 128 in _LIMIT_SIGNALS):
        # Killed directly, a negative code; inside the sandbox, its init reports 128 + the signal.
        lines.append(
            f"[killed by signal {-code if code < 0 else code - 128}: a limit of the sandbox (memory, CPU, "
            "processes) was reached]"
        )
    elif code not in (0, 1):
        lines.append(f"[exit code {code}]")
    if not lines:
        lines.append("(no output)")
    failed = outcome.timed_out or code != 0
    return ToolResult("\n".join(lines), is_error=failed, notes=tuple(channel.notes))


async def _tool_parameters(tools: ProgramTools | None) -> dict[str, list[str]]:
    """The run's tools as the program sees them: name and parameter names, required first."""
    found: dict[str, list[str]] = {}
    for spec in await tools.tools() if tools is not None else ():
        properties = spec.parameters.get("properties", {})
        required = [p for p in spec.parameters.get("required", []) if p in properties]
        found[spec.name] = [*required, *(p for p in properties if p not in required)]
    return found


@tool(name=NAME)
async def execute_code(ctx: ToolContext, code: str, timeout_s: float | None = None) -> ToolResult:
    """Run a Python program in the sandbox; the run's tools are functions inside it.

    Call tools with keyword arguments, e.g. text = read_file(path="README.md") or
    grep(pattern="TODO"); each returns the tool's output as a string and raises ToolCallError
    when the call fails or is refused. call_tool("name", **arguments) calls any tool by name.
    Printed output comes back, and the value of the last line when it is an expression.
    The workspace is read-only to the program itself: change files through write_file or
    edit_file. No network. Use it to combine many tool calls in one step.

    Args:
        code: The Python source to run.
        timeout_s: Seconds before the program (its tool calls included) is stopped. Default: the
            configured limit (120 s unless changed); at most 600.
    """
    if timeout_s is not None and not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise ToolError(f"timeout_s must be more than 0 and at most {MAX_TIMEOUT_S:g} (got {timeout_s:g}).")
    limit = min(timeout_s if timeout_s is not None else ctx.settings.bash_timeout_s, MAX_TIMEOUT_S)
    return await run_program(code, ctx, limit)


def code_tools() -> list[Tool]:
    """The code tools: execute_code."""
    return [execute_code]


# --- the program's calls through the run's toolset ------------------------------------


class ProgramCalls:
    """The calls of one program: each through ``toolset`` (the guarded stack), recorded.

    A program run again after an approval is given the answers of the calls it made before
    (``earlier``, recorded then) while it makes the same calls in the same order: they do not
    run twice. From its first other call on, every call runs (and is numbered after them)."""

    def __init__(
        self, toolset: Toolset, ctx: ToolContext, limit: int, *, granted: str | None,
        earlier: tuple[NestedCall, ...] = (),
    ) -> None:  # fmt: skip
        self.toolset, self.ctx, self.limit = toolset, ctx, limit
        self.granted = granted  # the hash of the one call a human approved for this program
        self.earlier = earlier
        self.replaying = bool(earlier)
        self.made = 0  # calls answered so far, from the record or run
        self.records: list[NestedCall] = []  # the calls that ran (the stopped one is not among them)
        self.notes: list[tuple[str, str]] = []
        self.stop: ApprovalRequired | None = None

    @property
    def halted(self) -> bool:
        return self.stop is not None

    async def tools(self) -> Sequence[ToolSpec]:
        return [s for s in await self.toolset.get_tools(self.ctx) if s.name != NAME]

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        if self.stop is not None:  # never ran: not recorded
            return ToolResult("Not run: the program is stopped for an approval.", is_error=True)
        self.made += 1
        if self.replaying and self.made <= len(self.earlier):
            recorded = self.earlier[self.made - 1]
            if recorded.tool == name and dict(recorded.arguments) == dict(arguments):
                return ToolResult(recorded.output, is_error=recorded.is_error, category=recorded.category)
        self.replaying = False  # the program took another path: everything from here runs
        started = time.perf_counter()
        if name == NAME:
            result = ToolResult(f"{NAME} cannot be called from a program.", is_error=True)
        else:
            result = await self._guarded(name, arguments)
        if self.halted:  # the gate stands for this call in the record
            return result
        took = (time.perf_counter() - started) * 1000
        n = len(self.earlier) + len(self.records) + 1
        record = NestedCall(n, name, dict(arguments), result.content, result.is_error, took, result.category)
        self.records.append(record)
        self.notes.extend(result.notes)
        if self.ctx.on_call is not None:  # on the record now, whatever becomes of the program
            self.ctx.on_call(record)
        return result

    async def _guarded(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        # What the program sends never carries an approval: only a human's, kept on the host.
        inner = replace(self.ctx, approved=None, program_tools=None, on_call=None)
        approved: str | None = None
        for _ in range(2):  # asked, then (once) with the approval a human gave for this call
            try:
                return await self.toolset.call_tool(name, arguments, replace(inner, approved=approved))
            except ApprovalRequired as request:
                if approved is not None or self.granted is None or request.call_hash != self.granted:
                    self.stop = request  # the tool changed since it was approved: asked again
                    return ToolResult(_needs_approval(name, arguments, request.reason), is_error=True)
                approved, self.granted = request.call_hash, None  # one approval, one call
        raise AssertionError("unreachable: the second pass returns")


class CodeToolset(WrapperToolset):
    """Outermost: gives ``execute_code`` its calls, records them, and stops a program for an
    approval (then runs it again once the human approved that call)."""

    def __init__(self, wrapped: Toolset, *, max_tool_calls: int) -> None:
        super().__init__(wrapped)
        self.max_tool_calls = max_tool_calls

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        if name != NAME:
            return await self.wrapped.call_tool(name, arguments, ctx)
        waiting = ctx.scope(WAITING, dict[str, Waiting])
        again = waiting.pop(ctx.approved, None) if ctx.approved is not None else None
        if again is None:  # a new program (or the program itself approved)
            return await self._program(arguments, ctx, granted=None, earlier=(), approved=ctx.approved)
        result = await self._program(
            again.arguments, replace(ctx, approved=None), granted=ctx.approved, earlier=again.records,
            approved=again.approved,
        )  # fmt: skip
        shown = "[the call was approved; the program ran again, its earlier calls answered from the record]"
        return replace(result, content=f"{shown}\n{result.content}")

    async def _program(
        self, arguments: Mapping[str, Any], ctx: ToolContext, *, granted: str | None,
        earlier: tuple[NestedCall, ...], approved: str | None,
    ) -> ToolResult:  # fmt: skip
        calls = ProgramCalls(self.wrapped, ctx, self.max_tool_calls, granted=granted, earlier=earlier)
        inner = replace(ctx, program_tools=calls, approved=approved)
        result = await self.wrapped.call_tool(NAME, arguments, inner)
        records = (*earlier, *calls.records)
        stop = calls.stop
        if stop is not None:
            waiting = ctx.scope(WAITING, dict[str, Waiting])
            if len(waiting) >= _MAX_WAITING:
                waiting.pop(next(iter(waiting)))
            waiting[stop.call_hash] = Waiting(dict(arguments), records, approved)
            raise ProgramPaused(
                stop, program=arguments, earlier=records, reason=f"{NAME} calls it: {stop.reason}"
            )
        return replace(result, nested=tuple(calls.records), notes=(*result.notes, *calls.notes))


_MAX_WAITING = 16
