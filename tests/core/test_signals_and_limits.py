"""Loop signals, error categories and the limits that end a run."""

from __future__ import annotations

from typing import Any

import pytest

from steward.signals import LoopCounters, categorize_error, compute


def step(phase: str, summary: str = "s", **fields: Any) -> dict[str, Any]:
    return {"agent_step": {"phase": phase, "summary": summary, **fields}}


END = step("end", end_status="solved", end_message="done")


@pytest.mark.parametrize(
    ("message", "category"),
    [
        ("File not found: a.py", "not_found"),
        ("bash: no such file or directory", "not_found"),
        ("Permission denied", "permission"),
        ("Path '../x' is outside the workspace", "permission"),
        ("bash timed out after 5 s", "timeout"),
        ("Invalid arguments for read_file: path: Field required", "invalid_input"),
        ("ZeroDivisionError: division by zero", "runtime"),
    ],
)
def test_error_categories(message: str, category: str) -> None:
    assert categorize_error(message) == category


def test_steps_used_is_always_the_first_signal() -> None:
    signals = compute(LoopCounters(step=5, max_steps=14))
    assert signals[0].message == "ℹ 5 of 14 steps used"


def test_same_action_failing_twice_warns() -> None:
    c = LoopCounters()
    c.record_act("bash {}", True, "runtime")
    assert "same_action_failed" not in {s.code for s in compute(c)}
    c.record_act("bash {}", True, "runtime")
    assert "⚠ Same action failed twice. Reflect before acting again." in [s.message for s in compute(c)]


def test_a_different_action_resets_the_failure_streak() -> None:
    c = LoopCounters()
    c.record_act("bash {}", True, "runtime")
    c.record_act("ls {}", True, "runtime")
    assert "same_action_failed" not in {s.code for s in compute(c)}


def test_three_steps_without_action_warn() -> None:
    c = LoopCounters()
    for phase in ("plan", "reason", "reason"):
        c.record_non_act(phase)
    assert "⚠ 3 steps without action. Act, reflect, or ask." in [s.message for s in compute(c)]


def test_repeated_permission_errors_warn() -> None:
    c = LoopCounters()
    c.record_act("a", True, "permission")
    c.record_act("b", True, "permission")
    assert "permission_errors" in {s.code for s in compute(c)}


async def test_identical_action_repeated_is_signalled_then_stops_the_run(script: Any) -> None:
    same = {"tool": "lookup", "args": {"key": "a"}}
    out = await script([same] * 4, repeat_warning=3, repeat_stop=4)
    signal = out.of("signal")
    assert [s.code for s in signal] == ["repeated_action"]
    assert "Identical action repeated 3 times" in out.requests[3].system_text
    assert out.result.end_status == "stuck"
    assert "repeated 4 times" in out.result.output


async def test_signals_are_emitted_once_when_they_appear(script: Any) -> None:
    fail = {"tool": "lookup", "args": {"key": "missing"}}
    out = await script([fail, fail, fail, END])
    assert [s.code for s in out.of("signal")].count("same_action_failed") == 1


async def test_step_limit_without_progress_ends_stuck(script: Any) -> None:
    out = await script([step("reason")] * 3, max_steps=3)
    assert out.result.end_status == "stuck"
    assert out.result.output.startswith("Stopped at the step limit (3 steps).")
    assert out.model.unconsumed == 0


async def test_step_limit_with_progress_ends_partial_and_says_what_is_left(script: Any) -> None:
    plan = {"goal": "g", "sub_tasks": [{"id": 1, "title": "first"}, {"id": 2, "title": "second"}]}
    out = await script(
        [
            step("plan", plan=plan),
            {"tool": "lookup", "args": {"key": "a"}},
            step("verify", sub_task_outcome="done"),
        ],
        max_steps=3,
    )
    assert out.result.end_status == "partial"
    assert "Done: 1 first. Not done: 2 second." in out.result.output


async def test_budget_low_warning_appears_near_the_limit(script: Any) -> None:
    out = await script([step("reason"), step("reason"), END], max_steps=4)
    assert "⚠ Only 2 step(s) left." in out.requests[1].system_text
    assert "⚠ Only 1 step(s) left." in out.requests[2].system_text


async def test_script_running_out_fails_the_run_loudly(script: Any) -> None:
    out = await script([step("reason")])
    assert out.result.status == "failed"
    error = out.of("error")[-1]
    assert error.code == "model_error" and "all were used" in error.message
