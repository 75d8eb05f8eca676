"""MCP over streamable HTTP: server-everything as a real HTTP server (the everything_http
fixture), driven through a real ``Agent`` with a scripted model. The server is killed mid-call
and started again on the same port, hangs past its timeout, or is not there at all."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_kit import NODE, HttpServer, Recording, calls, free_port, run_agent, time_server

from steward import Agent
from steward.config import Config, McpServerConfig, PolicySettings
from steward.events import Event, ToolResultEvent, ToolUse


def _listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert process.poll() is None, "server-everything exited while starting"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    pytest.fail("server-everything did not start listening within 20 s")


@pytest.fixture
def restart() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes started by a test to bring a server back; all killed at the end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def _start_again(server: HttpServer, started: list[subprocess.Popen[bytes]]) -> None:
    """server-everything again, on the port the killed one listened on."""
    port = int(server.url.rsplit(":", 1)[1].split("/", 1)[0])
    process = subprocess.Popen(
        ["node", str(NODE / "server-everything" / "dist" / "index.js"), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started.append(process)
    _listening(port, process)


async def test_calls_resources_and_prompts_over_http(workspace: Path, everything_http: HttpServer) -> None:
    run = await run_agent(
        workspace,
        {"ev": McpServerConfig(url=everything_http.url)},
        calls(
            ("ev__echo", {"message": "over http"}),
            ("ev__get-sum", {"a": 2.5, "b": 4}),
            ("ev__trigger-long-running-operation", {"duration": 0.3, "steps": 3}),
            ("mcp_resources", {"server": "ev"}),
            ("mcp_read_resource", {"server": "ev", "uri": "demo://resource/dynamic/text/3"}),
            ("mcp_prompts", {"server": "ev"}),
            ("mcp_get_prompt", {"server": "ev", "name": "args-prompt", "arguments": {"city": "Oslo"}}),
        ),
        allow=["ev__*", "mcp_read_resource", "mcp_get_prompt"],
    )

    assert run.status == "done"
    echo, total, operation, resources, resource, prompts, prompt = run.of("tool_result")
    assert all(r.status == "completed" for r in run.of("tool_result")), [
        r.output for r in run.of("tool_result")
    ]
    assert echo.output == "Echo: over http"
    assert "6.5" in total.output
    assert "Long running operation completed" in operation.output
    assert [e.message for e in run.of("signal") if e.code == "progress"] == [
        "ev__trigger-long-running-operation: 3/3 (3 updates)"
    ]
    assert "- demo://resource/static/document/architecture.md — architecture.md" in resources.output
    assert "template demo://resource/dynamic/text/{resourceId}" in resources.output
    assert resource.output.startswith("Resource 3: ")
    assert "- args-prompt(city, state?)" in prompts.output
    assert prompt.output.startswith("user: ")
    assert "Oslo" in prompt.output
    # The model saw the server's own schemas, as over stdio.
    tools = {t.name: t for t in run.requests[0].tools}
    assert set(tools["ev__get-sum"].parameters["properties"]) == {"a", "b"}
    toolset = run.agent.mcp_toolset()
    assert toolset is not None
    assert toolset.servers["ev"].transport == "http"
    assert toolset.servers["ev"].starts == 1  # one session for every call


async def test_headers_name_an_unset_variable(
    workspace: Path, everything_http: HttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STEWARD_TEST_HEADER", raising=False)
    run = await run_agent(
        workspace,
        {"ev": McpServerConfig(url=everything_http.url, headers={"X-Test": "${STEWARD_TEST_HEADER}"})},
        calls(("ev__echo", {"message": "x"}), ("ev__echo", {"message": "y"})),
        allow=["ev__*"],
    )

    assert run.status == "done"
    first, second = run.of("tool_result")
    for result in (first, second):
        assert result.status == "failed"
        assert "[mcp_servers.ev] headers uses ${STEWARD_TEST_HEADER}, which is not set" in result.output
        assert "export STEWARD_TEST_HEADER" in result.output
    assert not run.of("error")


async def test_headers_are_sent_with_variables_expanded(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bare TCP listener records what the client sends (server-everything ignores headers)."""
    monkeypatch.setenv("STEWARD_TEST_HEADER", "s3cret-token")
    seen: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    config = McpServerConfig(
        url=f"http://127.0.0.1:{port}/mcp",
        headers={"Authorization": "Bearer ${STEWARD_TEST_HEADER}", "X-Test": "plain"},
        startup_timeout_s=5,
    )
    try:
        run = await run_agent(
            workspace, {"ev": config}, calls(("ev__echo", {"message": "x"})), allow=["ev__*"]
        )
    finally:
        listener.close()
        await listener.wait_closed()

    assert seen, "the client never sent a request"
    request = seen[0].decode().lower()
    assert request.startswith("post /mcp ")
    assert "authorization: bearer s3cret-token\r\n" in request
    assert "x-test: plain\r\n" in request
    assert run.status == "done"
    assert run.results()["ev__echo"].status == "failed"


