"""End to end through ``steward run``: a scripted model branches, edits and commits with the git
tools, in a real repository, with the real sandbox, checkpoints, guard and policy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from tests.tools.test_git_helpers import git, make_repo

END: dict[str, Any] = {
    "agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "done"}
}


def steward_run(
    tmp_path: Path, workspace: Path, replies: list[dict[str, Any]], *flags: str
) -> list[dict[str, Any]]:
    """``steward run`` with a scripted model in ``workspace``; its events."""
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump(replies))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config-home")
    env["XDG_STATE_HOME"] = str(tmp_path / "state-home")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "steward",
            "run",
            "fix the greeting",
            "--model",
            f"scripted:{script}",
            "--json",
            *flags,
        ],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def results(events: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [
        (e["data"]["tool"], e["data"]["status"], e["data"]["output"])
        for e in events
        if e["type"] == "tool_result"
    ]


def test_a_scripted_agent_branches_edits_and_commits(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "app.py").write_text("print('hi')\n")
    git(repo, "add", "app.py")
    git(repo, "commit", "-q", "-m", "Add app")
    replies = [
        {"tool": "git_status", "args": {}},
        {"tool": "git_branch", "args": {"action": "create", "name": "fix/greeting"}},
        {"tool": "edit_file", "args": {"path": "app.py", "old_text": "hi", "new_text": "hello"}},
        {"tool": "git_diff", "args": {"stat": True}},
        {"tool": "git_commit", "args": {"message": "Say hello", "paths": ["app.py"]}},
        {"tool": "git_log", "args": {"max_count": 2}},
        END,
    ]
    events = steward_run(tmp_path, repo, replies)
    done = results(events)
    assert [(tool, status) for tool, status, _ in done] == [
        ("git_status", "completed"),
        ("git_branch", "completed"),
        ("edit_file", "completed"),
        ("git_diff", "completed"),
        ("git_commit", "completed"),
        ("git_log", "completed"),
    ]
    assert done[0][2].startswith("branch: main")
    assert "app.py | 2 +-" in done[3][2]
    assert done[4][2].startswith("[fix/greeting ")
    assert "Say hello" in done[5][2].splitlines()[0]
    # The changing calls were checkpointed, and nothing the commit did was undone.
    checkpoints = [
        e["data"]["message"] for e in events if e["type"] == "signal" and e["data"]["code"] == "checkpoint"
    ]
    assert any("before git_branch" in c for c in checkpoints)
    assert any("before git_commit" in c for c in checkpoints)
    assert events[-1]["type"] == "done" and events[-1]["data"]["end_status"] == "solved"
    assert git(repo, "log", "-1", "--format=%s %D").strip() == "Say hello HEAD -> fix/greeting"
    assert git(repo, "show", "HEAD:app.py") == "print('hello')\n"
    assert git(repo, "log", "-1", "--format=%s", "main").strip() == "Add app"
    assert git(repo, "status", "--porcelain") == ""


def test_a_deny_rule_on_git_branch_keeps_the_branch_from_being_made(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    replies = [{"tool": "git_branch", "args": {"action": "create", "name": "topic"}}, END]
    events = steward_run(tmp_path, repo, replies, "--deny", "git_branch")
    ((tool, status, output),) = results(events)
    assert (tool, status) == ("git_branch", "failed")
    assert "denied by the rule deny git_branch" in output
    assert git(repo, "branch", "--list", "topic") == ""


def test_no_verify_needs_its_rule_through_the_cli(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'hook says no'\nexit 1\n")
    hook.chmod(0o755)
    (repo / "x.txt").write_text("x\n")
    commit: dict[str, Any] = {
        "tool": "git_commit",
        "args": {"message": "Skip", "all": True, "no_verify": True},
    }
    refused = results(steward_run(tmp_path, repo, [commit, END]))
    assert refused[0][1] == "failed" and 'allow = ["git_commit(no_verify)"]' in refused[0][2]
    assert git(repo, "log", "-1", "--format=%s").strip() == "First commit"
    allowed = results(steward_run(tmp_path, repo, [commit, END], "--allow", "git_commit(no_verify)"))
    assert allowed[0][1] == "completed", allowed
    assert git(repo, "log", "-1", "--format=%s").strip() == "Skip"
