"""The egress proxy: only allowed domains, never loopback or private addresses, every connection logged.

Real sockets throughout: upstream servers on the host's loopback that count what reaches them,
the proxy on a real UNIX socket, the forwarder script as a real daemonizing subprocess, and
real curl, git and pip pointed at it with ``proxy_env``. The seams ``resolve`` and
``address_ok`` make an allowed test domain lead to a loopback upstream where a test needs a
reachable server; the tests of the defaults never pass them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import pytest

from steward.errors import ConfigError
from steward.safety.sandbox.egress import (
    FORWARDER_SCRIPT,
    DomainAllowlist,
    EgressConnection,
    EgressProxy,
    IPAddress,
    Resolver,
    address_allowed,
    forwarder_argv,
    proxy_env,
)

LOOPBACK = ipaddress.ip_address("127.0.0.1")
WAIT_S = 20.0  # a bound against hangs, never a measure of speed


# --- helpers -------------------------------------------------------------------------------


class Upstream:
    """A real TCP server that counts connections and either echoes or answers one HTTP request."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.connections = 0
        self.received: list[bytes] = []
        self.closed = 0
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            if self.mode == "echo":
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
                writer.write_eof()
            else:
                first = await reader.readexactly(1)
                if first == b"\x16":  # a TLS hello through a tunnel: this server speaks plain HTTP only
                    return
                head = first + await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                body = await reader.readexactly(length)
                self.received.append(head + body)
                answer = b"hello from upstream " + head.split(b" ")[1]
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                    + f"Content-Length: {len(answer)}\r\n\r\n".encode()
                    + answer
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed += 1
            writer.close()


@contextlib.asynccontextmanager
async def upstream(mode: str = "http", host: str = "127.0.0.1") -> AsyncIterator[Upstream]:
    server_state = Upstream(mode)
    server = await asyncio.start_server(server_state.handle, host, 0)
    server_state.port = server.sockets[0].getsockname()[1]
    async with server:
        yield server_state


class Log:
    """What ``on_connection`` received, with a bounded wait for the next reports."""

    def __init__(self) -> None:
        self.records: list[EgressConnection] = []
        self._changed = asyncio.Event()

    def __call__(self, record: EgressConnection) -> None:
        self.records.append(record)
        self._changed.set()

    async def wait(self, count: int) -> list[EgressConnection]:
        async with asyncio.timeout(WAIT_S):
            while len(self.records) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.records


def resolver(table: dict[str, Sequence[str]], calls: list[str] | None = None) -> Resolver:
    """A resolver seam: names to the addresses given, counting what was asked."""

    async def resolve(host: str, port: int) -> list[IPAddress]:
        if calls is not None:
            calls.append(host)
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [ipaddress.ip_address(a) for a in table[host]]

    return resolve


def only(*addresses: str) -> Callable[[IPAddress], bool]:
    """An address-check seam that adds the given test addresses to the default check."""
    extra = {ipaddress.ip_address(a) for a in addresses}
    return lambda ip: ip in extra or address_allowed(ip)


