"""The ``bash`` tool: one shell command in the workspace, bounded in time and output.

The command runs in its own session (a new process group), so a timeout or a cancelled run
stops the whole tree it started, background children included. Output (stdout and stderr
merged) is read as it arrives and only a head and a tail are kept, so a command printing
gigabytes costs no more memory than the cap. With a sandbox in the context (``ctx.sandbox``)
the command runs inside it; a sandbox that cannot start refuses the call with the fix.

Result text: the output, then ``exit code: N`` as the last line. A timeout adds a line
``[timed out after N s; ...]`` before it, a cut adds a notice naming how many chars were cut.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import shutil
import signal
import subprocess
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steward.errors import ToolError
from steward.tools._paths import workspace_root
from steward.tools.base import Tool, ToolContext, ToolResult, tool

MAX_TIMEOUT_S = 600.0
"""No command runs longer than this, whatever the configuration or the model asks."""

KILL_GRACE_S = 1.0
"""Time between SIGTERM and SIGKILL for a process group being stopped."""

EOF_GRACE_S = 0.5
"""How long to wait for the output to close once the shell itself has exited."""

_POLL_S = 0.02


def shell_argv(command: str) -> list[str]:
    """The argv that runs ``command``; the sandbox wraps this (and only this) later."""
    shell = shutil.which("bash") or "/bin/sh"
    return [shell, "-c", command]


async def launch(
    argv: Sequence[str], cwd: Path, protocol_factory: Callable[[], asyncio.SubprocessProtocol]
) -> tuple[asyncio.SubprocessTransport, asyncio.SubprocessProtocol]:
    """Start ``argv`` in a new session, stdin from /dev/null, stderr merged into stdout.

    Cancelled while asyncio still connects the pipes, asyncio would kill the shell alone (its
    pid), and whatever the shell had already started would live on: the start is left to finish
    instead, then its whole group is stopped, and the cancellation goes on."""
    loop = asyncio.get_running_loop()
    started = asyncio.ensure_future(
        loop.subprocess_exec(
            protocol_factory,
            *argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    )
    try:
        return await asyncio.shield(started)
    except asyncio.CancelledError:
        await asyncio.shield(stop_started(started))
        raise


async def stop_started(
    started: asyncio.Future[tuple[asyncio.SubprocessTransport, asyncio.SubprocessProtocol]],
) -> None:
    """Once ``started`` is done, stop the process group it started (nothing if it failed)."""
    try:
        transport, _ = await started
    except Exception:  # it never started: nothing runs
        return
    try:
        await stop_group(transport.get_pid())  # start_new_session: the shell leads its group
    finally:
        transport.close()


class CappedOutput:
    """Decodes a byte stream as UTF-8 and keeps only its first and last ``cap // 2`` chars."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.total = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head: list[str] = []
        self._head_len = 0
        self._tail: deque[str] = deque()
        self._tail_len = 0

    def feed(self, data: bytes, *, final: bool = False) -> None:
        text = self._decoder.decode(data, final)
        self.total += len(text)
        if self._head_len < self.head_cap:
            taken = text[: self.head_cap - self._head_len]
            self._head.append(taken)
            self._head_len += len(taken)
            text = text[len(taken) :]
        if text:
            self._tail.append(text)
            self._tail_len += len(text)
            # Drop whole chunks only while what is left still covers the tail.
            while self._tail_len - len(self._tail[0]) >= self.tail_cap:
                self._tail_len -= len(self._tail.popleft())

    def text(self) -> str:
        head = "".join(self._head)
        tail = "".join(self._tail)
        if self.total <= self.head_cap + self.tail_cap:
            return head + tail
        tail = tail[len(tail) - self.tail_cap :]
        # Cut at line ends when one is near, so no half lines sit next to the notice.
        head_end = head.rfind("\n", len(head) * 3 // 4)
        head = head[:head_end] if head_end != -1 else head
        tail_start = tail.find("\n", 0, len(tail) // 4)
        tail = tail[tail_start + 1 :] if tail_start != -1 else tail
        cut = self.total - len(head) - len(tail)
        return (
            f"{head}\n[... {cut} chars cut: the output was {self.total} chars, showing the first "
            f"{len(head)} and the last {len(tail)}. Redirect output to a file and use grep or read_file "
            f"to see the rest ...]\n{tail}"
        )


class _Collector(asyncio.SubprocessProtocol):
    """Feeds the child's output into a CappedOutput and signals exit and end of output."""

    def __init__(self, output: CappedOutput, loop: asyncio.AbstractEventLoop) -> None:
        self.output = output
        self.exited: asyncio.Future[None] = loop.create_future()
        self.eof: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | bytearray) -> None:
        self.output.feed(bytes(data))

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if not self.eof.done():
            self.eof.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


_PROC = Path("/proc")


def _group_alive(pgid: int) -> bool:
    """True while a member of the group runs. Zombies do not count: killed children reparented
    to an init that reaps slowly (or never, in some containers) would otherwise look alive."""
    try:
        os.killpg(pgid, 0)  # the common case, a group with no member left, without reading /proc
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed user (setuid); it still exists
        pass
    if _PROC.is_dir():  # a member exists: running, or a zombie nobody reaped yet
        with os.scandir(_PROC) as entries:
            return any(_is_running_member(entry.name, pgid) for entry in entries if entry.name.isdigit())
    return True


def _is_running_member(pid: str, pgid: int) -> bool:
    try:
        stat = (_PROC / pid / "stat").read_text()
    except OSError:  # exited while we looked
        return False
    # Fields after the command name, which may itself hold ')': state, ppid, pgrp, ...
    fields = stat.rpartition(")")[2].split()
    return len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z"


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


async def stop_group(pgid: int) -> bool:
    """SIGTERM the process group, SIGKILL what is left after a grace; True if any was running."""
    if not _group_alive(pgid):
        return False
    _signal_group(pgid, signal.SIGTERM)
    # No event tells when a whole group is gone, so poll, a bounded number of times.
    for _ in range(round(KILL_GRACE_S / _POLL_S)):
        if not _group_alive(pgid):
            break
        await asyncio.sleep(_POLL_S)
    _signal_group(pgid, signal.SIGKILL)
    return True


async def _wait(future: asyncio.Future[None], seconds: float) -> None:
    # asyncio.wait leaves the future alone on timeout, unlike wait_for.
    await asyncio.wait([future], timeout=seconds)


@dataclass(slots=True, frozen=True)
class CommandOutcome:
    """What a finished (or timed-out) command left behind."""

    output: str
    returncode: int | None
    timed_out: bool
    leftovers: bool
    """Processes of the command's group were still running after the shell exited, and were stopped."""


async def run_command(argv: Sequence[str], cwd: Path, *, timeout_s: float, cap_chars: int) -> CommandOutcome:
    """Run ``argv`` to completion or timeout; whatever happens, its process group is stopped."""
    loop = asyncio.get_running_loop()
    output = CappedOutput(cap_chars)
    transport, protocol = await launch(argv, cwd, lambda: _Collector(output, loop))
    assert isinstance(protocol, _Collector)
    pgid = transport.get_pid()  # start_new_session makes the child the leader of its own group
    try:
        timed_out = False
        try:
            async with asyncio.timeout(timeout_s):
                await protocol.exited
        except TimeoutError:
            timed_out = True
        else:
            # Background children may still hold the output open; give them a moment to finish.
            await _wait(protocol.eof, EOF_GRACE_S)
        leftovers = await stop_group(pgid)
        await _wait(protocol.exited, KILL_GRACE_S)
        await _wait(protocol.eof, EOF_GRACE_S)
    except asyncio.CancelledError:
        try:
            # Shielded so that a second cancellation cannot leave the tree half stopped.
            await asyncio.shield(stop_group(pgid))
        finally:
            transport.close()
        raise
    transport.close()
    output.feed(b"", final=True)
    return CommandOutcome(output.text(), transport.get_returncode(), timed_out, leftovers)


def _exit_line(returncode: int | None) -> str:
    if returncode is None:
        return "exit code: unknown"
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"exit code: {returncode} (killed by {signal.Signals(-returncode).name})"
    return f"exit code: {returncode}"


def _sandboxed(
    ctx: ToolContext, argv: list[str], cwd: Path, noted: list[tuple[str, str]], refused: list[str]
) -> AbstractAsyncContextManager[list[str]]:
    """The sandbox's argv for ``argv``, or ``argv`` itself when the user turned the sandbox off.

    Each connection through the egress proxy is noted in ``noted`` (the result's notes: events
    in the run's log); refused ones are also collected in ``refused``: the programs that made
    them rarely show the reason."""

    def heard(connection: Any) -> None:
        line = connection.line()
        noted.append(("egress", line))
        if not connection.allowed and len(refused) < 20:
            refused.append(line)

    if ctx.sandbox is None:
        return contextlib.nullcontext(argv)
    return ctx.sandbox.command(
        argv, workspace=cwd, network=ctx.allow_network, writable=ctx.writable, on_connection=heard
    )


@tool
async def bash(ctx: ToolContext, command: str, timeout_s: float | None = None) -> ToolResult:
    """Run a shell command with bash in the workspace root and return its output.

    stdout and stderr are merged; stdin is empty, so interactive prompts get end-of-file.
    The last line of the result is 'exit code: N'. Each call starts a fresh shell (cd and
    variables do not carry over), and background processes (&) are stopped when the command
    returns. Long output keeps its beginning and end with a notice in the middle.

    Args:
        command: The command line, e.g. 'pytest -q tests/test_app.py' or 'ls -la src | head'.
        timeout_s: Seconds before the command and all its child processes are killed. Default: the
            configured limit (120 s unless changed); at most 600.
    """
    if timeout_s is not None and not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise ToolError(f"timeout_s must be more than 0 and at most {MAX_TIMEOUT_S:g} (got {timeout_s:g}).")
    limit = min(timeout_s if timeout_s is not None else ctx.settings.bash_timeout_s, MAX_TIMEOUT_S)
    cwd = workspace_root(ctx.workspace)
    noted: list[tuple[str, str]] = []
    refused: list[str] = []
    async with _sandboxed(ctx, shell_argv(command), cwd, noted, refused) as argv:
        outcome = await run_command(argv, cwd, timeout_s=limit, cap_chars=ctx.settings.output_cap_chars)
    lines = [outcome.output.removesuffix("\n") if outcome.output else "(no output)"]
    lines.extend(f"[egress proxy: {line}]" for line in refused)
    if outcome.timed_out:
        lines.append(
            f"[timed out after {limit:g} s; the command and all its child processes were stopped. "
            f"Pass a larger timeout_s (at most {MAX_TIMEOUT_S:g}) if it needs longer]"
        )
    elif outcome.leftovers:
        lines.append("[background processes still running when the command exited were stopped]")
    lines.append(_exit_line(outcome.returncode))
    failed = outcome.timed_out or outcome.returncode != 0
    return ToolResult("\n".join(lines), is_error=failed, notes=tuple(noted))


def shell_tools() -> list[Tool]:
    """The shell tools: bash."""
    return [bash]
