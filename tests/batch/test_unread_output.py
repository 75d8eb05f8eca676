"""A batch whose output nobody reads while it runs (``steward batch ... | slow-reader``) still
runs every attempt to its end: neither the progress nor the table waits for a reader."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path


def test_a_batch_with_unread_stdout_and_stderr_settles_every_attempt(
    tmp_path: Path, task_set: Path, steward_env: dict[str, str]
) -> None:
    report = tmp_path / "report"
    argv = [sys.executable, "-m", "steward", "batch", str(task_set), "--model", "scripted",
            "-j", "4", "-k", "4", "-o", str(report)]  # fmt: skip
    # Both pipes stay unread until the report is written: a writer blocked on them would stall here.
    started = subprocess.Popen(
        argv, cwd=tmp_path, env=steward_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 240  # a bound on failure only: the report is the event waited for
        while not (report / "report.json").exists():
            assert started.poll() is None or (report / "report.json").exists(), (
                "the batch ended without a report"
            )
            assert time.monotonic() < deadline, "no report in 240 s with its output unread"
            time.sleep(0.05)
        out, err = started.communicate(timeout=120)
    finally:
        if started.poll() is None:
            started.kill()
            started.communicate()
    assert started.returncode == 0, err.decode()
    attempts = json.loads((report / "report.json").read_text())["attempts"]
    assert len(attempts) == 12
    assert all(a["job_status"] in ("done", "failed") for a in attempts)
    assert b"12/12 attempts settled" in out