@pytest.fixture
def sockdir() -> Iterator[Path]:
    # Short: a UNIX socket path must fit in 107 bytes, and pytest's tmp_path may not.
    path = Path(tempfile.mkdtemp(prefix="egress-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def exchange(sock: Path, data: bytes, *, half_close: bool = True) -> bytes:
    reader, writer = await asyncio.open_unix_connection(sock)
    try:
        writer.write(data)
        await writer.drain()
        if half_close:
            writer.write_eof()
        async with asyncio.timeout(WAIT_S):
            return await reader.read()
    finally:
        writer.close()


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- the allowlist ---------------------------------------------------------------------------


def test_exact_names_match_case_insensitively_and_ignore_a_trailing_dot() -> None:
    allow = DomainAllowlist(["Example.COM", "pypi.org."])
    assert allow.allows("example.com")
    assert allow.allows("EXAMPLE.com.")
    assert allow.allows("pypi.org")
    assert not allow.allows("www.example.com")
    assert not allow.allows("example.org")
    assert not allow.allows("notexample.com")


def test_a_wildcard_matches_subdomains_at_any_depth_but_not_the_apex() -> None:
    allow = DomainAllowlist(["*.github.com"])
    assert allow.allows("api.github.com")
    assert allow.allows("a.b.c.github.com")
    assert not allow.allows("github.com")
    assert not allow.allows("evilgithub.com")
    assert not allow.allows("github.com.evil.net")


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.1", "0x7f000001", "2130706433", "0177.0.0.1", "::1", "[::1]", "10.0.0.1", "1.2.3.4.5"],
)
def test_an_ip_literal_never_matches_a_domain_pattern(host: str) -> None:
    allow = DomainAllowlist(["example.com", "*.example.com"])
    assert not allow.allows(host)
    refusal = allow.refusal(host)
    assert refusal is not None and "IP address" in refusal


@pytest.mark.parametrize(
    "host", ["", ".", "exa mple.com", "a..example.com", "-a.example.com", "a-.example.com", "ex@mple.com",
             "x.example.com/path", "x.example.com:80", f"{'a' * 64}.example.com", "ünïcode.example.com", "a\x00.example.com"]
)  # fmt: skip
def test_malformed_hosts_are_refused(host: str) -> None:
    assert not DomainAllowlist(["*.example.com", "example.com"]).allows(host)


def test_an_empty_list_allows_nothing_and_says_how_to_allow() -> None:
    allow = DomainAllowlist([])
    assert not allow.allows("example.com")
    assert 'allowed_domains = ["example.com"]' in (allow.refusal("example.com") or "")


@pytest.mark.parametrize(
    "pattern", ["http://example.com", "example.com/path", "example.com:443", "*", "*.com", "foo.*.com",
                "*example.com", "1.2.3.4", "::1", "", "exa mple.com"]
)  # fmt: skip
def test_a_bad_pattern_is_a_config_error_naming_the_key(pattern: str) -> None:
    with pytest.raises(ConfigError, match=r"\[sandbox\] allowed_domains"):
        DomainAllowlist([pattern])


def test_unicode_patterns_are_taken_in_their_punycode_form() -> None:
    assert DomainAllowlist(["bücher.example"]).allows("xn--bcher-kva.example")


# --- addresses -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1", "127.255.0.1", "0.0.0.0", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
        "100.64.0.1", "224.0.0.1", "240.0.0.1", "255.255.255.255", "192.0.2.1", "198.18.0.1",
        "::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1", "ff0e::1", "2001:db8::1",
        "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::127.0.0.1", "::8.8.8.8",
        "64:ff9b::7f00:1", "64:ff9b::a00:1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "2002:a00:1::1",
        "2001:0:4136:e378:8000:63bf:80ff:fffe", "fe80::1%eth0", "not an address",
    ],
)  # fmt: skip
def test_loopback_private_link_local_reserved_and_hidden_ipv4_are_refused(address: str) -> None:
    assert not address_allowed(address)


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "151.101.0.223",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ],
)
def test_public_unicast_addresses_are_allowed(address: str) -> None:
    assert address_allowed(address)


# --- the defaults never reach a loopback listener ------------------------------------------------


