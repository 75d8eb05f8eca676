"""The forge token in Steward's environment is used on the host and nowhere else: not in the
sandbox's environment, not in what the model is sent, not in the store, not in any output."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.tools.test_forge_repo import TOKEN, git, make_repo

from steward import Agent, ScriptedModel
from steward.config import Config, GitSettings, PolicySettings
from steward.events import ToolResultEvent
from steward.models.base import ModelRequest, StreamItem
from steward.safety.policy.rules import Policy
from steward.store.events import open_store
from steward.testing.fake_forge import FakeForge

END = {"agent_step": {"phase": "end", "summary": "opened", "end_status": "solved", "end_message": "done"}}


class Recording(ScriptedModel):
    """The scripted model, keeping every request it was sent."""

    seen: list[ModelRequest]

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        self.seen.append(request)
        async for item in super().stream(request):
            yield item


def script() -> list[dict[str, Any]]:
    return [
        {"tool": "bash", "args": {"command": 'env; echo "token length=${#GITHUB_TOKEN}"'}},
        {"tool": "read_file", "args": {"path": "notes.txt"}},
        {"tool": "git_push", "args": {}},
        {"tool": "create_pull_request", "args": {"title": "Fix", "body": "Summary: fixed."}},
        END,
    ]


async def test_the_token_reaches_the_forge_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    repo = make_repo(tmp_path)
    git(repo.workspace, "switch", "-q", "-c", "fix")
    repo.commit("fix.py", "x = 1\n", "Fix it")
    (repo.workspace / "notes.txt").write_text(f"someone pasted the token here: {TOKEN}\n")
    model = Recording.from_data(script())
    assert isinstance(model, Recording)
    model.seen = []
    allow = ("git_push", "create_pull_request")
    with FakeForge({"acme/widgets": repo.remote}, token=TOKEN) as forge:
        async with await open_store(f"sqlite:///{tmp_path}/steward.db") as store:
            agent = Agent(
                model,
                config=Config(
                    git=GitSettings(forge="github", api_url=forge.github_api_url),
                    policy=PolicySettings(allow=list(allow)),
                ),
                policy=Policy.from_lists(allow=allow),
                store=store,
            )
            events = [e async for e in agent.run_stream("ship it", workspace=repo.workspace)]
    outputs = [e.output for e in events if isinstance(e, ToolResultEvent)]
    assert len(outputs) == 4, outputs
    shell, notes, pushed, opened = outputs
    assert "token length=0" in shell and "GITHUB_TOKEN" not in shell  # the sandbox never had it
    assert TOKEN not in notes and "someone pasted the token here" in notes  # redacted where it shows
    assert pushed.startswith("Pushed") and opened.startswith("Opened pull request #1")
    assert forge.requests[-1].headers["authorization"] == f"Bearer {TOKEN}"  # used, on the host
    assert all(TOKEN not in repr(request) for request in model.seen)
    assert all(TOKEN not in repr(event) for event in events)
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("steward.db*"))
    assert stored and TOKEN.encode() not in stored
