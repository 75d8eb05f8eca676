"""When a plain-text reply ends a run (``steward.ending``): ``answered`` when nothing says the work
is unfinished; otherwise answered once with a nudge, and ``partial`` when it comes again."""

from __future__ import annotations

from typing import Any

import pytest

from steward.ending import UNFINISHED_ANSWER, asks_for_change, unfinished
from steward.models.base import UserMessage


def step(phase: str, summary: str = "s", **fields: Any) -> dict[str, Any]:
    return {"agent_step": {"phase": phase, "summary": summary, **fields}}


def end(status: str = "solved", message: str = "All done.") -> dict[str, Any]:
    return step("end", end_status=status, end_message=message)


PLAN = step(
    "plan",
    "Plan the work",
    plan={
        "goal": "Write the code and its tests",
        "sub_tasks": [
            {"id": 1, "title": "Write the code"},
            {"id": 2, "title": "Write the tests", "depends_on": [1]},
            {"id": 3, "title": "Run the tests", "depends_on": [2]},
        ],
    },
)
LOOKUP = {"tool": "lookup", "args": {"key": "a"}}
DONE = step("verify", "done with it", sub_task_outcome="done")


def signals(out: Any) -> list[Any]:
    return [e for e in out.of("signal") if e.code == UNFINISHED_ANSWER]


def told(request: Any) -> list[str]:
    """The user messages a request carries after the goal."""
    return [m.content for m in request.messages if isinstance(m, UserMessage)][1:]


# --- the goal: a question or a change ---------------------------------------------------------


@pytest.mark.parametrize(
    "goal",
    [
        "What does parse() return for an empty string?",
        "why is the build red",
        "How many Python files are under src/",
        "Is the cache thread-safe",
        "explain the retry policy",
        "Summarize README.md",
        "list the TODOs in src",
        "Please describe the store's schema",
        "the tests pass, don't they?",
        "Compare the two config loaders.",
        "hello there",
        "say hello",
        "Thanks, that helps",
        "",
    ],
)
def test_a_question_or_a_request_to_explain_does_not_ask_for_a_change(goal: str) -> None:
    assert not asks_for_change(goal)


@pytest.mark.parametrize(
    "goal",
    [
        "fix the failing test",
        "Add a --verbose flag to the CLI",
        "rename parse to parse_text everywhere",
        "Please write tests for mathutils.py",
        "make the linter happy",
        "README: document the exit codes",
    ],
)
def test_anything_else_asks_for_a_change(goal: str) -> None:
    assert asks_for_change(goal)


def test_the_nudge_names_the_first_open_sub_task_and_counts_the_rest() -> None:
    said = unfinished([(2, "Write the tests"), (3, "Run them")], acted=True, goal="x", typed=False)
    assert said == (
        "Your plan says sub-task 2 'Write the tests' is open (and 1 more): go on with it, or end with "
        "agent_step phase end and end_status partial or stuck and say why."
    )
    alone = unfinished([(3, "Run them")], acted=False, goal="fix it", typed=False)
    assert alone is not None and "sub-task 3 'Run them' is open:" in alone


def test_a_run_that_never_acted_on_a_change_is_nudged_unless_its_answer_is_typed() -> None:
    said = unfinished([], acted=False, goal="fix the bug", typed=False)
    assert said == (
        "You have not run any tool and the goal asks for a change: make it with the tools, or, if "
        "nothing needs doing, end with agent_step phase end and say why."
    )
    assert unfinished([], acted=True, goal="fix the bug", typed=False) is None
    assert unfinished([], acted=False, goal="what is wrong?", typed=False) is None
    assert unfinished([], acted=False, goal="fix the bug", typed=True) is None


# --- runs ------------------------------------------------------------------------------------


async def test_plain_text_after_acting_without_a_plan_ends_answered(script: Any) -> None:
    out = await script([LOOKUP, {"text": "a is 'value of a'."}])
    result = out.result
    assert (result.status, result.end_status, result.output) == ("done", "answered", "a is 'value of a'.")
    assert result.answered and not result.solved
    assert not signals(out)
    assert out.of("done")[0].end_status == "answered"


async def test_a_question_answered_in_text_without_any_tool_ends_answered(script: Any) -> None:
    out = await script([{"text": "It returns None."}], goal="What does parse() return for ''?")
    assert (out.result.end_status, out.result.output) == ("answered", "It returns None.")
    assert not signals(out) and len(out.requests) == 1


