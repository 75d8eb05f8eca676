"""remember, recall and forget through real agent runs, on SQLite and PostgreSQL.

Each test drives an ``Agent`` with the scripted model against a real store: a fact remembered
in one run is recalled by the next, and never by a run of another user, persona or workspace.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from steward import Agent, ScriptedModel
from steward.config import Config, MemorySettings, PolicySettings
from steward.events import ApprovalGateEvent, Event, ToolResultEvent
from steward.personas import Persona
from steward.store.events import EventStore

END = {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "finished"}}


def call(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def agent(store: EventStore, replies: Sequence[dict[str, Any]], **options: Any) -> Agent:
    config = options.pop("config", None) or Config()
    return Agent(
        ScriptedModel.from_data([*replies, END]), store=store, builtin_tools=False, sandbox=False,
        config=config, **options,
    )  # fmt: skip


async def outputs(
    store: EventStore,
    workspace: Path,
    replies: Sequence[dict[str, Any]],
    *,
    user: str | None = None,
    **options: Any,
) -> list[str]:
    """The tool results of one run of ``replies``, in order."""
    made = agent(store, replies, **options)
    try:
        run = made.start("do the task", workspace=workspace, user=user)
        events: list[Event] = [e async for e in run.stream()]
    finally:
        await made.aclose()
    return [e.output for e in events if isinstance(e, ToolResultEvent)]


async def test_a_fact_remembered_in_one_run_is_recalled_in_the_next(
    store: EventStore, workspace: Path
) -> None:
    first = await outputs(
        store, workspace, [call("remember", text="The staging database is on port 6543.", tags=["db"])]
    )
    assert first[0].startswith("Remembered as m")
    ref = first[0].removeprefix("Remembered as ")
    second = await outputs(store, workspace, [call("recall", query="staging database port")])
    lines = second[0].splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"{ref} (") and "tags: db" in lines[0]
    assert lines[0].endswith("): The staging database is on port 6543.")


async def test_the_same_fact_again_is_merged(store: EventStore, workspace: Path) -> None:
    text = "Releases are cut on Tuesdays."
    first = await outputs(store, workspace, [call("remember", text=text)])
    again = await outputs(store, workspace, [call("remember", text="  releases are cut on TUESDAYS. ")])
    ref = first[0].removeprefix("Remembered as ")
    assert again == [f"Already remembered as {ref} (merged)"]


async def test_nothing_matching_says_so(store: EventStore, workspace: Path) -> None:
    found = await outputs(store, workspace, [call("recall", query="kubernetes cluster")])
    assert found == ["Nothing remembered matches 'kubernetes cluster'."]


async def test_another_scope_recalls_nothing(store: EventStore, workspace: Path, tmp_path: Path) -> None:
    await outputs(store, workspace, [call("remember", text="The launch code is swordfish.")], user="ada")
    recall = [call("recall", query="launch code")]
    # The same user, persona and workspace: found.
    assert "swordfish" in (await outputs(store, workspace, recall, user="ada"))[0]
    # Another user (a job's user key), another persona, another workspace: nothing.
    assert "Nothing remembered" in (await outputs(store, workspace, recall, user="grace"))[0]
    assert "Nothing remembered" in (await outputs(store, workspace, recall))[0]  # "local"
    reviewer = Persona(name="reviewer")
    assert "Nothing remembered" in (await outputs(store, workspace, recall, user="ada", persona=reviewer))[0]
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    assert "Nothing remembered" in (await outputs(store, elsewhere, recall, user="ada"))[0]


async def test_forget_hides_an_item_of_the_runs_own_scope(store: EventStore, workspace: Path) -> None:
    made = await outputs(store, workspace, [call("remember", text="The API key rotates monthly.")])
    ref = made[0].removeprefix("Remembered as ")
    number = int(ref.removeprefix("m"))
    # Another user cannot forget it, by "m7" or by 7: to that run it does not exist.
    stranger = await outputs(
        store, workspace, [call("forget", id=ref), call("forget", id=number)], user="mallory"
    )
    assert stranger == [f"no memory {ref} in this scope; use an id recall returned, e.g. m7"] * 2
    assert "rotates monthly" in (await outputs(store, workspace, [call("recall", query="API key")]))[0]
    gone = await outputs(store, workspace, [call("forget", id=number), call("recall", query="API key")])
    assert gone == [f"Forgot {ref}: it will not be recalled again.", "Nothing remembered matches 'API key'."]


async def test_bad_arguments_are_tool_errors_naming_the_limit(store: EventStore, workspace: Path) -> None:
    results = await outputs(
        store, workspace,
        [call("remember", text="   "), call("remember", text="x" * 5_000), call("recall", query="x", k=50)],
    )  # fmt: skip
    assert "it was empty" in results[0]
    assert "at most 4,000" in results[1]
    assert "k must be between 1 and 20" in results[2]


async def test_a_policy_ask_makes_remember_wait_for_approval(store: EventStore, workspace: Path) -> None:
    config = Config(policy=PolicySettings(ask=["remember"]))
    made = agent(store, [call("remember", text="Deploys need two reviewers.")], config=config)
    try:
        run = made.start("do the task", workspace=workspace)
        events = [e async for e in run.stream()]
        gate = next(e for e in events if isinstance(e, ApprovalGateEvent))
        assert gate.tool == "remember" and run.status == "waiting"
        # Nothing was written while it waits.
        assert (
            "Nothing remembered" in (await outputs(store, workspace, [call("recall", query="reviewers")]))[0]
        )
        after = [e async for e in run.approve_stream()]
        result = next(e for e in after if isinstance(e, ToolResultEvent))
        assert result.output.startswith("Remembered as m")
    finally:
        await made.aclose()


async def test_long_term_off_offers_no_memory_tools(store: EventStore, workspace: Path) -> None:
    config = Config(memory=MemorySettings(long_term=False))
    made = agent(store, [], config=config)
    try:
        run = made.start("do the task", workspace=workspace)
        names = {s.name for s in await made.toolset().get_tools(run._loop.ctx)}
    finally:
        await made.aclose()
    assert not names & {"remember", "recall", "forget"}
    on = agent(store, [])
    try:
        run = on.start("do the task", workspace=workspace)
        assert {"remember", "recall", "forget"} <= {
            s.name for s in await on.toolset().get_tools(run._loop.ctx)
        }
    finally:
        await on.aclose()
