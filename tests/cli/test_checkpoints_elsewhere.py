"""Rewinding from another directory: the hints carry the run's -w, and a run that is not in the
current workspace's store is named as such (with where it ran), not as "no such checkpoint"."""

from __future__ import annotations

import json
import shutil
import subprocess
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


@pytest.fixture
def ran(cli: Any, tmp_path: Path) -> tuple[str, Path, Path]:
    """A run made in a project from another directory with -w: (run id, project, elsewhere)."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "notes.txt").write_text("kept\n")
    subprocess.run(["git", "-C", str(project), "init", "-q"], check=True)
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([{"tool": "bash", "args": {"command": "rm notes.txt"}}, ended("ok")]))
    run = cli("run", "tidy", "--model", f"scripted:{script}", "-w", str(project), "--json", cwd=elsewhere)
    assert run.returncode == 0, run.stderr
    run_id = json.loads(run.stdout.splitlines()[0])["run_id"]
    assert f"undo with: steward rewind {run_id} -w {project} --to 1" in run.stdout
    return run_id, project, elsewhere


def test_a_rewind_from_elsewhere_says_where_the_run_is(cli: Any, ran: tuple[str, Path, Path]) -> None:
    run_id, project, elsewhere = ran
    for args in (("rewind", run_id, "--to", "1"), ("checkpoints", run_id)):
        done = cli(*args, cwd=elsewhere)
        assert done.returncode == 2, done.stdout
        assert "not in this workspace's store" in done.stderr and "no such checkpoint" not in done.stderr
        assert f"-w {project}" in done.stderr and "Traceback" not in done.stderr
    assert not (project / "notes.txt").exists()  # nothing was rewound from the wrong place


def test_hints_printed_elsewhere_carry_the_workspace(cli: Any, ran: tuple[str, Path, Path]) -> None:
    run_id, project, elsewhere = ran
    listed = cli("checkpoints", run_id, "-w", str(project), cwd=elsewhere)
    assert listed.returncode == 0 and f"steward rewind {run_id} -w {project} --to STEP" in listed.stdout
    rewound = cli("rewind", run_id, "-w", str(project), "--to", "1", cwd=elsewhere)
    assert rewound.returncode == 0, rewound.stderr
    assert (project / "notes.txt").read_text() == "kept\n"
    assert f"undo this rewind: steward rewind {run_id} -w {project} --checkpoint" in rewound.stdout
    here = cli("checkpoints", run_id, cwd=project)  # from the workspace itself: no -w needed
    assert f"steward rewind {run_id} --to STEP" in here.stdout
