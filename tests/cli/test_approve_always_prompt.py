"""When the approval prompt offers "a" (approve always), and what it says when it cannot."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from steward.cli.stdio import _KEYS as STDIO_REQUEST_KEYS

ECHO = {"tool": "bash", "args": {"command": "echo hello"}}
END = {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "done"}}


def script(tmp_path: Path, replies: list[dict[str, Any]]) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(replies))
    return f"scripted:{path}"


def test_an_explicit_ask_rule_says_why_always_is_not_offered(cli: Any, tmp_path: Path) -> None:
    # An allow rule could never outrank the ask rule: remembering one would not stop the question.
    model = script(tmp_path, [ECHO, END])
    proc = cli("run", "greet", "--ask", "bash(echo*)", "--model", model, stdin="a\ny\n")
    assert proc.returncode == 0, proc.stderr
    assert "the rule ask bash(echo*)" in proc.stderr and "[a] always: allow" not in proc.stderr
    assert "no [a] always: an ask rule asks every time" in proc.stderr
    assert "remove or narrow that rule in [policy] ask" in proc.stderr
    assert not (tmp_path / "steward.toml").exists()  # "a" remembered nothing


def test_a_default_ask_offers_always_and_remembers_the_rule(cli: Any, tmp_path: Path) -> None:
    curl = {"tool": "bash", "args": {"command": "curl --version"}}  # asks by default (the network)
    proc = cli("run", "check", "--model", script(tmp_path, [curl, END]), stdin="a\n")
    assert proc.returncode == 0, proc.stderr
    assert "[a] always: allow bash(curl*)" in proc.stderr and "no [a] always" not in proc.stderr
    assert tomllib.loads((tmp_path / "steward.toml").read_text())["policy"]["allow"] == ["bash(curl*)"]


def test_stdio_help_lists_every_request_it_accepts(cli: Any) -> None:
    proc = cli("stdio", "--help", COLUMNS="80")
    assert proc.returncode == 0, proc.stderr
    shown = set(re.findall(r'"(\w+)"', proc.stdout))
    assert shown >= STDIO_REQUEST_KEYS, f"missing from --help: {sorted(STDIO_REQUEST_KEYS - shown)}"
    for request in ("answer", "approve", "deny", "resume", "start a run"):
        assert request in proc.stdout
