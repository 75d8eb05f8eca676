"""Fixtures of the MCP tests; the helpers live in mcp_kit.py (tests import it by name)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # `from mcp_kit import ...` in the test modules

from mcp_kit import NODE, HttpServer, free_port, need


@pytest.fixture
def everything_http() -> Iterator[HttpServer]:
    """server-everything over streamable HTTP on a free loopback port."""
    script = NODE / "server-everything" / "dist" / "index.js"
    need(script, "@modelcontextprotocol/server-everything")
    port = free_port()
    process = subprocess.Popen(
        ["node", str(script), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    else:
        process.kill()
        pytest.fail("server-everything did not start listening within 20 s")
    server = HttpServer(f"http://127.0.0.1:{port}/mcp", process)
    yield server
    if process.poll() is None:
        server.kill()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws
