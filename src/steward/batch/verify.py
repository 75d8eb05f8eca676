"""An attempt's verifier: the task's command, run in the sandbox in the attempt's workspace
after its run ended, as the agent's ``bash`` runs it (network off, its limits, every process
it started stopped when it returns). Exit 0 passes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_EXIT = re.compile(r"exit code: (-?\d+)")
OUTPUT_TAIL_CHARS = 2_000  # what the report keeps of the verifier's output: its verdict is last


@dataclass(frozen=True, slots=True)
class Verdict:
    passed: bool
    exit_code: int | None  # None: it timed out, or could not start
    output: str  # the end of what it printed

    def as_dict(self) -> dict[str, object]:
        return {"passed": self.passed, "exit_code": self.exit_code, "output": self.output}


async def run_verifier(workspace: Path, command: str, timeout_s: float) -> Verdict:
    """Run ``command`` in ``workspace`` under the workspace's own sandbox settings."""
    from steward.config import load_config
    from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, settings_from_config
    from steward.settings import tool_settings
    from steward.tools.base import FunctionToolset, ToolContext
    from steward.tools.shell import bash

    config = load_config(workspace)
    sandbox = BubblewrapSandbox(settings_from_config(config.sandbox)) if config.sandbox.enabled else None
    ctx = ToolContext(workspace=workspace, run_id="", settings=tool_settings(config), sandbox=sandbox)
    result = await FunctionToolset([bash]).call_tool(
        bash.name, {"command": command, "timeout_s": timeout_s}, ctx
    )
    lines = result.content.rstrip().splitlines()
    found = _EXIT.fullmatch(lines[-1]) if lines else None
    code = int(found.group(1)) if found is not None else None
    return Verdict(
        passed=not result.is_error and code == 0, exit_code=code, output=result.content[-OUTPUT_TAIL_CHARS:]
    )
