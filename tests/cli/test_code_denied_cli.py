"""`runs show` has a program's calls, the one a human denied among them, after a real CLI run."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)

PROGRAM = "print(bash(command='echo one'))\nprint(bash(command='curl --version'))\n"
REPLIES = [
    {"tool": "execute_code", "args": {"code": PROGRAM}},
    {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "done"}},
]


def test_a_denied_call_of_a_program_and_the_calls_before_it_are_in_runs_show(
    cli: Any, tmp_path: Path
) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump(REPLIES))
    proc = cli("run", "check", "--model", f"scripted:{script}", stdin="n no network today\n", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "because execute_code calls it: it uses the network" in proc.stderr
    shown = cli("runs", "show", "last")
    assert shown.returncode == 0, shown.stderr
    timeline = [line.split(maxsplit=1)[1] for line in shown.stdout.splitlines() if line.strip()[:1].isdigit()]
    start = next(i for i, line in enumerate(timeline) if line.startswith("▸ execute_code"))
    assert timeline[start + 1] == "▸ bash {'command': 'echo one'}"
    assert timeline[start + 2].startswith("✓")
    assert timeline[start + 3].startswith("? approval for bash: execute_code calls it")
    assert timeline[start + 5] == "approval denied (user) no network today"
    assert timeline[start + 6] == "▸ bash {'command': 'curl --version'}"  # the denied call, recorded
    assert timeline[start + 7].startswith("✗") and "no network today" in timeline[start + 7]
    assert timeline[start + 8].startswith("✗")  # execute_code: not run