async def test_connect_to_an_ip_literal_is_refused_and_nothing_is_reached(sockdir: Path) -> None:
    log = Log()
    async with upstream() as server, EgressProxy(["example.com"]).listen(sockdir / "p", log) as listener:
        for target in (f"127.0.0.1:{server.port}", f"[::1]:{server.port}", f"127.1:{server.port}"):
            reply = await exchange(listener.path, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
            assert status_of(reply) == 403
            assert b"IP address" in reply
        reply = await exchange(
            listener.path, f"GET http://127.0.0.1:{server.port}/ HTTP/1.1\r\n\r\n".encode()
        )
        assert status_of(reply) == 403
        records = await log.wait(4)
    assert server.connections == 0
    assert all(not r.allowed and r.address is None for r in records)


async def test_localhost_on_the_list_is_still_refused(sockdir: Path) -> None:
    log = Log()
    async with upstream() as server, EgressProxy(["localhost"]).listen(sockdir / "p", log) as listener:
        reply = await exchange(listener.path, f"CONNECT localhost:{server.port} HTTP/1.1\r\n\r\n".encode())
        (record,) = await log.wait(1)
    assert status_of(reply) == 403
    assert b"never reachable" in reply
    assert server.connections == 0
    assert record.host == "localhost" and not record.allowed and record.address is None


@pytest.mark.parametrize(
    "addresses",
    [["127.0.0.1"], ["::1"], ["::ffff:127.0.0.1"], ["10.0.0.7"], ["192.168.1.20"], ["169.254.169.254"],
     ["64:ff9b::7f00:1"], ["127.0.0.1", "10.0.0.7", "::1"]],
)  # fmt: skip
async def test_an_allowed_name_that_resolves_to_a_private_address_is_refused(
    sockdir: Path, addresses: list[str]
) -> None:
    log = Log()
    resolve = resolver({"internal.example.com": addresses})
    proxy = EgressProxy(["*.example.com"], resolve=resolve)  # the DEFAULT address check
    async with upstream() as server, proxy.listen(sockdir / "p", log) as listener:
        for request in (
            f"CONNECT internal.example.com:{server.port} HTTP/1.1\r\n\r\n",
            f"GET http://internal.example.com:{server.port}/ HTTP/1.1\r\n\r\n",
        ):
            reply = await exchange(listener.path, request.encode())
            assert status_of(reply) == 403
            assert b"never reachable" in reply
        records = await log.wait(2)
    assert server.connections == 0
    assert all(not r.allowed and r.address is None for r in records)


async def test_a_loopback_listener_on_ipv6_is_not_reached_either(sockdir: Path) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this host")
    try:
        context = upstream(host="::1")
        server = await context.__aenter__()
    except OSError:
        pytest.skip("cannot listen on ::1 here")
    try:
        proxy = EgressProxy(["v6.example.com"], resolve=resolver({"v6.example.com": ["::1"]}))
        async with proxy.listen(sockdir / "p", Log()) as listener:
            reply = await exchange(
                listener.path, f"CONNECT v6.example.com:{server.port} HTTP/1.1\r\n\r\n".encode()
            )
        assert status_of(reply) == 403
        assert server.connections == 0
    finally:
        await context.__aexit__(None, None, None)


async def test_a_domain_not_on_the_list_is_refused_without_being_resolved(sockdir: Path) -> None:
    calls: list[str] = []
    log = Log()
    proxy = EgressProxy(
        ["pypi.org"], resolve=resolver({"evil.example": ["127.0.0.1"]}, calls), address_ok=only("127.0.0.1")
    )
    async with upstream() as server, proxy.listen(sockdir / "p", log) as listener:
        reply = await exchange(listener.path, f"CONNECT evil.example:{server.port} HTTP/1.1\r\n\r\n".encode())
        (record,) = await log.wait(1)
    assert status_of(reply) == 403
    assert b"evil.example is not in [sandbox] allowed_domains" in reply
    assert b'add it to [sandbox] allowed_domains in steward.toml: allowed_domains = ["evil.example"]' in reply
    assert calls == []  # no DNS query leaks the name
    assert server.connections == 0
    assert (record.method, record.host, record.allowed) == ("CONNECT", "evil.example", False)


async def test_an_empty_list_refuses_everything(sockdir: Path) -> None:
    log = Log()
    proxy = EgressProxy([], resolve=resolver({"example.com": ["127.0.0.1"]}), address_ok=only("127.0.0.1"))
    async with upstream() as server, proxy.listen(sockdir / "p", log) as listener:
        reply = await exchange(
            listener.path, f"GET http://example.com:{server.port}/ HTTP/1.1\r\n\r\n".encode()
        )
    assert status_of(reply) == 403
    assert b"allowed_domains is empty" in reply
    assert server.connections == 0


# --- what goes through ------------------------------------------------------------------------


def reachable_proxy(*, head_timeout_s: float = 30.0, max_connections: int = 64) -> EgressProxy:
    """Through the seams: allowed.test leads to the test upstream on 127.0.0.1 (and only there)."""
    return EgressProxy(
        ["allowed.test"],
        resolve=resolver({"allowed.test": ["127.0.0.1"]}),
        address_ok=only("127.0.0.1"),
        head_timeout_s=head_timeout_s,
        max_connections=max_connections,
    )


async def test_a_connect_tunnel_carries_bytes_both_ways_and_reports_them(sockdir: Path) -> None:
    log = Log()
    payload = os.urandom(300_000)
    async with upstream("echo") as server, reachable_proxy().listen(sockdir / "p", log) as listener:
        reader, writer = await asyncio.open_unix_connection(listener.path)
        writer.write(f"CONNECT allowed.test:{server.port} HTTP/1.1\r\nHost: allowed.test\r\n\r\n".encode())
        async with asyncio.timeout(WAIT_S):
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection established\r\n\r\n"
            writer.write(payload)
            writer.write_eof()  # a half-close passes through: the upstream still answers
            echoed = await reader.read()
        writer.close()
        (record,) = await log.wait(1)
    assert echoed == payload
    assert server.connections == 1
    assert record.allowed and record.reason == ""
    assert (record.method, record.host, record.port, record.address) == (
        "CONNECT",
        "allowed.test",
        server.port,
        "127.0.0.1",
    )
    assert (record.bytes_up, record.bytes_down) == (len(payload), len(payload))
    assert record.line().startswith(
        f"CONNECT allowed.test:{server.port} via 127.0.0.1 allowed, 300000 B up, 300000 B down, "
    )


async def test_only_checked_addresses_are_used_and_the_name_is_resolved_once(sockdir: Path) -> None:
    calls: list[str] = []
    log = Log()
    proxy = EgressProxy(
        ["*.allowed.test"],
        resolve=resolver({"api.allowed.test": ["10.9.9.9", "127.0.0.1"]}, calls),
        address_ok=only("127.0.0.1"),
    )
    async with upstream("echo") as server, proxy.listen(sockdir / "p", log) as listener:
        reply = await exchange(
            listener.path, f"CONNECT api.allowed.test:{server.port} HTTP/1.1\r\n\r\nping".encode()
        )
        (record,) = await log.wait(1)
    assert reply == b"HTTP/1.1 200 Connection established\r\n\r\nping"
    assert record.address == "127.0.0.1"
    assert calls == ["api.allowed.test"]


async def test_plain_http_is_forwarded_in_origin_form_with_connection_close(sockdir: Path) -> None:
    log = Log()
    body = b"x" * 5000
    request = (
        b"POST http://allowed.test:%d/upload?a=1&b=2 HTTP/1.1\r\n"
        b"Host: allowed.test\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic c2VjcmV0\r\n"
        b"Connection: keep-alive, X-Hop\r\nX-Hop: drop me\r\nX-Keep: kept\r\n"
        b"Content-Length: 5000\r\n\r\n" + body
    )
    async with upstream("http") as server, reachable_proxy().listen(sockdir / "p", log) as listener:
        reply = await exchange(listener.path, request % server.port, half_close=False)
        (record,) = await log.wait(1)
    (received,) = server.received
    head, _, got_body = received.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /upload?a=1&b=2 HTTP/1.1"
    assert f"Host: allowed.test:{server.port}".encode() in lines
    assert b"Connection: close" in lines
    assert b"X-Keep: kept" in lines
    assert not any(line.lower().startswith((b"proxy-", b"x-hop", b"connection: keep")) for line in lines)
    assert got_body == body
    assert status_of(reply) == 200
    assert reply.endswith(b"hello from upstream /upload?a=1&b=2")
    assert record.allowed and record.method == "POST"
    assert record.bytes_up == len(received) and record.bytes_down == len(reply)


async def test_an_unreachable_allowed_host_answers_502_and_is_logged(sockdir: Path) -> None:
    log = Log()
    port = free_port()  # nothing listens there
    async with reachable_proxy().listen(sockdir / "p", log) as listener:
        reply = await exchange(listener.path, f"CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n".encode())
        (record,) = await log.wait(1)
    assert status_of(reply) == 502
    assert record.allowed and record.address is None and "Could not connect" in record.reason


# --- garbage and limits ---------------------------------------------------------------------------

GARBAGE = {
    "tls hello": bytes.fromhex("16030100a5010000a10303") + os.urandom(64),
    "no request line": b"hello\r\n\r\n",
    "origin form": b"GET /relative HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
    "bare LF": b"GET http://allowed.test/ HTTP/1.1\nHost: x\n\n",
    "header without colon": b"GET http://allowed.test/ HTTP/1.1\r\nBad Header\r\n\r\n",
    "folded header": b"GET http://allowed.test/ HTTP/1.1\r\nX-A: 1\r\n  continued\r\n\r\n",
    "NUL in header": b"GET http://allowed.test/ HTTP/1.1\r\nX-A: a\x00b\r\n\r\n",
    "connect without port": b"CONNECT allowed.test HTTP/1.1\r\n\r\n",
    "connect bad port": b"CONNECT allowed.test:99999 HTTP/1.1\r\n\r\n",
    "url port 0": b"GET http://allowed.test:0/ HTTP/1.1\r\n\r\n",
    "https absolute": b"GET https://allowed.test/ HTTP/1.1\r\n\r\n",
    "credentials": b"GET http://user:pw@allowed.test/ HTTP/1.1\r\n\r\n",
    "http/2 preface": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "head over 64 KiB": b"GET http://allowed.test/ HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",
    "101 headers": b"GET http://allowed.test/ HTTP/1.1\r\n" + b"X-A: 1\r\n" * 101 + b"\r\n",
    "cut short": b"GET http://allowed.test/ HTTP/1.1\r\nHost: a",
}


@pytest.mark.parametrize("name", sorted(GARBAGE))
async def test_garbage_gets_400_reaches_nothing_and_the_listener_keeps_serving(
    sockdir: Path, name: str
) -> None:
    log = Log()
    async with upstream("http") as server, reachable_proxy().listen(sockdir / "p", log) as listener:
        reply = await exchange(listener.path, GARBAGE[name])
        assert status_of(reply) in (400, 431)
        assert server.connections == 0
        good = await exchange(
            listener.path,
            f"GET http://allowed.test:{server.port}/ok HTTP/1.1\r\n\r\n".encode(),
            half_close=False,
        )
        records = await log.wait(2)
    assert status_of(good) == 200 and server.connections == 1
    assert not records[0].allowed and records[0].reason
    assert records[1].allowed


async def test_a_client_that_sends_nothing_is_closed_after_the_head_timeout(sockdir: Path) -> None:
    log = Log()
    async with reachable_proxy(head_timeout_s=0.2).listen(sockdir / "p", log) as listener:
        reply = await exchange(listener.path, b"GET http://allowed.test/ HTTP/1.1\r\n", half_close=False)
        (record,) = await log.wait(1)
    assert status_of(reply) == 408
    assert not record.allowed


async def test_a_client_that_closes_at_once_is_logged_without_an_answer(sockdir: Path) -> None:
    log = Log()
    async with reachable_proxy().listen(sockdir / "p", log) as listener:
        assert await exchange(listener.path, b"") == b""
        (record,) = await log.wait(1)
    assert record.method == "" and not record.allowed and "without sending a request" in record.reason


async def test_connections_beyond_the_limit_get_503(sockdir: Path) -> None:
    log = Log()
    async with (
        upstream("echo") as server,
        reachable_proxy(max_connections=2).listen(sockdir / "p", log) as listener,
    ):
        held = []
        for _ in range(2):
            reader, writer = await asyncio.open_unix_connection(listener.path)
            writer.write(f"CONNECT allowed.test:{server.port} HTTP/1.1\r\n\r\n".encode())
            async with asyncio.timeout(WAIT_S):
                await reader.readuntil(b"\r\n\r\n")
            held.append(writer)
        reply = await exchange(listener.path, f"CONNECT allowed.test:{server.port} HTTP/1.1\r\n\r\n".encode())
        assert status_of(reply) == 503
        assert listener.active == 2
        for writer in held:
            writer.close()
        records = await log.wait(3)
    assert server.connections == 2
    assert sum(1 for r in records if not r.allowed and "connections at once" in r.reason) == 1


async def test_a_failing_callback_does_not_stop_the_listener(sockdir: Path) -> None:
    seen: list[EgressConnection] = []

    def broken(record: EgressConnection) -> None:
        seen.append(record)
        raise RuntimeError("callback bug")

    async with upstream("http") as server, reachable_proxy().listen(sockdir / "p", broken) as listener:
        for _ in range(2):
            reply = await exchange(
                listener.path,
                f"GET http://allowed.test:{server.port}/ HTTP/1.1\r\n\r\n".encode(),
                half_close=False,
            )
            assert status_of(reply) == 200
    assert server.connections == 2 and len(seen) == 2


async def test_closing_the_listener_closes_open_tunnels_and_removes_the_socket(sockdir: Path) -> None:
    log = Log()
    async with upstream("echo") as server:
        async with reachable_proxy().listen(sockdir / "p", log) as listener:
            assert listener.path.exists()
            reader, writer = await asyncio.open_unix_connection(listener.path)
            writer.write(f"CONNECT allowed.test:{server.port} HTTP/1.1\r\n\r\nping".encode())
            async with asyncio.timeout(WAIT_S):
                await reader.readuntil(b"\r\n\r\n")
                assert await reader.readexactly(4) == b"ping"
        async with asyncio.timeout(WAIT_S):
            assert await reader.read() == b""  # the tunnel was closed
            while server.closed < 1:  # noqa: ASYNC110 - and the upstream saw its side close
                await asyncio.sleep(0.01)
        writer.close()
    assert not (sockdir / "p").exists()
    (record,) = log.records
    assert record.allowed and "ended" in record.reason and record.bytes_down == 4


async def test_a_socket_path_too_long_for_unix_sockets_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="shorter directory"):
        async with EgressProxy([]).listen("/tmp/" + "d" * 120, Log()):
            pass


