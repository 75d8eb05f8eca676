"""``steward mcp``: the configured MCP servers — list them with their tools, call one by hand —
and the ``/mcp``, ``/resources``, ``/resource``, ``/prompts`` and ``/prompt`` commands of chat."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from steward.config import Config
    from steward.mcp.server import McpServer
    from steward.mcp.toolset import McpToolset
    from steward.tools.base import ToolContext

mcp_app = typer.Typer(
    help="MCP servers: list them and their tools, call a tool by hand.", no_args_is_help=True
)

Workspace = Annotated[Path, typer.Option("--workspace", "-w", help="Workspace whose configuration to use.")]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _toolset(workspace: Path) -> tuple[Config, McpToolset]:
    from steward.config import load_config
    from steward.errors import ConfigError
    from steward.mcp import mcp_toolsets
    from steward.run import check_workspace

    config = load_config(check_workspace(workspace))
    servers = {name: cfg for name, cfg in config.mcp_servers.items() if cfg.enabled}
    if not config.mcp_servers:
        raise ConfigError(
            "no MCP servers are configured. Add one to steward.toml, e.g.\n"
            '  [mcp_servers.time]\n  command = "uvx"\n  args = ["mcp-server-time"]'
        )
    found = mcp_toolsets(servers, config=config)
    if not found:
        raise ConfigError("every configured MCP server has enabled = false")
    return config, found[0]


def _status(server: McpServer) -> str:
    match server.state:
        case "ready":
            return f"ready{f' ({server.server_name})' if server.server_name else ''}"
        case "failed":
            return f"FAILED: {server.problem}"
        case _:
            return server.state


@mcp_app.command("list")
def list_servers(
    workspace: Workspace = Path(),
    descriptions: Annotated[
        bool, typer.Option("--descriptions", "-d", help="Show full descriptions.")
    ] = False,
) -> None:
    """Start each configured server, then show its status, its tools and what they default to."""
    config, toolset = _toolset(workspace)

    async def main() -> int:
        from steward.tools.base import ToolContext

        try:
            ctx = ToolContext(workspace=workspace.resolve())
            specs = await toolset.get_tools(ctx)
            statuses = {name: _status(server) for name, server in toolset.servers.items()}
            ready = {name for name, server in toolset.servers.items() if server.state == "ready"}
        finally:
            await toolset.aclose()
        failed = 0
        for name, cfg in config.mcp_servers.items():
            where = cfg.url or shlex.join([str(cfg.command), *cfg.args])
            server = toolset.servers.get(name)
            if server is None:
                typer.echo(f"{name}  ({'http' if cfg.url else 'stdio'}: {where})  disabled")
                continue
            failed += name not in ready
            sandboxed = ", sandboxed" if server.sandbox is not None else ""
            typer.echo(f"{name}  ({server.transport}: {where}{sandboxed})  {statuses[name]}")
            mine = [s for s in specs if s.origin == f"mcp:{name}"]
            if name in ready:
                extras = [k for k in ("resources", "prompts") if getattr(server.capabilities, k, None)]
                typer.echo(
                    f"  {len(mine)} tools{''.join(f', {k}' for k in extras)}; approval: {cfg.approval}"
                )
            for spec in mine:
                text = " ".join(spec.description.split())
                if not descriptions and len(text) > 90:
                    text = text[:87] + "..."
                typer.echo(f"  - {spec.name}  [{spec.default_action}]  {text}")
        return EXIT_FAILED if failed else EXIT_OK

    raise typer.Exit(asyncio.run(main()))


@mcp_app.command("call")
def call(
    server: Annotated[str, typer.Argument(help="The server's name, as in \\[mcp_servers.NAME].")],
    tool: Annotated[str, typer.Argument(help="The tool's name on that server (with or without SERVER__).")],
    arguments: Annotated[
        str, typer.Argument(help='Arguments as a JSON object, e.g. \'{"timezone": "UTC"}\'.')
    ] = "{}",
    workspace: Workspace = Path(),
) -> None:
    """Call one tool by hand and print its result (exit 1 if the call failed)."""
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as exc:
        typer.echo(f"steward: the arguments are not valid JSON ({exc.msg} at column {exc.colno}); "
                   "give an object such as '{\"text\": \"hi\"}'", err=True)  # fmt: skip
        raise typer.Exit(EXIT_USAGE) from None
    if not isinstance(parsed, dict):
        typer.echo('steward: the arguments must be a JSON object, e.g. \'{"text": "hi"}\'', err=True)
        raise typer.Exit(EXIT_USAGE)
    _, toolset = _toolset(workspace)
    if server not in toolset.servers:
        known = ", ".join(sorted(toolset.servers)) or "(none)"
        typer.echo(f"steward: no enabled MCP server named {server!r}; configured: {known}", err=True)
        raise typer.Exit(EXIT_USAGE)
    name = tool if tool.startswith(f"{server}__") else f"{server}__{tool}"

    async def main() -> int:
        from steward.tools.base import ToolContext

        ctx = ToolContext(workspace=workspace.resolve())
        try:
            specs = await toolset.get_tools(ctx)
            if name not in {s.name for s in specs}:
                mcp_server = toolset.servers[server]
                if mcp_server.state != "ready":
                    typer.echo(f"steward: {_status(mcp_server)}", err=True)
                    return EXIT_FAILED
                offered = sorted(s.name.split("__", 1)[1] for s in specs if s.origin == f"mcp:{server}")
                typer.echo(
                    f"steward: {server} has no tool {tool!r}; its tools: {', '.join(offered)}", err=True
                )
                return EXIT_USAGE
            result = await toolset.call_tool(name, parsed, ctx)
        finally:
            await toolset.aclose()
        for kind, message in result.notes:
            typer.echo(f"{kind}: {message}", err=True)
        typer.echo(result.content)
        return EXIT_FAILED if result.is_error else EXIT_OK

    raise typer.Exit(asyncio.run(main()))


# --- chat commands ------------------------------------------------------------------------------

CHAT_HELP = (
    "/mcp       list MCP servers and their status\n"
    "/resources [SERVER]          list resources\n"
    "/resource SERVER URI         read a resource; it is attached to your next message\n"
    "/prompts [SERVER]            list prompts\n"
    "/prompt SERVER NAME [k=v...] run a server's prompt as your message"
)


async def chat_command(toolset: McpToolset | None, words: list[str], workspace: Path) -> tuple[str, str]:
    """Run one MCP chat command: (text to show the user, text to send to the agent, or "")."""
    from steward.tools.base import ToolContext

    if toolset is None:
        return "no MCP servers are configured (add [mcp_servers.NAME] to steward.toml)", ""
    await toolset.refresh(workspace)
    command = _CHAT.get(words[0].lower())
    if command is None:
        return f"unknown command {words[0]}", ""
    return await command(toolset, words[1:], ToolContext(workspace=workspace))


async def _servers(toolset: McpToolset, rest: list[str], ctx: ToolContext) -> tuple[str, str]:
    lines = []
    for server in toolset.servers.values():
        count = len(server.listing.tools) if server.state == "ready" else 0
        lines.append(f"{server.name}: {_status(server)}, {count} tools")
    return "\n".join(lines), ""


async def _resources(toolset: McpToolset, rest: list[str], ctx: ToolContext) -> tuple[str, str]:
    return (await toolset.list_resources({"server": rest[0]} if rest else {}, ctx)).content, ""


async def _resource(toolset: McpToolset, rest: list[str], ctx: ToolContext) -> tuple[str, str]:
    if len(rest) != 2:
        return "usage: /resource SERVER URI", ""
    result = await toolset.read_resource({"server": rest[0], "uri": rest[1]}, ctx)
    if result.is_error:
        return result.content, ""
    attached = f'<resource server="{rest[0]}" uri="{rest[1]}">\n{result.content}\n</resource>'
    return f"attached {rest[1]} ({len(result.content)} characters) to your next message", attached


async def _prompts(toolset: McpToolset, rest: list[str], ctx: ToolContext) -> tuple[str, str]:
    return (await toolset.list_prompts({"server": rest[0]} if rest else {}, ctx)).content, ""


async def _prompt(toolset: McpToolset, rest: list[str], ctx: ToolContext) -> tuple[str, str]:
    if len(rest) < 2:
        return "usage: /prompt SERVER NAME [key=value ...]", ""
    bad = [part for part in rest[2:] if "=" not in part]
    if bad:
        return f"arguments are key=value pairs; not understood: {' '.join(bad)}", ""
    values = dict(part.split("=", 1) for part in rest[2:])
    result = await toolset.get_prompt({"server": rest[0], "name": rest[1], "arguments": values}, ctx)
    if result.is_error:
        return result.content, ""
    return f"running prompt {rest[1]} of {rest[0]}", result.content


_CHAT = {
    "/mcp": _servers,
    "/resources": _resources,
    "/resource": _resource,
    "/prompts": _prompts,
    "/prompt": _prompt,
}
CHAT_COMMANDS = frozenset({"/mcp", "/resources", "/resource", "/prompts", "/prompt"})
