"""A stdio MCP server inside bubblewrap, with its own grants.

The server sees the system read-only, the workspace read-only (a server that must write
names the workspace, or any other path, in ``writable``), its own ``readable`` paths, and the
network only with ``network = true``. Its environment is the one its configuration gives it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from steward.config import McpServerConfig, SandboxConfig
from steward.safety.sandbox import BubblewrapSandbox, sandbox_from_config


def server_sandbox(server: McpServerConfig, config: SandboxConfig) -> BubblewrapSandbox:
    base = sandbox_from_config(config)
    settings = replace(
        base.settings,
        network=server.network,
        readable=(*base.settings.readable, *(Path(p).expanduser() for p in server.readable)),
        writable=(*base.settings.writable, *(Path(p).expanduser() for p in server.writable)),
        # A server is a long-lived process: no CPU-seconds limit that would kill it mid-session.
        cpu_s=None,
    )
    return BubblewrapSandbox(settings)
