"""The egress proxy: the only way out of a sandbox that was granted the network.

Every sandboxed command runs in its own network namespace (only loopback inside). When the
policy grants a call the network, Steward serves one ``EgressProxy.listen`` UNIX socket for
that call on the host and binds it into the sandbox; ``forward.py`` (``FORWARDER_SCRIPT``)
relays ``127.0.0.1:PORT`` inside to it, and ``proxy_env(PORT)`` points curl, git, pip, npm
and the rest at it. The proxy speaks HTTP ``CONNECT`` (tunnels, for https and anything else
over TCP) and plain HTTP in absolute form (``GET http://host/path``, forwarded in origin form
with ``Connection: close``).

What may be reached, in order, each step holding on its own:

1. ``DomainAllowlist``: the host must be a domain name on ``[sandbox] allowed_domains``
   (exact names, ``*.example.com`` for any depth of subdomain but not the apex). An IP
   literal (also the legacy spellings ``127.1`` or ``0x7f000001``) never matches.
2. ``EgressGuard`` resolves the name on the host and keeps only addresses that
   ``address_allowed`` accepts: globally routable unicast, with IPv4 hidden in IPv6
   (mapped, compatible, 6to4, NAT64, Teredo) unwrapped and checked too. Loopback, private,
   link-local (cloud metadata at 169.254.169.254), reserved and multicast are never reached.
   Abstract and other UNIX sockets are out of reach by construction: the proxy only dials TCP.
3. The connection goes to the checked address itself: nothing resolves the name again, so a
   DNS answer that changes between check and use (rebinding) cannot redirect it.

``fetch_url`` (``steward.tools.web``) uses the same allowlist and guard (``steward.tools.reach``).
Every connection attempt, allowed or not, is reported once as an ``EgressConnection``.
Ports are not restricted: an allowed domain is reachable on any TCP port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from steward.tools.reach import (
    ALLOWED_DOMAINS_KEY,
    CONNECT_TIMEOUT_S,
    NEVER_REACHABLE,
    AddressCheck,
    DomainAllowlist,
    EgressError,
    EgressGuard,
    IPAddress,
    Resolver,
    address_allowed,
    domain_fix,
    is_ip_literal,
    normalize_host,
    system_resolver,
)

__all__ = [
    "ALLOWED_DOMAINS_KEY",
    "FORWARDER_SCRIPT",
    "NEVER_REACHABLE",
    "SANDBOX_PROXY_PORT",
    "AddressCheck",
    "DomainAllowlist",
    "EgressConnection",
    "EgressError",
    "EgressGuard",
    "EgressListener",
    "EgressProxy",
    "IPAddress",
    "Resolver",
    "address_allowed",
    "domain_fix",
    "forwarder_argv",
    "is_ip_literal",
    "normalize_host",
    "proxy_env",
    "system_resolver",
]

FORWARDER_SCRIPT = Path(__file__).with_name("forward.py")
"""The stdlib-only relay run inside the sandbox: ``python -I -S forward.py PORT SOCKET``."""
SANDBOX_PROXY_PORT = 3128
"""The loopback port inside the sandbox where the forwarder listens (its own network namespace,
so any free port works; 3128 is the port proxies are conventionally found on)."""

HEADER_LIMIT = 64 * 1024
MAX_HEADERS = 100
MAX_CONNECTIONS = 64
HEAD_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 300.0
_CHUNK = 64 * 1024
_REPLY_TIMEOUT_S = 5.0
_LINGER_BYTES = 1024 * 1024
_CLOSE_TIMEOUT_S = 5.0

_log = logging.getLogger(__name__)


# --- what each connection did --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EgressConnection:
    """One connection attempt through the proxy, reported when it ends."""

    method: str  #: "CONNECT", "GET", ...; "" when no request could be read
    host: str
    port: int
    address: str | None  #: the address connected to, None when none was
    allowed: bool  #: whether the checks let it through
    reason: str  #: why it was refused or failed; "" when all went well
    bytes_up: int  #: client to server, the forwarded request head included
    bytes_down: int  #: server to client
    duration_s: float

    def line(self) -> str:
        """One line for logs and events."""
        where = f"{self.host}:{self.port}" if self.host else "(no request)"
        via = f" via {self.address}" if self.address else ""
        verdict = "allowed" if self.allowed else "refused"
        text = f"{self.method or '-'} {where}{via} {verdict}"
        text += f", {self.bytes_up} B up, {self.bytes_down} B down, {self.duration_s:.2f} s"
        return f"{text}: {self.reason}" if self.reason else text


@dataclass(slots=True)
class _Record:
    started: float
    method: str = ""
    host: str = ""
    port: int = 0
    address: str | None = None
    allowed: bool = False
    reason: str = ""
    up: int = 0
    down: int = 0

    def frozen(self) -> EgressConnection:
        return EgressConnection(
            self.method, self.host, self.port, self.address, self.allowed, self.reason,
            self.up, self.down, round(time.monotonic() - self.started, 6),
        )  # fmt: skip


# --- parsing a request head ----------------------------------------------------------------

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_REQUEST_LINE = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+) (\S+) (HTTP/1\.[01])")
_BAD_BYTES = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
# Hop-by-hop headers: they describe the client's connection to us, not the request.
_HOP_BY_HOP = frozenset(
    {b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization", b"proxy-authenticate",
     b"te", b"upgrade", b"host"}
)  # fmt: skip
_STATUS_TEXT = {
    400: "Bad Request", 403: "Forbidden", 408: "Request Timeout", 431: "Request Header Fields Too Large",
    502: "Bad Gateway", 503: "Service Unavailable",
}  # fmt: skip


class _BadRequestError(Exception):
    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass(slots=True)
class _Request:
    method: str
    target: str
    version: str
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


async def _read_head(reader: asyncio.StreamReader, timeout_s: float) -> _Request:
    """Read and parse one request head, line by line, bounded in size, count and time."""
    size = 0
    async with asyncio.timeout(timeout_s):
        first = await _read_line(reader, size)
        size += len(first)
        match = _REQUEST_LINE.fullmatch(first[:-2])
        if match is None:
            raise _BadRequestError("the request line is not `METHOD TARGET HTTP/1.1`")
        method, target, version = (part.decode("ascii") for part in match.groups())
        request = _Request(method, target, version)
        for _ in range(MAX_HEADERS + 1):
            line = await _read_line(reader, size)
            size += len(line)
            if line == b"\r\n":
                return request
            if line[:1] in (b" ", b"\t"):
                raise _BadRequestError("folded header lines are not accepted")
            name, colon, value = line[:-2].partition(b":")
            if not colon or _TOKEN.fullmatch(name) is None:
                raise _BadRequestError("a header line is not `Name: value`")
            request.headers.append((name, value.strip(b" \t")))
    raise _BadRequestError(f"more than {MAX_HEADERS} header lines", 431)


async def _read_line(reader: asyncio.StreamReader, size: int) -> bytes:
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise _BadRequestError(f"the request head is larger than {HEADER_LIMIT // 1024} KiB", 431) from None
    except asyncio.IncompleteReadError as exc:
        # Closing before sending anything is not an error to answer; closing midway is.
        ended_early = bool(exc.partial) or size > 0
        raise _BadRequestError(
            "the connection closed before the request head ended" if ended_early else ""
        ) from None
    if size + len(line) > HEADER_LIMIT:
        raise _BadRequestError(f"the request head is larger than {HEADER_LIMIT // 1024} KiB", 431)
    if not line.endswith(b"\r\n") or _BAD_BYTES.search(line[:-2]):
        raise _BadRequestError("the request head has control characters or lines not ended by CRLF")
    return line


def _connect_target(target: str) -> tuple[str, int]:
    """``host:port`` of a CONNECT request."""
    host, colon, port = target.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise _BadRequestError(f"CONNECT needs host:port, got {target!r}")
    return host.strip("[]") if host.startswith("[") else host, int(port)


def _absolute_target(target: str) -> tuple[str, int, str, str]:
    """``(host, port, authority, origin-form target)`` of a plain-HTTP absolute-form request."""
    if target.lower().startswith("https://"):
        raise _BadRequestError("https goes through CONNECT; set HTTPS_PROXY to this proxy")
    if not target.lower().startswith("http://"):
        raise _BadRequestError(
            "this is a proxy: send absolute URLs (GET http://host/path) or CONNECT host:port"
        )
    parts = urlsplit(target)
    if "@" in parts.netloc:
        raise _BadRequestError("credentials in the URL are not supported; send an Authorization header")
    try:
        port = 80 if parts.port is None else parts.port
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise _BadRequestError(f"the port in {target!r} is not valid")
    if not parts.hostname:
        raise _BadRequestError(f"{target!r} has no host")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname, port, parts.netloc, path


def _forwarded_head(request: _Request, authority: str, path: str) -> bytes:
    named = {
        token.strip().lower()
        for name, value in request.headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    lines = [
        f"{request.method} {path} {request.version}".encode("ascii"),
        b"Host: " + authority.encode("ascii"),
    ]
    lines += [
        name + b": " + value
        for name, value in request.headers
        if name.lower() not in _HOP_BY_HOP and name.lower() not in named
    ]
    # One request per client connection: the server closes after its answer, and so do we.
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _reply(status: int, text: str) -> bytes:
    body = f"Steward egress proxy: {text}\n".encode()
    head = (
        f"HTTP/1.1 {status} {_STATUS_TEXT.get(status, 'Error')}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


# --- the proxy -----------------------------------------------------------------------------


@dataclass(slots=True)
class EgressListener:
    """One listening socket of the proxy (one per tool call)."""

    path: Path
    #: Connections being served now.
    active: int = 0
    #: Connection attempts reported so far.
    served: int = 0
    #: Set when the listener closes; a connection whose handler starts later is refused.
    closed: bool = False
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)


class EgressProxy:
    """The host side of sandbox egress: HTTP CONNECT and plain HTTP, checked by an ``EgressGuard``.

    ``async with proxy.listen(path, on_connection) as listener:`` serves one UNIX socket until
    the block ends; then the socket is removed and open tunnels are closed. ``on_connection``
    receives one ``EgressConnection`` per connection attempt (allowed or refused) as it ends.
    """

    __slots__ = ("guard", "head_timeout_s", "idle_timeout_s", "max_connections")

    def __init__(
        self,
        allowlist: DomainAllowlist | Iterable[str],
        *,
        resolve: Resolver = system_resolver,
        address_ok: AddressCheck = address_allowed,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        head_timeout_s: float = HEAD_TIMEOUT_S,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        domains = allowlist if isinstance(allowlist, DomainAllowlist) else DomainAllowlist(allowlist)
        self.guard = EgressGuard(
            domains, resolve=resolve, address_ok=address_ok, connect_timeout_s=connect_timeout_s
        )
        self.head_timeout_s = head_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_connections = max_connections

    @contextlib.asynccontextmanager
    async def listen(
        self, socket_path: str | os.PathLike[str], on_connection: Callable[[EgressConnection], None]
    ) -> AsyncIterator[EgressListener]:
        """Serve ``socket_path`` (created, mode 0600; it should be in a private directory)."""
        path = Path(socket_path)
        if len(os.fsencode(path)) > 107:
            raise ValueError(
                f"The socket path {str(path)!r} is longer than a UNIX socket allows (107 bytes); "
                "use a shorter directory, e.g. one from tempfile.mkdtemp()."
            )
        listener = EgressListener(path)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(listener, reader, writer, on_connection)

        server = await asyncio.start_unix_server(serve, path=path, limit=HEADER_LIMIT)
        try:
            # Only our user (and the sandbox, which runs as it) may connect. The window between
            # bind and chmod is why the socket belongs in a private directory.
            await asyncio.to_thread(path.chmod, 0o600)
            yield listener
        finally:
            listener.closed = True
            server.close()
            tasks = list(listener._tasks)
            for task in tasks:
                task.cancel()
            if tasks:
                # Each handler closes its sockets when cancelled; this waits for that, bounded.
                await asyncio.wait(tasks, timeout=_CLOSE_TIMEOUT_S)
            with contextlib.suppress(OSError):
                await asyncio.to_thread(path.unlink)

    async def _serve(
        self,
        listener: EgressListener,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_connection: Callable[[EgressConnection], None],
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        listener._tasks.add(task)
        record = _Record(time.monotonic())
        try:
            if listener.closed:  # accepted just before the listener closed: the call is over
                record.reason = "the tool call that owned this proxy socket has ended"
                return
            if listener.active >= self.max_connections:
                record.reason = f"more than {self.max_connections} connections at once for this call"
                await _refuse(reader, writer, 503, f"{record.reason}; retry when some have finished.")
                return
            listener.active += 1
            try:
                await self._handle(reader, writer, record)
            finally:
                listener.active -= 1
        except asyncio.CancelledError:
            # Only the listener cancels a handler (it is closing). Ending quietly instead of
            # re-raising: asyncio's stream server logs a cancelled handler as an error.
            record.reason = record.reason or "closed: the tool call ended"
        except Exception as exc:  # one bad connection must never take the listener down
            record.reason = record.reason or f"proxy error: {type(exc).__name__}: {exc}"
            _log.exception("egress connection failed")
        finally:
            listener._tasks.discard(task)
            writer.close()
            listener.served += 1
            try:
                on_connection(record.frozen())
            except Exception:  # the callback is the caller's; a bug there must not stop serving
                _log.exception("egress on_connection callback failed")

    async def _handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: _Record
    ) -> None:
        """Serve one client connection: read its request, check it, then connect and relay."""
        try:
            request = await _read_head(reader, self.head_timeout_s)
            record.method = request.method
            if request.method == "CONNECT":
                record.host, record.port = _connect_target(request.target)
                authority = path = ""
            else:
                record.host, record.port, authority, path = _absolute_target(request.target)
        except TimeoutError:
            record.reason = f"no complete request within {self.head_timeout_s:g} s"
            await _refuse(reader, writer, 408, record.reason)
            return
        except _BadRequestError as exc:
            record.reason = exc.reason or "the client closed without sending a request"
            if exc.reason:
                await _refuse(reader, writer, exc.status, exc.reason)
            return
        try:
            up_reader, up_writer, ip = await self.guard.open_connection(record.host, record.port)
        except EgressError as exc:
            record.allowed = not exc.refused
            record.reason = exc.reason
            await _refuse(reader, writer, exc.status, exc.reason)
            return
        record.allowed, record.address = True, str(ip)
        try:
            if request.method == "CONNECT":
                await _send(writer, b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                head = _forwarded_head(request, authority, path)
                up_writer.write(head)
                record.up += len(head)
            tunnel = request.method == "CONNECT"
            await self._relay(reader, writer, up_reader, up_writer, record, tunnel=tunnel)
        finally:
            up_writer.close()

    async def _relay(
        self,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        record: _Record,
        *,
        tunnel: bool,
    ) -> None:
        """Copy bytes both ways until both sides are done (a tunnel) or the answer ended (HTTP)."""
        activity = [time.monotonic()]

        def count_up(n: int) -> None:
            record.up += n

        def count_down(n: int) -> None:
            record.down += n

        up = asyncio.create_task(self._pump(client_reader, up_writer, count_up, activity))
        down = asyncio.create_task(self._pump(up_reader, client_writer, count_down, activity))
        try:
            # A tunnel lasts until both sides are done (half-closes pass through); plain HTTP
            # until the server's answer ended (it closes: Connection: close), whatever the client does.
            waited = {up, down} if tunnel else {down}
            done, _ = await asyncio.wait(waited, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                failure = task.exception()
                if failure is not None:
                    record.reason = _relay_failure(failure, self.idle_timeout_s)
        finally:
            for task in (up, down):
                task.cancel()
            await asyncio.gather(up, down, return_exceptions=True)

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        count: Callable[[int], None],
        activity: list[float],
    ) -> None:
        # Ends at EOF, on an error, when both directions were idle for idle_timeout_s, or when the
        # relay is cancelled (the listener closing). A quiet direction waits while the other works.
        while True:
            try:
                async with asyncio.timeout(self.idle_timeout_s):
                    data = await source.read(_CHUNK)
            except TimeoutError:
                if time.monotonic() - activity[0] >= self.idle_timeout_s:
                    raise
                continue
            if not data:
                break
            activity[0] = time.monotonic()
            sink.write(data)
            count(len(data))
            await sink.drain()
        if sink.can_write_eof():
            with contextlib.suppress(OSError):
                sink.write_eof()


def _relay_failure(failure: BaseException, idle_timeout_s: float) -> str:
    if isinstance(failure, TimeoutError):
        return f"closed after {idle_timeout_s:g} s without traffic"
    return f"connection broken: {type(failure).__name__}: {failure}"


async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Write to the client; a client that does not read within a few seconds is dropped."""
    writer.write(data)
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(_REPLY_TIMEOUT_S):
            await writer.drain()


