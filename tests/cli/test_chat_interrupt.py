"""Ctrl-C in `steward chat`: it cancels the turn in progress, and ends the chat only at the prompt.

Each test drives a real `steward chat` process through pipes and sends it a real SIGINT.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import yaml


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


SLEEP = {"tool": "bash", "args": {"command": "touch started; sleep 30"}}
CURL = {"tool": "bash", "args": {"command": "curl --version"}}  # the network: asks for approval


class Chat:
    """A `steward chat` process whose output is collected as it comes."""

    def __init__(self, tmp_path: Path, replies: list[dict[str, Any]]) -> None:
        script = tmp_path / "s.yaml"
        script.write_text(yaml.safe_dump(replies))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
        env["XDG_CONFIG_HOME"] = str(tmp_path / "config-home")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "steward", "chat", "--no-sandbox", "--model", f"scripted:{script}"],
            cwd=tmp_path, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [
            threading.Thread(target=_collect, args=(stream, into), daemon=True)
            for stream, into in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))
        ]
        for reader in self.readers:
            reader.start()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        for reader in self.readers:
            reader.join(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait_for(self, text: str, *, stderr: bool = True, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in "".join(self.err if stderr else self.out):
            assert time.monotonic() < deadline, f"never saw {text!r}; stderr: {''.join(self.err)}"
            assert self.proc.poll() is None, f"chat ended before {text!r}; stderr: {''.join(self.err)}"
            time.sleep(0.05)

    def ctrl_c(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    def end(self) -> int:
        """Close stdin (Ctrl-D) and wait for the chat to end."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=30)


@pytest.fixture
def start_chat(tmp_path: Path) -> Iterator[Callable[[list[dict[str, Any]]], Chat]]:
    """Start chats in ``tmp_path``; each is stopped and its pipes closed after the test."""
    started: list[Chat] = []

    def start(replies: list[dict[str, Any]]) -> Chat:
        started.append(Chat(tmp_path, replies))
        return started[-1]

    yield start
    for chat in started:
        chat.close()


def _collect(stream: IO[str] | None, into: list[str]) -> None:
    assert stream is not None
    into.extend(stream)  # line by line, as the process writes them


def wait_for_file(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_ctrl_c_during_a_turn_cancels_it_and_the_chat_goes_on(
    cli: Any, tmp_path: Path, start_chat: Any
) -> None:
    chat = start_chat([SLEEP, ended("second answer")])
    chat.wait_for("steward chat · session")
    chat.say("wait a while")
    wait_for_file(tmp_path / "started")
    chat.ctrl_c()
    chat.wait_for("turn cancelled")
    chat.say("answer now")
    chat.wait_for("second answer", stderr=False)
    assert chat.end() == 0, "".join(chat.err)
    assert "Traceback" not in "".join(chat.err)
    runs = cli("runs", "list").stdout.splitlines()
    assert [line.split()[3] for line in runs] == ["solved", "cancelled"]  # newest first


def test_a_cancelled_turn_is_not_remembered_as_an_answer(cli: Any, tmp_path: Path, start_chat: Any) -> None:
    chat = start_chat([SLEEP, ended("second answer")])
    chat.wait_for("steward chat · session")
    chat.say("wait a while")
    wait_for_file(tmp_path / "started")
    chat.ctrl_c()
    chat.wait_for("turn cancelled")
    chat.say("answer now")
    chat.wait_for("second answer", stderr=False)
    assert chat.end() == 0
    assert "Cancelled before it finished" not in "".join(chat.out)  # not printed as an answer
    shown = cli("sessions", "show", "last")
    assert shown.returncode == 0, shown.stderr
    assert "Cancelled before it finished" not in shown.stdout
    assert "> wait a while\n  (no answer: this turn was cancelled before it finished)" in shown.stdout
    assert "> answer now\n  second answer" in shown.stdout


def test_ctrl_c_at_an_approval_prompt_cancels_the_waiting_turn(
    cli: Any, tmp_path: Path, start_chat: Any
) -> None:
    chat = start_chat([CURL, ended("second answer")])
    chat.wait_for("steward chat · session")
    chat.say("check curl")
    chat.wait_for("? approve bash")
    chat.ctrl_c()
    chat.wait_for("turn cancelled")
    assert chat.end() == 130  # the chat's code is its last turn's: cancelled
    runs = cli("runs", "list").stdout.split()
    assert runs[3] == "cancelled"


def test_ctrl_c_at_the_prompt_ends_the_chat(start_chat: Any) -> None:
    chat = start_chat([{"text": "never asked"}])
    chat.wait_for("steward chat · session")
    chat.ctrl_c()
    assert chat.proc.wait(timeout=30) == 0, "".join(chat.err)
    stderr = "".join(chat.err)
    assert "Traceback" not in stderr and "interrupted" not in stderr
