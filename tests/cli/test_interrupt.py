"""Ctrl-C cancels the run: exit 130, and no process the agent started is left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def host_processes_with(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if token in cmdline and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def test_sigint_in_the_sandbox_kills_everything_it_started(tmp_path: Path) -> None:
    token = f"{60 + os.getpid() % 1000}.{time.time_ns() % 1000}"
    script = tmp_path / "s.yaml"
    command = f"sleep {token} & setsid sleep {token} & touch started; sleep {token}"
    script.write_text(yaml.safe_dump([{"tool": "bash", "args": {"command": command}}]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEWARD_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "steward", "run", "wait", "--model", f"scripted:{script}"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(host_processes_with(f"sleep {token}")) >= 3  # the sleeps (and the shell, bwrap)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 130, stderr
    deadline = time.monotonic() + 5
    while host_processes_with(f"sleep {token}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_processes_with(f"sleep {token}") == []


def test_sigint_cancels_the_run_and_kills_its_processes(tmp_path: Path) -> None:
    # Without the sandbox the tool kills the process group it started.
    command = "sleep 60 & echo $! > bg.pid; sleep 60"
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([{"tool": "bash", "args": {"command": command}}]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEWARD_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "cfg")
    proc = subprocess.Popen(
        [sys.executable, "-m", "steward", "run", "wait", "--no-sandbox", "--model", f"scripted:{script}"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    pid_file = tmp_path / "bg.pid"
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    background = int(pid_file.read_text())
    assert alive(background)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    deadline = time.monotonic() + 5
    while alive(background) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(background)


def test_sigint_under_json_ends_the_stream_with_a_cancelled_event(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([{"tool": "bash", "args": {"command": "touch started; sleep 60"}}]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEWARD_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "steward", "run", "wait", "--json", "--model", f"scripted:{script}"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 130, stderr
    last = json.loads(stdout.splitlines()[-1])
    assert last["type"] == "done" and last["data"]["status"] == "cancelled"
    assert "never used" not in stderr


def test_ctrl_c_at_an_approval_prompt_leaves_the_run_waiting_and_says_how_to_answer(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([{"tool": "write_file", "args": {"path": "a.txt", "content": "x"}}]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEWARD_")}
    steward = [sys.executable, "-m", "steward"]
    proc = subprocess.Popen(
        [*steward, "run", "write it", "--model", f"scripted:{script}", "--ask", "write_file"],
        cwd=tmp_path, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    database = tmp_path / ".steward" / "steward.db"
    while time.monotonic() < deadline:  # the run is recorded as waiting once the prompt shows
        listed = subprocess.run(
            [*steward, "runs", "list"], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        if database.exists() and "waiting" in listed.stdout:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 130, stderr
    assert "the run still waits for your approval: `steward approve|deny" in stderr
    assert not (tmp_path / "a.txt").exists()
    approved = subprocess.run(
        [*steward, "approve", "last"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert approved.returncode in (0, 1), approved.stderr  # the script ends after the call
    assert (tmp_path / "a.txt").read_text() == "x"
