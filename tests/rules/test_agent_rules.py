"""Through a real Agent run: the root rules in the system prompt, nested rules on first touch,
and a skill loaded on request."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from steward import Agent, ScriptedModel
from steward.config import Config
from steward.models.base import ModelRequest, ToolResultMessage

Write = Callable[[Path, str], Path]
MakeSkill = Callable[..., Path]

END: dict[str, Any] = {
    "agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "Done."}
}


class RecordingScript(ScriptedModel):
    """A scripted model that also keeps every request it was sent."""

    def __init__(self, replies: Sequence[Mapping[str, Any]]) -> None:
        super().__init__(ScriptedModel.from_data(replies).replies)
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> Any:
        self.requests.append(request)
        return super().stream(request)


def results(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if isinstance(m, ToolResultMessage)]


async def test_an_agent_run_gets_root_rules_nested_rules_once_and_skills(
    workspace: Path, write: Write, make_skill: MakeSkill
) -> None:
    write(workspace / "AGENTS.md", "Always run the tests before finishing.\n")
    write(workspace / "sub/AGENTS.md", "Files in sub/ use snake_case names.\n")
    write(workspace / "sub/x.py", "value = 1\n")
    make_skill(workspace / ".steward/skills", "release", "Cut a release.", body="Bump the version, then tag.")
    model = RecordingScript(
        [
            {"tool": "read_file", "args": {"path": "sub/x.py"}},
            {"tool": "read_file", "args": {"path": "sub/x.py"}},
            {"tool": "load_skill", "args": {"name": "release"}},
            END,
        ]
    )
    agent = Agent(model, config=Config(), sandbox=False)
    result = await agent.start("check sub/x.py", workspace=workspace).result()

    assert result.solved
    system = model.requests[0].system_text
    assert "## Project rules (AGENTS.md)\n\nAlways run the tests before finishing." in system
    assert "- release: Cut a release." in system and "Bump the version" not in system
    first, second, skill = results(model.requests[-1])
    assert first == (
        "     1\tvalue = 1\n\n"
        "[Rules from sub/AGENTS.md — they apply to files under sub/]\n"
        "Files in sub/ use snake_case names.\n"
        "[End of rules from sub/AGENTS.md]"
    )
    assert second == "     1\tvalue = 1"
    assert skill == "# Skill: release\n\nBump the version, then tag."


async def test_a_resumed_run_remembers_which_nested_rules_it_was_given(
    workspace: Path, tmp_path: Path, write: Write
) -> None:
    from steward.store.events import open_store

    write(workspace / "sub/AGENTS.md", "Files in sub/ use snake_case names.\n")
    write(workspace / "sub/x.py", "value = 1\n")
    script: list[dict[str, Any]] = [
        {"tool": "read_file", "args": {"path": "sub/x.py"}},
        {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Go on?"}},
        {"tool": "read_file", "args": {"path": "sub/x.py"}},
        END,
    ]
    store = await open_store(f"sqlite:///{tmp_path}/state/steward.db")
    try:
        first = Agent(RecordingScript(script), config=Config(), sandbox=False, store=store)
        waiting = await first.start("check sub/x.py", workspace=workspace).result()
        assert waiting.waiting
        model = RecordingScript(script)
        run = await Agent(model, config=Config(), sandbox=False, store=store).resume(waiting.run.id)
        result = await run.answer("yes")
    finally:
        await store.close()
    assert result.solved
    reads = [r for r in results(model.requests[-1]) if r.startswith("     1\t")]
    assert reads == [
        "     1\tvalue = 1\n\n[Rules from sub/AGENTS.md — they apply to files under sub/]\n"
        "Files in sub/ use snake_case names.\n[End of rules from sub/AGENTS.md]",
        "     1\tvalue = 1",
    ]