async def _stream(agent: Agent, workspace: Path, on_event: Any) -> list[Event]:
    events = []
    try:
        async for event in agent.start("use the servers", workspace=workspace).stream():
            events.append(event)
            on_event(event)
    finally:
        await agent.aclose()
    return events


async def test_a_server_killed_mid_call_fails_the_call_and_comes_back(
    workspace: Path, everything_http: HttpServer, restart: list[subprocess.Popen[bytes]]
) -> None:
    model = Recording(
        calls(
            ("ev__echo", {"message": "before"}),
            ("ev__trigger-long-running-operation", {"duration": 20, "steps": 20}),
            ("ev__echo", {"message": "after"}),
        )
    )
    config = Config(
        mcp_servers={"ev": McpServerConfig(url=everything_http.url)},
        policy=PolicySettings(allow=["ev__*"]),
    )
    agent = Agent(model, config=config, builtin_tools=False)
    killers: list[asyncio.Task[None]] = []

    async def kill_soon() -> None:
        await asyncio.sleep(0.5)
        everything_http.kill()

    def on_event(event: Event) -> None:
        if isinstance(event, ToolUse) and event.tool == "ev__trigger-long-running-operation":
            killers.append(asyncio.create_task(kill_soon()))
        if isinstance(event, ToolResultEvent) and event.tool == "ev__trigger-long-running-operation":
            # The failed call is reported; the server comes back before the next step.
            _start_again(everything_http, restart)

    events = await _stream(agent, workspace, on_event)
    await asyncio.gather(*killers)

    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert [r.tool for r in results] == ["ev__echo", "ev__trigger-long-running-operation", "ev__echo"]
    before, killed, after = results
    assert before.output == "Echo: before"
    assert killed.status == "failed"
    assert killed.error_category == "mcp_server_down"
    assert "MCP server 'ev' stopped" in killed.output
    assert "Whether the call had any effect is unknown" in killed.output
    assert killed.duration_ms < 10_000  # failed when the server died, not at a timeout
    assert after.status == "completed", after.output
    assert after.output == "Echo: after"
    assert events[-1].type == "done"
    toolset = agent.mcp_toolset()
    assert toolset is not None
    assert toolset.servers["ev"].starts == 2  # a new session with the new process


async def test_a_server_that_is_not_running_is_reported_and_the_run_goes_on(workspace: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    run = await run_agent(
        workspace,
        {"ev": McpServerConfig(url=url), "time": time_server()},
        calls(("ev__echo", {"message": "x"}), ("time__get_current_time", {"timezone": "UTC"})),
        allow=["ev__*", "time__*"],
    )

    assert run.status == "done"
    echo, clock = run.of("tool_result")
    assert echo.status == "failed"
    assert echo.error_category == "mcp_server_down"
    assert f"MCP server 'ev' at {url} cannot be reached" in echo.output
    assert "is it running?" in echo.output
    assert clock.status == "completed"
    assert json.loads(clock.output)["timezone"] == "UTC"
    # The other server's tools were offered all along.
    assert "time__get_current_time" in {t.name for t in run.requests[0].tools}


async def test_a_hung_call_hits_its_timeout_and_the_next_call_works(
    workspace: Path, everything_http: HttpServer
) -> None:
    run = await run_agent(
        workspace,
        {"ev": McpServerConfig(url=everything_http.url, tool_timeouts={"trigger-long-running-operation": 1})},
        calls(
            ("ev__trigger-long-running-operation", {"duration": 30, "steps": 30}),
            ("ev__echo", {"message": "still here"}),
        ),
        allow=["ev__*"],
    )

    assert run.status == "done"
    hung, echo = run.of("tool_result")
    assert hung.status == "failed"
    assert hung.error_category == "mcp_timeout"
    assert "did not answer the call to trigger-long-running-operation within 1 s" in hung.output
    assert hung.duration_ms >= 900
    assert echo.status == "completed"
    assert echo.output == "Echo: still here"
