"""`steward stdio`: NDJSON in, NDJSON out, through a real subprocess."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


def events_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_requests_run_in_order_and_bad_lines_get_error_events(cli: Any, tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([ended("first answer"), ended("second answer")]))
    lines = [
        json.dumps({"prompt": "one"}),
        "this is not json",
        json.dumps(["a list"]),
        json.dumps({"promt": "typo"}),
        json.dumps({"prompt": "two"}),
    ]
    proc = cli("stdio", "--model", f"scripted:{script}", stdin="\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    done = [e["data"]["message"] for e in events if e["type"] == "done"]
    assert sorted(done) == ["first answer", "second answer"]
    errors = [e["data"] for e in events if e["type"] == "error"]
    assert [e["code"] for e in errors] == ["bad_request", "bad_request", "bad_request"]
    assert all(e["recoverable"] for e in errors)
    assert "unknown key(s) ['promt']" in errors[2]["message"]


def test_answering_an_unknown_run_is_an_error_event(cli: Any, tmp_path: Path) -> None:
    ask = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Name?"}}
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([ask]))
    lines = [json.dumps({"prompt": "greet"}), json.dumps({"run_id": "unknown", "answer": "x"})]
    proc = cli("stdio", "--model", f"scripted:{script}", stdin="\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    waiting = next(e for e in events if e["type"] == "waiting")
    assert waiting["data"]["question"] == "Name?"
    error = next(e for e in events if e["type"] == "error")["data"]
    assert error["code"] == "unknown_run" and "'unknown'" in error["message"]


def test_answer_in_the_same_session_finishes_the_run(cli: Any, tmp_path: Path) -> None:
    ask = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Name?"}}
    end = {
        "agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "Hello, Ada."}
    }
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([ask, end]))
    # The run id is chosen by the server; a client reads it from the waiting event. Here
    # the client is a small driver process that answers what it is asked.
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import json, subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-m', 'steward', 'stdio', '--model', sys.argv[1]],\n"
        "                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)\n"
        "p.stdin.write(json.dumps({'prompt': 'greet'}) + '\\n'); p.stdin.flush()\n"
        "for line in p.stdout:\n"
        "    event = json.loads(line)\n"
        "    print(line, end='')\n"
        "    if event['type'] == 'waiting':\n"
        "        p.stdin.write(json.dumps({'run_id': event['run_id'], 'answer': 'Ada'}) + '\\n'); p.stdin.flush()\n"
        "    if event['type'] == 'done':\n"
        "        p.stdin.close()\n"
        "sys.exit(p.wait(timeout=30))\n"
    )
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, str(driver), f"scripted:{script}"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    assert events[-1]["type"] == "done" and events[-1]["data"]["message"] == "Hello, Ada."
    assert len({e["run_id"] for e in events}) == 1


def test_bad_fields_get_error_events_and_the_server_goes_on(cli: Any, tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([ended("still serving")]))
    lines = [
        json.dumps({"prompt": "x", "workspace": 5}),
        json.dumps({"prompt": "x", "workspace": {"a": 1}}),
        json.dumps({"prompt": "x", "max_steps": 0}),
        json.dumps({"prompt": "x", "max_steps": True}),
        json.dumps({"prompt": "x", "run_id": "bad id with spaces"}),
        json.dumps({"prompt": "x", "workspace": str(tmp_path / "missing")}),
        json.dumps({"prompt": "x", "model": "nope"}),
        json.dumps({"prompt": "x", "run_id": "mine-1"}),
    ]
    proc = cli("stdio", "--model", f"scripted:{script}", stdin="\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    events = events_of(proc.stdout)
    errors = [e["data"] for e in events if e["type"] == "error"]
    assert len(errors) == 7 and all(e["recoverable"] for e in errors)
    assert '"workspace" must be a directory path' in errors[0]["message"]
    assert '"max_steps" must be at least 1' in errors[2]["message"]
    assert "is not a directory this user can read" in errors[5]["message"]
    assert "names no provider" in errors[6]["message"] or "Unknown model provider" in errors[6]["message"]
    done = [e for e in events if e["type"] == "done"]
    assert len(done) == 1 and done[0]["run_id"] == "mine-1"
    assert done[0]["data"]["message"] == "still serving"


def test_a_run_id_chosen_by_the_client_tags_every_event(cli: Any, tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([ended("a")]))
    lines = [json.dumps({"prompt": "x", "run_id": "req-7"}), json.dumps({"prompt": "y", "run_id": "req-7"})]
    proc = cli("stdio", "--model", f"scripted:{script}", stdin="\n".join(lines) + "\n")
    events = events_of(proc.stdout)
    assert {e["run_id"] for e in events} == {"req-7"}
    error = next(e for e in events if e["type"] == "error")["data"]
    assert "already in use" in error["message"]
