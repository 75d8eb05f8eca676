"""MCP servers as toolsets, built on the official ``mcp`` SDK.

Nothing here imports the SDK until a server is configured: ``import steward`` stays fast and
the SDK is an optional dependency (``pip install 'steward[mcp]'``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from steward.errors import ConfigError

if TYPE_CHECKING:
    from steward.config import Config, McpServerConfig, SandboxConfig
    from steward.mcp.server import McpServer
    from steward.mcp.toolset import McpToolset

INSTALL_HINT = "pip install 'steward[mcp]' (or: pip install mcp)"


def check_servers(servers: Mapping[str, McpServerConfig]) -> None:
    """Refuse a server section that cannot work, naming the fix."""
    from steward.mcp.toolset import SERVER_NAME

    for name, cfg in servers.items():
        where = f"[mcp_servers.{name}]"
        if not SERVER_NAME.match(name) or len(name) > 32:
            raise ConfigError(
                f"{where}: a server name may hold letters, digits, '-' and single '_' (not '__', which "
                "separates it from tool names), at most 32 characters; rename the section"
            )
        if not cfg.command and not cfg.url:
            raise ConfigError(
                f'{where}: sets neither command nor url; add command = "PROGRAM" (with args = [...]) '
                'for a stdio server, or url = "https://..." for a streamable HTTP server'
            )
        if cfg.command and cfg.url:
            raise ConfigError(
                f"{where}: sets both command and url; keep command for a stdio server or url for a "
                "streamable HTTP server, not both"
            )
        if cfg.url and not cfg.url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}: url must start with http:// or https:// (got {cfg.url!r})")
        if cfg.url and cfg.sandbox:
            raise ConfigError(f"{where}: sandbox applies to stdio servers only; remove it or use command")


def require_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigError(
            f"MCP servers are configured but the MCP SDK is not installed: {INSTALL_HINT}"
        ) from None


def make_servers(
    servers: Mapping[str, McpServerConfig], *, sandbox: SandboxConfig | None = None
) -> list[McpServer]:
    """One ``McpServer`` per configured server (nothing starts yet)."""
    check_servers(servers)
    require_sdk()
    import logging

    # The SDK logs transport failures with tracebacks; each one reaches the model and the user
    # as a one-line error already, so they must not also land on the user's terminal.
    for name in ("mcp", "client"):  # the SDK's session logs under "client"
        logging.getLogger(name).addHandler(logging.NullHandler())
        logging.getLogger(name).propagate = False
    from steward.mcp.server import McpServer

    made = []
    for name, cfg in servers.items():
        jailed = cfg.sandbox and sandbox is not None and sandbox.enabled
        made.append(McpServer(name, cfg, sandbox=sandbox if jailed else None))
    return made


def mcp_toolsets(servers: Mapping[str, McpServerConfig], *, config: Config) -> list[McpToolset]:
    """The toolset that offers every configured server's tools (empty when there are none)."""
    if not servers:
        return []
    from steward.mcp.toolset import McpToolset

    return [McpToolset(make_servers(servers, sandbox=config.sandbox))]


__all__ = ["INSTALL_HINT", "check_servers", "make_servers", "mcp_toolsets", "require_sdk"]
