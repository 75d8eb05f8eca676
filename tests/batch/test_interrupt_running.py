"""Ctrl-C while the command's own worker runs an attempt: the call in flight finishes, the job
goes back to the queue, and ``--resume`` goes on with the same run from its next step: the call
is not made twice."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import yaml

Steward = Callable[..., subprocess.CompletedProcess[str]]
Interrupt = Callable[..., str]


def _one_slow_task(root: Path) -> Path:
    (root / "tpl").mkdir(parents=True)
    (root / "tpl" / "value.txt").write_text("old\n")
    script = [
        # The mark says the call started; the sleep keeps it running while the batch is stopped.
        {"tool": "bash", "args": {"command": "echo ran >> ran.txt && touch started && sleep 3"}},
        {"tool": "edit_file", "args": {"path": "value.txt", "old_text": "old", "new_text": "new"}},
        {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "done"}},
    ]
    (root / "slow.yaml").write_text(yaml.safe_dump(script))
    task = {"id": "slow", "goal": "Change the value", "workspace": "tpl", "verify": "grep -qx new value.txt",
            "script": "slow.yaml"}  # fmt: skip
    (root / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    return root / "tasks.jsonl"


def test_a_stopped_batch_resumes_its_run_without_repeating_the_call_in_flight(
    tmp_path: Path, steward: Steward, interrupt: Interrupt
) -> None:
    tasks = _one_slow_task(tmp_path / "set")
    report = tmp_path / "report"
    workspace = report / "workspaces" / "slow" / "1"
    err = interrupt(
        str(tasks), "--model", "scripted", "-j", "1", "-o", str(report),
        ready=(workspace / "started").exists, what="the attempt's first call",
    )  # fmt: skip
    assert "0 of 1 attempts settled" in err
    assert (workspace / "value.txt").read_text() == "old\n"  # stopped between the two steps

    resumed = steward("batch", "--resume", str(report), "-j", "1")
    assert resumed.returncode == 0, resumed.stderr
    outcome = json.loads((report / "report.json").read_text())["attempts"][0]
    assert outcome["passed"] is True
    assert (workspace / "ran.txt").read_text() == "ran\n"  # the call ran once, before the stop
