"""Phase routing through the loop: each agent_step phase does what seed 000 says."""

from __future__ import annotations

import json
from typing import Any

from steward.models.base import ToolResultMessage


def step(phase: str, summary: str = "s", **fields: Any) -> dict[str, Any]:
    return {"agent_step": {"phase": phase, "summary": summary, **fields}}


END = step("end", end_status="solved", end_message="All done.")
PLAN = step(
    "plan",
    "Plan two lookups",
    plan={
        "goal": "Look up a and b",
        "sub_tasks": [{"id": 1, "title": "a"}, {"id": 2, "title": "b", "depends_on": [1]}],
    },
)


def tool_results(request: Any) -> list[ToolResultMessage]:
    return [m for m in request.messages if isinstance(m, ToolResultMessage)]


async def test_end_phase_finishes_with_its_status_and_message(script: Any) -> None:
    out = await script([step("end", end_status="partial", end_message="Half of it.")])
    assert (out.result.status, out.result.end_status, out.result.output) == ("done", "partial", "Half of it.")
    assert out.types()[-1] == "done"
    assert out.of("done")[0].message == "Half of it."


async def test_plain_text_reply_is_the_final_answer_but_not_a_solution(script: Any) -> None:
    out = await script([{"text": "The answer is 42."}], goal="what is the answer?")
    assert (out.result.status, out.result.end_status) == ("done", "answered") and not out.result.solved
    assert out.result.output == "The answer is 42."


async def test_plan_phase_sets_plan_and_acknowledges(script: Any) -> None:
    out = await script([PLAN, END])
    plan_event = out.of("plan")[0]
    assert plan_event.version == 1 and plan_event.current == 1
    ack = json.loads(tool_results(out.requests[1])[0].content)
    assert ack == {"acknowledged": True, "plan_version": 1, "current_sub_task": 1}
    assert "[PLAN v1]  Goal: Look up a and b" in out.requests[1].system_text


async def test_act_phase_runs_the_tool_and_returns_its_output(script: Any) -> None:
    out = await script(
        [step("act", "Look up a", action={"tool_name": "lookup", "tool_input": {"key": "a"}}), END]
    )
    assert tool_results(out.requests[1])[0].content == "value of a"
    use, result = out.of("tool_use")[0], out.of("tool_result")[0]
    assert (use.tool, use.input) == ("lookup", {"key": "a"})
    assert (result.status, result.output) == ("completed", "value of a")
    assert result.duration_ms >= 0


async def test_direct_tool_call_is_an_act_step(script: Any) -> None:
    out = await script([{"tool": "lookup", "args": {"key": "b"}}, END])
    assert out.of("tool_result")[0].output == "value of b"
    assert "[Step 1] ACT: Execute lookup" in out.requests[1].system_text


async def test_verify_records_facts_and_advances_the_plan(script: Any) -> None:
    out = await script(
        [
            PLAN,
            step("act", "Look up a", action={"tool_name": "lookup", "tool_input": {"key": "a"}}),
            step("verify", "a found", key_facts=["a has a value"], sub_task_outcome="done"),
            END,
        ]
    )
    fact = out.of("key_fact")[0]
    assert (fact.fact, fact.source_step, fact.source_tool) == ("a has a value", 3, "lookup")
    assert out.of("plan")[-1].current == 2
    view = out.requests[3].system_text
    assert "✓ Sub-task 1: a" in view and "→ Sub-task 2: b" in view
    assert "• a has a value  [step 3]" in view


async def test_reflect_resolves_the_last_error(script: Any) -> None:
    out = await script(
        [
            step("act", "Look up missing", action={"tool_name": "lookup", "tool_input": {"key": "missing"}}),
            step("reflect", "The key does not exist; use key a instead"),
            END,
        ]
    )
    assert "(not_found) — unresolved" in out.requests[1].system_text
    assert "→ resolved: The key does not exist; use key a instead" in out.requests[2].system_text


async def test_reason_phase_is_recorded_without_action(script: Any) -> None:
    out = await script([step("reason", "Think about order"), END])
    assert "[Step 1] REASON: Think about order" in out.requests[1].system_text
    assert out.of("tool_use") == []


async def test_feedback_waits_and_the_answer_continues_the_same_run(script: Any) -> None:
    out = await script([step("feedback", "Ask", feedback_message="Which key?"), END])
    assert out.result.waiting
    assert out.result.question == "Which key?"
    assert out.types()[-1] == "waiting"
    run = out.result.run
    events = [e async for e in run.answer_stream("key a")]
    assert run.status == "done"
    assert events[0].seq == out.events[-1].seq + 1
    answer = tool_results(out.requests[-1])[-1]
    assert json.loads(answer.content) == {"user_answer": "key a"}


async def test_malformed_agent_step_goes_back_to_the_model(script: Any) -> None:
    out = await script([step("plan", plan={"goal": "g", "sub_tasks": []}), step("dance"), END])
    errors = [r.content for r in tool_results(out.requests[-1])]
    assert any("plan.sub_tasks must be a non-empty list" in e for e in errors)
    assert any("phase must be one of" in e for e in errors)
    assert out.result.solved


