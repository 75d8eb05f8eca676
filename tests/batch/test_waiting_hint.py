"""An attempt that waits for a person is announced with commands that reach the batch's own
store: with no store configured that is ``DIR/steward.db``, which a bare ``steward jobs list``
in the current folder does not read."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml


def test_a_waiting_attempt_is_announced_with_the_batchs_store(
    tmp_path: Path, steward_env: dict[str, str]
) -> None:
    (tmp_path / "tpl").mkdir()
    reply = {"tool": "bash", "args": {"command": "curl -s https://example.com"}}  # asks first
    (tmp_path / "net.yaml").write_text(yaml.safe_dump([reply]))
    task = {"id": "net", "goal": "fetch the page", "workspace": "tpl", "script": "net.yaml"}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    said = tmp_path / "stderr.txt"
    with said.open("w") as err:
        started = subprocess.Popen(
            [sys.executable, "-m", "steward", "batch", "tasks.jsonl", "--model", "scripted", "-o", "report"],
            cwd=tmp_path, env=steward_env, stdout=subprocess.DEVNULL, stderr=err, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120  # a bound on failure only: the message is the event
            while "wait for a person" not in said.read_text():
                assert started.poll() is None, said.read_text()
                assert time.monotonic() < deadline, "no attempt was announced as waiting in 120 s"
                time.sleep(0.05)
            started.send_signal(signal.SIGINT)
            started.wait(timeout=120)
        finally:
            if started.poll() is None:
                started.kill()
                started.wait()
    store = shlex.quote(f"sqlite:///{tmp_path / 'report' / 'steward.db'}")
    assert f"`STEWARD_DB={store} steward jobs list --status waiting`" in said.read_text()

    # What it says to run finds the waiting job.
    listed = subprocess.run(
        ["sh", "-c", f"STEWARD_DB={store} {shlex.quote(sys.executable)} -m steward jobs list --status waiting"],
        cwd=tmp_path, env=steward_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert listed.returncode == 0 and "waiting" in listed.stdout and "fetch the page" in listed.stdout, listed