async def test_plain_text_with_an_open_plan_is_nudged_and_the_run_goes_on(script: Any) -> None:
    out = await script(
        [
            PLAN,
            LOOKUP,
            DONE,
            {"text": "The code is written; that should do."},
            LOOKUP,
            DONE,
            LOOKUP,
            DONE,
            end(),
        ]
    )
    assert out.result.solved and out.result.output == "All done."
    [signal] = signals(out)
    nudge = (
        "Your plan says sub-task 2 'Write the tests' is open (and 1 more): go on with it, or end with "
        "agent_step phase end and end_status partial or stuck and say why."
    )
    assert (signal.level, signal.message) == ("warning", nudge)
    assert told(out.requests[4]) == [nudge]  # the model reads it right after its reply
    assert out.requests[4].messages[-2].text == "The code is written; that should do."


async def test_plain_text_twice_with_an_open_plan_ends_partial_with_what_is_not_done(script: Any) -> None:
    out = await script([PLAN, LOOKUP, DONE, {"text": "Done, I think."}, {"text": "Really done."}])
    result = out.result
    assert (result.status, result.end_status) == ("done", "partial")
    assert (
        result.output
        == "Really done.\n\nDone: 1 Write the code. Not done: 2 Write the tests; 3 Run the tests."
    )
    assert len(signals(out)) == 1  # the second reply is not sent back again


async def test_a_change_never_made_with_a_tool_ends_partial_after_the_second_text(script: Any) -> None:
    out = await script([{"text": "I fixed the bug."}, {"text": "The bug is fixed."}], goal="fix the bug")
    result = out.result
    assert result.end_status == "partial" and result.output.startswith(
        "The bug is fixed.\n\nMade 0 tool calls"
    )
    [signal] = signals(out)
    assert signal.message.startswith("You have not run any tool and the goal asks for a change")
    assert len(out.requests) == 2


async def test_a_failed_tool_call_is_not_acting(script: Any) -> None:
    failing = {"tool": "lookup", "args": {"key": "missing"}}  # the tool fails
    out = await script([failing, {"text": "Done."}, {"text": "Done!"}], goal="fix the bug")
    assert out.result.end_status == "partial" and len(signals(out)) == 1


async def test_a_successful_tool_call_after_the_nudge_resets_the_count(script: Any) -> None:
    out = await script([{"text": "Fixed."}, LOOKUP, {"text": "Fixed, with the lookup."}], goal="fix the bug")
    # After a tool ran the run has acted, and no plan is open: the reply is an answer.
    assert (out.result.end_status, out.result.output) == ("answered", "Fixed, with the lookup.")
    assert len(signals(out)) == 1


async def test_the_count_resets_so_a_later_text_is_nudged_again(script: Any) -> None:
    out = await script([PLAN, {"text": "a"}, LOOKUP, {"text": "b"}, LOOKUP, DONE, DONE, DONE, {"text": "c"}])
    assert (out.result.end_status, out.result.output) == ("answered", "c")
    assert len(signals(out)) == 2


async def test_a_plan_whose_sub_tasks_are_all_done_does_not_hold_the_answer(script: Any) -> None:
    out = await script([PLAN, LOOKUP, DONE, DONE, DONE, {"text": "All three are done."}])
    assert out.result.end_status == "answered" and not signals(out)


async def test_a_failed_sub_task_stays_open_until_a_new_plan_replaces_it(script: Any) -> None:
    failed = step("verify", "it failed", sub_task_outcome="failed")
    small = step("plan", "smaller", plan={"goal": "g", "sub_tasks": [{"id": 1, "title": "Only this"}]})
    out = await script(
        [PLAN, LOOKUP, failed, {"text": "Gave up."}, small, DONE, {"text": "Did the smaller plan."}]
    )
    [signal] = signals(out)
    assert "sub-task 1 'Write the code' is open (and 2 more)" in signal.message
    assert (out.result.end_status, out.result.output) == ("answered", "Did the smaller plan.")


async def test_an_agent_step_end_still_ends_the_run_with_its_status_whatever_the_plan(script: Any) -> None:
    out = await script([PLAN, end("solved", "Said so.")])
    assert out.result.solved and not signals(out)


def test_the_progress_report_counts_in_the_singular_for_one() -> None:
    from pathlib import Path

    from steward.memory.working import WorkingMemory
    from steward.run_state import RunState, progress_report

    state = RunState(run_id="r1", goal="fix the bug", workspace=Path("."), memory=WorkingMemory("r1"))
    state.counters.tool_calls = 1
    assert "Made 1 tool call (0 failed, 0 errors unresolved)" in progress_report(state)
    state.counters.tool_calls = 1200
    assert "Made 1,200 tool calls" in progress_report(state)
