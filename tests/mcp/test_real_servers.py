"""Real MCP servers over stdio, driven through a real ``Agent`` with a scripted model.

The servers: mcp-server-time and mcp-server-git (PyPI), server-everything and
server-filesystem (npm), and our rogue server for the environment checks. The CLI tests run
``steward mcp`` as real subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from mcp_kit import (
    BIN,
    NODE,
    Recording,
    calls,
    everything,
    filesystem,
    git_server,
    rogue,
    run_agent,
    time_server,
)

from steward import Agent
from steward.config import Config, McpServerConfig, PolicySettings
from steward.events import ApprovalGateEvent, ApprovalResultEvent, Event, SignalEvent, ToolResultEvent
from steward.mcp import mcp_toolsets
from steward.tools.base import ToolContext


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


E = TypeVar("E", bound=Event)

# --- mcp-server-time ----------------------------------------------------------------------------


async def test_time_server_returns_the_time_in_the_asked_timezone(workspace: Path) -> None:
    run = await run_agent(
        workspace,
        {"time": time_server()},
        calls(("time__get_current_time", {"timezone": "Asia/Tokyo"})),
        allow=["time__*"],
    )

    assert run.status == "done"
    result = run.results()["time__get_current_time"]
    assert result.status == "completed", result.output
    data = json.loads(result.output)
    assert data["timezone"] == "Asia/Tokyo"
    # A real, current time in that zone: Tokyo is UTC+9 and has no daylight saving time.
    moment = datetime.fromisoformat(data["datetime"])
    assert moment.utcoffset() is not None
    assert moment.utcoffset().total_seconds() == 9 * 3600  # type: ignore[union-attr]
    assert abs((moment - datetime.now(moment.tzinfo)).total_seconds()) < 120
    assert data["is_dst"] is False


async def test_time_server_invalid_timezone_is_a_tool_error_and_the_run_goes_on(workspace: Path) -> None:
    run = await run_agent(
        workspace,
        {"time": time_server()},
        calls(
            ("time__get_current_time", {"timezone": "Mars/Olympus_Mons"}),
            ("time__get_current_time", {"timezone": "UTC"}),
        ),
        allow=["time__*"],
    )

    assert run.status == "done"
    first, second = run.of("tool_result")
    # mcp-server-time reports a bad timezone as a result with isError (the tool ran and
    # failed), not as a JSON-RPC error: the category and the text both say so.
    assert first.status == "failed"
    assert first.error_category == "mcp_tool_error"
    assert "the tool ran and failed" in first.output
    assert "Invalid timezone" in first.output
    assert "Mars/Olympus_Mons" in first.output
    assert second.status == "completed"
    assert json.loads(second.output)["timezone"] == "UTC"


# --- mcp-server-git -----------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@pytest.fixture
def repo(workspace: Path) -> Path:
    repo = workspace / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "hello.txt").write_text("hello\n")
    _git(repo, "add", "hello.txt")
    _git(repo, "commit", "-q", "-m", "first commit: add hello.txt")
    (repo / "hello.txt").write_text("hello, changed\n")
    (repo / "untracked.txt").write_text("new\n")
    return repo


async def test_git_server_reports_the_real_repository_state(workspace: Path, repo: Path) -> None:
    run = await run_agent(
        workspace,
        {"git": git_server(repo)},
        calls(
            ("git__git_status", {"repo_path": str(repo)}),
            ("git__git_log", {"repo_path": str(repo), "max_count": 5}),
        ),
        allow=["git__*"],
    )

    assert run.status == "done"
    status, log = run.of("tool_result")
    assert status.status == "completed", status.output
    assert "modified:" in status.output
    assert "hello.txt" in status.output
    assert "untracked.txt" in status.output
    assert log.status == "completed", log.output
    head = _git(repo, "rev-parse", "HEAD").strip()
    assert head in log.output
    assert "first commit: add hello.txt" in log.output


# --- server-everything over stdio ---------------------------------------------------------------


async def test_everything_echo_and_sum(workspace: Path) -> None:
    run = await run_agent(
        workspace,
        {"ev": everything()},
        calls(("ev__echo", {"message": "hi there 42"}), ("ev__get-sum", {"a": 19, "b": 23})),
        allow=["ev__*"],
    )

    assert run.status == "done"
    echo, total = run.of("tool_result")
    assert echo.status == "completed"
    assert "hi there 42" in echo.output
    assert total.status == "completed"
    assert "is 42" in total.output


async def test_everything_tool_schemas_reach_the_model(workspace: Path) -> None:
    run = await run_agent(workspace, {"ev": everything()}, [ended("nothing to do")])

    assert run.status == "done"
    tools = {t.name: t for t in run.requests[0].tools}
    get_sum = tools["ev__get-sum"]
    assert set(get_sum.parameters["properties"]) == {"a", "b"}
    assert get_sum.parameters["properties"]["a"]["type"] == "number"
    assert set(get_sum.parameters.get("required", [])) == {"a", "b"}
    assert get_sum.description == "Returns the sum of two numbers"
    assert get_sum.origin == "mcp:ev"
    operation = tools["ev__trigger-long-running-operation"]
    assert {"duration", "steps"} <= set(operation.parameters["properties"])
    # The shared tools are offered because the server has resources and prompts.
    assert {"mcp_resources", "mcp_read_resource", "mcp_prompts", "mcp_get_prompt"} <= set(tools)


async def test_everything_image_becomes_a_placeholder_and_structured_content_is_shown(
    workspace: Path,
) -> None:
    run = await run_agent(
        workspace,
        {"ev": everything()},
        calls(
            ("ev__get-tiny-image", {}),
            ("ev__get-structured-content", {"location": "New York"}),
        ),
        allow=["ev__*"],
    )

    assert run.status == "done"
    image, structured = run.of("tool_result")
    assert image.status == "completed"
    assert "[image: image/png, " in image.output
    assert "bytes, not shown]" in image.output
    assert "iVBOR" not in image.output  # no base64 PNG data reaches the model
    assert structured.status == "completed"
    data = json.loads(structured.output)
    assert {"temperature", "conditions", "humidity"} <= set(data)


async def test_everything_progress_becomes_a_signal(workspace: Path) -> None:
    run = await run_agent(
        workspace,
        {"ev": everything()},
        calls(("ev__trigger-long-running-operation", {"duration": 0.5, "steps": 3})),
        allow=["ev__*"],
    )

    assert run.status == "done"
    result = run.results()["ev__trigger-long-running-operation"]
    assert result.status == "completed", result.output
    assert "Long running operation completed" in result.output
    progress = [e for e in run.of("signal") if e.code == "progress"]
    assert len(progress) == 1
    assert progress[0].message.startswith("ev__trigger-long-running-operation: 3/3")
    assert "(3 updates)" in progress[0].message


async def test_everything_resources_list_and_read(workspace: Path) -> None:
    uri = "demo://resource/static/document/architecture.md"
    run = await run_agent(
        workspace,
        {"ev": everything()},
        calls(
            ("mcp_resources", {"server": "ev"}),
            ("mcp_read_resource", {"server": "ev", "uri": uri}),
            ("mcp_read_resource", {"server": "ev", "uri": "demo://resource/dynamic/text/7"}),
        ),
        allow=["ev__*", "mcp_read_resource"],
    )

    assert run.status == "done"
    listed, document, dynamic = run.of("tool_result")
    assert listed.status == "completed"
    assert f"- {uri} — architecture.md" in listed.output
    assert "template demo://resource/dynamic/text/{resourceId}" in listed.output
    assert document.status == "completed"
    expected = (NODE / "server-everything" / "dist" / "docs" / "architecture.md").read_text()
    assert document.output.strip() == expected.strip()
    assert dynamic.status == "completed"
    assert "7" in dynamic.output


async def test_everything_prompts_list_and_get(workspace: Path) -> None:
    run = await run_agent(
        workspace,
        {"ev": everything()},
        calls(
            ("mcp_prompts", {}),
            ("mcp_get_prompt", {"server": "ev", "name": "args-prompt", "arguments": {"city": "Lyon"}}),
        ),
        allow=["mcp_get_prompt"],
    )

    assert run.status == "done"
    listed, filled = run.of("tool_result")
    assert listed.status == "completed"
    assert "ev:" in listed.output
    assert "- args-prompt(city, state?)" in listed.output
    assert "- simple-prompt()" in listed.output
    assert filled.status == "completed", filled.output
    assert filled.output.startswith("user: ")
    assert "Lyon" in filled.output


async def test_everything_protocol_errors_are_told_apart_from_tool_errors(workspace: Path) -> None:
    run = await run_agent(
        workspace,
        {"ev": everything()},
        calls(
            ("ev__get-sum", {"a": "nineteen", "b": 23}),
            ("mcp_get_prompt", {"server": "ev", "name": "no-such-prompt"}),
            ("mcp_read_resource", {"server": "ev", "uri": "demo://no/such/resource"}),
            ("ev__get-sum", {"a": 1, "b": 2}),
        ),
        allow=["ev__*", "mcp_get_prompt", "mcp_read_resource"],
    )

    assert run.status == "done"
    wrong_type, prompt, resource, fine = run.of("tool_result")
    # server-everything (the TypeScript SDK) answers arguments that fail its schema with a
    # result marked isError, not with a JSON-RPC error: to the client that is a tool error.
    assert wrong_type.status == "failed"
    assert wrong_type.error_category == "mcp_tool_error"
    assert "the tool ran and failed" in wrong_type.output
    assert "expected number" in wrong_type.output
    # A request the server refuses with a JSON-RPC error is a protocol error, and says so.
    for refused in (prompt, resource):
        assert refused.status == "failed"
        assert refused.error_category == "mcp_protocol"
        assert "protocol error" in refused.output
        assert "JSON-RPC error -32602" in refused.output
    assert "no-such-prompt" in prompt.output
    assert "demo://no/such/resource" in resource.output
    assert fine.status == "completed"
    assert "3" in fine.output


# --- server-filesystem --------------------------------------------------------------------------


async def test_filesystem_writes_and_reads_inside_its_directory_only(workspace: Path) -> None:
    allowed = workspace / "shared"
    allowed.mkdir()
    secret = workspace / "secret.txt"
    secret.write_text("top secret\n")
    target = allowed / "note.txt"
    run = await run_agent(
        workspace,
        {"fs": filesystem(allowed)},
        calls(
            ("fs__write_file", {"path": str(target), "content": "written through MCP\n"}),
            ("fs__read_text_file", {"path": str(target)}),
            ("fs__read_text_file", {"path": str(secret)}),
            ("fs__list_directory", {"path": str(allowed)}),
        ),
        allow=["fs__*"],
    )

    assert run.status == "done"
    write, read, outside, listing = run.of("tool_result")
    assert write.status == "completed", write.output
    assert target.read_text() == "written through MCP\n"
    assert read.status == "completed"
    assert read.output.strip() == "written through MCP"
    assert outside.status == "failed"
    assert outside.error_category == "mcp_tool_error"
    assert "outside allowed directories" in outside.output
    assert "top secret" not in outside.output
    assert listing.status == "completed"
    assert "[FILE] note.txt" in listing.output


# --- approvals ----------------------------------------------------------------------------------


def _of(events: list[Event], kind: type[E]) -> list[E]:
    return [e for e in events if isinstance(e, kind)]


def _agent(replies: list[dict[str, Any]], servers: dict[str, McpServerConfig], **policy: Any) -> Agent:
    config = Config(mcp_servers=servers, policy=PolicySettings(**policy))
    return Agent(Recording(replies), config=config, builtin_tools=False)


async def test_an_mcp_tool_waits_for_approval_then_runs(workspace: Path) -> None:
    agent = _agent(calls(("time__get_current_time", {"timezone": "UTC"})), {"time": time_server()})
    try:
        run = agent.start("what time is it", workspace=workspace)
        first = [e async for e in run.stream()]
        assert run.status == "waiting"
        assert not _of(first, ToolResultEvent)
        (gate,) = _of(first, ApprovalGateEvent)
        assert gate.tool == "time__get_current_time"
        assert gate.input == {"timezone": "UTC"}
        assert gate.description == "Get current time in a specific timezone"

        rest = [e async for e in run.approve_stream()]
    finally:
        await agent.aclose()

    assert run.status == "done"
    (decision,) = _of(rest, ApprovalResultEvent)
    assert decision.decision == "approved"
    (result,) = _of(rest, ToolResultEvent)
    assert result.status == "completed"
    assert json.loads(result.output)["timezone"] == "UTC"


async def test_an_allow_rule_runs_mcp_tools_without_asking(workspace: Path) -> None:
    run = await run_agent(
        workspace,
        {"time": time_server()},
        calls(("time__get_current_time", {"timezone": "UTC"})),
        allow=["time__*"],
    )

    assert run.status == "done"
    assert not run.of("approval_gate")
    assert run.results()["time__get_current_time"].status == "completed"


async def test_a_deny_rule_refuses_an_mcp_tool(workspace: Path) -> None:
    agent = _agent(
        calls(("time__get_current_time", {"timezone": "UTC"})),
        {"time": time_server()},
        allow=["time__*"],
        deny=["time__get_current_time"],
    )
    try:
        events = [e async for e in agent.start("what time is it", workspace=workspace).stream()]
    finally:
        await agent.aclose()

    assert not _of(events, ApprovalGateEvent)
    (result,) = _of(events, ToolResultEvent)
    assert result.status == "failed"
    assert result.output.startswith("Not run:")
    assert "timezone" not in result.output  # the server never answered: nothing ran
    assert [e for e in _of(events, SignalEvent) if e.code == "blocked"]
    assert events[-1].type == "done"


# --- several servers ----------------------------------------------------------------------------


async def test_two_servers_of_one_program_each_get_their_own_names(workspace: Path) -> None:
    run = await run_agent(
        workspace,
        {"a": time_server(), "b": time_server()},
        calls(
            ("a__get_current_time", {"timezone": "Europe/Paris"}),
            ("b__get_current_time", {"timezone": "America/New_York"}),
        ),
        allow=["a__*", "b__*"],
    )

    assert run.status == "done"
    offered = {t.name for t in run.requests[0].tools}
    assert {"a__get_current_time", "a__convert_time", "b__get_current_time", "b__convert_time"} <= offered
    results = run.results()
    assert json.loads(results["a__get_current_time"].output)["timezone"] == "Europe/Paris"
    assert json.loads(results["b__get_current_time"].output)["timezone"] == "America/New_York"
    toolset = run.agent.mcp_toolset()
    assert toolset is not None
    assert toolset.servers["a"].starts == 1
    assert toolset.servers["b"].starts == 1


# --- the servers' environment -------------------------------------------------------------------


async def _environment(workspace: Path, server: McpServerConfig) -> dict[str, str]:
    run = await run_agent(workspace, {"r": server}, calls(("r__env", {})), allow=["r__*"])
    result = run.results()["r__env"]
    assert result.status == "completed", result.output
    env = json.loads(result.output)
    assert isinstance(env, dict)
    return env


async def test_a_server_does_not_see_our_secrets(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEWARD_TEST_SECRET", "hunter2")

    env = await _environment(workspace, rogue())

    assert "STEWARD_TEST_SECRET" not in env
    assert "hunter2" not in json.dumps(env)
    assert env["PATH"] == os.environ["PATH"]  # enough of ours to find programs


async def test_a_server_gets_what_its_configuration_gives_it(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEWARD_TEST_SECRET", "hunter2")

    given = await _environment(workspace, rogue(env={"GIVEN": "1", "TOKEN": "${STEWARD_TEST_SECRET}"}))
    passed = await _environment(workspace, rogue(env_passthrough=["STEWARD_TEST_SECRET"]))

    assert given["GIVEN"] == "1"
    assert given["TOKEN"] == "hunter2"
    assert "STEWARD_TEST_SECRET" not in given
    assert passed["STEWARD_TEST_SECRET"] == "hunter2"
    assert "TOKEN" not in passed


async def test_everything_get_env_does_not_see_our_secrets(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEWARD_TEST_SECRET", "hunter2")
    run = await run_agent(
        workspace,
        {"ev": everything(env={"GIVEN": "1"})},
        calls(("ev__get-env", {})),
        allow=["ev__*"],
    )

    env = json.loads(run.results()["ev__get-env"].output)
    assert env["GIVEN"] == "1"
    assert "STEWARD_TEST_SECRET" not in env


async def test_an_unset_variable_in_env_is_an_error_naming_it(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The toolset itself: the server cannot start, and the call's result says why."""
    monkeypatch.delenv("STEWARD_TEST_UNSET", raising=False)
    [toolset] = mcp_toolsets({"r": rogue(env={"TOKEN": "${STEWARD_TEST_UNSET}"})}, config=Config())
    ctx = ToolContext(workspace=workspace)
    try:
        assert not [s for s in await toolset.get_tools(ctx) if s.origin == "mcp:r"]
        result = await toolset.call_tool("r__env", {}, ctx)
        state = toolset.servers["r"].state
    finally:
        await toolset.aclose()

    assert result.is_error
    assert "${STEWARD_TEST_UNSET}, which is not set" in result.content
    assert "export STEWARD_TEST_UNSET" in result.content
    assert state == "failed"


