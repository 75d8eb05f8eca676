"""One configured MCP server: started on first use, watched, stopped, restarted.

The SDK's ``Client`` must be entered and left in the same task (its task groups are bound to
it), so each connection lives in an owner task that holds it open until told to stop. Calls
come from the runs' tasks and race the server's death and their timeout: a crashed server
fails its pending call at once, a hung one is stopped at the deadline, and either is started
again by the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from steward.config import McpServerConfig

if TYPE_CHECKING:
    import mcp_types

    from mcp import Client
    from steward.config import SandboxConfig
    from steward.mcp.transport import ProcessWatch

T = TypeVar("T")

State = Literal["stopped", "starting", "ready", "failed"]

#: After a failed start, listing tools does not try again for this long (each step lists
#: tools; a broken server must not cost every step its start-up timeout). Calls always retry.
RETRY_START_AFTER_S = 30.0
_MAX_PAGES = 100  # pages of a listing read before giving up on a server that never ends it


class McpCallError(Exception):
    """A call to a server failed; ``kind`` tells how, for the model and for the error category."""

    def __init__(
        self, kind: Literal["down", "timeout", "protocol", "config"], message: str, *, sent: bool = True
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message.rstrip(" .")
        #: Whether the request reached the server (False: it could not be started or reached,
        #: so the call certainly did nothing).
        self.sent = sent


@dataclass(slots=True)
class Progress:
    """The latest progress a server reported for one call (kept small: servers may send many)."""

    updates: int = 0
    progress: float = 0.0
    total: float | None = None
    message: str | None = None

    def render(self) -> str:
        amount = f"{self.progress:g}/{self.total:g}" if self.total else f"{self.progress:g}"
        text = f"{amount}{f' {self.message}' if self.message else ''}"
        return f"{text} ({self.updates} update{'s' if self.updates != 1 else ''})"


@dataclass(slots=True)
class Listing:
    tools: list[mcp_types.Tool] = field(default_factory=list)
    fresh: bool = False


class McpServer:
    """A server's connection and what it offers. Constructing it starts nothing."""

    def __init__(self, name: str, config: McpServerConfig, *, sandbox: SandboxConfig | None = None) -> None:
        self.name = name
        self.config = config
        self.sandbox = sandbox  # the [sandbox] settings, set only when the server runs sandboxed
        self.state: State = "stopped"
        self.problem = ""  # why it is not ready, for the model and `steward mcp list`
        self.problem_kind: Literal["down", "timeout", "protocol", "config"] = "down"
        self.starts = 0
        self.listing = Listing()
        self.resources_changed = False
        self.prompts_changed = False
        self.server_name = ""
        self.instructions = ""
        self.capabilities: mcp_types.ServerCapabilities | None = None
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._watch: ProcessWatch | None = None
        self._lock = asyncio.Lock()
        self._failed_at = 0.0

    def is_ready(self) -> bool:
        return self.state == "ready"

    @property
    def transport(self) -> str:
        return "http" if self.config.url else "stdio"

    def timeout_for(self, tool: str | None) -> float:
        if tool is not None and tool in self.config.tool_timeouts:
            return self.config.tool_timeouts[tool]
        return self.config.call_timeout_s

    # --- lifecycle --------------------------------------------------------------------------

    def should_start_for_listing(self) -> bool:
        if self.state in ("ready", "starting"):
            return False
        if self.state == "stopped":
            return True
        return time.monotonic() - self._failed_at >= RETRY_START_AFTER_S

    async def ensure(self, workspace: Path) -> Client:
        """The live client, starting (or restarting) the server when needed."""
        async with self._lock:
            if self.state == "ready" and self._client is not None and not self._ended():
                return self._client
            if self.state == "ready":  # it died since the last call
                await self._shutdown()
            return await self._start(workspace)

    def _ended(self) -> bool:
        return self._watch is not None and self._watch.ended.is_set()

    async def _start(self, workspace: Path) -> Client:
        from steward.mcp.transport import ProcessWatch

        self.state, self.starts = "starting", self.starts + 1
        self._watch = ProcessWatch() if not self.config.url else None
        self._stop = asyncio.Event()
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._owner = asyncio.create_task(self._own(workspace, ready), name=f"mcp:{self.name}")
        try:
            client = await self._race(ready, self.config.startup_timeout_s, starting=True)
        except McpCallError as failure:
            await self._shutdown()
            self._fail(failure.message, failure.kind)
            failure.sent = False
            raise
        except BaseException:
            await self._shutdown()
            self._fail("its start was cancelled")
            raise
        self._client, self.state, self.problem = client, "ready", ""
        self.capabilities = client.server_capabilities
        info = client.server_info
        self.server_name = f"{info.name} {info.version}".strip() if info is not None else ""
        self.instructions = client.instructions or ""
        self.listing.fresh = False
        return client

    def _fail(self, problem: str, kind: Literal["down", "timeout", "protocol", "config"] = "down") -> None:
        self.state, self.problem, self._failed_at = "failed", problem.rstrip(" ."), time.monotonic()
        self.problem_kind = kind
        self._client = None

    def failure(self) -> McpCallError:
        """Why the server is not ready, as the error a call to it gets (nothing was sent)."""
        return McpCallError(self.problem_kind, self.problem or "it is not running", sent=False)

    async def _own(self, workspace: Path, ready: asyncio.Future[Client]) -> None:
        """Hold the connection open (entered and left in this one task) until told to stop."""
        from mcp_types import Implementation

        from mcp import Client

        assert self._stop is not None
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = await self._transport(stack, workspace)
                client = Client(
                    transport,
                    message_handler=self._on_message,
                    client_info=Implementation(name="steward", version="0.1"),
                    cache=None,  # we keep the listings ourselves, refreshed on list_changed
                    read_timeout_seconds=None,
                )
                await stack.enter_async_context(client)
                if not ready.done():
                    ready.set_result(client)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(_startup_failure(self, exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if self.state == "ready" and (self._stop is None or not self._stop.is_set()):
                self._fail(self._down_reason("the connection ended"))

    async def _transport(self, stack: contextlib.AsyncExitStack, workspace: Path) -> Any:
        cfg = self.config
        if cfg.url:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            from steward.mcp.transport import expand

            with _unset_variable(self.name, "headers"):
                headers = {k: expand(v, os.environ) for k, v in cfg.headers.items()}
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=headers, timeout=cfg.call_timeout_s)
            )
            return streamable_http_client(cfg.url, http_client=http)
        from steward.mcp.transport import child_environment, expand, stdio_transport

        with _unset_variable(self.name, "env"):
            env = child_environment(os.environ, set_vars=cfg.env, passthrough=cfg.env_passthrough)
        with _unset_variable(self.name, "args"):
            argv = [str(cfg.command), *(expand(a, os.environ) for a in cfg.args)]
        cwd = (workspace / cfg.cwd) if cfg.cwd else workspace
        if self.sandbox is not None:
            from steward.mcp.sandboxing import server_sandbox

            jail, writable = server_sandbox(cfg, self.sandbox, workspace)
            argv = await stack.enter_async_context(
                jail.command(argv, workspace=workspace, network=cfg.network, writable=writable, env=env)
            )
        assert self._watch is not None
        return stdio_transport(argv, env=env, cwd=cwd, watch=self._watch)

    async def _on_message(self, message: Any) -> None:
        import mcp_types

        match message:
            case mcp_types.ToolListChangedNotification():
                self.listing.fresh = False
            case mcp_types.ResourceListChangedNotification():
                self.resources_changed = True
            case mcp_types.PromptListChangedNotification():
                self.prompts_changed = True
            case _:
                pass

    async def stop(self) -> None:
        async with self._lock:
            await self._shutdown()
            self.state, self.problem = "stopped", ""

    async def _shutdown(self) -> None:
        holding = self._client is not None  # past the handshake: the owner waits for _stop
        owner, self._owner, self._client = self._owner, None, None
        if self._stop is not None:
            self._stop.set()
        if owner is not None and not owner.done() and not holding:
            owner.cancel()  # stuck in the handshake: only a cancel ends it (its exit stops the process)
        if owner is not None and not owner.done():
            try:
                await asyncio.wait_for(asyncio.shield(owner), timeout=5.0)
            except (TimeoutError, asyncio.CancelledError, Exception):
                owner.cancel()
                with contextlib.suppress(BaseException):
                    await owner

    # --- calls ------------------------------------------------------------------------------

    async def call(
        self, workspace: Path, what: str, op: Callable[[Client], Awaitable[T]], limit_s: float
    ) -> T:
        """Run ``op`` on the live client; the server's death or ``timeout`` fail it at once."""
        client = await self.ensure(workspace)
        task = asyncio.ensure_future(op(client))
        try:
            return await self._race(task, limit_s, what=what)
        except McpCallError as failure:
            if failure.kind in ("down", "timeout"):
                # A hung or dead server would fail every later call too: stop it now, the
                # next call starts a fresh one.
                async with self._lock:
                    await self._shutdown()
                    self._fail(failure.message)
            raise

    async def _race(
        self, work: asyncio.Future[T], limit_s: float, *, what: str = "", starting: bool = False
    ) -> T:
        watch = self._watch
        ended = asyncio.ensure_future(watch.ended.wait()) if watch is not None else None
        owner = self._owner if starting else None
        waiting: set[asyncio.Future[Any]] = {work, *(f for f in (ended, owner) if f is not None)}
        try:
            done, _ = await asyncio.wait(waiting, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            work.cancel()
            raise
        finally:
            if ended is not None:
                ended.cancel()
        if work in done:
            if watch is not None and _connection_closed(work):
                # The SDK fails pending calls as soon as stdout closes; the exit status and
                # stderr come a moment later and say why.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(watch.ended.wait(), 2.0)
            return _result(self, work, what)
        work.cancel()
        with contextlib.suppress(BaseException):
            await work
        if starting and owner is not None and owner in done and not (ended and ended in done):
            raise _startup_failure(self, owner.exception() if not owner.cancelled() else None)
        if not done:
            verb = "start" if starting else f"answer {what}"
            raise McpCallError(
                "timeout",
                f"MCP server '{self.name}' did not {verb} within {limit_s:g} s; it was stopped and will "
                "be started again on the next call",
            )
        raise McpCallError("down", self._down_reason("stopped" if not starting else "exited while starting"))

    def _down_reason(self, what: str) -> str:
        detail = self._watch.describe_end() if self._watch is not None else ""
        hint = ""
        if self.sandbox is not None and self.state == "starting":
            hint = (
                f"; it runs sandboxed: the files it needs must be in the workspace or listed in readable "
                f"under [mcp_servers.{self.name}]"
            )
        return f"MCP server '{self.name}' {what}{f' ({detail})' if detail else ''}{hint}"

    async def list_tools(self, workspace: Path, limit_s: float) -> list[mcp_types.Tool]:
        """The server's tools, listed again only after it said they changed (or restarted)."""
        if self.listing.fresh and self.state == "ready":
            return self.listing.tools

        async def every_page(client: Client) -> list[mcp_types.Tool]:
            tools: list[mcp_types.Tool] = []
            cursor: str | None = None
            for _ in range(_MAX_PAGES):
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            return tools

        self.listing.fresh = True  # set first: a change announced while listing marks it stale again
        try:
            self.listing.tools = await self.call(workspace, "tools/list", every_page, limit_s)
        except BaseException:
            self.listing.fresh = False
            raise
        return self.listing.tools


@contextlib.contextmanager
def _unset_variable(server: str, key: str) -> Iterator[None]:
    """A ``${NAME}`` in ``key`` that names an unset variable is a config error naming it."""
    try:
        yield
    except KeyError as missing:
        raise McpCallError(
            "config",
            f"[mcp_servers.{server}] {key} uses ${{{missing.args[0]}}}, which is not set; "
            f"export {missing.args[0]} or change the value",
        ) from None


def _connection_closed(work: asyncio.Future[Any]) -> bool:
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    exc = work.exception() if not work.cancelled() else None
    return isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED


def _result(server: McpServer, work: asyncio.Future[T], what: str) -> T:
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    try:
        return work.result()
    except MCPError as exc:
        if server._ended() or exc.code == CONNECTION_CLOSED:
            raise McpCallError("down", server._down_reason("stopped")) from None
        raise McpCallError(
            "protocol",
            f"MCP server '{server.name}' refused {what} (JSON-RPC error {exc.code}): {exc.message}",
        ) from None
    except McpCallError:
        raise
    except Exception as exc:
        if server._ended():
            raise McpCallError("down", server._down_reason("stopped")) from None
        raise McpCallError(
            "protocol",
            f"MCP server '{server.name}' sent a reply to {what} that breaks the protocol "
            f"({type(exc).__name__}: {_first_line(exc)})",
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _startup_failure(server: McpServer, exc: BaseException | None) -> McpCallError:
    """A readable reason a server could not start (anyio wraps errors in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, McpCallError):
        return exc
    where = f"[mcp_servers.{server.name}]"
    if isinstance(exc, FileNotFoundError | PermissionError | NotADirectoryError):
        what = server.config.command if not isinstance(exc, NotADirectoryError) else server.config.cwd
        return McpCallError(
            "config",
            f"MCP server '{server.name}' cannot start: {exc.strerror} ({what}); fix command or cwd in "
            f"{where}",
        )
    if server._watch is not None and server._watch.ended.is_set():
        return McpCallError("down", server._down_reason("exited while starting"))
    detail = f"{type(exc).__name__}: {_first_line(exc)}" if exc is not None else "it stopped"
    if server.config.url:
        return McpCallError(
            "down",
            f"MCP server '{server.name}' at {server.config.url} cannot be reached ({detail}); is it running?",
        )
    return McpCallError("down", f"MCP server '{server.name}' failed to start ({detail})")
