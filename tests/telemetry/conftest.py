"""Spans kept in memory by the SDK's own exporter: what Steward sends, as a collector gets it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from steward.config import Config, TelemetrySettings
from steward.telemetry import use_tracer_provider


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Every span Steward ends, in the order they end."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_tracer_provider(provider)
    try:
        yield exporter
    finally:
        use_tracer_provider(None)
        provider.shutdown()


def traced(record_content: bool = False, **fields: Any) -> Config:
    """A configuration with tracing on."""
    return Config(telemetry=TelemetrySettings(enabled=True, record_content=record_content), **fields)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    """The span's attributes, as plain values."""
    return dict(span.attributes or {})


def named(spans: Sequence[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def parent_of(span: ReadableSpan, spans: Sequence[ReadableSpan]) -> ReadableSpan:
    """The span ``span`` hangs under (it must be among ``spans``)."""
    assert span.parent is not None, f"{span.name} has no parent"
    found = [s for s in spans if s.context is not None and s.context.span_id == span.parent.span_id]
    assert found, f"the parent of {span.name} was not exported"
    return found[0]
