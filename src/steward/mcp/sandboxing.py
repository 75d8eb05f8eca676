"""A stdio MCP server inside bubblewrap, with its own grants.

The server sees the system read-only, the workspace read-only unless ``writable`` names it
(or a folder above it), its own ``readable`` and ``writable`` paths (relative ones are
relative to the workspace), and the network only with ``network = true``. Its environment is
the one its configuration gives it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from steward.config import McpServerConfig, SandboxConfig
from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, sandbox_from_config


def _grant(path: str, workspace: Path) -> Path:
    given = Path(path).expanduser()
    return (given if given.is_absolute() else workspace / given).resolve()


def server_sandbox(
    server: McpServerConfig, config: SandboxConfig, workspace: Path
) -> tuple[BubblewrapSandbox, bool]:
    """The sandbox for ``server`` over ``workspace``, and whether the workspace is writable."""
    root = workspace.resolve()
    writable = [_grant(p, root) for p in server.writable]
    workspace_writable = any(root == w or root.is_relative_to(w) for w in writable)
    base = sandbox_from_config(config)
    settings = replace(
        base.settings,
        network=server.network,
        readable=(*base.settings.readable, *(_grant(p, root) for p in server.readable)),
        # The workspace itself is mounted by the sandbox (read-write when granted); a second
        # mount of it here would be undone by that one.
        writable=(*base.settings.writable, *(w for w in writable if w != root)),
        # A server is a long-lived process: no CPU-seconds limit that would kill it mid-session.
        cpu_s=None,
    )
    return BubblewrapSandbox(settings), workspace_writable
