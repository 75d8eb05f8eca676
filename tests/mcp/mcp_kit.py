"""Helpers of the MCP tests: real servers from PyPI (installed with the dev extra), from npm
(installed by scripts/test into tests/mcp/node), and our own misbehaving one (servers/rogue.py).

A missing npm server skips its tests with the command that installs it, except under
``STEWARD_REQUIRE_MCP_SERVERS=1`` (set by scripts/test, so CI never skips them silently).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from steward import Agent, ScriptedModel
from steward.config import Config, McpServerConfig, PolicySettings
from steward.events import Event

HERE = Path(__file__).parent
NODE = HERE / "node" / "node_modules" / "@modelcontextprotocol"
BIN = Path(sys.executable).parent


def need(path: Path, what: str) -> None:
    if path.exists():
        return
    message = f"{what} is not installed ({path.relative_to(HERE.parent.parent)} missing); run scripts/test, or: npm install --prefix tests/mcp/node"
    if os.environ.get("STEWARD_REQUIRE_MCP_SERVERS"):
        pytest.fail(message)
    pytest.skip(message)


def rogue(**options: Any) -> McpServerConfig:
    """Our own server that misbehaves on demand (see servers/rogue.py)."""
    return McpServerConfig(command=sys.executable, args=[str(HERE / "servers" / "rogue.py")], **options)


def time_server(**options: Any) -> McpServerConfig:
    return McpServerConfig(command=str(BIN / "mcp-server-time"), **options)


def git_server(repository: Path, **options: Any) -> McpServerConfig:
    return McpServerConfig(
        command=str(BIN / "mcp-server-git"), args=["--repository", str(repository)], **options
    )


def everything(**options: Any) -> McpServerConfig:
    script = NODE / "server-everything" / "dist" / "index.js"
    need(script, "@modelcontextprotocol/server-everything")
    return McpServerConfig(command="node", args=[str(script), "stdio"], **options)


def filesystem(*roots: Path, **options: Any) -> McpServerConfig:
    script = NODE / "server-filesystem" / "dist" / "index.js"
    need(script, "@modelcontextprotocol/server-filesystem")
    return McpServerConfig(command="node", args=[str(script), *map(str, roots)], **options)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class HttpServer:
    url: str
    process: subprocess.Popen[bytes]

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)


@dataclass
class McpRun:
    events: list[Event]
    agent: Agent
    status: str
    requests: list[Any] = field(default_factory=list)

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]

    def results(self) -> dict[str, Any]:
        """The last tool_result of each tool."""
        return {e.tool: e for e in self.of("tool_result")}


class Recording(ScriptedModel):
    def __init__(self, replies: Sequence[Mapping[str, Any]]) -> None:
        base = ScriptedModel.from_data(replies)
        super().__init__(base.replies, source=base.source)
        self.requests: list[Any] = []

    def stream(self, request):  # type: ignore[no-untyped-def]
        self.requests.append(request)
        return super().stream(request)


def calls(*items: tuple[str, Mapping[str, Any]], answer: str = "done") -> list[dict[str, Any]]:
    """One reply per tool call, then the final answer (an agent_step end: the run is solved)."""
    end = {"phase": "end", "summary": "done", "end_status": "solved", "end_message": answer}
    return [{"tool": name, "args": dict(args)} for name, args in items] + [{"agent_step": end}]


async def run_agent(
    workspace: Path,
    servers: Mapping[str, McpServerConfig],
    replies: Sequence[Mapping[str, Any]],
    *,
    allow: Sequence[str] = (),
    goal: str = "use the servers",
    **config: Any,
) -> McpRun:
    """Run an agent with these MCP servers on scripted replies; the servers are stopped after."""
    model = Recording(replies)
    settings = Config(mcp_servers=dict(servers), policy=PolicySettings(allow=list(allow)), **config)
    agent = Agent(model, config=settings, builtin_tools=False)
    try:
        run = agent.start(goal, workspace=workspace)
        events = [e async for e in run.stream()]
    finally:
        await agent.aclose()
    return McpRun(events, agent, run.status, model.requests)
