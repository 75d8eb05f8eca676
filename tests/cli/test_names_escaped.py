"""File names are shown escaped wherever Steward prints them: a name holding terminal control
sequences (ESC, CR) or bytes that are not UTF-8 never reaches the user's terminal raw, in the
live run, the note of what was undone (which the model reads too), the checkpoint listing, a
rewind's report and a run's timeline."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"),
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]

MAKE_NAMES = (
    "printf x > $'esc\\x1b[2J.txt'; printf x > $'cr\\rname.txt'; printf x > $'caf\\xe9.txt'; "
    "mkdir $'\\x1b[2Jrepo' && git init -q $'\\x1b[2Jrepo'"
)


def test_names_with_control_sequences_are_printed_escaped(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# readme\n")
    script = tmp_path / "s.yaml"
    replies = [{"tool": "bash", "args": {"command": MAKE_NAMES}}, ended("done")]
    script.write_text(yaml.safe_dump(replies))
    printed = []
    run = cli("run", "make files", "--model", f"scripted:{script}")
    printed.append(run)
    assert run.returncode == 0, run.stderr
    assert not (tmp_path / "\x1b[2Jrepo" / ".git").exists()  # undone, and said so...
    printed.append(cli("checkpoints", "last"))
    printed.append(cli("rewind", "last", "--to", "1"))
    printed.append(cli("runs", "show", "last"))
    for done in printed:
        assert done.returncode == 0, done.stderr
        output = done.stdout + done.stderr
        assert "\x1b" not in output and "\r" not in output and "Traceback" not in output
    assert "\\x1b[2Jrepo" in printed[0].stderr  # ...in the live run, escaped
    assert "esc\\x1b[2J.txt" in printed[1].stdout and "caf\\xe9.txt" in printed[1].stdout
    assert "cr\\rname.txt" in printed[2].stdout  # removed by the rewind, named escaped
    assert not (tmp_path / "esc\x1b[2J.txt").exists()
    exported = cli("runs", "export", "last")
    assert "\\\\x1b[2Jrepo/.git removed" in exported.stdout  # the model read the escaped name
