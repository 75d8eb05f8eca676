"""Each way a run ends is its reward: solved 1, partial 0.5, stuck or failed 0; a verifier's verdict wins."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.trajectories.scenarios import GOAL, Reply, run, step

from steward.agent import Agent
from steward.errors import ModelError
from steward.models.base import AssistantMessage, ModelRequest
from steward.models.scripted import FunctionModel
from steward.store.events import EventStore
from steward.trajectories import chat_record, reward


def ended(status: str) -> list[Reply]:
    wrote = [("write_file", {"path": "out.txt", "content": "x\n"})]
    return [wrote, [step("end", end_status=status, end_message=f"ended {status}")]]


@pytest.mark.parametrize(("status", "expected"), [("solved", 1.0), ("partial", 0.5), ("stuck", 0.0)])
async def test_the_end_status_is_the_reward(
    store: EventStore, tmp_path: Path, status: str, expected: float
) -> None:
    record = await chat_record(store, await run(store, tmp_path, ended(status)))
    assert (record["outcome"], record["reward"], record["reward_source"]) == (status, expected, "outcome")
    assert record["phases"][-1] == "end" and record["messages"][-1]["role"] == "assistant"
    assert record["run"]["final_message"] == f"ended {status}"


async def test_a_failed_run_is_worth_nothing(store: EventStore, tmp_path: Path) -> None:
    def broken(request: ModelRequest) -> AssistantMessage:
        raise ModelError("the provider is down", provider="broken", retryable=False)

    started = Agent(FunctionModel(broken), sandbox=False, store=store).start(GOAL, workspace=tmp_path)
    await started.result()
    record = await chat_record(store, started.id)
    assert (record["outcome"], record["reward"]) == ("failed", 0.0)
    assert [m["role"] for m in record["messages"]] == ["system", "user"]


async def test_the_step_limit_ends_a_run_that_made_progress_partial(
    store: EventStore, tmp_path: Path
) -> None:
    writes: list[Reply] = [[("write_file", {"path": f"f{n}.txt", "content": "x\n"})] for n in range(5)]
    record = await chat_record(store, await run(store, tmp_path, writes, max_steps=2))
    assert (record["outcome"], record["reward"]) == ("partial", 0.5)


async def test_a_failing_verifier_wins_over_the_agents_word(store: EventStore, tmp_path: Path) -> None:
    record = await chat_record(
        store, await run(store, tmp_path, ended("solved"), verify="echo 'FAILED'; exit 1")
    )
    assert (record["reward"], record["reward_source"]) == (0.0, "verifier")
    asked = [m["content"] for m in record["messages"] if m["role"] == "user"][1:]
    assert asked and "Are you done?" in asked[0]  # the continuation question is part of the chat


async def test_a_passing_verifier_gives_full_reward(store: EventStore, tmp_path: Path) -> None:
    record = await chat_record(store, await run(store, tmp_path, ended("solved"), verify="test -f out.txt"))
    assert (record["outcome"], record["reward"], record["reward_source"]) == ("solved", 1.0, "verifier")


def test_the_reward_table() -> None:
    assert [reward(o) for o in ("solved", "answered", "partial", "stuck", "failed", "cancelled")] == [
        1.0, 1.0, 0.5, 0.0, 0.0, 0.0,
    ]  # fmt: skip
    assert reward("partial", verified=True) == 1.0 and reward("solved", verified=False) == 0.0
