"""Waiting and crashed runs across processes: steward answer / approve / deny / resume, and stdio."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


ASK = {
    "agent_step": {
        "phase": "feedback",
        "thinking": "t",
        "summary": "ask",
        "feedback_message": "Which colour?",
    }
}
WRITE = {"tool": "write_file", "args": {"path": "colour.txt", "content": "chosen"}}
CURL = {"tool": "bash", "args": {"command": "curl --version"}}  # asks for approval by default
END = {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "all done"}}


def script(tmp_path: Path, replies: list[dict[str, Any]]) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(replies))
    return f"scripted:{path}"


def events_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_a_question_is_answered_later_from_another_process(cli: Any, tmp_path: Path) -> None:
    model = script(tmp_path, [ASK, WRITE, END])
    first = cli("run", "pick a colour", "--model", model, stdin="")
    assert first.returncode == 1
    assert "stays waiting; later: steward answer" in first.stderr
    assert not (tmp_path / "colour.txt").exists()

    listed = cli("runs", "list")
    run_id = listed.stdout.split()[0]
    assert "waiting" in listed.stdout

    wrong = cli("approve", run_id)
    assert wrong.returncode == 1 and "asks a question, not for approval" in wrong.stderr

    answered = cli("answer", run_id[:6], "blue", "--json")  # a prefix of the id is enough
    assert answered.returncode == 0, answered.stderr
    events = events_of(answered.stdout)
    assert events[0]["type"] == "answer" and events[0]["data"]["answer"] == "blue"
    assert events[-1]["type"] == "done" and events[-1]["data"]["end_status"] == "solved"
    assert (tmp_path / "colour.txt").read_text() == "chosen"

    shown = cli("runs", "show", run_id)
    assert "answered: blue" in shown.stdout and "solved" in shown.stdout
    again = cli("answer", run_id, "red")
    assert again.returncode == 1 and "not waiting" in again.stderr


def test_an_approval_is_given_or_denied_later(cli: Any, tmp_path: Path) -> None:
    model = script(tmp_path, [CURL, END])
    first = cli("run", "check curl", "--model", model, stdin="")
    assert first.returncode == 1 and "steward approve" in first.stderr
    run_id = cli("runs", "list").stdout.split()[0]
    denied = cli("deny", "last", "--reason", "not today", "--json")
    assert denied.returncode == 0, denied.stderr
    events = events_of(denied.stdout)
    assert events[0]["type"] == "approval_result" and events[0]["data"]["decision"] == "denied"
    result = next(e for e in events if e["type"] == "tool_result")["data"]
    assert "not today" in result["output"]
    log = events_of(cli("runs", "export", run_id).stdout)
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))


def test_a_killed_run_resumes_and_its_interrupted_command_is_not_repeated(cli: Any, tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [
        {"tool": "bash", "args": {"command": "echo one >> log.txt"}},
        {"tool": "bash", "args": {"command": "echo two >> log.txt; sleep 30; echo three >> log.txt"}},
        {"tool": "bash", "args": {"command": "cat log.txt"}},
        ended("finished"),
    ]
    model = script(tmp_path, replies)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config-home")
    proc = subprocess.Popen(
        [sys.executable, "-m", "steward", "run", "log things", "--model", model, "--json"],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:  # wait until the slow command has started
        if '"tool_use"' in line and "sleep 30" in line:
            break
    deadline = time.monotonic() + 20
    while "two" not in (tmp_path / "log.txt").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()

    listed = cli("runs", "list")
    assert "running" in listed.stdout  # its process died without closing it
    resumed = cli("run", "--resume", "last", "--json")
    assert resumed.returncode == 0, resumed.stderr
    events = events_of(resumed.stdout)
    interrupted = next(e for e in events if e["type"] == "tool_result")["data"]
    assert interrupted["error_category"] == "interrupted" and "outcome is unknown" in interrupted["output"]
    assert events[-1]["type"] == "done" and events[-1]["data"]["message"] == "finished"
    # The interrupted command never ran again (its sandbox died with the process: no "three").
    assert (tmp_path / "log.txt").read_text().split() == ["one", "two"]
    run_id = listed.stdout.split()[0]
    shown = cli("runs", "show", run_id)
    assert "resumed after 1 crash" in shown.stdout
    done = cli("resume", run_id)
    assert done.returncode == 1 and "already finished" in done.stderr


def test_stdio_answers_a_run_started_by_an_earlier_server(cli: Any, tmp_path: Path) -> None:
    model = script(tmp_path, [ASK, WRITE, END])
    first = cli("stdio", "--model", model, stdin=json.dumps({"prompt": "pick", "run_id": "keep-1"}) + "\n")
    assert first.returncode == 0, first.stderr
    assert events_of(first.stdout)[-1]["type"] == "waiting"

    second = cli("stdio", "--model", model, stdin=json.dumps({"run_id": "keep-1", "answer": "blue"}) + "\n")
    assert second.returncode == 0, second.stderr
    events = events_of(second.stdout)
    assert events[0]["type"] == "answer" and events[-1]["type"] == "done", events
    assert {e["run_id"] for e in events} == {"keep-1"}
    assert (tmp_path / "colour.txt").read_text() == "chosen"


def test_resume_names_the_fix_for_unknown_runs(cli: Any, tmp_path: Path) -> None:
    proc = cli("resume", "nope", "--model", script(tmp_path, [END]))
    assert proc.returncode == 1 and "no run 'nope'" in proc.stderr and "Traceback" not in proc.stderr
    both = cli("run", "goal", "--resume", "x")
    assert both.returncode == 2 and "either a GOAL or --resume" in both.stderr


SLOW: list[dict[str, Any]] = [
    {
        "tool": "bash",
        "args": {"command": "echo one >> log.txt; touch started; sleep 30; echo three >> log.txt"},
    },
    {"tool": "bash", "args": {"command": "cat log.txt"}},
    ended("finished"),
]


def _start(tmp_path: Path, model: str, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config-home")
    return subprocess.Popen(
        [sys.executable, "-m", "steward", "run", "log things", "--model", model, "--json", *args],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists()


def test_sigterm_and_sigint_are_recorded_as_a_stop_that_resume_continues(cli: Any, tmp_path: Path) -> None:
    model = script(tmp_path, SLOW)
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        (tmp_path / "started").unlink(missing_ok=True)
        proc = _start(tmp_path, model)
        _wait_for(tmp_path / "started")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == code, err
        assert "the run was cancelled; `steward resume" in err
        shown = events_of(out)[-1]
        assert shown["type"] == "done" and shown["data"]["status"] == "cancelled"
        log = events_of(cli("runs", "export", shown["run_id"]).stdout)
        assert log[-1] == shown  # what the consumer saw is what the log holds
        assert not (tmp_path / ".git").exists()  # the sandbox's placeholders are gone too
        resumed = cli("resume", shown["run_id"], "--json")
        assert resumed.returncode == 0, resumed.stderr
        after = events_of(resumed.stdout)
        assert after[0]["seq"] == shown["seq"] + 1 and after[0]["data"]["error_category"] == "interrupted"


def test_a_reader_that_goes_away_stops_the_run_without_hanging(cli: Any, tmp_path: Path) -> None:
    model = script(tmp_path, SLOW)
    proc = _start(tmp_path, model)
    assert proc.stdout is not None
    proc.stdout.readline()  # like `| head -1`
    proc.stdout.close()
    proc.wait(timeout=60)  # it notices at its next event and stops there
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stderr.close()
    assert "Traceback" not in err
    listed = cli("runs", "list").stdout
    assert "cancelled" in listed, listed


def test_kill_9_leaves_no_placeholder_behind_after_resume(cli: Any, tmp_path: Path) -> None:
    model = script(tmp_path, SLOW)
    proc = _start(tmp_path, model)
    _wait_for(tmp_path / "started")
    proc.kill()
    proc.communicate(timeout=30)
    # The empty .git placeholder (a read-only mount point while the command ran) is still
    # there: the killed process could not remove it.
    assert (tmp_path / ".git").is_file() and (tmp_path / ".git").stat().st_size == 0
    resumed = cli("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert not (tmp_path / ".git").exists()


def test_last_means_the_newest_waiting_run_for_answers(cli: Any, tmp_path: Path) -> None:
    waiting = script(tmp_path, [CURL, END])
    assert cli("run", "check curl", "--model", waiting, stdin="").returncode == 1
    (tmp_path / "s2.yaml").write_text(yaml.safe_dump([ended("later")]))
    assert cli("run", "newer", "--model", f"scripted:{tmp_path / 's2.yaml'}").returncode == 0
    approved = cli("approve", "last", "--json")
    assert approved.returncode == 0, approved.stderr
    assert events_of(approved.stdout)[0]["data"]["decision"] == "approved"
    empty = cli("answer", "last", " ")
    assert empty.returncode == 2 and "the answer is empty" in empty.stderr


def test_chat_ends_cleanly_when_input_ends_inside_a_pasted_block(cli: Any, tmp_path: Path) -> None:
    model = script(tmp_path, [ended("hello"), ended("never")])
    proc = cli("chat", "--model", model, stdin='hi\n"""\nunterminated\n', timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "the block was not sent" in proc.stderr and "hello" in proc.stdout and "never" not in proc.stdout


def test_stdio_refuses_a_run_id_already_recorded_with_that_run_id(cli: Any, tmp_path: Path) -> None:
    model = script(tmp_path, [ended("one"), ended("two")])
    request = json.dumps({"prompt": "x", "run_id": "job-1"}) + "\n"
    assert cli("stdio", "--model", model, stdin=request).returncode == 0
    again = cli("stdio", "--model", model, stdin=request)
    error = next(e for e in events_of(again.stdout) if e["type"] == "error")
    assert error["run_id"] == "job-1" and error["data"]["code"] == "bad_request"
    assert '"resume": true' in error["data"]["message"]
