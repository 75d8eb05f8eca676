"""A recorded run read back as one OpenAI chat record: its turns, their phases, its reward."""

from __future__ import annotations

import json
from pathlib import Path

from tests.trajectories.scenarios import GOAL, WORK, run

from steward.store.events import EventStore
from steward.trajectories import chat_record


async def test_a_run_with_tools_an_error_a_plan_and_an_answer_is_a_chat(
    store: EventStore, tmp_path: Path
) -> None:
    run_id = await run(store, tmp_path, WORK)
    record = await chat_record(store, run_id)
    messages = record["messages"]
    assert next(m for m in messages if m["role"] == "user")["content"] == GOAL
    assistant = [m for m in messages if m["role"] == "assistant"]
    assert len(assistant) == len(WORK)
    # Every call's arguments are one JSON string, and each call is answered by its id.
    calls = [c for m in assistant for c in m.get("tool_calls", [])]
    assert all(isinstance(c["function"]["arguments"], str) for c in calls)
    answered = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    assert set(answered) == {c["id"] for c in calls}
    by_name = {json.loads(c["function"]["arguments"]).get("path"): c["id"] for c in calls}
    assert "not found" in answered[by_name["missing.txt"]]
    assert "alpha" in answered[next(c["id"] for c in calls if "act" in c["function"]["arguments"])]
    phases = [p for m, p in zip(messages, record["phases"], strict=True) if m["role"] == "assistant"]
    assert phases == ["plan", "act", "verify", "act", "reflect", "act", "verify", "end"]
    assert assistant[-1]["content"] == WORK[-1]
    assert record["outcome"] == "answered" and record["reward"] == 1.0
    assert record["run"]["id"] == run_id and record["run"]["steps"] == len(WORK)


async def test_the_system_prompt_and_the_tools_offered_are_recorded_with_the_run(
    store: EventStore, tmp_path: Path
) -> None:
    run_id = await run(store, tmp_path, WORK, instructions="Answer in one line.")
    record = await chat_record(store, run_id)
    system = record["messages"][0]
    assert system["role"] == "system" and "Answer in one line." in system["content"]
    assert "agent_step" in system["content"]  # the phase guide
    names = [t["function"]["name"] for t in record["tools"]]
    assert {"read_file", "write_file", "bash", "agent_step"} <= set(names)
    read = next(t["function"] for t in record["tools"] if t["function"]["name"] == "read_file")
    assert read["parameters"]["properties"]["path"]["type"] == "string"
    # The run ends in a plain answer: nothing follows the last assistant turn.
    assert record["messages"][-1]["role"] == "assistant"
