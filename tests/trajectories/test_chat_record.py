"""A recorded run read back as one OpenAI chat record: its turns, their phases, its reward."""

from __future__ import annotations

import json
from pathlib import Path

from tests.trajectories.scenarios import GOAL, WORK, Reply, run, scripted, step

from steward.agent import Agent
from steward.config import BudgetSettings, Config, Limits
from steward.models.base import AssistantMessage, ModelRequest, Thinking, ToolCall
from steward.models.scripted import FunctionModel
from steward.store.events import EventStore
from steward.testing.trajectory import GOAL as TRAJECTORY_GOAL
from steward.testing.trajectory import markers, trajectory_agent
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


async def test_a_question_answered_and_a_call_approved_read_back_as_the_model_saw_them(
    store: EventStore, tmp_path: Path
) -> None:
    """The trajectory agent: plan, a direct call, an act step, verify, a question to the human,
    a call that waits for approval, two calls in one reply, verify, end."""
    agent = trajectory_agent()
    agent.store = store
    run = agent.start(TRAJECTORY_GOAL, workspace=tmp_path)
    result = await run.result()
    for _ in range(5):  # bounded: one question and one approval
        if not result.waiting:
            break
        pending = run.pending
        assert pending is not None
        result = await (run.approve() if pending.approval is not None else run.answer("blue"))
    assert result.end_status == "solved" and markers(tmp_path) == ["a", "b", "c", "d", "e"]
    record = await chat_record(store, run.id)
    messages, phases = record["messages"], record["phases"]
    turns = [p for p in phases if p is not None]
    assert turns == ["plan", "act", "act", "verify", "feedback", "act", "act", "verify", "end"]
    answered = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    calls = [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert (len(calls), len(answered)) == (10, 9)  # every call answered once, but the closing ack
    asked = next(c["id"] for c in calls if '"feedback"' in c["function"]["arguments"])
    assert json.loads(answered[asked]) == {"user_answer": "blue"}
    marked = [answered[c["id"]] for c in calls if c["function"]["name"] == "mark"]
    assert marked[1:] == ["marked c", "marked d", "marked e"]  # the approved call, then the pair
    two = next(m for m in messages if m["role"] == "assistant" and len(m.get("tool_calls", [])) == 2)
    at = messages.index(two)
    assert [m["role"] for m in messages[at + 1 : at + 3]] == ["tool", "tool"]  # each call then its result


async def test_malformed_calls_are_answered_with_the_errors_the_model_was_sent(
    store: EventStore, tmp_path: Path
) -> None:
    replies: list[Reply] = [
        [step("dance")],
        [("read_file", {"lines": 3})],
        [step("end", end_status="solved", end_message="done")],
    ]
    record = await chat_record(store, await run(store, tmp_path, replies))
    tools = [m["content"] for m in record["messages"] if m["role"] == "tool"]
    assert "Invalid agent_step: phase must be one of" in tools[0]
    assert "path" in tools[1] and "lines" in tools[1]  # the argument errors, named for the model
    assert [p for p in record["phases"] if p is not None] == ["invalid", "act", "end"]


async def test_the_models_reasoning_is_kept_only_when_asked_for(store: EventStore, tmp_path: Path) -> None:
    def reply(request: ModelRequest) -> AssistantMessage:
        if any(isinstance(m, AssistantMessage) for m in request.messages):
            return AssistantMessage(text="It is 4.", thinking=(Thinking("2 and 2 make 4."),))
        return AssistantMessage(
            tool_calls=(ToolCall("c0", "list_dir", {}),), thinking=(Thinking("Look first."),)
        )

    started = Agent(FunctionModel(reply), sandbox=False, store=store).start(
        "what is 2+2?", workspace=tmp_path
    )
    await started.result()
    plain = await chat_record(store, started.id)
    assert all("reasoning_content" not in m for m in plain["messages"])
    kept = await chat_record(store, started.id, thinking=True)
    said = [m.get("reasoning_content") for m in kept["messages"] if m["role"] == "assistant"]
    assert said == ["Look first.", "2 and 2 make 4."]


async def test_a_budgets_warning_the_model_read_is_a_user_turn_where_it_read_it(
    store: EventStore, tmp_path: Path
) -> None:
    reads: list[Reply] = [[("read_file", {"path": f"n{n}.txt"})] for n in range(6)]
    for n in range(6):
        (tmp_path / f"n{n}.txt").write_text(f"note {n}\n")
    config = Config(limits=Limits(max_steps=20), budget=BudgetSettings(tool_calls=5))
    started = Agent(scripted(reads), config=config, sandbox=False, store=store).start(
        GOAL, workspace=tmp_path
    )
    await started.result()
    record = await chat_record(store, started.id)
    warned = [
        n for n, m in enumerate(record["messages"]) if m["role"] == "user" and "80% used" in m["content"]
    ]
    assert len(warned) == 1, record["messages"]
    # Read after the fourth call's result (4 of 5 tool calls: 80 %), before the next reply.
    before, after = record["messages"][warned[0] - 1], record["messages"][warned[0] + 1]
    assert before["role"] == "tool" and "note 3" in before["content"], before
    assert after["role"] == "assistant" and record["phases"][warned[0]] is None
