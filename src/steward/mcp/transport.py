"""The stdio transport for MCP servers: a subprocess speaking newline-delimited JSON-RPC.

Ours rather than the SDK's ``stdio_client`` because the agent needs three things it does not
give: knowing at once that the server died (a pending call otherwise waits for its timeout),
the tail of the server's stderr to explain why, and lines that are not JSON counted and shown
instead of logged as tracebacks on the user's terminal.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import mcp_types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

# The server gets this long to exit after its stdin closes, then SIGTERM, then SIGKILL.
_EXIT_GRACE_S = 1.0
_TERM_GRACE_S = 1.0
_STDERR_KEEP = 4_000  # characters of the server's stderr kept for error messages
_LINE_LIMIT = 64 * 1024 * 1024  # a "line" longer than this is garbage, not a message


@dataclass(slots=True)
class ProcessWatch:
    """What the agent knows about a server process while it runs and after it ended."""

    pid: int | None = None
    returncode: int | None = None
    ended: anyio.Event = field(default_factory=anyio.Event)
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=64))
    garbage: deque[str] = field(default_factory=lambda: deque(maxlen=5))
    garbage_count: int = 0

    def stderr_tail(self) -> str:
        text = "".join(self.stderr).strip()
        return text[-_STDERR_KEEP:]

    def describe_end(self) -> str:
        parts = []
        if self.returncode is not None:
            parts.append(
                f"killed by signal {-self.returncode}"
                if self.returncode < 0
                else f"exit status {self.returncode}"
            )
        tail = self.stderr_tail()
        if tail:
            last = tail.splitlines()[-3:]
            parts.append("stderr: " + " | ".join(line.strip() for line in last)[-400:])
        if self.garbage_count:
            parts.append(f"{self.garbage_count} line(s) of its output were not JSON-RPC")
        return "; ".join(parts)


@contextlib.asynccontextmanager
async def stdio_transport(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | None, watch: ProcessWatch
) -> AsyncIterator[TransportStreams]:
    """Start ``argv`` and yield the session's streams; stop the whole process group on exit."""
    process = await anyio.open_process(
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdin=-1,
        stdout=-1,
        stderr=-1,
        start_new_session=True,  # its own process group: stopping it stops its children too
    )
    watch.pid = process.pid
    to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    to_server, from_session = anyio.create_memory_object_stream[SessionMessage](16)

    async def read_stdout() -> None:
        try:
            async with to_session:
                await _pump_stdout(process, to_session, watch)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            watch.returncode = await _reap(process)
            watch.ended.set()

    async def read_stderr() -> None:
        assert process.stderr is not None
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for chunk in process.stderr:
                watch.stderr.append(chunk.decode("utf-8", "replace"))

    async def write_stdin() -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read_stdout)
        tasks.start_soon(read_stderr)
        tasks.start_soon(write_stdin)
        try:
            yield from_server, to_server
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
                watch.returncode = process.returncode
                watch.ended.set()
            tasks.cancel_scope.cancel()


async def _pump_stdout(
    process: anyio.abc.Process,
    to_session: MemoryObjectSendStream[SessionMessage | Exception],
    watch: ProcessWatch,
) -> None:
    """Forward each line of the server's stdout that is a JSON-RPC message; count the rest."""
    assert process.stdout is not None
    buffer = bytearray()  # appended to in place and searched only where new bytes came: linear
    async for chunk in process.stdout:
        start = len(buffer)
        buffer += chunk
        if b"\n" not in chunk:
            if len(buffer) > _LINE_LIMIT:
                _garbage(watch, bytes(buffer[:200]).decode("utf-8", "replace"))
                buffer = bytearray()
            continue
        end = buffer.rindex(b"\n", start)
        lines, buffer = bytes(buffer[:end]).split(b"\n"), buffer[end + 1 :]
        for raw in lines:
            message = _parse(raw, watch)
            if message is not None:
                await to_session.send(message)


def _parse(raw: bytes, watch: ProcessWatch) -> SessionMessage | None:
    line = raw.strip()
    if not line:
        return None
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError:
        # A stray print() in a server is common; the conversation goes on without that line.
        _garbage(watch, line[:200].decode("utf-8", "replace"))
        return None


def _garbage(watch: ProcessWatch, sample: str) -> None:
    watch.garbage_count += 1
    watch.garbage.append(sample)


async def _reap(process: anyio.abc.Process) -> int | None:
    # stdout closed: the process is ending (or closed stdout on purpose); give it a moment.
    with anyio.move_on_after(_EXIT_GRACE_S):
        return await process.wait()
    return process.returncode


async def _stop(process: anyio.abc.Process) -> None:
    """Close stdin (the polite stop), then SIGTERM and SIGKILL the process group."""
    if process.stdin is not None:
        with contextlib.suppress(Exception):
            await process.stdin.aclose()
    with anyio.move_on_after(_EXIT_GRACE_S):
        await process.wait()
        _kill_group(process.pid, signal.SIGKILL)  # leftovers of a server that exited
        return
    _kill_group(process.pid, signal.SIGTERM)
    with anyio.move_on_after(_TERM_GRACE_S):
        await process.wait()
        _kill_group(process.pid, signal.SIGKILL)
        return
    _kill_group(process.pid, signal.SIGKILL)
    with anyio.move_on_after(_TERM_GRACE_S):
        await process.wait()


def _kill_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def child_environment(
    base: Mapping[str, str], *, set_vars: Mapping[str, str], passthrough: Sequence[str]
) -> dict[str, str]:
    """The environment a stdio server gets: an allowlist, never the agent's own secrets.

    ``set_vars`` values may name our variables as ``${NAME}`` (how a token reaches one server
    without reaching the others).
    """
    env = {name: base[name] for name in SAFE_ENV if name in base and not base[name].startswith("()")}
    env.update({name: base[name] for name in passthrough if name in base})
    env.update({name: expand(value, base) for name, value in set_vars.items()})
    return env


#: What every stdio server may see of our environment: enough to find programs and a home.
SAFE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")


def expand(value: str, environ: Mapping[str, str]) -> str:
    """Replace ``${NAME}`` with our variable NAME (unset: an error naming it)."""
    import re

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise KeyError(name)
        return environ[name]

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", one, value)
