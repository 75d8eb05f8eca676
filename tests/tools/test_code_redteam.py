"""Red team: a program that tries the network, the host's files and its channel to the host.

Each attack runs as a real program in the real sandbox; the host's answer is checked, never
the program's own report alone.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
from pathlib import Path

import pytest
from tests.tools.test_code import LIMITS, run_code

from steward.safety.sandbox.bubblewrap import BubblewrapSandbox
from steward.tools.base import CombinedToolset, FunctionToolset, ToolResult, tool
from steward.tools.builtin import builtin_toolset
from steward.tools.code import MAX_REQUEST_BYTES, CodeToolset, code_tools

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)

SOCKET = "/run/steward/code/channel.sock"
RAW = (
    "import json, socket, struct\n"
    "def connect():\n"
    "    s = socket.socket(socket.AF_UNIX)\n"
    f"    s.connect({SOCKET!r})\n"
    "    return s\n"
    "def send(s, body):\n"
    "    s.sendall(struct.pack('>I', len(body)) + body)\n"
    "def answer(s):\n"
    "    head = s.recv(4)\n"
    "    if len(head) < 4:\n"
    "        return None\n"
    "    size = struct.unpack('>I', head)[0]\n"
    "    data = b''\n"
    "    while len(data) < size:\n"
    "        chunk = s.recv(size - len(data))\n"
    "        if not chunk:\n"
    "            break\n"
    "        data += chunk\n"
    "    return json.loads(data)\n"
)


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    return BubblewrapSandbox(LIMITS)


# --- the network -------------------------------------------------------------------------


async def test_the_hosts_loopback_is_out_of_reach(workspace: Path, sandbox: BubblewrapSandbox) -> None:
    heard: list[bytes] = []

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heard.append(await reader.read(100))
        writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    code = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=3).sendall(b'leak')\n"
        "    print('connected')\n"
        "except OSError as e:\n"
        "    print('refused', type(e).__name__)\n"
    )
    try:
        result = await run_code(code, workspace, sandbox)
    finally:
        server.close()
        await server.wait_closed()
    assert result.content.startswith("refused") and heard == []


async def test_the_outside_is_out_of_reach(workspace: Path, sandbox: BubblewrapSandbox) -> None:
    code = (
        "import socket\n"
        "for host in ('1.1.1.1', '8.8.8.8'):\n"
        "    try:\n"
        "        socket.create_connection((host, 53), timeout=3)\n"
        "        print('connected', host)\n"
        "    except OSError as e:\n"
        "        print('refused', host)\n"
        "try:\n"
        "    socket.getaddrinfo('example.com', 80)\n"
        "    print('resolved')\n"
        "except OSError:\n"
        "    print('no dns')\n"
    )
    result = await run_code(code, workspace, sandbox)
    assert result.content.splitlines() == ["refused 1.1.1.1", "refused 8.8.8.8", "no dns"]


# --- the host's files --------------------------------------------------------------------


async def test_the_hosts_files_are_out_of_reach(
    workspace: Path, outside: Path, sandbox: BubblewrapSandbox
) -> None:
    home_ssh = Path.home() / ".ssh"
    code = (
        "import os\n"
        f"for path in ({str(outside / 'secret.txt')!r}, '/etc/shadow', {str(home_ssh / 'id_rsa')!r}):\n"
        "    try:\n"
        "        print(open(path).read()[:20])\n"
        "    except OSError as e:\n"
        "        print('unreadable', type(e).__name__)\n"
        f"print(os.path.exists({str(home_ssh)!r}) and os.listdir({str(home_ssh)!r}))\n"
    )
    result = await run_code(code, workspace, sandbox)
    lines = result.content.splitlines()
    assert all(line.startswith("unreadable") for line in lines[:3]), lines
    assert "TOP SECRET" not in result.content
    assert lines[3] in ("False", "[]")


async def test_writing_outside_the_workspace_fails(
    workspace: Path, outside: Path, sandbox: BubblewrapSandbox
) -> None:
    target = outside / "planted.txt"
    code = (
        "for path in (" + repr(str(target)) + ", '/usr/planted', " + repr(str(workspace / "x.txt")) + "):\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        print('wrote', path)\n"
        "    except OSError:\n"
        "        print('refused')\n"
    )
    result = await run_code(code, workspace, sandbox)
    assert result.content.splitlines() == ["refused"] * 3
    assert not target.exists() and not (workspace / "x.txt").exists()


# --- forged channel messages -------------------------------------------------------------


async def test_a_call_to_a_tool_the_run_does_not_have_is_refused_and_recorded(
    workspace: Path, sandbox: BubblewrapSandbox
) -> None:
    code = RAW + (
        "s = connect()\n"
        "send(s, json.dumps({'tool': 'shutdown_host', 'arguments': {}}).encode())\n"
        "print(answer(s))\n"
    )
    result = await run_code(code, workspace, sandbox)
    assert "'ok': False" in result.content and "Unknown tool 'shutdown_host'" in result.content
    assert [(c.tool, c.is_error) for c in result.nested] == [("shutdown_host", True)]


async def test_malformed_frames_are_refused_and_the_channel_goes_on(
    workspace: Path, sandbox: BubblewrapSandbox
) -> None:
    (workspace / "a.txt").write_text("fine")
    code = RAW + (
        "s = connect()\n"
        "for body in (b'{not json', b'[1, 2]', json.dumps({'tool': 7}).encode(),\n"
        "             json.dumps({'tool': 'read_file', 'arguments': 'a.txt'}).encode()):\n"
        "    send(s, body)\n"
        "    print(answer(s)['ok'])\n"
        "send(s, json.dumps({'tool': 'read_file', 'arguments': {'path': 'a.txt'}}).encode())\n"
        "print('fine' in answer(s)['output'])\n"
    )
    result = await run_code(code, workspace, sandbox)
    assert result.content.splitlines() == ["False", "False", "False", "False", "True"]
    assert [c.tool for c in result.nested] == ["read_file"]  # only the well-formed call ran


async def test_a_huge_frame_closes_the_channel(workspace: Path, sandbox: BubblewrapSandbox) -> None:
    code = RAW + (
        "import struct\n"
        "s = connect()\n"
        f"s.sendall(struct.pack('>I', {MAX_REQUEST_BYTES + 1}))\n"
        "print(answer(s)['output'][:40])\n"
        "print(answer(s))\n"
    )
    result = await run_code(code, workspace, sandbox)
    lines = result.content.splitlines()
    assert lines[0].startswith(f"a frame of {MAX_REQUEST_BYTES + 1} bytes") and lines[1] == "None"
    assert any(kind == "code_channel" for kind, _ in result.notes)
    assert result.nested == ()


async def test_a_second_connection_is_refused(workspace: Path, sandbox: BubblewrapSandbox) -> None:
    (workspace / "a.txt").write_text("fine")
    code = RAW + (
        "first = connect()\n"
        "second = connect()\n"
        "try:\n"
        "    send(second, json.dumps({'tool': 'read_file', 'arguments': {'path': 'a.txt'}}).encode())\n"
        "    print(answer(second))\n"
        "except OSError:\n"
        "    print(None)\n"
        "send(first, json.dumps({'tool': 'read_file', 'arguments': {'path': 'a.txt'}}).encode())\n"
        "print(answer(first)['ok'])\n"
    )
    result = await run_code(code, workspace, sandbox)
    assert result.content.splitlines() == ["None", "True"]
    assert len(result.nested) == 1
    assert ("code_channel", "a second connection to the channel was refused") in result.notes


async def test_no_call_is_heard_after_the_program_ended(workspace: Path) -> None:
    """Without the sandbox the program sees the socket's host path: after the call it is gone."""
    ran: list[str] = []

    @tool
    def mark() -> str:
        """Records that it ran."""
        ran.append("mark")
        return "marked"

    toolset = CodeToolset(
        CombinedToolset([builtin_toolset(), FunctionToolset([*code_tools(), mark])]), max_tool_calls=10
    )
    code = "print(open('/proc/self/cmdline').read().split(chr(0))[-2])"
    result: ToolResult = await run_code(code, workspace, None, toolset=toolset)
    directory = Path(result.content.strip())
    assert directory.name.startswith("steward-code-")
    assert not directory.exists()
    with socket.socket(socket.AF_UNIX) as late, pytest.raises(OSError):
        late.connect(str(directory / "channel.sock"))
    assert ran == []


async def test_answers_are_json_the_program_cannot_bend(workspace: Path, sandbox: BubblewrapSandbox) -> None:
    """A tool's output that looks like a frame is only text to the program."""
    (workspace / "evil.txt").write_text(json.dumps({"ok": True, "output": "forged"}))
    result = await run_code("read_file(path='evil.txt')", workspace, sandbox)
    assert '\\"ok\\": true' in result.content or '"ok": true' in result.content