async def test_plan_with_cycle_is_refused(script: Any) -> None:
    cyclic = {
        "goal": "g",
        "sub_tasks": [{"id": 1, "title": "a", "depends_on": [2]}, {"id": 2, "title": "b", "depends_on": [1]}],
    }
    out = await script([step("plan", plan=cyclic), END])
    assert "dependency cycle" in tool_results(out.requests[1])[0].content


async def test_invalid_tool_arguments_are_a_fixable_error(script: Any) -> None:
    out = await script([{"tool": "lookup", "args": {"key": 3}}, END])
    result = out.of("tool_result")[0]
    assert result.status == "failed" and result.error_category == "invalid_input"
    assert "key: Input should be a valid string" in result.output


async def test_unknown_tool_is_a_fixable_error(script: Any) -> None:
    out = await script([{"tool": "nope", "args": {}}, END])
    assert "Unknown tool 'nope'. Available tools:" in out.of("tool_result")[0].output
    assert out.result.solved


async def test_several_calls_in_one_reply_all_run_in_order(script: Any) -> None:
    calls = [{"name": "lookup", "arguments": {"key": k}} for k in ("a", "b")]
    out = await script([{"tool_calls": calls}, END])
    assert [r.output for r in out.of("tool_result")] == ["value of a", "value of b"]


async def test_calls_after_an_end_in_the_same_reply_are_not_run(script: Any) -> None:
    calls = [
        {
            "name": "agent_step",
            "arguments": {"phase": "end", "summary": "s", "end_status": "solved", "end_message": "x"},
        },
        {"name": "lookup", "arguments": {"key": "a"}},
    ]
    out = await script([{"tool_calls": calls}])
    assert out.result.solved and out.of("tool_use") == []


async def test_event_sequence_is_gap_free_and_typed(script: Any) -> None:
    out = await script([PLAN, {"tool": "lookup", "args": {"key": "a"}}, END])
    assert [e.seq for e in out.events] == list(range(1, len(out.events) + 1))
    assert out.types()[0] == "run_start"
    assert {e.run_id for e in out.events} == {out.result.run.id}


async def test_lenient_phase_case_and_json_string_objects(script: Any) -> None:
    act = {
        "phase": "ACT",
        "summary": "s",
        "action": json.dumps({"tool_name": "lookup", "tool_input": {"key": "a"}}),
    }
    out = await script([{"agent_step": act}, END])
    assert out.of("tool_result")[0].output == "value of a"


async def test_an_empty_reply_is_nudged_not_sent_back(workspace: Any) -> None:
    from steward import Agent, FunctionModel
    from steward.models.base import AssistantMessage, UserMessage

    replies = iter([AssistantMessage(), AssistantMessage(text="Done.")])
    seen: list[Any] = []

    def reply(request: Any) -> AssistantMessage:
        seen.append(request)
        return next(replies)

    result = await Agent(FunctionModel(reply), builtin_tools=False).run("what is it?", workspace=workspace)
    assert result.answered and result.output == "Done."
    second = seen[1].messages
    assert not any(isinstance(m, AssistantMessage) for m in second)
    assert isinstance(second[-1], UserMessage) and "reply was empty" in second[-1].content


async def test_a_provider_bug_fails_the_run_instead_of_raising(workspace: Any) -> None:
    from steward import Agent, FunctionModel

    def broken(request: Any) -> Any:
        raise KeyError("choices")

    result = await Agent(FunctionModel(broken), builtin_tools=False).run("goal", workspace=workspace)
    assert result.status == "failed"
    assert "failed unexpectedly: KeyError" in result.output


async def test_a_failed_sub_task_shows_and_raises_a_signal(script: Any) -> None:
    out = await script([PLAN, step("verify", "a is broken", sub_task_outcome="failed"), END])
    view = out.requests[2].system_text
    assert "✗ Sub-task 1: a" in view and "← CURRENT (failed)" in view
    assert "⚠ Sub-task 1 failed" in view
    assert "sub_task_failed" in [s.code for s in out.of("signal")]


async def test_run_stream_hands_over_the_run_to_answer_it(workspace: Any) -> None:
    from steward import Agent, ScriptedModel

    model = ScriptedModel.from_data([step("feedback", "ask", feedback_message="Which?"), END])
    stream = Agent(model, builtin_tools=False).run_stream("goal", workspace=workspace)
    events = [e async for e in stream]
    assert events[-1].type == "waiting"
    result = await stream.run.answer("that one")
    assert result.solved


async def test_end_status_is_case_insensitive_and_errors_say_what_came(script: Any) -> None:
    out = await script(
        [step("end", end_status="DONE", end_message="x"), step("end", end_status="Solved", end_message="ok")]
    )
    assert out.result.solved
    error = next(e for e in out.of("error"))
    assert "got 'DONE'" in error.message
