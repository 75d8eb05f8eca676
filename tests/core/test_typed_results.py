"""Typed results (seed 003): with an output schema a run ends solved only with JSON that matches
it, that JSON is its output, and an answer that does not match goes back to the model to fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from steward import Agent, FunctionModel, tool
from steward.answers import check_answer, check_schema, load_schema_file
from steward.errors import ConfigError
from steward.events import ErrorEvent, Event, RunStart, SignalEvent, decode_event, encode_event
from steward.models.base import AssistantMessage, ModelRequest, ToolCall, ToolResultMessage, UserMessage
from steward.personas import persona_from_data
from steward.run import Run
from steward.store.events import open_store

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"count": {"type": "integer"}, "names": {"type": "array", "items": {"type": "string"}}},
    "required": ["count"],
    "additionalProperties": False,
}


@tool
def count_files() -> str:
    """Count the files."""
    return "3 files"


class Replies:
    """A model that gives ``replies`` in order and keeps every request it was sent."""

    def __init__(self, *replies: str | ToolCall) -> None:
        self.replies = list(replies)
        self.requests: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        self.requests.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, str):
            return AssistantMessage(text=reply)
        return AssistantMessage(tool_calls=(reply,))

    def told(self) -> list[str]:
        """What the model was told after its replies: user messages and tool results, in order."""
        last = self.requests[-1].messages
        return [m.content for m in last if isinstance(m, UserMessage | ToolResultMessage)][1:]


def end(message: str, status: str = "solved", call_id: str = "e1") -> ToolCall:
    step = {"phase": "end", "summary": "done", "end_status": status, "end_message": message}
    return ToolCall(call_id, "agent_step", step)


def agent_for(model: Replies, **options: Any) -> Agent:
    return Agent(FunctionModel(model), tools=[count_files], builtin_tools=False, sandbox=False, **options)


async def run_typed(
    model: Replies, workspace: Path, schema: dict[str, Any] | None = SCHEMA, **options: Any
) -> tuple[Run, list[Event]]:
    run = agent_for(model, **options).start("count the files", workspace=workspace, output_schema=schema)
    return run, [e async for e in run.stream()]


# --- the answer ---------------------------------------------------------------------------------


async def test_a_matching_json_answer_solves_the_run_and_is_its_output(tmp_path: Path) -> None:
    run, _ = await run_typed(Replies('{"count": 3,   "names": ["a.txt"]}'), tmp_path)
    result = run.snapshot()
    assert result.solved
    assert result.output == '{"count": 3, "names": ["a.txt"]}'  # normalized
    assert json.loads(result.output) == {"count": 3, "names": ["a.txt"]}


async def test_the_model_is_told_the_schema_in_its_instructions(tmp_path: Path) -> None:
    model = Replies('{"count": 3}')
    await run_typed(model, tmp_path)
    system = model.requests[0].system
    assert "Your final answer must be a JSON value matching this JSON Schema" in system
    assert '"required":["count"]' in system


async def test_an_answer_in_a_json_fenced_block_counts(tmp_path: Path) -> None:
    run, _ = await run_typed(Replies('```json\n{"count": 3}\n```'), tmp_path)
    assert run.snapshot().solved and run.state.output == '{"count": 3}'


async def test_a_wrong_answer_goes_back_to_the_model_which_fixes_it(tmp_path: Path) -> None:
    model = Replies('{"count": "three"}', '{"count": 3}')
    run, events = await run_typed(model, tmp_path)
    assert run.snapshot().solved and run.state.output == '{"count": 3}'
    told = model.told()
    assert len(told) == 1
    assert "at $.count: 'three' is not of type 'integer'" in told[0]
    assert "must be JSON" in told[0] and "matching the JSON Schema" in told[0]
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert [(e.code, e.recoverable) for e in errors] == [("invalid_answer", True)]


async def test_an_answer_that_is_not_json_is_a_fixable_error_too(tmp_path: Path) -> None:
    model = Replies("There are three files.", '{"count": 3}')
    run, _ = await run_typed(model, tmp_path)
    assert run.snapshot().solved
    assert "it is not valid JSON" in model.told()[0]


async def test_three_wrong_answers_in_a_row_fail_the_run_with_the_reason(tmp_path: Path) -> None:
    model = Replies("three", '{"count": "3"}', '{"total": 3}', '{"count": 3}')
    run, events = await run_typed(model, tmp_path)
    result = run.snapshot()
    assert result.status == "failed" and not result.solved
    assert "did not match the output schema 3 times in a row" in result.output
    assert "'count' is a required property" in result.output  # the last problem, named
    assert model.replies == ['{"count": 3}']  # the model was not asked a fourth time
    closing = [e for e in events if isinstance(e, ErrorEvent)][-1]
    assert closing.code == "invalid_answer" and not closing.recoverable


async def test_answers_count_in_a_row_only_until_a_tool_runs(tmp_path: Path) -> None:
    tool_call = ToolCall("t1", "count_files", {})
    model = Replies("three", "3 files", tool_call, "still three", '{"count": 3}')
    run, _ = await run_typed(model, tmp_path)
    assert run.snapshot().solved and run.state.output == '{"count": 3}'


async def test_an_agent_step_end_is_checked_and_a_wrong_one_is_a_tool_error(tmp_path: Path) -> None:
    model = Replies(end("three files", call_id="e1"), end('{"count": 3}', call_id="e2"))
    run, _ = await run_typed(model, tmp_path)
    assert run.snapshot().solved and run.state.output == '{"count": 3}'
    results = {m.call_id: m for m in model.requests[-1].messages if isinstance(m, ToolResultMessage)}
    assert results["e1"].is_error
    assert "it is not valid JSON" in results["e1"].content and "agent_step end" in results["e1"].content
    steps = [s.phase for s in run.state.memory.steps]
    assert steps.count("end") == 1  # only the accepted end is a step of the run


async def test_an_agent_step_end_that_is_not_solved_is_not_checked(tmp_path: Path) -> None:
    run, _ = await run_typed(Replies(end("Could not count them.", status="partial")), tmp_path)
    result = run.snapshot()
    assert result.end_status == "partial" and result.output == "Could not count them."


async def test_a_typed_answer_solves_even_a_goal_worded_as_a_change(tmp_path: Path) -> None:
    """The schema says what a finished answer is: no tool needs to have run for it."""
    run = agent_for(Replies('{"count": 3}')).start(
        "write down the count", workspace=tmp_path, output_schema=SCHEMA
    )
    assert (await run.result()).solved and run.state.output == '{"count": 3}'


async def test_a_typed_answer_with_its_plan_still_open_is_sent_back_first(tmp_path: Path) -> None:
    plan = {"goal": "count", "sub_tasks": [{"id": 1, "title": "Count the files"}]}
    verify = ToolCall(
        "v1", "agent_step", {"phase": "verify", "summary": "counted", "sub_task_outcome": "done"}
    )
    model = Replies(ToolCall("p1", "agent_step", {"phase": "plan", "summary": "plan", "plan": plan}),
                    '{"count": 3}', verify, '{"count": 3}')  # fmt: skip
    run, events = await run_typed(model, tmp_path)
    assert run.snapshot().solved and run.state.output == '{"count": 3}'
    assert [e.code for e in events if isinstance(e, SignalEvent) and e.level == "warning"] == [
        "unfinished_answer"
    ]


async def test_without_a_schema_any_text_is_an_answer(tmp_path: Path) -> None:
    run, _ = await run_typed(Replies("There are three files."), tmp_path, schema=None)
    assert run.snapshot().answered and run.state.output == "There are three files."


# --- the schema ---------------------------------------------------------------------------------


def test_a_schema_that_is_not_valid_is_refused_with_the_fix(tmp_path: Path) -> None:
    agent = agent_for(Replies())
    with pytest.raises(ConfigError, match=r"not a valid JSON Schema: .*objekt.*\$\.type.*Fix the schema"):
        agent.start("count", workspace=tmp_path, output_schema={"type": "objekt"})
    with pytest.raises(ConfigError, match="unknown \\$schema"):
        agent.start("count", workspace=tmp_path, output_schema={"$schema": "https://example.com/mine"})


async def test_a_schema_that_cannot_be_applied_ends_the_run_with_the_fix(tmp_path: Path) -> None:
    remote = {"$ref": "https://example.com/answer.json"}  # never fetched
    run, _ = await run_typed(Replies('{"count": 3}'), tmp_path, schema=remote)
    assert run.snapshot().status == "failed" and "Keep every $ref inside the schema" in run.state.output


def test_the_check_is_a_pure_function_of_the_text_and_the_schema() -> None:
    schema = check_schema(SCHEMA)
    assert check_answer(' {"count": 1} ', schema) == ('{"count": 1}', None)
    assert check_answer("```\n[1]\n```", check_schema({"type": "array"})) == ("[1]", None)
    value, problem = check_answer('{"count": 1, "extra": true}', schema)
    assert value is None and problem is not None and problem.startswith("at $:") and "extra" in problem
    assert check_answer("NaN", check_schema({})) == (None, "it is not valid JSON (NaN is not a JSON value)")


def test_a_schema_file_is_read_and_checked_with_the_fix_named(tmp_path: Path) -> None:
    good = tmp_path / "answer.schema.json"
    good.write_text(json.dumps(SCHEMA))
    assert load_schema_file(good) == SCHEMA
    with pytest.raises(ConfigError, match=r"no such file\. Give the path of a JSON file"):
        load_schema_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{type: object}")
    with pytest.raises(ConfigError, match=r"bad\.json: not valid JSON \(.* at line 1, column 2\)\. Fix"):
        load_schema_file(bad)
    bad.write_text("[]")
    with pytest.raises(ConfigError, match="must be a JSON object"):
        load_schema_file(bad)


async def test_a_persona_s_schema_is_the_default_and_start_can_override_it(tmp_path: Path) -> None:
    persona = persona_from_data({"role": "counter", "output_schema": SCHEMA}, name="counter")
    model = Replies("three", '{"count": 3}')
    run, _ = await run_typed(model, tmp_path, schema=None, persona=persona)
    assert run.snapshot().solved and run.state.output == '{"count": 3}' and len(model.told()) == 1
    run, _ = await run_typed(Replies("[3]"), tmp_path, schema={"type": "array"}, persona=persona)
    assert run.snapshot().solved and run.state.output == "[3]"


# --- recorded, and kept when resumed --------------------------------------------------------------


def test_run_start_carries_the_schema_through_its_json_encoding() -> None:
    start = RunStart(goal="g", model="m", workspace="/w", max_steps=5, output_schema=SCHEMA)
    again = decode_event(encode_event(start))
    assert isinstance(again, RunStart) and again.output_schema == SCHEMA
    old = {"type": "run_start", "data": {"goal": "g", "model": "m", "workspace": "/w", "max_steps": 5}}
    assert decode_event(old) == RunStart(goal="g", model="m", workspace="/w", max_steps=5)


async def test_a_resumed_run_keeps_checking_its_answer_against_the_recorded_schema(tmp_path: Path) -> None:
    ask = ToolCall("q1", "agent_step", {"phase": "feedback", "summary": "ask", "feedback_message": "Which?"})
    async with await open_store(f"sqlite:///{tmp_path}/steward.db") as store:
        first = agent_for(Replies(ask), store=store)
        run = first.start("count the files", workspace=tmp_path, output_schema=SCHEMA)
        assert (await run.result()).waiting
        recorded = (await store.events(run.id))[0]
        assert isinstance(recorded, RunStart) and recorded.output_schema == SCHEMA

        later = Replies("three", '{"count": 3}')
        second = agent_for(later, store=store)  # a new process: no schema given this time
        resumed = await second.resume(run.id)
        result = await resumed.answer("all of them")
        assert result.solved and result.output == '{"count": 3}'
        assert "it is not valid JSON" in later.told()[-1]
        assert "Your final answer must be a JSON value" in later.requests[0].system
        row = await store.get_run(run.id)
        assert row is not None and row.output == '{"count": 3}'


async def test_a_run_recorded_without_a_schema_is_resumed_without_one(tmp_path: Path) -> None:
    ask = ToolCall("q1", "agent_step", {"phase": "feedback", "summary": "ask", "feedback_message": "Which?"})
    async with await open_store(f"sqlite:///{tmp_path}/steward.db") as store:
        plain = persona_from_data({"role": "counter"}, name="counter")
        run = agent_for(Replies(ask), store=store, persona=plain).start("count", workspace=tmp_path)
        assert (await run.result()).waiting
        # The persona has gained a schema since: the run goes on as it was started.
        typed = persona_from_data({"role": "counter", "output_schema": SCHEMA}, name="counter")
        resumed = await agent_for(Replies("three files"), store=store, persona=typed).resume(run.id)
        result = await resumed.answer("all")
        assert result.answered and result.output == "three files"  # text, as the run started: no schema
