"""The scripted-model example in README.md is examples/scripted.yaml, and it runs as described."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "scripted.yaml"


def _readme_example() -> str:
    """The first YAML block of the README's section on scripted models."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Scripted models", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```yaml\n(.*?)```", section, flags=re.S)
    assert found, "README.md: the scripted-model section has no ```yaml block"
    return found.group(1)


def _workspace(tmp_path: Path) -> Path:
    workspace = tmp_path / "try"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")  # as the README says to make it
    return workspace


def test_the_readme_shows_the_example_file_verbatim() -> None:
    assert _readme_example() == EXAMPLE.read_text(encoding="utf-8")


def test_the_example_runs_to_its_answer(cli: Any, tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    proc = cli("run", "How many lines has notes.txt?", "--model", f"scripted:{EXAMPLE}", cwd=workspace)
    assert proc.returncode == 3, proc.stderr  # answered: a question, answered in text
    assert "■ answered" in proc.stderr
    assert proc.stdout.strip() == "notes.txt has two lines, alpha and beta."
    assert "never used" not in proc.stderr


def test_the_example_shows_each_kind_of_reply(cli: Any, tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    proc = cli("run", "How many lines?", "--json", "--model", f"scripted:{EXAMPLE}", cwd=workspace)
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    kinds = {e["type"] for e in events}
    assert {"thinking", "plan", "key_fact", "text", "done"} <= kinds
    phases = [e["data"]["phase"] for e in events if e["type"] == "phase"]
    assert phases[:3] == ["plan", "act", "verify"]
    results = {e["data"]["tool"]: e["data"] for e in events if e["type"] == "tool_result"}
    assert set(results) == {"read_file", "glob", "list_dir", "grep"}  # via act, tool, tool_calls
    assert all(r["status"] == "completed" for r in results.values())
    assert events[-1]["data"]["end_status"] == "answered"


def test_a_script_that_runs_out_fails_as_the_readme_says(cli: Any, tmp_path: Path) -> None:
    replies = EXAMPLE.read_text(encoding="utf-8").split("\n- ")
    short = tmp_path / "short.yaml"
    short.write_text("\n- ".join(replies[:-1]) + "\n")  # without the final answer
    proc = cli("run", "How many lines?", "--model", f"scripted:{short}", cwd=_workspace(tmp_path))
    assert proc.returncode == 1
    assert "has 5 replies and all were used; the agent asked for reply 6" in proc.stderr + proc.stdout


def test_replies_left_over_are_reported_as_the_readme_says(cli: Any, tmp_path: Path) -> None:
    longer = tmp_path / "long.yaml"
    longer.write_text(EXAMPLE.read_text(encoding="utf-8") + "- text: never needed\n")
    proc = cli("run", "How many lines?", "--model", f"scripted:{longer}", cwd=_workspace(tmp_path))
    assert proc.returncode == 3, proc.stderr
    assert f"warning: 1 of 7 scripted replies in {longer} were never used." in proc.stderr
