"""A tool call with arguments of the wrong type reaches the model as an error it can fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


def test_bash_with_a_list_command_tells_the_model_to_pass_a_string(cli: Any, tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([{"tool": "bash", "args": {"command": ["ls", "-la"]}}, ended("done")]))
    proc = cli("run", "list the files", "--json", "--model", f"scripted:{script}")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    result = next(e["data"] for e in events if e["type"] == "tool_result")
    assert result["status"] == "failed"
    assert result["output"].startswith("Invalid arguments for bash: command must be a string, not a list")
    assert '{"command": "ls -la"}' in result["output"]
    assert "obfuscation" not in proc.stdout and "blocked by the guard" not in proc.stdout
    assert not [e for e in events if e["type"] == "signal" and e["data"]["code"] == "blocked"]
