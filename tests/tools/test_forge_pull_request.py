"""create_pull_request against the fake GitHub and Gitea: opened with the body, asked first, and
every error naming the fix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.tools.test_forge_repo import TOKEN, Repo, git, make_repo

from steward import Agent, ScriptedModel
from steward.config import Config, GitSettings, PolicySettings
from steward.events import ApprovalGateEvent, Event, ToolResultEvent
from steward.safety.policy.rules import Policy
from steward.testing.fake_forge import FakeForge

END = {"agent_step": {"phase": "end", "summary": "opened", "end_status": "solved", "end_message": "done"}}
BODY = "Summary: the parser no longer fails on empty input.\n\nTested with pytest."


def pull(**args: Any) -> dict[str, Any]:
    return {"tool": "create_pull_request", "args": {"title": "Fix the parser", "body": BODY, **args}}


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    made = make_repo(tmp_path)
    git(made.workspace, "switch", "-q", "-c", "fix-parser")
    made.commit("parser.py", "x = 1\n", "Fix the parser")
    git(made.workspace, "push", "-q", "origin", "fix-parser")
    git(made.workspace, "fetch", "-q", str(made.remote), "+refs/heads/*:refs/remotes/origin/*")
    return made


@pytest.fixture
def forge(repo: Repo) -> Iterator[FakeForge]:
    with FakeForge({"acme/widgets": repo.remote}, token=TOKEN) as served:
        yield served


def agent(replies: list[dict[str, Any]], settings: GitSettings, *, allow: tuple[str, ...] = ()) -> Agent:
    return Agent(
        ScriptedModel.from_data(replies),
        config=Config(git=settings, policy=PolicySettings(allow=list(allow))),
        policy=Policy.from_lists(allow=allow),
    )


def output(events: list[Event]) -> str:
    return next(e for e in events if isinstance(e, ToolResultEvent)).output


async def test_a_pull_request_asks_first_then_opens_on_github_with_the_body(
    repo: Repo, forge: FakeForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    settings = GitSettings(forge="github", api_url=forge.github_api_url)
    run = agent([pull(draft=True), END], settings).start("open a PR", workspace=repo.workspace)
    gate = next(e for e in [e async for e in run.stream()] if isinstance(e, ApprovalGateEvent))
    assert (
        "pull request as a draft on acme/widgets" in gate.description and "'fix-parser'" in gate.description
    )
    assert forge.pulls == []
    events = [e async for e in run.approve_stream()]
    assert (
        output(events)
        == f"Opened pull request #1 on acme/widgets: http://127.0.0.1:{forge.port}/acme/widgets/pull/1"
    )
    opened = forge.pulls[0]
    assert (opened.forge, opened.head, opened.base, opened.body, opened.draft) == (
        "github", "fix-parser", "main", BODY, True,
    )  # fmt: skip
    posted = next(r for r in forge.requests if r.method == "POST")
    assert posted.headers["authorization"] == f"Bearer {TOKEN}"
    assert posted.headers["accept"] == "application/vnd.github+json"


async def test_a_pull_request_opens_on_gitea_with_its_token_header(
    repo: Repo, forge: FakeForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITEA_TOKEN", TOKEN)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    settings = GitSettings(forge="gitea", api_url=forge.gitea_api_url)
    run = agent([pull(base="main"), END], settings, allow=("create_pull_request",)).start(
        "open a PR", workspace=repo.workspace
    )
    events = [e async for e in run.stream()]
    assert output(events).endswith("/acme/widgets/pulls/1")
    assert forge.pulls[0].forge == "gitea" and forge.pulls[0].body == BODY
    assert forge.requests[-1].headers["authorization"] == f"token {TOKEN}"
    assert "draft" not in forge.requests[-1].body


async def test_without_a_token_the_model_is_told_which_variable_the_user_must_set(
    repo: Repo, forge: FakeForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FORGE_TOKEN", raising=False)
    settings = GitSettings(forge="github", api_url=forge.github_api_url, token_env="FORGE_TOKEN")
    run = agent([pull(), END], settings, allow=("create_pull_request",)).start("PR", workspace=repo.workspace)
    said = output([e async for e in run.stream()])
    assert "FORGE_TOKEN is not set" in said and "export FORGE_TOKEN=" in said
    assert forge.requests == []


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (401, "GITHUB_TOKEN holds no valid token"),
        (403, "may not open pull requests on acme/widgets (403"),
        (404, "acme/widgets was not found"),
    ],
)
async def test_forge_refusals_are_explained(
    repo: Repo, forge: FakeForge, monkeypatch: pytest.MonkeyPatch, status: int, expected: str
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    forge.fail_next(status, "nope")
    settings = GitSettings(forge="github", api_url=forge.github_api_url)
    run = agent([pull(base="main"), END], settings, allow=("create_pull_request",)).start(
        "PR", workspace=repo.workspace
    )
    said = output([e async for e in run.stream()])
    assert expected in said and TOKEN not in said


async def test_a_second_pull_request_for_the_branch_is_explained(
    repo: Repo, forge: FakeForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    settings = GitSettings(forge="github", api_url=forge.github_api_url)
    run = agent([pull(), pull(), END], settings, allow=("create_pull_request",)).start(
        "PR", workspace=repo.workspace
    )
    events = [e async for e in run.stream()]
    said = [e.output for e in events if isinstance(e, ToolResultEvent)]
    assert said[0].startswith("Opened pull request #1")
    assert "rejected the pull request (422" in said[1] and "may already exist" in said[1]
    assert len(forge.pulls) == 1


async def test_a_branch_with_unpushed_commits_must_be_pushed_first(
    repo: Repo, forge: FakeForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    repo.commit("later.py", "y = 2\n", "Not pushed yet")
    settings = GitSettings(forge="github", api_url=forge.github_api_url)
    run = agent([pull(), END], settings, allow=("create_pull_request",)).start("PR", workspace=repo.workspace)
    said = output([e async for e in run.stream()])
    assert "has commits not pushed yet" in said and "git_push first" in said
    assert forge.requests == []


async def test_the_fake_forge_refuses_a_head_branch_the_remote_lacks(
    repo: Repo, forge: FakeForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    git(repo.workspace, "switch", "-q", "-c", "local-only")
    git(repo.workspace, "update-ref", "refs/remotes/origin/local-only", "HEAD")  # looks pushed, is not
    settings = GitSettings(forge="github", api_url=forge.github_api_url)
    run = agent([pull(base="main"), END], settings, allow=("create_pull_request",)).start(
        "PR", workspace=repo.workspace
    )
    said = output([e async for e in run.stream()])
    assert "(422" in said and "head invalid" in said
