"""No network inside the sandbox unless the call is allowed it: no loopback, no outside, no DNS."""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from steward.safety.sandbox import BubblewrapSandbox, SandboxSettings
from steward.tools.base import ToolContext
from steward.tools.shell import bash

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    return BubblewrapSandbox(SandboxSettings(cpu_s=10, max_processes=64, tmpfs_mb=64))


async def sh(
    box: BubblewrapSandbox, workspace: Path, command: str, *, network: bool = False
) -> tuple[int, str]:
    ctx = ToolContext(workspace=workspace, sandbox=box, allow_network=network)
    result = await bash.call({"command": command, "timeout_s": 10}, ctx)
    match = re.search(r"exit code: (-?\d+)$", result.content)
    assert match, result.content
    return int(match.group(1)), result.content


def has_resolver_configuration() -> bool:
    return Path("/etc/resolv.conf").resolve().is_file()


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


async def test_a_loopback_server_on_the_host_cannot_be_reached(
    sandbox: BubblewrapSandbox, tmp_path: Path, listener: tuple[Listener, int]
) -> None:
    counter, port = listener
    status, output = await sh(sandbox, tmp_path, f"exec 3<>/dev/tcp/127.0.0.1/{port}")
    await asyncio.sleep(0.05)
    assert status != 0
    assert "Connection refused" in output
    assert counter.connections == 0


async def test_the_same_server_is_reached_when_the_call_may_use_the_network(
    sandbox: BubblewrapSandbox, tmp_path: Path, listener: tuple[Listener, int]
) -> None:
    # The control for the test above: the probe would have seen a connection had there been one.
    counter, port = listener
    status, _ = await sh(sandbox, tmp_path, f"exec 3<>/dev/tcp/127.0.0.1/{port}", network=True)
    for _ in range(50):
        if counter.connections:
            break
        await asyncio.sleep(0.01)
    assert status == 0
    assert counter.connections == 1


async def test_hosts_outside_cannot_be_reached(sandbox: BubblewrapSandbox, tmp_path: Path) -> None:
    status, output = await sh(sandbox, tmp_path, "exec 3<>/dev/tcp/1.1.1.1/443")
    assert status != 0
    assert "Network is unreachable" in output


async def test_names_cannot_be_resolved(sandbox: BubblewrapSandbox, tmp_path: Path) -> None:
    status, output = await sh(sandbox, tmp_path, "getent hosts pypi.org")
    assert status != 0
    assert "pypi" not in output.lower()
    status, _ = await sh(sandbox, tmp_path, "test -e /etc/resolv.conf")
    assert status != 0


async def test_only_the_loopback_interface_exists(sandbox: BubblewrapSandbox, tmp_path: Path) -> None:
    status, output = await sh(sandbox, tmp_path, "tail -n +3 /proc/net/dev | cut -d: -f1")
    assert status == 0
    assert [line.strip() for line in output.splitlines()[:-1]] == ["lo"]


async def test_the_resolver_configuration_is_there_with_network(
    sandbox: BubblewrapSandbox, tmp_path: Path
) -> None:
    if not has_resolver_configuration():
        pytest.skip("this host has no /etc/resolv.conf")
    status, _ = await sh(sandbox, tmp_path, "test -s /etc/resolv.conf", network=True)
    assert status == 0


async def test_the_configuration_can_allow_the_network_for_every_command(
    tmp_path: Path, listener: tuple[Listener, int]
) -> None:
    counter, port = listener
    box = BubblewrapSandbox(SandboxSettings(network=True))
    status, _ = await sh(box, tmp_path, f"exec 3<>/dev/tcp/127.0.0.1/{port}")
    for _ in range(50):
        if counter.connections:
            break
        await asyncio.sleep(0.01)
    assert status == 0
    assert counter.connections == 1
