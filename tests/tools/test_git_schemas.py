"""The schema and description each git tool shows the model are pinned by snapshot files.

After an intended change, rewrite the snapshots and review the diff:

    STEWARD_UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/tools/test_git_schemas.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from steward.models.base import schema_chars
from steward.tools.base import Tool
from steward.tools.git import GIT_TOOLS, git_tools

SNAPSHOTS = Path(__file__).parent / "snapshots" / "git"
TOOLS: dict[str, Tool] = {tool.name: tool for tool in git_tools()}
UPDATE = os.environ.get("STEWARD_UPDATE_SNAPSHOTS") == "1"
HOW_TO_UPDATE = "If the change is intended, run STEWARD_UPDATE_SNAPSHOTS=1 .venv/bin/pytest " + (
    "tests/tools/test_git_schemas.py and review the diff of tests/tools/snapshots/git/."
)


def rendered(tool: Tool) -> str:
    spec = tool.spec
    document = {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_schema_matches_snapshot(name: str) -> None:
    snapshot = SNAPSHOTS / f"{name}.json"
    current = rendered(TOOLS[name])
    if UPDATE:
        SNAPSHOTS.mkdir(parents=True, exist_ok=True)
        snapshot.write_text(current, encoding="utf-8")
        return
    assert snapshot.exists(), f"No snapshot for tool {name!r}. {HOW_TO_UPDATE}"
    assert snapshot.read_text(encoding="utf-8") == current, (
        f"The schema or description of tool {name!r} changed. {HOW_TO_UPDATE}"
    )


def test_every_git_tool_has_a_snapshot_and_no_other() -> None:
    assert {path.stem for path in SNAPSHOTS.glob("*.json")} == set(TOOLS) == GIT_TOOLS


def test_the_git_tools_cost_few_tokens_on_each_request() -> None:
    # What every request in a git repository pays for them (about 4 characters a token).
    assert schema_chars([tool.spec for tool in TOOLS.values()]) < 4000
