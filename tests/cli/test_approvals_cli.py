"""Approvals at the terminal and over stdio, through real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import yaml

CURL = {"tool": "bash", "args": {"command": "curl --version"}}  # the network: asked by default
END = {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "done"}}


def script(tmp_path: Path, replies: list[dict[str, Any]]) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(replies))
    return path


def events_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_n_with_a_reason_denies_and_the_model_hears_it(cli: Any, tmp_path: Path) -> None:
    proc = cli("run", "check", "--json", "--model", f"scripted:{script(tmp_path, [CURL, END])}",
               stdin="n no network today\n")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "? approve bash" in proc.stderr and "it uses the network" in proc.stderr
    events = events_of(proc.stdout)
    decision = next(e for e in events if e["type"] == "approval_result")["data"]
    assert decision["decision"] == "denied" and decision["reason"] == "no network today"
    result = next(e for e in events if e["type"] == "tool_result")["data"]
    assert result["status"] == "failed" and "no network today" in result["output"]


def test_y_approves_once_and_the_command_runs(cli: Any, tmp_path: Path) -> None:
    proc = cli("run", "check", "--json", "--model", f"scripted:{script(tmp_path, [CURL, END])}", stdin="y\n")
    assert proc.returncode == 0, proc.stderr
    result = next(e for e in events_of(proc.stdout) if e["type"] == "tool_result")["data"]
    assert result["status"] == "completed" and "curl" in result["output"].lower()
    assert not (tmp_path / "steward.toml").exists()


def test_a_approves_always_and_remembers_the_rule(cli: Any, tmp_path: Path) -> None:
    proc = cli("run", "check", "--model", f"scripted:{script(tmp_path, [CURL, CURL, END])}", stdin="a\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("? approve bash") == 1  # the second call needed no approval
    saved = tomllib.loads((tmp_path / "steward.toml").read_text())
    assert saved["policy"]["allow"] == ["bash(curl*)"]


def test_no_answer_before_the_deadline_takes_the_default(tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text("[policy]\napproval_timeout_s = 1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEWARD_")}
    silent_reader, silent_writer = os.pipe()  # stdin stays open, and nobody answers
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "steward", "run", "check", "--json", "--model",
             f"scripted:{script(tmp_path, [CURL, END])}"],
            cwd=tmp_path, env=env, stdin=silent_reader, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        started = time.monotonic()
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        os.close(silent_reader)
        os.close(silent_writer)
    assert proc.returncode == 0, stderr
    assert time.monotonic() - started >= 1
    decision = next(e for e in events_of(stdout) if e["type"] == "approval_result")["data"]
    assert decision["decision"] == "expired"
    assert "no answer before the deadline" in stderr


def test_a_guard_block_is_a_tool_result_not_a_crash(cli: Any, tmp_path: Path) -> None:
    bomb = {"tool": "bash", "args": {"command": "echo hi && rm -rf ~"}}
    proc = cli("run", "clean", "--json", "--model", f"scripted:{script(tmp_path, [bomb, END])}")
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    result = next(e for e in events if e["type"] == "tool_result")["data"]
    assert result["status"] == "failed" and "blocked by the guard" in result["output"]
    assert any(e["type"] == "signal" and e["data"]["code"] == "blocked" for e in events)


def test_stdio_answers_an_approval_by_run_id(tmp_path: Path) -> None:
    path = script(tmp_path, [CURL, END])
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import json, subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-m', 'steward', 'stdio', '--model', sys.argv[1]],\n"
        "                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)\n"
        "p.stdin.write(json.dumps({'prompt': 'check', 'run_id': 'r1'}) + '\\n'); p.stdin.flush()\n"
        "for line in p.stdout:\n"
        "    print(line, end='')\n"
        "    event = json.loads(line)\n"
        "    if event['type'] == 'approval_gate':\n"
        "        p.stdin.write(json.dumps({'run_id': 'r1', 'deny': 'not now'}) + '\\n'); p.stdin.flush()\n"
        "    if event['type'] == 'done':\n"
        "        p.stdin.close()\n"
        "sys.exit(p.wait(timeout=30))\n"
    )
    proc = subprocess.run([sys.executable, str(driver), f"scripted:{path}"], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    assert next(e for e in events if e["type"] == "approval_result")["data"]["decision"] == "denied"
    assert events[-1]["type"] == "done" and events[-1]["run_id"] == "r1"