async def _refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int, text: str) -> None:
    """Answer with an error, then read what the client still sends before closing: closing a
    socket with unread input resets the connection, and the client would lose the answer."""
    await _send(writer, _reply(status, text))
    if writer.can_write_eof():
        with contextlib.suppress(OSError):
            writer.write_eof()
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(_REPLY_TIMEOUT_S):
            # Bounded: at most _LINGER_BYTES, then the connection is closed regardless.
            for _ in range(_LINGER_BYTES // _CHUNK):
                if not await reader.read(_CHUNK):
                    break


# --- inside the sandbox ----------------------------------------------------------------------


def proxy_env(port: int) -> dict[str, str]:
    """The environment that sends HTTP(S) of common tools inside the sandbox to the forwarder.

    Both spellings are set because readers differ: curl (and git, through libcurl) reads only
    the lower-case ``http_proxy`` (the upper-case one is ignored since httpoxy), either case of
    ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY``; pip (requests/urllib), npm, Go and wget
    read both cases or the lower-case one. ``NO_PROXY`` keeps loopback inside the sandbox
    direct; ``NODE_USE_ENV_PROXY`` makes Node's own http and fetch (22.21+, 24+) honour them.
    """
    if not 0 < port < 65536:
        raise ValueError(f"proxy_env: port {port} is not a TCP port (1-65535).")
    url = f"http://127.0.0.1:{port}"
    local = "localhost,127.0.0.1,::1"
    env = {"NO_PROXY": local, "no_proxy": local, "NODE_USE_ENV_PROXY": "1"}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = url
    return env


def forwarder_argv(
    socket_path: str | os.PathLike[str],
    *,
    port: int = SANDBOX_PROXY_PORT,
    python: str = sys.executable,
    script: str | os.PathLike[str] = FORWARDER_SCRIPT,
) -> list[str]:
    """The argv that starts the forwarder inside the sandbox; it returns once it listens.

    ``socket_path`` and ``script`` are paths as the sandbox sees them. Run it before the
    command, e.g. ``sh -c '"$0" -I -S SCRIPT PORT SOCKET && exec "$@"'``: the forwarder exits 0
    only after binding, and keeps relaying in the background until the sandbox ends."""
    return [python, "-I", "-S", os.fspath(script), str(port), os.fspath(socket_path)]
