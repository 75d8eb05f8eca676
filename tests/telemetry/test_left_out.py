"""A run its sampler leaves out costs one sampling decision, not three a step, and its calls
still run in its (unsampled) trace, so a delegated job follows the same decision."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes
from tests.telemetry.lookups import looking_up

from steward import Agent, Limits
from steward.config import Config, TelemetrySettings
from steward.telemetry import current_traceparent, use_tracer_provider

STEPS = 6


class Counting(Sampler):
    """Samples nothing, and names each span it was asked about."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        self.asked.append(name)
        return ALWAYS_OFF.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return "Counting"


@pytest.fixture
def sampler() -> Iterator[Counting]:
    counting = Counting()
    provider = TracerProvider(sampler=counting)
    use_tracer_provider(provider)
    try:
        yield counting
    finally:
        use_tracer_provider(None)
        provider.shutdown()


seen_in_tool: list[str | None] = []


async def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    seen_in_tool.append(current_traceparent())  # what a delegated job would continue
    return f"value of {key}"


async def test_a_run_left_out_asks_its_sampler_once_and_its_calls_carry_its_unsampled_trace(
    sampler: Counting, tmp_path: Path
) -> None:
    seen_in_tool.clear()
    config = Config(telemetry=TelemetrySettings(enabled=True))
    limits = Limits(max_steps=STEPS + 5, repeat_stop=STEPS + 5, repeat_warning=STEPS + 4)
    agent = Agent(
        looking_up(STEPS), tools=[lookup], builtin_tools=False, config=config, limits=limits, sandbox=False
    )
    result = await agent.start("look them up", workspace=tmp_path).result()
    assert result.solved, result.output
    assert sampler.asked == ["invoke_agent steward"]  # no step, chat or tool span was started
    assert len(seen_in_tool) == STEPS - 1
    # Each call ran in the run's trace, marked not sampled (the flags' low bit): a job it
    # delegated would be left out too, so a trace is whole or absent.
    assert all(tp is not None and int(tp.split("-")[3], 16) & 1 == 0 for tp in seen_in_tool), seen_in_tool
    assert len({tp.split("-")[1] for tp in seen_in_tool if tp}) == 1
