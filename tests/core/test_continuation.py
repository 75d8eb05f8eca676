"""Continuation (``steward.continuation``): a run that ends with an answer while its plan or task
list has open items, or whose verifier fails, is asked "are you done?" and goes on, a bounded
number of times; each decision is a ``continuation`` event."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.core.conftest import RecordingScript, lookup

from steward import Agent, Limits, RunResult
from steward.config import Config, PolicySettings
from steward.continuation import VERIFY_TOOL
from steward.events import ContinuationEvent, Event, ToolResultEvent
from steward.models.base import UserMessage
from steward.models.scripted import ScriptedModel


def step(phase: str, summary: str = "s", **fields: Any) -> dict[str, Any]:
    return {"agent_step": {"phase": phase, "summary": summary, **fields}}


def end(status: str = "solved", message: str = "All done.") -> dict[str, Any]:
    return step("end", end_status=status, end_message=message)


PLAN = step(
    "plan",
    "Plan the work",
    plan={"goal": "Write the code and its tests",
          "sub_tasks": [{"id": 1, "title": "Write the code"}, {"id": 2, "title": "Write the tests"}]},
)  # fmt: skip
LOOKUP = {"tool": "lookup", "args": {"key": "a"}}
DONE = step("verify", "done with it", sub_task_outcome="done")


async def run(
    workspace: Path,
    replies: Sequence[Mapping[str, Any]],
    *,
    mode: str = "autonomous",
    builtin_tools: bool = False,
    **limits: Any,
) -> tuple[RunResult, list[Event], RecordingScript]:
    model = RecordingScript(ScriptedModel.from_data(replies))
    config = Config(policy=PolicySettings(mode=mode))  # type: ignore[arg-type]
    agent = Agent(model, tools=[lookup], builtin_tools=builtin_tools, config=config, limits=Limits(**limits),
                  sandbox=False)  # fmt: skip
    started = agent.start("write the code and its tests", workspace=workspace)
    events = [e async for e in started.stream()]
    model.assert_consumed()
    return started.snapshot(), events, model


def continuations(events: list[Event]) -> list[ContinuationEvent]:
    return [e for e in events if isinstance(e, ContinuationEvent)]


def told(model: RecordingScript) -> list[str]:
    """What the last request's user messages said after the goal."""
    return [m.content for m in model.requests[-1].messages if isinstance(m, UserMessage)][1:]


async def test_an_end_with_open_sub_tasks_is_asked_once_and_the_run_goes_on(workspace: Path) -> None:
    result, events, model = await run(
        workspace,
        [PLAN, LOOKUP, DONE, end(message="Wrote the code."), LOOKUP, DONE, end(message="Both done.")],
    )
    assert (result.end_status, result.output) == ("solved", "Both done.")
    [asked] = continuations(events)
    assert asked.asked and asked.number == 1
    assert asked.reasons == ["sub-task 2 'Write the tests' is in_progress"]
    assert "Are you done?" in asked.message and "sub-task 2 'Write the tests'" in asked.message
    assert asked.message in told(model)  # the model read it


async def test_open_tasks_keep_a_run_going_like_open_sub_tasks(workspace: Path) -> None:
    add = {"tool": "tasks", "args": {"action": "add", "text": "update the changelog"}}
    done = {"tool": "tasks", "args": {"action": "done", "ids": [1]}}
    result, events, _ = await run(
        workspace, [add, end(message="Finished."), done, end(message="Finished, changelog too.")],
        builtin_tools=True,
    )  # fmt: skip
    assert result.output == "Finished, changelog too."
    [asked] = continuations(events)
    assert asked.reasons == ["task 1 'update the changelog' is open"]


async def test_a_failing_verifier_asks_and_a_passing_one_lets_the_run_end(workspace: Path) -> None:
    # The verifier passes once the agent has written the file it checks for.
    verify = "test -f fixed.txt && echo ok || { echo 'FAILED: fixed.txt is missing'; exit 3; }"
    write = {"tool": "write_file", "args": {"path": "fixed.txt", "content": "yes\n"}}
    result, events, _ = await run(
        workspace, [end(message="Fixed."), write, end(message="Fixed, for real.")],
        builtin_tools=True, verify=verify,
    )  # fmt: skip
    assert (result.end_status, result.output) == ("solved", "Fixed, for real.")
    [asked] = continuations(events)
    assert asked.verifier_exit == 3 and asked.reasons == [f"the verifier `{verify}` failed"]
    assert "FAILED: fixed.txt is missing" in asked.message and "exit 3" in asked.message
    checks = [e for e in events if isinstance(e, ToolResultEvent) and e.tool == VERIFY_TOOL]
    assert [c.status for c in checks] == ["failed", "completed"]
    assert "ok" in checks[1].output


async def test_the_bound_ends_the_run_partial_with_what_is_still_open(workspace: Path) -> None:
    result, events, _ = await run(
        workspace, [end(message="Done."), end(message="Done!"), end(message="Done!!")],
        verify="exit 1", max_continuations=2,
    )  # fmt: skip
    assert result.end_status == "partial"
    assert result.output.startswith("Done!!") and "verifier `exit 1` failed" in result.output
    found = continuations(events)
    assert [(c.number, c.asked) for c in found] == [(1, True), (2, True), (2, False)]


async def test_structured_mode_checks_the_verifier_but_not_the_plan(workspace: Path) -> None:
    result, events, _ = await run(workspace, [PLAN, LOOKUP, DONE, end(message="Enough.")], mode="structured")
    assert (result.end_status, result.output) == ("solved", "Enough.")
    assert not continuations(events)
    result, events, _ = await run(
        workspace, [end(message="Enough."), end(message="Sure.")], mode="structured", verify="exit 2",
        max_continuations=1,
    )  # fmt: skip
    assert [(c.asked, c.verifier_exit) for c in continuations(events)] == [(True, 2), (False, 2)]
    assert result.end_status == "partial"


async def test_partial_and_stuck_ends_are_not_questioned(workspace: Path) -> None:
    result, events, _ = await run(workspace, [PLAN, end("partial", "Only half.")], verify="exit 1")
    assert result.end_status == "partial" and result.output == "Only half."
    assert not continuations(events)
    assert not [e for e in events if isinstance(e, ToolResultEvent) and e.tool == VERIFY_TOOL]


async def test_no_continuations_allowed_ends_partial_at_once(workspace: Path) -> None:
    result, events, _ = await run(workspace, [end(message="Done.")], verify="exit 1", max_continuations=0)
    assert result.end_status == "partial"
    assert [(c.number, c.asked) for c in continuations(events)] == [(0, False)]


async def test_the_verifiers_output_has_secret_values_redacted(workspace: Path) -> None:
    (workspace / ".env").write_text("API_TOKEN=tok-verifier-5555-secret\n")
    result, events, model = await run(
        workspace, [end(message="Done."), end(message="Done anyway.")], verify="cat .env; exit 1",
        max_continuations=1,
    )  # fmt: skip
    assert result.end_status == "partial"
    check = next(e for e in events if isinstance(e, ToolResultEvent) and e.tool == VERIFY_TOOL)
    assert "[redacted: secret from .env]" in check.output
    said = "\n".join(told(model))
    assert "[redacted: secret from .env]" in said
    assert not [e for e in events if "tok-verifier-5555-secret" in str(e.to_dict())]
    assert "tok-verifier-5555-secret" not in said