async def test_an_unset_variable_in_env_reaches_the_model_as_the_reason(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STEWARD_TEST_UNSET", raising=False)
    run = await run_agent(
        workspace,
        {"r": rogue(env={"TOKEN": "${STEWARD_TEST_UNSET}"})},
        calls(("r__env", {})),
        allow=["r__*"],
    )

    assert run.status == "done"
    result = run.results()["r__env"]
    assert result.status == "failed"
    assert result.output.startswith("r__env is not available: ")
    assert "${STEWARD_TEST_UNSET}, which is not set" in result.output
    # The server never started, so nothing was listed: the reason reaches the model anyway,
    # and the call asks like any untrusted MCP tool (here an allow rule answers).
    assert not [t for t in run.requests[0].tools if t.name.startswith("r__")]


# --- steward mcp, as a user runs it -------------------------------------------------------------


def _toml(servers: dict[str, McpServerConfig]) -> str:
    lines = []
    for name, cfg in servers.items():
        lines.append(f"[mcp_servers.{name}]")
        lines.append(f"command = {json.dumps(cfg.command)}")
        lines.append(f"args = {json.dumps(cfg.args)}")
    return "\n".join(lines) + "\n"


def _steward(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEWARD_")}
    return subprocess.run(
        [sys.executable, "-m", "steward", "mcp", *args, "--workspace", str(workspace)],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_mcp_list_shows_ready_servers_and_their_tools(workspace: Path) -> None:
    (workspace / "steward.toml").write_text(_toml({"time": time_server()}))

    done = _steward(workspace, "list")

    assert done.returncode == 0, done.stderr
    first, *rest = done.stdout.splitlines()
    assert first.startswith(f"time  (stdio: {BIN / 'mcp-server-time'})  ready")
    assert "2 tools" in rest[0]
    assert "approval: ask" in rest[0]
    assert any(line.strip().startswith("- time__get_current_time  [ask]") for line in rest)
    assert any(line.strip().startswith("- time__convert_time  [ask]") for line in rest)
    assert "Traceback" not in done.stderr


def test_cli_mcp_list_shows_a_broken_server_as_failed_with_a_fix(workspace: Path) -> None:
    broken = McpServerConfig(command=str(workspace / "no-such-server"))
    (workspace / "steward.toml").write_text(_toml({"time": time_server(), "broken": broken}))

    done = _steward(workspace, "list")

    assert done.returncode == 1
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("broken  ")]
    assert "FAILED:" in line
    assert "no-such-server" in line
    assert "fix command or cwd in [mcp_servers.broken]" in line
    assert any(line.startswith("time  ") and "ready" in line for line in done.stdout.splitlines())
    assert "Traceback" not in done.stderr


def test_cli_mcp_call_prints_the_result(workspace: Path) -> None:
    (workspace / "steward.toml").write_text(_toml({"time": time_server()}))

    done = _steward(workspace, "call", "time", "get_current_time", '{"timezone": "Europe/Berlin"}')

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["timezone"] == "Europe/Berlin"


def test_cli_mcp_call_refuses_bad_json_in_one_line(workspace: Path) -> None:
    (workspace / "steward.toml").write_text(_toml({"time": time_server()}))

    done = _steward(workspace, "call", "time", "get_current_time", "{timezone: UTC}")

    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("steward: the arguments are not valid JSON")
    assert "Traceback" not in done.stderr


def test_cli_mcp_call_exits_1_when_the_tool_fails(workspace: Path) -> None:
    (workspace / "steward.toml").write_text(_toml({"time": time_server()}))

    done = _steward(workspace, "call", "time", "get_current_time", '{"timezone": "Nowhere/Special"}')

    assert done.returncode == 1
    assert "reported an error (the tool ran and failed)" in done.stdout
    assert "Nowhere/Special" in done.stdout
    assert "Traceback" not in done.stderr
