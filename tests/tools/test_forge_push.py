"""git_push through the whole agent: asked by default with what leaves shown, bound to one commit,
denied, forced only by a rule, and autonomous mode still asking."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.tools.test_forge_repo import Repo, git, make_repo

from steward import Agent, ScriptedModel
from steward.config import Config, GitSettings, PolicySettings
from steward.events import ApprovalGateEvent, Event, ToolResultEvent
from steward.safety.policy.rules import Policy

END = {"agent_step": {"phase": "end", "summary": "pushed", "end_status": "solved", "end_message": "done"}}
PUSH: dict[str, Any] = {"tool": "git_push", "args": {}}
FORCE: dict[str, Any] = {"tool": "git_push", "args": {"force": True}}


def agent(
    replies: list[dict[str, Any]], *, allow: list[str] | None = None, mode: str = "structured"
) -> Agent:
    settings = PolicySettings(allow=allow or [], mode=mode)  # type: ignore[arg-type]
    return Agent(
        ScriptedModel.from_data(replies),
        config=Config(policy=settings, git=GitSettings()),
        policy=Policy.from_lists(allow=allow or [], mode=settings.mode),
    )


def on_branch(repo: Repo) -> str:
    git(repo.workspace, "switch", "-q", "-c", "fix-parser")
    repo.commit("parser.py", "def parse(text):\n    return text.split()\n", "Fix the parser on empty input")
    return repo.commit(
        "test_parser.py", "def test_empty():\n    assert True\n", "Test the parser on empty input"
    )


def gate_of(events: list[Event]) -> ApprovalGateEvent:
    gates = [e for e in events if isinstance(e, ApprovalGateEvent)]
    assert gates, [e.type for e in events]
    return gates[-1]


def results(events: list[Event]) -> list[ToolResultEvent]:
    return [e for e in events if isinstance(e, ToolResultEvent)]


async def test_a_push_asks_first_and_shows_the_commits_the_stat_the_remote_and_the_branch(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    sha = on_branch(repo)
    run = agent([PUSH, END]).start("push the fix", workspace=repo.workspace)
    gate = gate_of([e async for e in run.stream()])
    assert gate.tool == "git_push" and run.status == "waiting"
    shown = gate.description
    assert f"commit {sha[:12]} to branch 'fix-parser' of origin ({repo.remote})" in shown
    assert "Fix the parser on empty input" in shown and "Test the parser on empty input" in shown
    assert "Commits (2):" in shown and "Initial commit" not in shown  # the remote has that one
    assert "parser.py" in shown and "2 files changed" in shown
    assert repo.remote_sha("fix-parser") is None  # nothing left before the approval


async def test_approving_pushes_exactly_the_commit_that_was_shown(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    sha = on_branch(repo)
    run = agent([PUSH, END]).start("push the fix", workspace=repo.workspace)
    _ = [e async for e in run.stream()]
    events = [e async for e in run.approve_stream()]
    assert repo.remote_sha("fix-parser") == sha
    assert f"Pushed {sha[:12]} to origin/fix-parser (2 commit(s)" in results(events)[0].output
    assert git(repo.workspace, "rev-parse", "refs/remotes/origin/fix-parser") == sha
    assert run.status == "done"


async def test_a_branch_that_moves_after_the_question_is_asked_about_again(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    shown_sha = on_branch(repo)
    run = agent([PUSH, END]).start("push the fix", workspace=repo.workspace)
    first = gate_of([e async for e in run.stream()])
    later = repo.commit("extra.py", "x = 1\n", "A commit nobody approved")
    events = [e async for e in run.approve_stream()]
    second = gate_of(events)
    assert second.call_hash != first.call_hash and shown_sha[:12] in first.description
    assert "A commit nobody approved" in second.description
    assert repo.remote_sha("fix-parser") is None  # the approval of the first plan pushed nothing else
    _ = [e async for e in run.approve_stream()]
    assert repo.remote_sha("fix-parser") == later


async def test_a_denied_push_sends_nothing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    on_branch(repo)
    run = agent([PUSH, END]).start("push the fix", workspace=repo.workspace)
    _ = [e async for e in run.stream()]
    events = [e async for e in run.deny_stream(reason="not today")]
    assert repo.remote_sha("fix-parser") is None
    assert "not today" in results(events)[0].output


async def test_a_force_push_is_refused_without_a_rule_that_names_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    before = repo.remote_sha("main")
    git(repo.workspace, "commit", "-q", "--amend", "-m", "Rewritten history")
    run = agent([FORCE, END], allow=["git_push"]).start("force it", workspace=repo.workspace)
    events = [e async for e in run.stream()]
    refused = results(events)[0]
    assert refused.status != "completed" and 'allow = ["git_push(force)"]' in refused.output
    assert not [e for e in events if isinstance(e, ApprovalGateEvent)]
    assert repo.remote_sha("main") == before


async def test_a_force_push_runs_when_a_rule_names_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    rewritten = git(repo.workspace, "commit", "-q", "--amend", "-m", "Rewritten history") or git(
        repo.workspace, "rev-parse", "HEAD"
    )
    run = agent([FORCE, END], allow=["git_push(force)"]).start("force it", workspace=repo.workspace)
    events = [e async for e in run.stream()]
    assert "Pushed" in results(events)[0].output
    assert repo.remote_sha("main") == rewritten


async def test_a_push_the_remote_rejects_says_what_to_do(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    git(repo.workspace, "commit", "-q", "--amend", "-m", "Rewritten history")
    run = agent([PUSH, END], allow=["git_push"]).start("push", workspace=repo.workspace)
    events = [e async for e in run.stream()]
    assert "has commits this branch lacks" in results(events)[0].output


async def test_autonomous_mode_still_asks_before_anything_leaves(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    on_branch(repo)
    run = agent([PUSH, END], mode="autonomous").start("push", workspace=repo.workspace)
    gate = gate_of([e async for e in run.stream()])
    assert "asked in autonomous mode too" in gate.reason
    assert repo.remote_sha("fix-parser") is None


async def test_an_allow_rule_pushes_without_asking(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    sha = on_branch(repo)
    run = agent([PUSH, END], allow=["git_push"], mode="autonomous").start("push", workspace=repo.workspace)
    events = [e async for e in run.stream()]
    assert not [e for e in events if isinstance(e, ApprovalGateEvent)]
    assert repo.remote_sha("fix-parser") == sha


async def test_a_detached_head_is_explained_to_the_model(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    git(repo.workspace, "switch", "-q", "--detach")
    run = agent([PUSH, END]).start("push", workspace=repo.workspace)
    events = [e async for e in run.stream()]
    assert "HEAD is detached" in results(events)[0].output
