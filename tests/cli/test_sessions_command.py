"""`steward sessions`, "last" as a session id, and what a session remembers of its turns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from steward.agent import Agent
from steward.memory.session import session_history
from steward.models.scripted import ScriptedModel
from steward.sessions import Session
from steward.store.events import open_store


def answering(tmp_path: Path, answer: str) -> str:
    """A model for one process: a script whose only reply ends the run with ``answer``."""
    path = tmp_path / f"{len(list(tmp_path.glob('*.yaml')))}.yaml"
    end = {"phase": "end", "summary": "done", "end_status": "solved", "end_message": answer}
    path.write_text(yaml.safe_dump([{"agent_step": end}]))
    return f"scripted:{path}"


def session_of(stderr: str) -> str:
    return next(w for w in stderr.split() if len(w) == 12 and w.isalnum())


def test_sessions_show_last_shows_the_session_run_session_last_adds_to(cli: Any, tmp_path: Path) -> None:
    first = cli("run", "one", "--session", "new", "--model", answering(tmp_path, "first answer"))
    assert first.returncode == 0, first.stderr
    second = cli("run", "two", "--session", "last", "--model", answering(tmp_path, "second answer"))
    assert session_of(second.stderr) == session_of(first.stderr)
    shown = cli("sessions", "show", "last")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"session {session_of(first.stderr)} · open")
    assert "> one\n  first answer" in shown.stdout and "> two\n  second answer" in shown.stdout


def test_sessions_show_last_without_any_session_says_how_to_start_one(cli: Any, tmp_path: Path) -> None:
    cli("run", "no session", "--model", answering(tmp_path, "ok"))  # a store, no session
    shown = cli("sessions", "show", "last")
    assert shown.returncode == 2
    assert "no sessions in this store yet; `steward chat` starts one" in shown.stderr
    assert "Traceback" not in shown.stderr


def test_chat_session_last_continues_the_last_session(cli: Any, tmp_path: Path) -> None:
    first = cli("run", "one", "--session", "new", "--model", answering(tmp_path, "first answer"))
    chat = cli("chat", "--session", "last", "--model", answering(tmp_path, "chat answer"), stdin="hello\n")
    assert chat.returncode == 0, chat.stderr
    assert f"session {session_of(first.stderr)} (1 earlier turn)" in chat.stderr


async def test_a_cancelled_or_failed_turn_reaches_later_runs_as_no_answer(tmp_path: Path) -> None:
    async with await open_store(f"sqlite:///{tmp_path / 'steward.db'}") as store:
        agent = Agent(None, store=store)
        session = await Session.open(agent)
        for run_id, status, output in (
            ("r1", "done", "the real answer"),
            ("r2", "cancelled", "Cancelled before it finished."),
            ("r3", "failed", "model error: 529 overloaded"),
            ("r4", "waiting", ""),
        ):
            await store.create_run(run_id, goal=f"goal of {run_id}", session_id=session.id)
            await store.set_status(run_id, status, "solved" if status == "done" else None, output=output)
        history = await session_history(store, ScriptedModel([]), session.id, request_tokens=32_000)
    assert history.turns == (
        ("goal of r1", "the real answer"),
        ("goal of r2", "(no answer: this turn was cancelled before it finished)"),
        ("goal of r3", "(no answer: this turn failed before it finished)"),
    )
