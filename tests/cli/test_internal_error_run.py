"""A run that meets an internal error (a bug that escapes the tool-error path) is recorded
failed, saying so and where to look, never as cancelled; `steward runs` shows it that way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from steward import Agent, load_config
from steward.models.base import ToolSpec
from steward.tools.base import ToolContext, ToolResult, Toolset


class WrongResultToolset(Toolset):
    """A toolset with a bug: its result's text is a number (past the type checker, as an
    untyped caller's would be), which the run meets only after the call returned."""

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        return [ToolSpec(name="lookup", description="Look a thing up.", parameters={"type": "object"})]

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(cast("str", 12345))


async def test_an_internal_error_ends_the_run_failed_and_runs_show_says_so(cli: Any, tmp_path: Path) -> None:
    replies = [{"tool": "lookup", "args": {}}, {"text": "never reached"}]
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump(replies))
    config = load_config(tmp_path, overrides={"model": f"scripted:{script}"})
    agent = await Agent.open(config, workspace=tmp_path, toolsets=[WrongResultToolset()])
    run = agent.start("look it up", workspace=tmp_path)
    try:
        with pytest.raises(TypeError):
            await run.result()
    finally:
        await agent.aclose()
    assert run.status == "failed" and run.state.output.startswith("Internal error: TypeError")
    listed = cli("runs", "list").stdout
    assert f"{run.id}" in listed and "failed" in listed and "cancelled" not in listed
    shown = cli("runs", "show", run.id)
    assert shown.returncode == 0, shown.stderr
    assert f"run {run.id} · failed" in shown.stdout
    said = shown.stdout.splitlines()
    assert any("error (internal_error): Internal error: TypeError" in line for line in said), said
    assert f"internal error: {run.state.output}" in said, said
    assert f"steward runs show {run.id}" in run.state.output and "STEWARD_DEBUG=1" in run.state.output
    assert "cancelled" not in shown.stdout.lower()
