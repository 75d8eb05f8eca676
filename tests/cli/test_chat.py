"""steward chat and run --session, through a real subprocess."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


def script(tmp_path: Path, replies: list[dict[str, Any]]) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(replies))
    return f"scripted:{path}"


def test_chat_keeps_turns_and_new_starts_a_session_from_a_summary(cli: Any, tmp_path: Path) -> None:
    model = script(
        tmp_path,
        [
            ended("Hello Ada."),
            ended("You asked me to greet you."),
            ended("Fresh start."),
        ],
    )
    lines = [
        "hi, I am Ada",
        "what did I ask \\",  # continued on the next line
        "before?",
        "/sessions",
        "/new",
        '"""',
        "a pasted",
        "block",
        '"""',
        "/quit",
        "never read",
    ]
    proc = cli("chat", "--model", model, stdin="\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr
    assert (
        "Hello Ada." in proc.stdout
        and "You asked me to greet you." in proc.stdout
        and "Fresh start." in proc.stdout
    )
    assert "steward chat · session" in proc.stderr and "0 earlier turns" in proc.stderr
    assert "closed; new session" in proc.stderr
    assert "2 turns" in proc.stderr  # /sessions listed the first session with its two turns
    runs = cli("runs", "list").stdout
    assert "what did I ask before?" in runs  # the continued line, shown on one line
    assert len(runs.strip().splitlines()) == 3
    export = cli("runs", "export", runs.split()[0]).stdout  # the newest: the pasted block
    assert '"goal":"a pasted\\nblock"' in export


def test_run_session_adds_runs_to_one_session(cli: Any, tmp_path: Path) -> None:
    model = script(tmp_path, [ended("first answer"), ended("second answer")])
    first = cli("run", "one", "--session", "new", "--model", model)
    assert first.returncode == 0, first.stderr
    session_id = next(w for w in first.stderr.split() if len(w) == 12 and w.isalnum())
    second = cli("run", "two", "--session", session_id[:5], "--model", model)
    assert second.returncode == 0, second.stderr
    assert f"session {session_id}" in second.stderr
    unknown = cli("run", "three", "--session", "zzzz", "--model", model)
    assert (
        unknown.returncode == 1
        and "no session 'zzzz'" in unknown.stderr
        and "Traceback" not in unknown.stderr
    )


def test_core_memory_persists_between_cli_runs(cli: Any, tmp_path: Path) -> None:
    first = script(
        tmp_path, [{"tool": "memory_append", "args": {"label": "user", "text": "likes blue"}}, ended("ok")]
    )
    proc = cli("run", "remember blue", "--json", "--model", first)
    assert proc.returncode == 0, proc.stderr
    assert '"status":"completed"' in proc.stdout and "likes blue" in proc.stdout
    # A new process: the replace only succeeds if the first run's edit was kept in the store.
    second = script(
        tmp_path,
        [
            {"tool": "memory_replace", "args": {"label": "user", "old": "likes blue", "new": "likes green"}},
            ended("ok"),
        ],
    )
    proc = cli("run", "now green", "--json", "--model", second)
    assert proc.returncode == 0, proc.stderr
    assert "likes green" in proc.stdout and '"status":"failed"' not in proc.stdout
