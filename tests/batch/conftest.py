"""A small task set for the batch tests (real templates, verifiers and scripts), and ``steward``
run as a real process against one store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

_CALC = "def add(a, b):\n    return a - b\n"
_CALC_TEST = (
    "import unittest\n\nfrom calc import add\n\n\nclass AddTest(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)


def _end(status: str) -> dict[str, object]:
    return {"agent_step": {"phase": "end", "summary": status, "end_status": status, "end_message": status}}


def _edit(path: str, old: str, new: str) -> dict[str, object]:
    return {"tool": "edit_file", "args": {"path": path, "old_text": old, "new_text": new}}


def write_task_set(root: Path) -> Path:
    """Three tasks: ``add`` (its scripts alternate a right and a wrong fix: 2 of 4 attempts pass
    its verifier), ``greeting`` (always right), ``notes`` (no verifier; its run ends partial,
    so no attempt passes)."""
    (root / "add").mkdir(parents=True)
    (root / "add" / "calc.py").write_text(_CALC)
    (root / "add" / "test_calc.py").write_text(_CALC_TEST)
    (root / "greeting").mkdir()
    (root / "greeting" / "hello.txt").write_text("helo\n")
    (root / "notes").mkdir()
    (root / "notes" / "todo.txt").write_text("one\n")
    scripts = {
        "add-right.yaml": [_edit("calc.py", "a - b", "a + b"), _end("solved")],
        "add-wrong.yaml": [_edit("calc.py", "a - b", "a * b"), _end("solved")],
        "greeting.yaml": [_edit("hello.txt", "helo", "hello"), _end("solved")],
        "notes.yaml": [{"tool": "read_file", "args": {"path": "todo.txt"}}, _end("partial")],
    }
    for name, replies in scripts.items():
        (root / name).write_text(yaml.safe_dump(replies))
    tasks = [
        {"id": "add", "goal": "Fix add in calc.py", "workspace": "add", "verify": "python3 -m unittest -q",
         "script": ["add-right.yaml", "add-wrong.yaml"]},
        {"id": "greeting", "goal": "Fix the typo in hello.txt", "workspace": "greeting",
         "verify": "grep -qx hello hello.txt", "script": "greeting.yaml"},
        {"id": "notes", "goal": "Read the notes", "workspace": "notes", "script": "notes.yaml"},
    ]  # fmt: skip
    path = root / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return path


@pytest.fixture
def task_set(tmp_path: Path) -> Path:
    return write_task_set(tmp_path / "set")


@pytest.fixture
def steward_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    return env | {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}


Steward = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def steward(steward_env: dict[str, str], tmp_path: Path) -> Steward:
    """``steward ARGS`` as a process in ``tmp_path``, waited for (at most 5 minutes)."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "steward", *args], cwd=tmp_path, env=env or steward_env,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    return run


Interrupt = Callable[..., str]


@pytest.fixture
def interrupt(steward_env: dict[str, str], tmp_path: Path) -> Interrupt:
    """``steward batch ARGS`` as a process in ``tmp_path``, stopped with Ctrl-C (SIGINT) once
    ``ready()`` holds (``what`` says what it waits for); its stderr. It must exit 130 (stopped,
    resumable); a process still there after the test's bound is killed."""

    def run(*args: str, ready: Callable[[], bool], what: str) -> str:
        started = subprocess.Popen(
            [sys.executable, "-m", "steward", "batch", *args], cwd=tmp_path, env=steward_env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120  # a bound on failure only: ``ready`` is the event waited for
            while not ready():
                assert started.poll() is None, started.communicate()
                assert time.monotonic() < deadline, f"{what} did not happen in 120 s"
                time.sleep(0.05)
            started.send_signal(signal.SIGINT)
            _out, err = started.communicate(timeout=120)
        finally:
            if started.poll() is None:
                started.kill()
                started.communicate()
        assert started.returncode == 130, err
        return err

    return run
