"""Compression by the model: large outputs, old turns, a failed attempt; nothing of the plan lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from steward import Agent, FunctionModel, Limits, tool
from steward.events import CompactionEvent, Event, ToolResultEvent
from steward.models.base import AssistantMessage, ModelRequest, ToolCall, ToolResultMessage, UserMessage
from steward.store.events import open_store

BIG = "\n".join(f"line {i}: ok" for i in range(600)) + "\nFAILED test_parse: expected 3, got 4"


def step(k: int, **arguments: Any) -> AssistantMessage:
    return AssistantMessage(tool_calls=(ToolCall(f"s{k}", "agent_step", arguments),))


def call(k: int, name: str, **arguments: Any) -> AssistantMessage:
    return AssistantMessage(tool_calls=(ToolCall(f"c{k}", name, arguments),))


class Model:
    """Scripted by step; answers summary requests itself and keeps every request."""

    def __init__(
        self, script: list[AssistantMessage], summary: str = "digest: test_parse fails, 3 != 4"
    ) -> None:
        self.script = script
        self.summary = summary
        self.steps: list[ModelRequest] = []
        self.summaries: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        if request.purpose == "summary":
            self.summaries.append(request)
            return AssistantMessage(text=self.summary)
        self.steps.append(request)
        return self.script[min(len(self.steps), len(self.script)) - 1]


@tool
def run_tests() -> str:
    """Run the test suite."""
    return BIG


@tool
def flaky(n: int) -> str:
    """Fails for the demo."""
    raise ValueError(f"flaky {n} broke")


@tool
def note(i: int) -> str:
    """A medium output."""
    return f"note {i} " + "x" * 1500


def agent(model: Model, **limits: Any) -> Agent:
    return Agent(
        FunctionModel(model, summaries=True),
        tools=[run_tests, flaky, note],
        builtin_tools=False,
        limits=Limits(max_steps=60, **limits),
    )


def results(request: ModelRequest) -> dict[str, str]:
    return {m.call_id: m.content for m in request.messages if isinstance(m, ToolResultMessage)}


async def test_a_large_output_is_compacted_and_recallable_in_full(tmp_path: Path) -> None:
    model = Model(
        [
            call(1, "run_tests"),
            call(2, "recall_output", call_id="c1"),
            AssistantMessage(text="test_parse fails"),
        ]
    )
    events = [e async for e in agent(model).run_stream("why do the tests fail?", workspace=tmp_path)]
    assert len(model.summaries) == 1
    asked = model.summaries[0].messages[0]
    assert (
        isinstance(asked, UserMessage) and "why do the tests fail?" in asked.content and BIG in asked.content
    )
    sent = results(model.steps[1])["c1"]
    assert sent.startswith("[run_tests output of") and 'recall_output(call_id="c1")' in sent
    assert "digest: test_parse fails" in sent and len(sent) < 400
    recalled = results(model.steps[2])["c2"]
    assert BIG in recalled  # the full output comes back on request, and is not compacted again
    compaction = next(e for e in events if isinstance(e, CompactionEvent))
    assert compaction.kind == "tool_output" and compaction.ref == "c1" and compaction.chars_before == len(BIG)
    logged = next(e for e in events if isinstance(e, ToolResultEvent) and e.call_id == "c1")
    assert logged.output == BIG  # the log keeps the whole output


async def test_outputs_under_the_threshold_or_of_exempt_tools_stay_verbatim(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text(BIG)
    model = Model([call(1, "read_file", path="big.txt"), AssistantMessage(text="read")])
    a = Agent(FunctionModel(model, summaries=True), limits=Limits(max_steps=5), sandbox=False)
    await a.run("read big.txt", workspace=tmp_path)
    assert not model.summaries
    assert "FAILED test_parse" in results(model.steps[1])["c1"]
    off = Model([call(1, "run_tests"), AssistantMessage(text="done")])
    await agent(off, compact_output_chars=0).run("run", workspace=tmp_path)
    assert not off.summaries and results(off.steps[1])["c1"] == BIG


async def test_when_turns_overflow_the_oldest_are_summarised_not_dropped(tmp_path: Path) -> None:
    plan = {"goal": "take notes", "sub_tasks": [{"id": 1, "title": "notes"}]}
    script = [step(0, phase="plan", summary="plan", plan=plan)]
    script += [call(i, "note", i=i) for i in range(1, 5)]
    script += [step(5, phase="verify", summary="v", key_facts=["notes have x padding"])]
    script += [call(i, "note", i=i) for i in range(6, 40)]
    script += [AssistantMessage(text="all noted")]
    model = Model(script, summary="notes 1..N were taken; all fine")
    events = [
        e
        async for e in agent(model, request_token_budget=4_000, keep_recent_observations=2).run_stream(
            "take 40 notes", workspace=tmp_path
        )
    ]
    folds = [e for e in events if isinstance(e, CompactionEvent) and e.kind == "turns"]
    assert folds and all(e.by_model for e in folds)
    last = model.steps[-1]
    first = last.messages[0]
    assert isinstance(first, UserMessage) and first.content.startswith("take 40 notes")
    assert "[Summary of earlier turns" in first.content and "notes 1..N were taken" in first.content
    # The plan and key facts live in the working memory, which is never summarised away.
    assert "[PLAN v1]" in last.system_text and "notes have x padding" in last.system_text
    assert events[-1].type == "done"


async def test_a_replan_after_failure_restarts_from_a_summary_of_the_attempt(tmp_path: Path) -> None:
    plan = {"goal": "fix", "sub_tasks": [{"id": 1, "title": "try flaky"}]}
    plan2 = {"goal": "fix", "sub_tasks": [{"id": 1, "title": "another way"}]}
    script = [
        step(0, phase="plan", summary="plan", plan=plan),
        call(1, "flaky", n=1),
        call(2, "flaky", n=2),
        step(3, phase="plan", summary="new plan", plan=plan2),
        AssistantMessage(text="done another way"),
    ]
    model = Model(script, summary="flaky broke twice with ValueError")
    events: list[Event] = [e async for e in agent(model).run_stream("fix it", workspace=tmp_path)]
    attempt = next(e for e in events if isinstance(e, CompactionEvent))
    assert attempt.kind == "attempt"
    after = model.steps[-1]
    first = after.messages[0]
    assert isinstance(first, UserMessage) and "The previous attempt, summarised" in first.content
    assert "flaky broke twice" in first.content
    assert "c1" not in results(after) and "c2" not in results(after)  # the attempt's turns are gone
    assert "s3" in results(after)  # the new plan's own call and its acknowledgement stay
    assert "[PLAN v2]" in after.system_text and "flaky 2 broke" in after.system_text  # errors kept


async def test_a_failing_summary_falls_back_to_an_excerpt(tmp_path: Path) -> None:
    def reply(request: ModelRequest) -> AssistantMessage:
        if request.purpose == "summary":
            raise RuntimeError("summariser down")
        n = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
        return call(1, "run_tests") if n == 0 else AssistantMessage(text="ok")

    events = [
        e
        async for e in Agent(
            FunctionModel(reply, summaries=True), tools=[run_tests], builtin_tools=False
        ).run_stream("run", workspace=tmp_path)
    ]
    compaction = next(e for e in events if isinstance(e, CompactionEvent))
    assert not compaction.by_model and "chars omitted" in compaction.text
    assert events[-1].type == "done"


async def test_a_rebuilt_run_reuses_recorded_summaries(tmp_path: Path) -> None:
    async with await open_store(f"sqlite:///{tmp_path}/s.db") as store:
        model = Model([call(1, "run_tests"), step(2, phase="feedback", summary="q", feedback_message="ok?")])
        first = agent(model)
        first.store = store
        run = first.start("why?", workspace=tmp_path)
        assert (await run.result()).waiting
        again = Model([AssistantMessage(text="unused")])
        second = agent(again)
        second.store = store
        rebuilt = await second.resume(run.id)
        assert not again.summaries and not again.steps  # nothing asked while rebuilding
        assert rebuilt.state.transcript.entries == run.state.transcript.entries
