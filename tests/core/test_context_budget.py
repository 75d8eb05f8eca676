"""The request budget: no text twice, elision with a pointer, recall, and never over budget."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from steward import Agent, FunctionModel, Limits, tool
from steward.memory.budget import budget_chars
from steward.models.base import AssistantMessage, ModelRequest, ToolCall, ToolResultMessage


def chunk(i: int, size: int) -> str:
    return f"<chunk {i}>" + "abcdefghij" * (size // 10)


def request_chars(request: ModelRequest) -> int:
    total = len(request.system_text)
    for m in request.messages:
        if isinstance(m, AssistantMessage):
            total += len(m.text) + sum(len(c.arguments_json()) + len(c.name) for c in m.tool_calls)
        else:
            total += len(m.content)
    schemas = sum(
        len(t.name) + len(t.description) + len(json.dumps(t.parameters, separators=(",", ":")))
        for t in request.tools
    )
    return total + schemas


def results(request: ModelRequest) -> list[ToolResultMessage]:
    return [m for m in request.messages if isinstance(m, ToolResultMessage)]


class Trajectory:
    """Reads chunks 1..n (an act step with a verify fact every 10th), then ends."""

    def __init__(self, n: int, recall_at: int | None = None) -> None:
        self.n = n
        self.recall_at = recall_at
        self.requests: list[ModelRequest] = []
        self.calls = 0

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        self.requests.append(request)
        self.calls += 1
        k = self.calls
        if k == 1:
            plan = {
                "goal": "read all",
                "sub_tasks": [{"id": 1, "title": "read"}, {"id": 2, "title": "report"}],
            }
            return _step(k, {"phase": "plan", "summary": "plan", "plan": plan})
        if self.recall_at is not None and k == self.recall_at:
            return AssistantMessage(tool_calls=(ToolCall(f"c{k}", "recall_output", {"call_id": "c2"}),))
        if k == 5:
            return _step(k, {"phase": "verify", "summary": "noted", "key_facts": ["chunks start with a tag"]})
        if k == 6:
            return AssistantMessage(tool_calls=(ToolCall(f"c{k}", "read_chunk", {"i": -1}),))
        if k < self.n:
            return AssistantMessage(tool_calls=(ToolCall(f"c{k}", "read_chunk", {"i": k}),))
        return _step(
            k, {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "read them"}
        )


def _step(k: int, arguments: dict[str, Any]) -> AssistantMessage:
    return AssistantMessage(tool_calls=(ToolCall(f"c{k}", "agent_step", arguments),))


def make_agent(trajectory: Trajectory, size: int, budget: int) -> Agent:
    @tool
    def read_chunk(i: int) -> str:
        """Return chunk i."""
        if i < 0:
            raise ValueError("chunk index must be positive")
        return chunk(i, size)

    # Outputs stay verbatim here (no compaction): these tests are about elision and the budget.
    limits = Limits(max_steps=trajectory.n + 5, request_token_budget=budget, compact_output_chars=0)
    return Agent(FunctionModel(trajectory), tools=[read_chunk], builtin_tools=False, limits=limits)


async def test_each_tool_output_is_sent_once_per_request(tmp_path: Path) -> None:
    trajectory = Trajectory(8)
    result = await make_agent(trajectory, 300, 32_000).run("read", workspace=tmp_path)
    assert result.solved
    for request in trajectory.requests:
        blob = request.system_text + "".join(m.content for m in results(request))
        for i in range(2, 8):
            assert blob.count(f"<chunk {i}>") <= 1


async def test_long_run_stays_under_budget_and_keeps_plan_facts_errors_and_newest(tmp_path: Path) -> None:
    trajectory = Trajectory(50)
    budget = 32_000
    result = await make_agent(trajectory, 4000, budget).run("read", workspace=tmp_path)
    assert result.solved
    limit = budget_chars(budget)
    for request in trajectory.requests:
        assert request_chars(request) <= limit
    last = trajectory.requests[-1]
    assert "[PLAN v1]  Goal: read all" in last.system_text
    assert "• chunks start with a tag  [step 5]" in last.system_text
    assert "chunk index must be positive" in last.system_text  # the error register
    outputs = [m.content for m in results(last)]
    for newest in outputs[-3:]:
        assert newest.startswith("<chunk ") and len(newest) > 4000
    elided = [o for o in outputs if o.startswith("[output elided")]
    assert elided, "older outputs must be elided in a long run"
    assert 'recall_output(call_id="c2")' in elided[0]


async def test_total_context_is_far_below_a_full_history_loop(tmp_path: Path) -> None:
    trajectory = Trajectory(50)
    await make_agent(trajectory, 4000, 32_000).run("read", workspace=tmp_path)
    sent = sum(request_chars(r) for r in trajectory.requests)
    full_history = sum(4000 * k for k in range(1, 51))
    assert sent < full_history / 3


async def test_recall_output_returns_an_elided_output(tmp_path: Path) -> None:
    trajectory = Trajectory(20, recall_at=18)
    await make_agent(trajectory, 4000, 8_000).run("read", workspace=tmp_path)
    after_recall = trajectory.requests[18]
    recalled = results(after_recall)[-1]
    assert recalled.name == "recall_output"
    assert recalled.content == chunk(2, 4000)


async def test_older_agent_step_arguments_are_compacted(tmp_path: Path) -> None:
    trajectory = Trajectory(6)
    await make_agent(trajectory, 100, 32_000).run("read", workspace=tmp_path)
    later = trajectory.requests[3]
    first_call = next(m for m in later.messages if isinstance(m, AssistantMessage)).tool_calls[0]
    assert first_call.name == "agent_step"
    assert "plan" not in first_call.arguments  # the plan lives in the view, not twice
    assert first_call.arguments["phase"] == "plan"


async def test_a_budget_too_small_for_the_prompt_fails_with_the_fix(tmp_path: Path) -> None:
    trajectory = Trajectory(3)
    agent = Agent(
        FunctionModel(trajectory),
        builtin_tools=True,
        instructions="x" * 20_000,
        limits=Limits(request_token_budget=2_000),
    )
    result = await agent.run("read", workspace=tmp_path)
    assert result.status == "failed"
    assert "limits.request_token_budget" in result.output


async def test_one_huge_output_is_cut_in_the_middle_to_fit(tmp_path: Path) -> None:
    trajectory = Trajectory(4)
    await make_agent(trajectory, 40_000, 4_000).run("read", workspace=tmp_path)
    for request in trajectory.requests:
        assert request_chars(request) <= budget_chars(4_000)
    cut = [m.content for m in results(trajectory.requests[-1]) if "chars cut to fit" in m.content]
    assert cut and cut[-1].startswith("<chunk ")


async def test_a_goal_too_large_for_the_budget_is_named(tmp_path: Path) -> None:
    agent = Agent(
        FunctionModel(Trajectory(2)), builtin_tools=False, limits=Limits(request_token_budget=2_000)
    )
    result = await agent.run("x" * 20_000, workspace=tmp_path)
    assert result.status == "failed"
    assert "the goal and conversation" in result.output and "shorten the goal" in result.output
