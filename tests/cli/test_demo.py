"""`steward demo` fixes a real failing test with real tools and a scripted model."""

from __future__ import annotations

import json
from typing import Any


def test_demo_plans_fixes_and_ends_solved(cli: Any) -> None:
    proc = cli("demo", "--json")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    tools = [e["data"]["tool"] for e in events if e["type"] == "tool_use"]
    assert tools == ["read_file", "bash", "edit_file", "bash"]
    results = [e["data"] for e in events if e["type"] == "tool_result"]
    assert results[1]["status"] == "failed" and "FAILED" in results[1]["output"]
    assert results[2]["status"] == "completed"
    assert results[3]["status"] == "completed" and "OK" in results[3]["output"]
    phases = [e["data"]["phase"] for e in events if e["type"] == "phase"]
    assert phases[0] == "plan" and "reflect" in phases and phases[-1] == "end"
    done = events[-1]["data"]
    assert done["end_status"] == "solved" and "All 4 tests now pass" in done["message"]


def test_demo_tells_how_to_use_a_real_model(cli: Any) -> None:
    proc = cli("demo")
    assert proc.returncode == 0, proc.stderr
    assert "■ solved" in proc.stderr
    assert "steward run --model openai:" in proc.stderr
