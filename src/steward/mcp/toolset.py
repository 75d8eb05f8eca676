"""MCP servers as one toolset: their tools as ``SERVER__TOOL``, their resources and prompts
through four shared tools, every call bounded and every failure a result the model can read.

Names: a server's tool keeps its own name behind the server's prefix; characters providers
refuse become ``_``, and a name that would then collide with another of the same server, or
run past 64 characters, gets a short digest instead of silently replacing the other tool.
"""

from __future__ import annotations

import asyncio
import base64
import fnmatch
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steward.mcp.server import McpCallError, McpServer, Progress
from steward.models.base import ToolSpec
from steward.tools.base import ToolContext, ToolResult, Toolset, unknown_tool

if TYPE_CHECKING:
    import mcp_types

    from mcp import Client

SEP = "__"
_NAME_LIMIT = 64
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_-]")
LIST_TIMEOUT_CAP_S = 30.0

# Categories of failed calls, so the model (and `runs show`) can tell them apart.
TOOL_ERROR = "mcp_tool_error"  # the tool ran and said it failed (isError)
PROTOCOL_ERROR = "mcp_protocol"  # the server refused the request or broke the protocol
SERVER_DOWN = "mcp_server_down"  # the server crashed, exited or cannot be reached
TIMEOUT = "mcp_timeout"  # no answer in time; the server was stopped
CONFIG_ERROR = "mcp_config"


@dataclass(slots=True, frozen=True)
class Offered:
    """A server tool as the model sees it, and how to reach it."""

    server: McpServer
    tool: str  # the server's own name
    spec: ToolSpec


