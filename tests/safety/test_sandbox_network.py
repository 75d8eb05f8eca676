"""The sandbox never shares the host's network: with or without a grant, host loopback, private
addresses and abstract sockets stay out of reach; a grant opens the egress proxy, and only the
allowed domains through it. Each check counts connections on a real listener."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address, IPv6Address, ip_address
from pathlib import Path

import pytest

from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings
from steward.safety.sandbox.egress import EgressProxy
from steward.tools.base import ToolContext, ToolResult
from steward.tools.shell import bash

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    return BubblewrapSandbox(SandboxSettings(cpu_s=10, max_processes=64, tmpfs_mb=64))


async def sh(
    box: BubblewrapSandbox, workspace: Path, command: str, *, network: bool = False
) -> tuple[int, str, ToolResult]:
    ctx = ToolContext(workspace=workspace, sandbox=box, allow_network=network)
    result = await bash.call({"command": command, "timeout_s": 20}, ctx)
    match = re.search(r"exit code: (-?\d+)$", result.content)
    assert match, result.content
    return int(match.group(1)), result.content, result


class Listener:
    """A real TCP server on the host's loopback that counts the connections it accepts."""

    def __init__(self) -> None:
        self.connections = 0

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.close()


@pytest.fixture
async def listener() -> AsyncIterator[tuple[Listener, int]]:
    counter = Listener()
    server = await asyncio.start_server(counter.accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield counter, port


async def settle(counter: Listener) -> None:
    for _ in range(20):  # a connection that got through would be counted within moments
        await asyncio.sleep(0.01)
        if counter.connections:
            return


async def test_hosts_outside_cannot_be_reached(sandbox: BubblewrapSandbox, tmp_path: Path) -> None:
    status, output, _ = await sh(sandbox, tmp_path, "exec 3<>/dev/tcp/1.1.1.1/443")
    assert status != 0
    assert "Network is unreachable" in output


async def test_names_cannot_be_resolved_even_with_a_grant(sandbox: BubblewrapSandbox, tmp_path: Path) -> None:
    for network in (False, True):
        status, output, _ = await sh(sandbox, tmp_path, "getent hosts pypi.org", network=network)
        assert status != 0
        assert "pypi" not in output.lower()


async def test_only_the_loopback_interface_exists_even_with_a_grant(
    sandbox: BubblewrapSandbox, tmp_path: Path
) -> None:
    for network in (False, True):
        status, output, _ = await sh(
            sandbox, tmp_path, "tail -n +3 /proc/net/dev | cut -d: -f1", network=network
        )
        assert status == 0
        assert [line.strip() for line in output.splitlines()[:-1]] == ["lo"]


@pytest.mark.parametrize("network", [False, True])
async def test_host_loopback_is_never_reached(
    sandbox: BubblewrapSandbox, tmp_path: Path, listener: tuple[Listener, int], network: bool
) -> None:
    counter, port = listener
    attempts = [
        f"exec 3<>/dev/tcp/127.0.0.1/{port}",
        f"curl -sS -m 5 http://127.0.0.1:{port}/",
        f"curl -sS -m 5 --noproxy '' http://127.0.0.1:{port}/",
        f"curl -sS -m 5 http://localhost:{port}/",
        f"curl -sS -m 5 -p -x http://127.0.0.1:3128 http://127.0.0.1:{port}/",
    ]
    for attempt in attempts:
        await sh(sandbox, tmp_path, attempt, network=network)
    await settle(counter)
    assert counter.connections == 0


async def test_the_configuration_granting_every_command_still_leaves_loopback_out(
    tmp_path: Path, listener: tuple[Listener, int]
) -> None:
    counter, port = listener
    box = BubblewrapSandbox(SandboxSettings(network=True, cpu_s=10))
    await sh(box, tmp_path, f"exec 3<>/dev/tcp/127.0.0.1/{port}; curl -sS -m 5 http://127.0.0.1:{port}/")
    await settle(counter)
    assert counter.connections == 0


@pytest.fixture
def abstract_listener() -> Iterator[tuple[str, list[int]]]:
    """A host process listening on an abstract UNIX socket, counting connections."""
    name = f"steward-test-{os.getpid()}-{id(object())}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(8)
    server.settimeout(0.2)
    accepted: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                continue
            accepted.append(1)
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield name, accepted
    stop.set()
    thread.join(timeout=2)
    server.close()


@pytest.mark.parametrize("network", [False, True])
async def test_abstract_sockets_of_the_host_are_out_of_reach(
    sandbox: BubblewrapSandbox, tmp_path: Path, abstract_listener: tuple[str, list[int]], network: bool
) -> None:
    name, accepted = abstract_listener
    # The control: the same client reaches it from the host.
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect("\0" + name)
    client.close()
    for _ in range(6000):  # the listener's thread counts it when it gets the core (a busy host)
        if accepted:
            break
        await asyncio.sleep(0.01)
    assert accepted == [1]
    python = sys.executable
    code = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0{name}')"
    status, output, _ = await sh(sandbox, tmp_path, f'{python} -c "{code}"', network=network)
    await asyncio.sleep(0.3)
    assert status != 0 and "refused" in output.lower()
    assert accepted == [1]


async def test_a_domain_not_on_the_list_is_refused_and_the_reason_shown(
    sandbox: BubblewrapSandbox, tmp_path: Path
) -> None:
    status, output, result = await sh(sandbox, tmp_path, "curl -sS -m 5 https://example.com/", network=True)
    assert status != 0
    assert "[egress proxy: CONNECT example.com:443" in output and "allowed_domains" in output
    assert any(kind == "egress" and "example.com" in message for kind, message in result.notes)


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"page {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[int]:
    """A web server standing in for an allowed domain (the proxy's resolver sends it there)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def proxied_sandbox(port: int) -> BubblewrapSandbox:
    """The proxy of the real sandbox, with its resolver and address check pointed at a test host:
    the one seam that lets an allowed domain be reached on a machine without a network."""

    async def resolve(host: str, _port: int) -> list[IPv4Address | IPv6Address]:
        return [ip_address("127.0.0.1")] if host == "pkg.test" else []

    proxy = EgressProxy(["pkg.test"], resolve=resolve, address_ok=lambda address: str(address) == "127.0.0.1")
    return BubblewrapSandbox(SandboxSettings(cpu_s=20, tmpfs_mb=64), egress=proxy)


async def test_an_allowed_domain_is_reached_through_the_proxy(tmp_path: Path, upstream: int) -> None:
    box = proxied_sandbox(upstream)
    status, output, result = await sh(
        box, tmp_path, f"curl -sS -m 5 http://pkg.test:{upstream}/hello", network=True
    )
    assert status == 0, output
    assert output.startswith("page /hello")
    assert any(kind == "egress" and "allowed" in message for kind, message in result.notes)
    # Without the grant, the same call reaches nothing.
    status, _, _ = await sh(box, tmp_path, f"curl -sS -m 5 http://pkg.test:{upstream}/hello")
    assert status != 0


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
async def test_git_works_through_the_proxy(tmp_path: Path) -> None:
    # A repository served over git's "dumb" HTTP protocol by a plain web server.
    source = tmp_path / "served" / "repo"
    source.mkdir(parents=True)
    run = ["git", "-C", str(source), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*run, "init", "-q"], check=True)
    (source / "README").write_text("served\n")
    subprocess.run([*run, "add", "-A"], check=True)
    subprocess.run([*run, "commit", "-q", "-m", "served"], check=True)
    bare = tmp_path / "served" / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True)

    directory = str(tmp_path / "served")

    class Files(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = Path(directory, self.path.lstrip("/").split("?")[0])
            if not path.is_file():
                self.send_error(404)
                return
            body = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Files)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        workspace = tmp_path / "ws"
        workspace.mkdir()
        box = proxied_sandbox(port)
        status, output, _ = await sh(
            box,
            workspace,
            f"git clone -q http://pkg.test:{port}/repo.git copy && cat copy/README",
            network=True,
        )
        assert status == 0, output
        assert output.startswith("served")
    finally:
        server.shutdown()
        server.server_close()
