"""The schemas and descriptions git_push and create_pull_request show the model, pinned.

After an intended change: STEWARD_UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/tools/test_forge_schemas.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.tools.test_forge_repo import make_repo

from steward.config import GitSettings
from steward.safety.hostgit import HostGit
from steward.tools.base import ToolContext
from steward.tools.forge import forge_toolset

SNAPSHOTS = Path(__file__).parent / "snapshots" / "forge"


@pytest.mark.parametrize("forge", ["auto", "none"])
async def test_the_forge_tools_match_their_snapshots(tmp_path: Path, forge: str) -> None:
    repo = make_repo(tmp_path)
    tools = forge_toolset(GitSettings(forge=forge), HostGit())  # type: ignore[arg-type]
    specs = await tools.get_tools(ToolContext(workspace=repo.workspace))
    expected = ["git_push"] if forge == "none" else ["git_push", "create_pull_request"]
    assert [s.name for s in specs] == expected
    for spec in specs:
        current = json.dumps(
            {"name": spec.name, "description": spec.description, "parameters": spec.parameters}, indent=2
        )
        snapshot = SNAPSHOTS / f"{spec.name}.json"
        if os.environ.get("STEWARD_UPDATE_SNAPSHOTS") == "1":
            snapshot.write_text(current + "\n", encoding="utf-8")
        assert snapshot.read_text(encoding="utf-8") == current + "\n", (
            f"{spec.name} changed: update the snapshot"
        )


async def test_the_forge_tools_are_not_offered_outside_a_repository(tmp_path: Path) -> None:
    tools = forge_toolset(GitSettings(), HostGit())
    assert await tools.get_tools(ToolContext(workspace=tmp_path)) == ()