class McpToolset(Toolset):
    """Every configured server, started together and lazily; one toolset for all of them."""

    def __init__(self, servers: Sequence[McpServer]) -> None:
        self.servers = {s.name: s for s in servers}
        self._offered: dict[str, Offered] = {}
        self._specs: list[ToolSpec] = []
        self._key: tuple[Any, ...] = ()
        self.warnings: list[str] = []

    # --- listing ----------------------------------------------------------------------------

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        await self.refresh(ctx.workspace)
        return self._specs

    async def refresh(self, workspace: Path, *, force: bool = False, only: str | None = None) -> None:
        """List the tools of every server that needs it (or just ``only``), concurrently."""

        async def one(server: McpServer) -> None:
            if only is not None and server.name != only:
                return
            if not force and server.state != "ready" and not server.should_start_for_listing():
                return
            if server.state == "ready" and server.listing.fresh:
                return
            try:
                await server.list_tools(workspace, min(server.config.call_timeout_s, LIST_TIMEOUT_CAP_S))
            except McpCallError as failure:
                # Its tools stay offered as last listed: calling one tells the model why it
                # failed and restarts the server.
                self._warn(failure.message)

        await asyncio.gather(*(one(s) for s in self.servers.values()))
        key = tuple((s.name, id(s.listing.tools), s.state == "ready") for s in self.servers.values())
        if key != self._key:
            self._key = key
            self._rebuild()

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def _rebuild(self) -> None:
        offered: dict[str, Offered] = {}
        for server in self.servers.values():
            taken: set[str] = set()
            for tool in server.listing.tools:
                if not _included(server, tool.name):
                    continue
                name = _model_name(server.name, tool.name, taken)
                taken.add(name)
                offered[name] = Offered(server, tool.name, _spec(server, name, tool))
        shared = self._shared_specs()
        self._offered = offered
        self._specs = [o.spec for o in offered.values()] + shared

    def _shared_specs(self) -> list[ToolSpec]:
        ready = [s for s in self.servers.values() if s.capabilities is not None]
        specs = []
        if any(s.capabilities and s.capabilities.resources for s in ready):
            specs += [RESOURCES_SPEC, READ_RESOURCE_SPEC]
        if any(s.capabilities and s.capabilities.prompts for s in ready):
            specs += [PROMPTS_SPEC, GET_PROMPT_SPEC]
        # Listing is harmless; what a resource or prompt says comes from the server, so reading
        # one asks first unless every server is trusted by the configuration.
        trusted = all(s.config.approval != "ask" for s in self.servers.values())
        return [
            s if s in (RESOURCES_SPEC, PROMPTS_SPEC) or trusted else replace(s, default_action="ask")
            for s in specs
        ]

    # --- calls ------------------------------------------------------------------------------

    def claims(self, name: str) -> bool:
        return name in _SHARED or (name.split(SEP, 1)[0] in self.servers and SEP in name)

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        shared = _SHARED.get(name)
        if shared is not None:
            return await shared(self, dict(arguments), ctx)
        offered = self._offered.get(name)
        if offered is None:
            server_name = name.split(SEP, 1)[0]
            server = self.servers.get(server_name)
            if server is not None and server.state != "ready":
                # Not listed because the server is down: this call is the one that restarts it.
                await self.refresh(ctx.workspace, force=True, only=server_name)
                offered = self._offered.get(name)
                if offered is None and not server.is_ready():
                    return _failure(name, server.failure())
                if offered is None:
                    return ToolResult(
                        f"{name} is not available: {server.name} does not offer it.", is_error=True
                    )
            else:
                return unknown_tool(name, self._offered)
        return await self._call(offered, dict(arguments), ctx)

    async def _call(self, offered: Offered, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        server, seen = offered.server, Progress()
        if not server.is_ready():
            # It restarts first, and may come back as a different program: the call was judged
            # (and maybe approved) on the old description, so a changed tool is not run.
            await self.refresh(ctx.workspace, force=True, only=server.name)
            if not server.is_ready():
                return _failure(offered.spec.name, server.failure())
            now = self._offered.get(offered.spec.name)
            if now is None or now.spec.fingerprint != offered.spec.fingerprint:
                return ToolResult(
                    f"{offered.spec.name} was not called: its server restarted and the tool "
                    f"{'is gone' if now is None else 'changed its description or arguments'}. "
                    "Call it again if it is still what you need; it is checked anew.",
                    is_error=True,
                    category=SERVER_DOWN,
                )
            offered = now

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.updates += 1
            seen.progress, seen.total, seen.message = progress, total, message

        async def call(client: Client) -> mcp_types.CallToolResult:
            return await client.call_tool(offered.tool, arguments, progress_callback=on_progress)

        name = offered.spec.name
        try:
            result = await server.call(
                ctx.workspace, f"the call to {offered.tool}", call, server.timeout_for(offered.tool)
            )
        except McpCallError as failure:
            return _with_progress(_failure(name, failure), name, seen)
        text = render_content(result.content, result.structured_content, ctx.settings.output_cap_chars)
        if result.is_error:
            failed = ToolResult(
                f"{name} reported an error (the tool ran and failed): {text or '(no message)'}",
                is_error=True,
                category=TOOL_ERROR,
            )
            return _with_progress(failed, name, seen)
        return _with_progress(ToolResult(text), name, seen)

    async def aclose(self) -> None:
        await asyncio.gather(*(s.stop() for s in self.servers.values()), return_exceptions=True)

    # --- resources and prompts --------------------------------------------------------------

    def _server_for(self, arguments: Mapping[str, Any], capability: str) -> McpServer | ToolResult:
        name = str(arguments.get("server") or "")
        server = self.servers.get(name)
        if server is None:
            known = ", ".join(sorted(self.servers)) or "(none)"
            return ToolResult(f"Unknown MCP server {name!r}. Servers: {known}.", is_error=True)
        caps = server.capabilities
        if caps is not None and getattr(caps, capability) is None:
            return ToolResult(f"MCP server {name!r} offers no {capability}.", is_error=True)
        return server

    def _servers_with(self, arguments: Mapping[str, Any], capability: str) -> list[McpServer] | ToolResult:
        if arguments.get("server"):
            found = self._server_for(arguments, capability)
            return found if isinstance(found, ToolResult) else [found]
        return [s for s in self.servers.values() if s.capabilities and getattr(s.capabilities, capability)]

    async def list_resources(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        servers = self._servers_with(arguments, "resources")
        if isinstance(servers, ToolResult):
            return servers
        lines: list[str] = []
        for server in servers:

            async def both(client: Client) -> tuple[Any, Any]:
                listed = await client.list_resources()
                try:
                    templates = await client.list_resource_templates()
                except Exception:
                    templates = None
                return listed, templates

            try:
                listed, templates = await server.call(
                    ctx.workspace, "resources/list", both, server.config.call_timeout_s
                )
            except McpCallError as failure:
                lines.append(f"{server.name}: {failure.message}")
                continue
            lines.append(f"{server.name}:")
            lines += [
                f"- {r.uri} — {r.name}{f': {_one_line(r.description)}' if r.description else ''}"
                f"{f' ({r.mime_type})' if r.mime_type else ''}"
                for r in listed.resources
            ] or ["  (no resources)"]
            if templates is not None:
                for t in templates.resource_templates:
                    about = f": {_one_line(t.description)}" if t.description else ""
                    lines.append(f"- template {t.uri_template} — {t.name}{about}")
        return ToolResult(_cap("\n".join(lines) or "No server offers resources.", ctx))

    async def read_resource(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        server = self._server_for(arguments, "resources")
        if isinstance(server, ToolResult):
            return server
        uri = str(arguments.get("uri") or "")
        if not uri:
            return ToolResult("mcp_read_resource needs a uri (see mcp_resources).", is_error=True)

        async def read(client: Client) -> Any:
            return await client.read_resource(uri)

        try:
            result = await server.call(
                ctx.workspace, f"resources/read {uri}", read, server.config.call_timeout_s
            )
        except McpCallError as failure:
            return _failure("mcp_read_resource", failure)
        return ToolResult(_cap(render_resource_contents(result.contents), ctx))

    async def list_prompts(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        servers = self._servers_with(arguments, "prompts")
        if isinstance(servers, ToolResult):
            return servers
        lines: list[str] = []
        for server in servers:

            async def listed(client: Client) -> Any:
                return await client.list_prompts()

            try:
                prompts = await server.call(
                    ctx.workspace, "prompts/list", listed, server.config.call_timeout_s
                )
            except McpCallError as failure:
                lines.append(f"{server.name}: {failure.message}")
                continue
            lines.append(f"{server.name}:")
            for p in prompts.prompts:
                args = ", ".join(f"{a.name}{'' if a.required else '?'}" for a in p.arguments or [])
                lines.append(f"- {p.name}({args}){f': {_one_line(p.description)}' if p.description else ''}")
        return ToolResult(_cap("\n".join(lines) or "No server offers prompts.", ctx))

    async def get_prompt(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        server = self._server_for(arguments, "prompts")
        if isinstance(server, ToolResult):
            return server
        name = str(arguments.get("name") or "")
        raw = arguments.get("arguments") or {}
        if not name or not isinstance(raw, dict):
            return ToolResult(
                "mcp_get_prompt needs a prompt name and arguments as an object of strings.", is_error=True
            )
        values = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
        try:
            text = await self.prompt_text(server, name, values, ctx.workspace)
        except McpCallError as failure:
            return _failure("mcp_get_prompt", failure)
        return ToolResult(_cap(text, ctx))

    async def prompt_text(self, server: McpServer, name: str, values: dict[str, str], workspace: Path) -> str:
        async def get(client: Client) -> Any:
            return await client.get_prompt(name, values)

        result = await server.call(workspace, f"prompts/get {name}", get, server.config.call_timeout_s)
        parts = [f"{m.role}: {render_content([m.content], None, 100_000)}" for m in result.messages]
        return "\n\n".join(parts)


# --- names and specs --------------------------------------------------------------------------

SERVER_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*$")


def _model_name(server: str, tool: str, taken: set[str]) -> str:
    name = f"{server}{SEP}{_BAD_CHARS.sub('_', tool)}"
    if len(name) > _NAME_LIMIT or name in taken:
        digest = hashlib.sha256(tool.encode()).hexdigest()[:6]
        name = f"{name[: _NAME_LIMIT - 7]}_{digest}"
    return name


def _included(server: McpServer, tool: str) -> bool:
    cfg = server.config
    if cfg.include_tools and not any(fnmatch.fnmatchcase(tool, p) for p in cfg.include_tools):
        return False
    return not any(fnmatch.fnmatchcase(tool, p) for p in cfg.exclude_tools)


def fingerprint(tool: mcp_types.Tool) -> str:
    """What an approval of this tool holds on to: its description and its schema."""
    canonical = json.dumps(
        {"description": tool.description or "", "schema": tool.input_schema}, sort_keys=True, default=str
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _spec(server: McpServer, name: str, tool: mcp_types.Tool) -> ToolSpec:
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    description = (tool.description or tool.title or tool.name).strip()
    approval = server.config.approval
    read_only = bool(tool.annotations and tool.annotations.read_only_hint)
    allowed = approval == "allow" or (approval == "read_only" and read_only)
    return ToolSpec(
        name=name,
        description=description,
        parameters=schema,
        origin=f"mcp:{server.name}",
        default_action="allow" if allowed else "ask",
        fingerprint=fingerprint(tool),
        read_only=read_only,
    )


# --- rendering results ----------------------------------------------------------------------


def render_content(content: Sequence[Any], structured: Any, cap: int) -> str:
    """Text for the model from an MCP result's content blocks."""
    import mcp_types

    parts: list[str] = []
    for block in content:
        match block:
            case mcp_types.TextContent(text=text):
                parts.append(text)
            case (
                mcp_types.ImageContent(mime_type=mime, data=data)
                | mcp_types.AudioContent(mime_type=mime, data=data)
            ):
                kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
                parts.append(f"[{kind}: {mime}, {_b64_size(data)} bytes, not shown]")
            case mcp_types.EmbeddedResource(resource=resource):
                parts.append(render_resource_contents([resource]))
            case mcp_types.ResourceLink(uri=uri, name=name):
                parts.append(f"[resource: {uri} ({name}); read it with mcp_read_resource]")
            case _:
                parts.append(f"[{getattr(block, 'type', type(block).__name__)} content]")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    text = "\n".join(parts)
    if len(text) > cap:
        text = text[: cap // 2] + f"\n[... {len(text) - cap} characters cut ...]\n" + text[-cap // 2 :]
    return text


def render_resource_contents(contents: Sequence[Any]) -> str:
    import mcp_types

    parts = []
    for item in contents:
        if isinstance(item, mcp_types.TextResourceContents):
            parts.append(item.text if len(contents) == 1 else f"--- {item.uri}\n{item.text}")
        else:
            blob = getattr(item, "blob", "")
            parts.append(f"[{item.uri}: {item.mime_type or 'binary'}, {_b64_size(blob)} bytes, not shown]")
    return "\n".join(parts)


def _b64_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except ValueError:
        return len(data)


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())[:200]


def _cap(text: str, ctx: ToolContext) -> str:
    cap = ctx.settings.output_cap_chars
    return text if len(text) <= cap else text[:cap] + f"\n[... {len(text) - cap} characters cut ...]"


def _with_progress(result: ToolResult, name: str, seen: Progress) -> ToolResult:
    """``result`` with the progress the server reported during the call as a note, if any."""
    if not seen.updates:
        return result
    return replace(result, notes=(*result.notes, ("progress", f"{name}: {seen.render()}")))


def _failure(name: str, failure: McpCallError) -> ToolResult:
    match failure.kind:
        case "down" if not failure.sent:
            text = f"{name} was not called: {failure.message}. The next call tries to start the server again."
            return ToolResult(text, is_error=True, category=SERVER_DOWN)
        case "down":
            text = (
                f"{name} failed: {failure.message}. Whether the call had any effect is unknown. The server "
                "is started again on the next call."
            )
            return ToolResult(text, is_error=True, category=SERVER_DOWN)
        case "timeout":
            return ToolResult(f"{name} failed: {failure.message}.", is_error=True, category=TIMEOUT)
        case "protocol":
            return ToolResult(
                f"{name} failed with a protocol error (the tool did not report a result): {failure.message}. "
                "Check the arguments against the tool's schema.",
                is_error=True,
                category=PROTOCOL_ERROR,
            )
        case "config":
            return ToolResult(
                f"{name} is not available: {failure.message}.", is_error=True, category=CONFIG_ERROR
            )


# --- the shared tools -------------------------------------------------------------------------

_SERVER_ARG = {"type": "string", "description": "The MCP server's name (the part before __ in its tools)."}

RESOURCES_SPEC = ToolSpec(
    "mcp_resources",
    "List the resources (documents, data) and resource templates MCP servers offer.",
    {
        "type": "object",
        "properties": {"server": {**_SERVER_ARG, "description": "Only this server (optional)."}},
    },
    origin="mcp",
)
READ_RESOURCE_SPEC = ToolSpec(
    "mcp_read_resource",
    "Read one resource of an MCP server by its URI (from mcp_resources).",
    {
        "type": "object",
        "properties": {
            "server": _SERVER_ARG,
            "uri": {"type": "string", "description": "The resource's URI."},
        },
        "required": ["server", "uri"],
    },
    origin="mcp",
)
PROMPTS_SPEC = ToolSpec(
    "mcp_prompts",
    "List the prompt templates MCP servers offer, with their arguments (? marks optional ones).",
    {
        "type": "object",
        "properties": {"server": {**_SERVER_ARG, "description": "Only this server (optional)."}},
    },
    origin="mcp",
)
GET_PROMPT_SPEC = ToolSpec(
    "mcp_get_prompt",
    "Get one prompt template of an MCP server, filled with arguments.",
    {
        "type": "object",
        "properties": {
            "server": _SERVER_ARG,
            "name": {"type": "string", "description": "The prompt's name."},
            "arguments": {"type": "object", "description": "Its arguments, name to string value."},
        },
        "required": ["server", "name"],
    },
    origin="mcp",
)

_SHARED = {
    "mcp_resources": McpToolset.list_resources,
    "mcp_read_resource": McpToolset.read_resource,
    "mcp_prompts": McpToolset.list_prompts,
    "mcp_get_prompt": McpToolset.get_prompt,
}
