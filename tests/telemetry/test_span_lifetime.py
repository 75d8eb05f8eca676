"""A traced run keeps no span alive once it ended: what a step costs must not grow with the run.

A run with no I/O (a function model, in-process tools) never lets asyncio's event loop turn, so
the cancelled timers of its time limits stay queued until it ends, each holding the context that
was current when it was made. Were a step's span current then, every step would leave its span
(and its attributes) behind: memory, and garbage-collector work, growing with the run.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Span, TracerProvider
from tests.telemetry.lookups import looking_up

from steward import Agent, Limits
from steward.config import Config, TelemetrySettings
from steward.events import StepStart
from steward.telemetry import use_tracer_provider

STEPS = 40


@pytest.fixture
def dropping() -> Iterator[Resource]:
    """SDK spans that no exporter keeps: once ended, only a leak can hold them. Theirs is the
    resource yielded (other tests' spans may still be alive in this process)."""
    resource = Resource.create({"service.name": "span-lifetime-test"})
    provider = TracerProvider(resource=resource)
    use_tracer_provider(provider)
    try:
        yield resource
    finally:
        use_tracer_provider(None)
        provider.shutdown()


async def lookup(key: str) -> str:  # async: run in the loop, no thread (no I/O at all)
    """Look a key up.

    Args:
        key: The key.
    """
    return f"value of {key}"


def live_spans(resource: Resource) -> int:
    gc.collect()
    # type(), not isinstance(): isinstance reads ``__class__``, which some objects of other
    # libraries (torch's deprecated aliases) answer with a warning the suite turns into an error.
    return sum(1 for o in gc.get_objects() if issubclass(type(o), Span) and o.resource is resource)


async def test_the_spans_alive_during_a_run_do_not_grow_with_its_steps(
    dropping: Resource, tmp_path: Path
) -> None:
    config = Config(telemetry=TelemetrySettings(enabled=True))
    limits = Limits(max_steps=STEPS + 5, repeat_stop=STEPS + 5, repeat_warning=STEPS + 4)
    agent = Agent(
        looking_up(STEPS), tools=[lookup], builtin_tools=False, config=config, limits=limits, sandbox=False
    )
    run = agent.start("look them up", workspace=tmp_path)
    alive: dict[int, int] = {}
    async for event in run.stream():
        if isinstance(event, StepStart) and event.step in (5, STEPS):
            alive[event.step] = live_spans(dropping)
    assert run.snapshot().solved
    # The run's span and its current step's, whatever the step: nothing left from earlier steps.
    assert alive == {5: 2, STEPS: 2}
    assert live_spans(dropping) == 0
