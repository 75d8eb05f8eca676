"""Runs of any length: 10,000 steps within the default budget, with a bounded transcript and view.

The time per step is measured by ``bench/long_run.py``, not here; these tests check what
makes it flat: the request, the transcript and the view stop growing, and what must stay in
sight stays.
"""

from __future__ import annotations

from pathlib import Path

from steward import Agent, FunctionModel, Limits, tool
from steward.events import CompactionEvent, Event
from steward.memory.budget import budget_chars
from steward.memory.working import VIEW_STEPS
from steward.models.base import AssistantMessage, ModelRequest, ToolCall, ToolResultMessage
from steward.store.events import open_store

from .test_context_budget import request_chars


class Long:
    """Plans, records a fact, fails once, reads N outputs of ``size`` chars, then asks or ends."""

    def __init__(self, n: int, size: int = 200, *, ask_at_end: bool = False) -> None:
        self.n, self.size, self.ask_at_end = n, size, ask_at_end
        self.calls = 0
        self.largest = 0
        self.last: ModelRequest | None = None
        self.missing: list[str] = []
        self.longest_transcript = 0

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        self.calls += 1
        k = self.calls
        self.largest = max(self.largest, request_chars(request))
        self.longest_transcript = max(self.longest_transcript, len(request.messages))
        self.last = request
        if k > 6:
            self._check(k, request)
        if k == 1:
            plan = {"goal": "read all", "sub_tasks": [{"id": 1, "title": "read"}]}
            return step(k, phase="plan", summary="plan", plan=plan)
        if k == 2:
            return AssistantMessage(tool_calls=(ToolCall("bad", "read", {"i": "one"}),))
        if k == 3:
            return step(k, phase="verify", summary="noted", key_facts=["outputs are ASCII"])
        if k - 3 <= self.n:
            return AssistantMessage(tool_calls=(ToolCall(f"c{k}", "read", {"i": k - 3}),))
        if self.ask_at_end:
            return step(k, phase="feedback", summary="ask", feedback_message="Shall I go on?")
        return step(k, phase="end", summary="done", end_status="solved", end_message="read all")

    def _check(self, k: int, request: ModelRequest) -> None:
        outputs = [
            m.content for m in request.messages if isinstance(m, ToolResultMessage) and m.name == "read"
        ]
        newest = outputs[-3:]
        if len(newest) < 3 or not all(o.startswith("<out ") and len(o) == self.size for o in newest):
            self.missing.append(f"request {k}: the three newest outputs are not all verbatim")
        view = request.context
        errors = view.split("[Errors]", 1)[-1]
        if "[PLAN v1]" not in view or "outputs are ASCII" not in view or "read:" not in errors:
            self.missing.append(f"request {k}: plan, key fact or error missing from the view")


def step(k: int, **arguments: object) -> AssistantMessage:
    return AssistantMessage(tool_calls=(ToolCall(f"s{k}", "agent_step", dict(arguments)),))


def make_agent(model: Long, **limits: object) -> Agent:
    @tool
    def read(i: int) -> str:
        """Return output number i."""
        head = f"<out {i}>"
        return head + ("abcdefghij" * (model.size // 10 + 1))[: model.size - len(head)]

    return Agent(
        FunctionModel(model),
        tools=[read],
        builtin_tools=False,
        limits=Limits(max_steps=model.n + 10, **limits),  # type: ignore[arg-type]
    )


async def test_ten_thousand_steps_complete_within_the_default_budget(tmp_path: Path) -> None:
    model = Long(10_000)
    agent = make_agent(model)
    assert agent.config.limits.request_token_budget == 32_000  # the default, unchanged
    result = await agent.run("Read every output, then answer.", workspace=tmp_path)
    assert result.solved, result.output
    assert model.largest <= budget_chars(32_000)
    assert not model.missing, model.missing[:3]
    # The transcript stops growing: old turns are folded into a summary as the run goes.
    assert model.longest_transcript < 1_000
    assert model.last is not None
    assert "[Summary of earlier turns" in model.last.messages[0].content  # type: ignore[union-attr]
    # The view lists only the newest steps; the rest are one line.
    assert model.last.context.count("[Step ") <= VIEW_STEPS
    assert "older entries folded" in model.last.context


async def test_old_turns_are_folded_as_the_run_goes_not_only_when_full(tmp_path: Path) -> None:
    model = Long(1_500)
    events: list[Event] = [e async for e in make_agent(model).run_stream("read", workspace=tmp_path)]
    folds = [e for e in events if isinstance(e, CompactionEvent) and e.kind == "turns"]
    # Several folds, each well before the budget was reached, never one giant emergency.
    assert len(folds) >= 3
    assert model.largest < budget_chars(32_000, 0.8)
    assert events[-1].type == "done"


async def test_summaries_turned_off_still_fold_with_an_excerpt(tmp_path: Path) -> None:
    model = Long(1_200)
    agent = make_agent(model, summarize_turns=False)
    events = [e async for e in agent.run_stream("read", workspace=tmp_path)]
    folds = [e for e in events if isinstance(e, CompactionEvent) and e.kind == "turns"]
    assert folds and not any(e.by_model for e in folds)
    assert events[-1].type == "done" and not model.missing


async def test_a_long_run_rebuilt_from_its_log_folds_at_the_same_points(tmp_path: Path) -> None:
    async with await open_store(f"sqlite:///{tmp_path}/s.db") as store:
        first_model = Long(1_200, ask_at_end=True)
        first = make_agent(first_model)
        first.store = store
        run = first.start("read", workspace=tmp_path)
        assert (await run.result()).waiting
        again = Long(1_200)
        second = make_agent(again)
        second.store = store
        rebuilt = await second.resume(run.id)
        assert again.calls == 0  # nothing asked of the model while rebuilding
        assert rebuilt.state.transcript.entries == run.state.transcript.entries
        assert rebuilt.state.memory.render_view() == run.state.memory.render_view()
