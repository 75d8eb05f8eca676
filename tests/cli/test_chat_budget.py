"""`steward chat --budget-tokens`: each message's run is held to the budget, as `steward run`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def test_chat_holds_each_message_run_to_the_token_budget(cli: Any, tmp_path: Path) -> None:
    ended = {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "Hi."}}
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([ended]))
    proc = cli("chat", "--model", f"scripted:{script}", "--budget-tokens", "1k", stdin="hello\n/quit\n")
    assert "Traceback" not in proc.stderr
    assert "this run's budget has no room for another model call" in proc.stderr
    runs = cli("runs", "list").stdout.splitlines()
    assert len(runs) == 1 and "partial" in runs[0] and "hello" in runs[0]


def test_a_session_whose_budget_is_spent_starts_no_more_runs_and_says_how_to_go_on(
    cli: Any, tmp_path: Path
) -> None:
    ended = {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "Hi."}}
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([ended, ended, ended]))
    (tmp_path / "steward.toml").write_text("[budget]\nsession_tokens = 1000\n")
    proc = cli("chat", "--model", f"scripted:{script}", stdin="hello\nagain\nonce more\n/quit\n")
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("has spent its budget") == 3, proc.stderr  # once stopped, twice refused
    assert "/new starts a new session" in proc.stderr and "steward chat --session" in proc.stderr
    runs = cli("runs", "list").stdout.splitlines()
    assert len(runs) == 1 and "partial" in runs[0] and "hello" in runs[0]  # no empty runs after it
