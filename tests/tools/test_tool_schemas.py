"""The schema and description each built-in tool shows the model are pinned by snapshot files.

After an intended change, rewrite the snapshots and review the diff:

    STEWARD_UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/tools/test_tool_schemas.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from steward.tools.base import Tool, ToolContext, ToolSettings
from steward.tools.builtin import builtin_toolset
from steward.tools.files import file_tools
from steward.tools.shell import shell_tools
from steward.tools.web import web_tools

SNAPSHOTS = Path(__file__).parent / "snapshots"
BUILTIN: dict[str, Tool] = {tool.name: tool for tool in [*file_tools(), *shell_tools(), *web_tools()]}
UPDATE = os.environ.get("STEWARD_UPDATE_SNAPSHOTS") == "1"
HOW_TO_UPDATE = "If the change is intended, run STEWARD_UPDATE_SNAPSHOTS=1 .venv/bin/pytest " + (
    "tests/tools/test_tool_schemas.py and review the diff of tests/tools/snapshots/."
)


def rendered(tool: Tool) -> str:
    spec = tool.spec
    document = {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_schema_matches_snapshot(name: str) -> None:
    snapshot = SNAPSHOTS / f"{name}.json"
    current = rendered(BUILTIN[name])
    if UPDATE:
        snapshot.write_text(current, encoding="utf-8")
        return
    assert snapshot.exists(), f"No snapshot for tool {name!r}. {HOW_TO_UPDATE}"
    assert snapshot.read_text(encoding="utf-8") == current, (
        f"The schema or description of tool {name!r} changed. {HOW_TO_UPDATE}"
    )


def test_every_snapshot_belongs_to_a_builtin_tool() -> None:
    stale = sorted(path.stem for path in SNAPSHOTS.glob("*.json") if path.stem not in BUILTIN)
    assert not stale, f"Snapshots without a built-in tool: {stale}; delete them."


async def test_builtin_toolset_offers_every_builtin_tool_once(tmp_path: Path) -> None:
    specs = await builtin_toolset().get_tools(ToolContext(workspace=tmp_path))
    assert [spec.name for spec in specs] == [
        "read_file",
        "write_file",
        "edit_file",
        "list_dir",
        "glob",
        "grep",
        "bash",
    ]


async def test_fetch_url_is_offered_only_with_a_domain_to_fetch_from(tmp_path: Path) -> None:
    with_domains = ToolContext(
        workspace=tmp_path, settings=ToolSettings(allowed_domains=("docs.python.org",))
    )
    specs = await builtin_toolset().get_tools(with_domains)
    assert [spec.name for spec in specs][-1] == "fetch_url"


async def test_builtin_toolset_runs_a_tool_by_name(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    result = await builtin_toolset().call_tool(
        "read_file", {"path": "a.txt"}, ToolContext(workspace=tmp_path)
    )
    assert result.content == "     1\thello"
