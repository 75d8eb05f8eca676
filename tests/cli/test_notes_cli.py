"""``steward notes`` lists, adds and removes a workspace's notes; ``steward runs show`` shows a
run's task list, the notes it left and the times it was asked whether it was done."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


def end(message: str) -> dict[str, Any]:
    return {
        "agent_step": {"phase": "end", "summary": "wrap up", "end_status": "solved", "end_message": message}
    }


ADD = {"tool": "tasks", "args": {"action": "add", "text": "run the linter\nupdate the changelog"}}
DONE = {"tool": "tasks", "args": {"action": "done", "ids": [1]}}
NOTE = {"tool": "note", "args": {"text": "keep parse() pure", "about": "file:src/app.py"}}


def test_runs_show_has_the_tasks_and_notes_and_notes_lists_them(cli: Any, tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([ADD, DONE, NOTE, end("done")]))
    assert cli("run", "tidy up", "--model", f"scripted:{script}").returncode == 0
    run_id = cli("runs", "list").stdout.split()[0]
    shown = cli("runs", "show", run_id)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = lines.index("tasks: 1 open, 1 done")
    assert lines[at + 1 : at + 3] == ["  ○ 2. update the changelog", "  ✓ 1. run the linter"]
    assert "notes left (1):" in lines
    assert any(line.endswith("[file:src/app.py] keep parse() pure") for line in lines)

    listed = cli("notes", "list")
    assert listed.returncode == 0 and "[file:src/app.py]  keep parse() pure" in listed.stdout
    assert f"(run {run_id})" in listed.stdout
    [as_json] = [
        json.loads(line)
        for line in cli("notes", "list", "--json", "--about", "src/app.py").stdout.splitlines()
    ]
    assert as_json["run_id"] == run_id and as_json["workspace"] == str(tmp_path.resolve())
    assert cli("notes", "list", "--about", "run:other").stdout.startswith("no notes here yet")

    added = cli("notes", "add", f"job:{run_id}", "rerun it after the migration")
    assert added.returncode == 0 and f"on run:{run_id}" in added.stdout
    note_id = added.stdout.split()[1].lstrip("#")
    assert cli("notes", "rm", note_id).returncode == 0
    gone = cli("notes", "rm", note_id)
    assert gone.returncode == 2 and f"no note #{note_id} in this workspace" in gone.stderr


def test_a_note_outside_the_workspace_is_refused_with_the_forms(cli: Any, tmp_path: Path) -> None:
    proc = cli("notes", "add", "file:../secret.txt", "x")
    assert proc.returncode == 2 and "file:src/app.py" in proc.stderr and "Traceback" not in proc.stderr


def test_runs_show_has_the_continuations(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text(
        '[limits]\nverify = "echo FAILED; exit 1"\nmax_continuations = 1\n'
    )
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([end("done"), end("done, really")]))
    proc = cli("run", "fix it", "--model", f"scripted:{script}", "--no-sandbox")
    assert proc.returncode != 0, proc.stdout  # partial: the verifier kept failing
    run_id = cli("runs", "list").stdout.split()[0]
    shown = cli("runs", "show", run_id).stdout
    assert "↻ asked whether it is done (continuation 1): the verifier `echo FAILED; exit 1` failed" in shown
    assert "↻ not asked again after 1 continuation(s)" in shown
    assert "▸ verify_work" in shown and "■ partial" in shown
