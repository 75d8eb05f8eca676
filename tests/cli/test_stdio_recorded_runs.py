"""`steward stdio` continuing recorded runs, and its own error events, through real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml


def events_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def ask_then_end(tmp_path: Path, name: str) -> str:
    """A script that asks a question, then ends saying which script it is."""
    ask = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": f"{name}?"}}
    end = {
        "agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": f"{name} done"}
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump([ask, end]))
    return f"scripted:{path}"


def requests(*lines: dict[str, Any]) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


def start_two_waiting_runs(cli: Any, tmp_path: Path) -> None:
    """Two runs, each started on its own script, both left waiting by a first server."""
    first = cli(
        "stdio",
        stdin=requests(
            {"prompt": "a", "run_id": "run-a", "model": ask_then_end(tmp_path, "alpha")},
            {"prompt": "b", "run_id": "run-b", "model": ask_then_end(tmp_path, "beta")},
        ),
    )
    waiting = {e["run_id"] for e in events_of(first.stdout) if e["type"] == "waiting"}
    assert waiting == {"run-a", "run-b"}, first.stdout + first.stderr


def test_each_answered_run_goes_on_with_the_model_it_was_started_with(cli: Any, tmp_path: Path) -> None:
    start_two_waiting_runs(cli, tmp_path)
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump([{"text": "the server's default model answered"}]))
    second = cli(
        "stdio", "--model", f"scripted:{other}",
        stdin=requests({"run_id": "run-a", "answer": "x"}, {"run_id": "run-b", "answer": "y"}),
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    done = {e["run_id"]: e["data"]["message"] for e in events_of(second.stdout) if e["type"] == "done"}
    assert done == {"run-a": "alpha done", "run-b": "beta done"}, second.stdout


def test_each_resumed_run_goes_on_with_the_model_it_was_started_with(cli: Any, tmp_path: Path) -> None:
    start_two_waiting_runs(cli, tmp_path)
    second = cli(
        "stdio",
        stdin=requests(
            {"run_id": "run-b", "resume": True},
            {"run_id": "run-a", "resume": True},
            {"run_id": "run-b", "answer": "y"},
            {"run_id": "run-a", "answer": "x"},
        ),
    )
    assert second.returncode == 0, second.stderr
    events = events_of(second.stdout)
    assert not [e for e in events if e["type"] == "error"], second.stdout
    done = {e["run_id"]: e["data"]["message"] for e in events if e["type"] == "done"}
    assert done == {"run-a": "alpha done", "run-b": "beta done"}


def test_a_request_may_name_the_model_a_recorded_run_goes_on_with(cli: Any, tmp_path: Path) -> None:
    start_two_waiting_runs(cli, tmp_path)
    chosen = ask_then_end(tmp_path, "gamma")  # its second reply follows the recorded question
    second = cli("stdio", stdin=requests({"run_id": "run-a", "answer": "x", "model": chosen}))
    assert second.returncode == 0, second.stderr
    done = [e["data"]["message"] for e in events_of(second.stdout) if e["type"] == "done"]
    assert done == ["gamma done"]


def test_an_unknown_run_error_carries_the_run_id_and_a_real_timestamp(cli: Any, tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([{"text": "fine"}]))
    before = time.time()
    proc = cli(
        "stdio", "--model", f"scripted:{script}",
        stdin=requests({"run_id": "nobody", "answer": "x"}, {"run_id": "nobody-2", "approve": True}),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    errors = [e for e in events_of(proc.stdout) if e["type"] == "error"]
    assert [e["data"]["code"] for e in errors] == ["unknown_run", "unknown_run"]
    assert [e["run_id"] for e in errors] == ["nobody", "nobody-2"]
    # Not part of any run's log (seq 0, like streamed deltas); ordered by time and by the stream.
    assert all(e["seq"] == 0 for e in errors)
    assert before <= errors[0]["ts"] <= errors[1]["ts"] <= time.time()


def test_a_bad_request_error_has_a_real_timestamp(cli: Any, tmp_path: Path) -> None:
    before = time.time()
    proc = cli("stdio", stdin="not json\n" + requests({"prompt": ""}))
    assert proc.returncode == 0, proc.stderr
    errors = [e for e in events_of(proc.stdout) if e["type"] == "error"]
    assert len(errors) == 2 and all(before <= e["ts"] <= time.time() for e in errors)


DRIVER = """\
import json, subprocess, sys
p = subprocess.Popen([sys.executable, '-m', 'steward', 'stdio', '--model', sys.argv[1]],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
def send(request):
    p.stdin.write(json.dumps(request) + '\\n'); p.stdin.flush()
send({'prompt': 'greet', 'run_id': 'run-a'})
waited = 0
for line in p.stdout:
    event = json.loads(line)
    print(line, end='')
    if event['type'] == 'waiting':
        waited += 1
        send({'run_id': 'run-a', 'resume': True} if waited == 1 else {'run_id': 'run-a', 'answer': 'Ada'})
    if event['type'] in ('done', 'error'):
        p.stdin.close()
sys.exit(p.wait(timeout=30))
"""


def test_resuming_a_run_this_server_holds_shows_what_it_waits_for(tmp_path: Path) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.run(
        [sys.executable, str(driver), ask_then_end(tmp_path, "alpha")],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    waiting = [e for e in events if e["type"] == "waiting"]
    assert [e["seq"] > 0 for e in waiting] == [True, False]  # the second is shown again, not logged
    assert events[-1]["type"] == "done" and events[-1]["data"]["message"] == "alpha done"