# --- inside the sandbox: environment and forwarder ------------------------------------------------


def test_proxy_env_points_every_reader_at_the_forwarder_and_keeps_loopback_direct() -> None:
    env = proxy_env(3128)
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        assert env[name] == "http://127.0.0.1:3128"
    for name in ("NO_PROXY", "no_proxy"):
        assert set(env[name].split(",")) >= {"localhost", "127.0.0.1", "::1"}
    with pytest.raises(ValueError):
        proxy_env(0)


def test_forwarder_argv_runs_the_script_isolated() -> None:
    argv = forwarder_argv("/run/egress.sock", port=3128, python="/usr/bin/python3")
    assert argv == ["/usr/bin/python3", "-I", "-S", str(FORWARDER_SCRIPT), "3128", "/run/egress.sock"]
    assert FORWARDER_SCRIPT.is_file()


def daemons_for(socket_path: Path) -> list[int]:
    """Our forwarder daemons, found by the unique socket path on their command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
                if str(socket_path).encode() in cmdline and str(FORWARDER_SCRIPT).encode() in cmdline:
                    found.append(int(entry.name))
    return found


@contextlib.contextmanager
def forwarder(socket_path: Path, port: int) -> Iterator[subprocess.CompletedProcess[str]]:
    """Start the forwarder as the sandbox does (cleared environment); stop its daemon after."""
    started = subprocess.run(
        forwarder_argv(socket_path, port=port), env={}, capture_output=True, text=True, timeout=WAIT_S
    )
    try:
        yield started
    finally:
        for pid in daemons_for(socket_path):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


async def unix_echo(path: Path) -> asyncio.Server:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.write_eof()
        writer.close()

    return await asyncio.start_unix_server(echo, path=path)


async def test_the_forwarder_exits_0_once_bound_and_relays_tcp_to_the_unix_socket(sockdir: Path) -> None:
    sock, port = sockdir / "p", free_port()
    async with await unix_echo(sock):
        with forwarder(sock, port) as started:
            assert (started.returncode, started.stderr) == (0, "")
            assert len(daemons_for(sock)) == 1

            async def one(size: int) -> bytes:
                # Connecting right after the exit works: the bind happened before it (no race).
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                payload = os.urandom(size)
                writer.write(payload)
                await writer.drain()
                writer.write_eof()
                async with asyncio.timeout(WAIT_S):
                    echoed = await reader.read()
                writer.close()
                return payload if echoed == payload else b"mismatch"

            sizes = [1, 1000, 200_000, 1_000_000] * 5
            results = await asyncio.gather(*(one(size) for size in sizes))
    assert [len(r) for r in results] == sizes


async def test_outside_a_pid_namespace_the_forwarder_stops_once_the_socket_is_gone(sockdir: Path) -> None:
    sock = sockdir / "p"
    server = await unix_echo(sock)
    with forwarder(sock, free_port()) as started:
        assert started.returncode == 0
        (pid,) = daemons_for(sock)
        server.close()
        await server.wait_closed()
        sock.unlink(missing_ok=True)
        async with asyncio.timeout(WAIT_S):
            while Path(f"/proc/{pid}").exists() and daemons_for(sock):  # noqa: ASYNC110 - a process, no event
                await asyncio.sleep(0.05)


def test_the_forwarder_fails_with_one_line_when_the_port_is_taken(sockdir: Path) -> None:
    sock = sockdir / "p"
    with socket.socket(socket.AF_UNIX) as unix, socket.socket() as taken:
        unix.bind(str(sock))
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with forwarder(sock, port) as started:
            assert started.returncode == 1
            assert started.stderr.count("\n") == 1
            assert f"cannot listen on 127.0.0.1:{port}" in started.stderr
            assert daemons_for(sock) == []


def test_the_forwarder_fails_when_the_proxy_socket_is_missing(sockdir: Path) -> None:
    with forwarder(sockdir / "absent", free_port()) as started:
        assert started.returncode == 1
        assert "no egress proxy socket" in started.stderr and started.stderr.count("\n") == 1


# --- real clients through forwarder and proxy ----------------------------------------------------


@contextlib.asynccontextmanager
async def chain(sockdir: Path, mode: str = "http") -> AsyncIterator[tuple[Upstream, Log, dict[str, str]]]:
    """Upstream <- proxy (seams: allowed.test is the upstream) <- forwarder on a free port."""
    log = Log()
    async with upstream(mode) as server, reachable_proxy().listen(sockdir / "p", log) as listener:
        port = free_port()
        with forwarder(listener.path, port) as started:
            assert started.returncode == 0, started.stderr
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(sockdir), **proxy_env(port)}
            yield server, log, env


async def run(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    async with asyncio.timeout(120):
        output, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, output.decode(errors="replace")


def needs(program: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(shutil.which(program) is None, reason=f"needs {program}")


@needs("curl")
async def test_curl_uses_the_proxy_for_http_and_https(sockdir: Path) -> None:
    async with chain(sockdir) as (server, log, env):
        code, output = await run(["curl", "-sS", f"http://allowed.test:{server.port}/via-curl"], env)
        assert (code, output) == (0, "hello from upstream /via-curl")
        # https: curl opens a CONNECT tunnel (the upstream does not speak TLS, so curl fails after).
        code, _ = await run(["curl", "-sS", f"https://allowed.test:{server.port}/"], env)
        records = await log.wait(2)
    assert code != 0
    assert [(r.method, r.host, r.allowed) for r in records] == [
        ("GET", "allowed.test", True),
        ("CONNECT", "allowed.test", True),
    ]
    assert server.connections == 2


@needs("curl")
async def test_curl_to_a_domain_not_on_the_list_gets_the_fix(sockdir: Path) -> None:
    async with chain(sockdir) as (server, log, env):
        _, output = await run(["curl", "-sS", "http://not-listed.test/"], env)
        (record,) = await log.wait(1)
    assert (
        'add it to [sandbox] allowed_domains in steward.toml: allowed_domains = ["not-listed.test"]' in output
    )
    assert not record.allowed and server.connections == 0


@needs("git")
async def test_git_uses_the_proxy(sockdir: Path) -> None:
    async with chain(sockdir) as (server, log, env):
        env |= {"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1"}
        await run(["git", "ls-remote", f"http://allowed.test:{server.port}/repo.git"], env)
        records = await log.wait(1)
    assert records[0].allowed and records[0].host == "allowed.test"
    assert server.received[0].startswith(b"GET /repo.git/info/refs?service=git-upload-pack HTTP/1.1")


@needs("npm")
async def test_npm_uses_the_proxy(sockdir: Path) -> None:
    async with chain(sockdir) as (server, log, env):
        env |= {
            "npm_config_cache": str(sockdir / "npm"),
            "npm_config_fetch_retries": "0",
            "npm_config_update_notifier": "false",
        }
        await run(["npm", "view", "left-pad", "--registry", f"http://allowed.test:{server.port}/"], env)
        records = await log.wait(1)
    assert records[0].allowed
    assert server.received[0].startswith(b"GET /left-pad HTTP/1.1")


async def test_pip_uses_the_proxy(sockdir: Path) -> None:
    async with chain(sockdir) as (server, log, env):
        index = f"http://allowed.test:{server.port}/simple/"
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--retries", "0",
                "--disable-pip-version-check", "--index-url", index, "--trusted-host", f"allowed.test:{server.port}",
                "-d", str(sockdir / "dl"), "steward-egress-probe"]  # fmt: skip
        await run(argv, env)
        records = await log.wait(1)
    assert records[0].allowed
    assert server.received[0].startswith(b"GET /simple/steward-egress-probe/ HTTP/1.1")


# --- in a real network namespace ----------------------------------------------------------------


def bwrap_argv(script: str) -> list[str]:
    return [
        "bwrap", "--unshare-net", "--unshare-pid", "--unshare-user", "--die-with-parent",
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "sh", "-c", script,
    ]  # fmt: skip


@pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("curl") is None, reason="needs bwrap and curl"
)
async def test_inside_a_network_namespace_only_the_proxy_leads_out(sockdir: Path) -> None:
    log = Log()
    async with upstream("http") as server, reachable_proxy().listen(sockdir / "p", log) as listener:
        python, script = sys.executable, str(FORWARDER_SCRIPT)
        start = f"'{python}' -I -S '{script}' 3128 '{listener.path}'"
        env = {"PATH": "/usr/bin:/bin", **proxy_env(3128)}
        code, output = await run(
            bwrap_argv(f"{start} && exec curl -sS http://allowed.test:{server.port}/inside"), env
        )
        if code != 0 and "bwrap" in output:
            pytest.skip(f"bubblewrap cannot start here: {output.strip()}")
        assert (code, output) == (0, "hello from upstream /inside")
        # Straight to the host's loopback, around the proxy: nothing there in this namespace.
        code, _ = await run(
            bwrap_argv(f"{start} && exec curl -sS --noproxy '*' http://127.0.0.1:{server.port}/direct"), env
        )
        assert code != 0
        # Through the proxy by IP literal: refused.
        code, output = await run(
            bwrap_argv(f"{start} && exec curl -sS --noproxy '' http://127.0.0.1:{server.port}/literal"), env
        )
        assert "IP address" in output
        await log.wait(2)
    assert [r.allowed for r in log.records] == [True, False]
    assert server.connections == 1
    # The forwarder died with its namespace: the kernel kills it when the namespace's first
    # process exits, and on a busy machine its entry can take a moment to leave /proc.
    for _ in range(50):
        if not daemons_for(listener.path):
            break
        await asyncio.sleep(0.1)
    assert daemons_for(listener.path) == []
