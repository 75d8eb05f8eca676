"""MCP resources and prompts from `steward chat`, through a real subprocess and a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from mcp_kit import everything


def steward(workspace: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env["XDG_CONFIG_HOME"] = str(workspace.parent / "config-home")
    return subprocess.run(
        [sys.executable, "-m", "steward", *args],
        cwd=workspace,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_chat_reads_resources_and_runs_prompts(workspace: Path) -> None:
    server = everything()
    (workspace / "steward.toml").write_text(
        f"[mcp_servers.ev]\ncommand = {json.dumps(server.command)}\nargs = {json.dumps(server.args)}\n"
    )
    (workspace / "s.yaml").write_text(yaml.safe_dump([{"text": "read it"}, {"text": "prompt done"}]))
    lines = [
        "/mcp",
        "/resources ev",
        "/resource ev demo://resource/dynamic/text/7",
        "what does it say?",
        "/prompt ev args-prompt city=Paris",
        "/prompt ev args-prompt Paris",  # not key=value: explained, nothing sent
        "/resource nowhere x://y",
        '/resource ev "demo://unbalanced',
        "/quit",
    ]
    proc = steward(workspace, "chat", "--model", "scripted:s.yaml", stdin="\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr
    assert "ev: ready" in proc.stderr and "demo://resource/static/document/architecture.md" in proc.stderr
    assert "attached demo://resource/dynamic/text/7" in proc.stderr
    assert "running prompt args-prompt of ev" in proc.stderr
    assert "arguments are key=value pairs; not understood: Paris" in proc.stderr
    assert "Unknown MCP server 'nowhere'" in proc.stderr
    assert "check its quotes" in proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert "read it" in proc.stdout and "prompt done" in proc.stdout
    runs = steward(workspace, "runs", "list").stdout.splitlines()
    assert len(runs) == 2
    goals = [_goal(steward(workspace, "runs", "export", line.split()[0]).stdout) for line in runs]
    prompt_goal, resource_goal = goals  # newest first
    assert resource_goal.startswith('<resource server="ev" uri="demo://resource/dynamic/text/7">')
    assert resource_goal.endswith("what does it say?") and "7" in resource_goal
    assert "Paris" in prompt_goal and prompt_goal.startswith("user:")


def _goal(export: str) -> str:
    events = [json.loads(line) for line in export.splitlines() if line.strip()]
    return next(str(e["data"]["goal"]) for e in events if e["type"] == "run_start")
