"""The MCP client against a server that misbehaves on purpose (servers/rogue.py, a real
subprocess): crashes, hangs, garbage, answers out of order, errors of both kinds, a tool list
that changes, and servers that cannot start. Every failure is a result; the next call works."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from mcp_kit import calls, rogue, run_agent

from steward.config import Config, McpServerConfig
from steward.mcp import mcp_toolsets
from steward.mcp.toolset import McpToolset
from steward.tools.base import ToolContext


def toolset(**servers: McpServerConfig) -> McpToolset:
    [found] = mcp_toolsets(servers, config=Config())
    return found


@pytest.fixture
def ctx(workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace)


async def test_tools_are_named_server__tool_with_their_schemas(ctx: ToolContext) -> None:
    hub = toolset(r=rogue())
    try:
        specs = {s.name: s for s in await hub.get_tools(ctx)}
        assert "r__echo" in specs and "r__add" in specs
        add = specs["r__add"]
        assert add.parameters["properties"] == {"a": {"type": "integer"}, "b": {"type": "integer"}}
        assert add.origin == "mcp:r" and add.default_action == "ask" and add.fingerprint
        result = await hub.call_tool("r__add", {"a": 2, "b": 40}, ctx)
        assert (result.content, result.is_error) == ("42", False)
    finally:
        await hub.aclose()


async def test_tool_error_and_protocol_error_are_told_apart(ctx: ToolContext) -> None:
    hub = toolset(r=rogue())
    try:
        await hub.get_tools(ctx)
        tool_error = await hub.call_tool("r__fail", {"text": "the disk"}, ctx)
        protocol = await hub.call_tool("r__bad_request", {}, ctx)
    finally:
        await hub.aclose()
    assert tool_error.is_error and tool_error.category == "mcp_tool_error"
    assert (
        "the tool ran and failed" in tool_error.content and "cannot do that: the disk" in tool_error.content
    )
    assert protocol.is_error and protocol.category == "mcp_protocol"
    assert "protocol error" in protocol.content and "-32602" in protocol.content


async def test_a_server_that_crashes_mid_call_fails_at_once_and_restarts(ctx: ToolContext) -> None:
    hub = toolset(r=rogue(call_timeout_s=30))
    server = hub.servers["r"]
    try:
        await hub.get_tools(ctx)
        crashed = await hub.call_tool("r__crash", {}, ctx)
        assert crashed.is_error and crashed.category == "mcp_server_down"
        assert "exit status 3" in crashed.content and "crashing on purpose" in crashed.content
        assert "started again on the next call" in crashed.content
        again = await hub.call_tool("r__echo", {"text": "back"}, ctx)
        assert (again.content, server.starts) == ("back", 2)
    finally:
        await hub.aclose()


async def test_a_hung_server_hits_its_timeout_is_stopped_and_restarted(ctx: ToolContext) -> None:
    hub = toolset(r=rogue(call_timeout_s=30, tool_timeouts={"hang": 0.5}))
    server = hub.servers["r"]
    try:
        await hub.get_tools(ctx)
        hung = await hub.call_tool("r__hang", {}, ctx)
        assert hung.is_error and hung.category == "mcp_timeout"
        assert "did not answer the call to hang within 0.5 s" in hung.content
        assert server.state == "failed"
        again = await hub.call_tool("r__echo", {"text": "alive"}, ctx)
        assert again.content == "alive" and server.starts == 2
    finally:
        await hub.aclose()


async def test_garbage_lines_are_skipped_and_counted(ctx: ToolContext) -> None:
    hub = toolset(r=rogue())
    try:
        await hub.get_tools(ctx)
        result = await hub.call_tool("r__garbage", {"text": "still fine"}, ctx)
        assert result.content == "still fine" and not result.is_error
        watch = hub.servers["r"]._watch
        assert watch is not None and watch.garbage_count == 1
        assert "not json" in watch.garbage[0]
    finally:
        await hub.aclose()


async def test_garbage_before_the_handshake_does_not_stop_the_start(ctx: ToolContext) -> None:
    hub = toolset(r=rogue(env={"ROGUE_START": "garbage"}))
    try:
        assert "r__echo" in {s.name for s in await hub.get_tools(ctx)}
    finally:
        await hub.aclose()


async def test_answers_out_of_order_reach_the_right_calls(ctx: ToolContext) -> None:
    hub = toolset(r=rogue())
    try:
        await hub.get_tools(ctx)
        held = asyncio.create_task(hub.call_tool("r__hold", {"text": "first"}, ctx))
        await asyncio.sleep(0.2)  # the server holds it until the next call is answered
        second = await hub.call_tool("r__echo", {"text": "second"}, ctx)
        first = await asyncio.wait_for(held, 10)
    finally:
        await hub.aclose()
    assert (first.content, second.content) == ("held: first", "second")


async def test_progress_is_reported_as_a_note(ctx: ToolContext) -> None:
    hub = toolset(r=rogue())
    try:
        await hub.get_tools(ctx)
        result = await hub.call_tool("r__progress", {"steps": 4}, ctx)
    finally:
        await hub.aclose()
    assert result.content == "done in 4 steps"
    assert result.notes == (("progress", "r__progress: 4/4 step 4 (4 updates)"),)


async def test_tools_list_changed_refreshes_the_offer(ctx: ToolContext) -> None:
    hub = toolset(r=rogue())
    try:
        assert "r__extra" not in {s.name for s in await hub.get_tools(ctx)}
        await hub.call_tool("r__grow", {}, ctx)
        for _ in range(50):  # the notification arrives right after the answer
            if "r__extra" in {s.name for s in await hub.get_tools(ctx)}:
                break
            await asyncio.sleep(0.05)
        assert (await hub.call_tool("r__extra", {"text": "new"}, ctx)).content == "new"
    finally:
        await hub.aclose()


async def test_a_missing_command_is_a_config_error_naming_the_fix(ctx: ToolContext) -> None:
    hub = toolset(gone=McpServerConfig(command="steward-no-such-server"))
    try:
        assert await hub.get_tools(ctx) == []
        result = await hub.call_tool("gone__anything", {}, ctx)
    finally:
        await hub.aclose()
    assert result.is_error
    assert "cannot start" in result.content and "[mcp_servers.gone]" in result.content
    assert any("steward-no-such-server" in w for w in hub.warnings)


async def test_a_server_that_exits_at_start_says_why(ctx: ToolContext) -> None:
    hub = toolset(r=rogue(env={"ROGUE_START": "exit"}))
    try:
        assert await hub.get_tools(ctx) == []
        problem = hub.servers["r"].problem
    finally:
        await hub.aclose()
    assert "exit status 7" in problem and "refusing to start" in problem


async def test_a_server_that_never_answers_the_handshake_times_out(ctx: ToolContext) -> None:
    silent = McpServerConfig(
        command=sys.executable, args=["-c", "import time; time.sleep(60)"], startup_timeout_s=0.5
    )
    hub = toolset(s=silent)
    try:
        assert await hub.get_tools(ctx) == []
        problem = hub.servers["s"].problem
    finally:
        await hub.aclose()
    assert "did not start within 0.5 s" in problem


async def test_names_providers_refuse_are_renamed_and_never_collide(ctx: ToolContext) -> None:
    long = "x" * 80
    hub = toolset(r=rogue(env={"ROGUE_NAMES": f"x.one,x_one,{long}"}))
    try:
        names = [s.name for s in await hub.get_tools(ctx) if s.name.startswith("r__x")]
        assert len(names) == len(set(names)) == 3
        assert "r__x_one" in names and all(len(n) <= 64 for n in names)
        renamed = next(n for n in names if n.startswith("r__x_one_"))  # x.one or x_one, whichever came second
        assert (await hub.call_tool(renamed, {}, ctx)).content.startswith("called x")
        assert (await hub.call_tool("r__x_one", {}, ctx)).content.startswith("called x")
    finally:
        await hub.aclose()


async def test_include_and_exclude_filter_a_servers_tools(ctx: ToolContext) -> None:
    hub = toolset(r=rogue(include_tools=["e*", "add"], exclude_tools=["env"]))
    try:
        names = {s.name for s in await hub.get_tools(ctx)}
    finally:
        await hub.aclose()
    assert names == {"r__echo", "r__add"}


async def test_only_allowlisted_environment_reaches_a_server(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEWARD_TEST_SECRET", "s3cret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-servers")
    hub = toolset(
        plain=rogue(),
        given=rogue(
            env={"TOKEN": "${STEWARD_TEST_SECRET}", "MODE": "x"}, env_passthrough=["STEWARD_TEST_SECRET"]
        ),
    )
    try:
        await hub.get_tools(ctx)
        plain = json.loads((await hub.call_tool("plain__env", {}, ctx)).content)
        given = json.loads((await hub.call_tool("given__env", {}, ctx)).content)
    finally:
        await hub.aclose()
    assert "STEWARD_TEST_SECRET" not in plain and "OPENAI_API_KEY" not in plain and "PATH" in plain
    assert given["TOKEN"] == given["STEWARD_TEST_SECRET"] == "s3cret" and given["MODE"] == "x"
    assert "OPENAI_API_KEY" not in given


async def test_an_unset_variable_in_env_names_it(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STEWARD_TEST_UNSET", raising=False)
    hub = toolset(r=rogue(env={"TOKEN": "${STEWARD_TEST_UNSET}"}))
    try:
        await hub.get_tools(ctx)
        result = await hub.call_tool("r__echo", {"text": "x"}, ctx)
    finally:
        await hub.aclose()
    assert result.is_error and "STEWARD_TEST_UNSET" in result.content and "export" in result.content
    assert result.category == "mcp_config" and "is not available" in result.content


async def test_a_run_goes_on_after_every_kind_of_failure(workspace: Path) -> None:
    server = rogue(call_timeout_s=30, tool_timeouts={"hang": 0.5})
    out = await run_agent(
        workspace,
        {"r": server},
        calls(
            ("r__crash", {}),
            ("r__hang", {}),
            ("r__bad_request", {}),
            ("r__fail", {"text": "x"}),
            ("r__echo", {"text": "still here"}),
        ),
        allow=["r__*"],
    )
    assert out.status == "done"
    results = out.of("tool_result")
    assert [r.error_category for r in results] == [
        "mcp_server_down", "mcp_timeout", "mcp_protocol", "mcp_tool_error", None,
    ]  # fmt: skip
    assert results[-1].output == "still here" and results[-1].status == "completed"


async def test_an_unset_variable_in_args_names_it(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STEWARD_TEST_UNSET", raising=False)
    hub = toolset(r=McpServerConfig(command=sys.executable, args=["${STEWARD_TEST_UNSET}"]))
    try:
        await hub.get_tools(ctx)
        result = await hub.call_tool("r__echo", {}, ctx)
    finally:
        await hub.aclose()
    assert result.category == "mcp_config" and "args uses ${STEWARD_TEST_UNSET}" in result.content
