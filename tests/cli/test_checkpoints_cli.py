"""`steward checkpoints` and `steward rewind`, as a user runs them after a scripted run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
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

WIPE = (
    f'{sys.executable} -c "import os, shutil; [shutil.rmtree(p) if os.path.isdir(p) else os.remove(p) '
    "for p in os.listdir('.') if p not in ('.git', '.steward', 's.yaml')]\"; echo junk > junk.txt"
)


def script(tmp_path: Path, replies: list[dict[str, Any]]) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(replies))
    return f"scripted:{path}"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("print('app')\n")
    (tmp_path / "README.md").write_text("# readme\n")
    subprocess.run(["git", "-C", str(tmp_path), "init", "-q"], check=True)
    return tmp_path


def test_a_wiped_workspace_is_rewound_and_the_rewind_is_logged(cli: Any, project: Path) -> None:
    model = script(
        project,
        [
            {"tool": "write_file", "args": {"path": "README.md", "content": "# changed\n"}},
            {"tool": "bash", "args": {"command": WIPE}},
            ended("done"),
        ],
    )
    run = cli("run", "tidy up", "--model", model, "--json")
    assert run.returncode == 0, run.stderr
    run_id = json.loads(run.stdout.splitlines()[0])["run_id"]
    assert not (project / "src").exists()

    listed = cli("checkpoints", "last")
    assert listed.returncode == 0, listed.stderr
    assert "step 1    before write_file" in listed.stdout and "M README.md" in listed.stdout
    assert "step 2    before bash" in listed.stdout and "D src/app.py" in listed.stdout

    rewound = cli("rewind", run_id[:6], "--to", "2")
    assert rewound.returncode == 0, rewound.stderr
    assert "restored" in rewound.stdout and "src/app.py" in rewound.stdout and "junk.txt" in rewound.stdout
    assert (project / "src" / "app.py").read_text() == "print('app')\n"
    assert (project / "README.md").read_text() == "# changed\n"  # as it was before step 2
    assert not (project / "junk.txt").exists()

    shown = cli("runs", "export", run_id)
    assert shown.returncode == 0, shown.stderr
    assert '"type":"rewind"' in shown.stdout.replace(" ", "")
    timeline = cli("runs", "show", run_id)
    assert "rewound to checkpoint #2 (before step 2)" in timeline.stdout

    back = cli("rewind", "last", "--to", "1")
    assert back.returncode == 0 and (project / "README.md").read_text() == "# readme\n"


def test_rewind_without_a_target_or_with_a_wrong_step_names_the_fix(cli: Any, project: Path) -> None:
    model = script(project, [{"tool": "bash", "args": {"command": "echo x > x.txt"}}, ended("ok")])
    assert cli("run", "x", "--model", model).returncode == 0
    missing = cli("rewind", "last")
    assert missing.returncode == 2 and "--to STEP" in missing.stderr
    wrong = cli("rewind", "last", "--to", "9")
    assert wrong.returncode == 2 and "steps with checkpoints: 1" in wrong.stderr
    assert "Traceback" not in missing.stderr + wrong.stderr
