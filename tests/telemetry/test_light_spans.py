"""Steward's own spans (``_light``), sent by its exporter process to a real OTLP receiver.

Where no application provider is set, a traced run makes light spans in its process and a
helper process sends them with the SDK's OTLP exporter: these tests read what the collector
got, and what happens to a run when that helper is gone."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from tests.telemetry.receiver import Received, Receiver, receiver

from steward import Agent, FunctionModel
from steward.config import Config, TelemetrySettings
from steward.models.base import AssistantMessage, ModelRequest, ToolCall
from steward.telemetry import _export
from steward.telemetry._light import LightSpan, LightTracer, Sink


@pytest.fixture
def collector() -> Iterator[Receiver]:
    with receiver() as made:
        try:
            yield made
        finally:  # this receiver's helper done with while the receiver still answers
            for sink in _sinks_of(made):
                sink.close()


def _sinks_of(collector: Receiver) -> list[Sink]:
    made = [m._sink for m in _export._providers.values() if isinstance(m, LightTracer)]
    return [s for s in made if s.url.startswith(collector.url)]


async def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"value of {key}"


async def broken(key: str) -> str:
    """Always fails.

    Args:
        key: Ignored.
    """
    raise ValueError("the store is down")


def _model() -> FunctionModel:
    def reply(request: ModelRequest) -> AssistantMessage:
        asked = sum(1 for m in request.messages if m.role == "assistant")
        if asked == 0:
            return AssistantMessage(tool_calls=(ToolCall("c1", "lookup", {"key": "k1"}),))
        if asked == 1:
            return AssistantMessage(tool_calls=(ToolCall("c2", "broken", {"key": "k2"}),))
        end = {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "ok"}
        return AssistantMessage(tool_calls=(ToolCall("end", "agent_step", end),))

    return FunctionModel(reply)


async def _run(tmp_path: Path, url: str) -> str:
    config = Config(telemetry=TelemetrySettings(enabled=True, endpoint=url, service_name="light-test"))
    agent = Agent(_model(), tools=[lookup, broken], builtin_tools=False, config=config, sandbox=False)
    result = await agent.run("look k1 up", workspace=str(tmp_path))
    assert result.solved, result.output
    return result.run.id


def _one(spans: list[Received], name: str) -> Received:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


async def test_a_run_s_spans_reach_the_collector_through_the_exporter_process(
    tmp_path: Path, collector: Receiver
) -> None:
    began = time.time_ns()
    run_id = await _run(tmp_path, collector.url)
    ended = time.time_ns()
    spans = collector.wait_for(lambda got: any(s.name.startswith("invoke_agent") for s in got))
    run = _one(spans, "invoke_agent steward")
    assert run.parent_id == "" and run.attributes["gen_ai.agent.id"] == run_id
    assert run.attributes["steward.run.end_status"] == "solved" and run.service == "light-test"
    assert {s.trace_id for s in spans} == {run.trace_id}
    by_id = {s.span_id: s for s in spans}
    steps = [s for s in spans if s.name == "step"]
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(steps) == 3 and len(chats) == 3
    assert [s.attributes.get("steward.phase") for s in steps] == ["act", "act", "end"]
    assert all(s.kind == 1 for s in steps)  # internal
    assert all(by_id[s.parent_id] is run for s in steps)
    assert all(by_id[c.parent_id].name == "step" for c in chats)
    assert all(c.kind == 3 and c.attributes["gen_ai.operation.name"] == "chat" for c in chats)  # client
    found = _one(spans, "execute_tool lookup")
    assert found.attributes["gen_ai.tool.call.id"] == "c1" and found.status == 0
    assert by_id[found.parent_id].name == "step"
    failed = _one(spans, "execute_tool broken")
    assert failed.status == 2 and failed.attributes["error.type"]  # an error, with its kind
    # Times go as float seconds to the helper: within a microsecond of the clock, and each span
    # within its parent's.
    assert all(began - 1000 <= s.start <= s.end <= ended + 1000 for s in spans)
    assert all(
        by_id[s.parent_id].start <= s.start and s.end <= by_id[s.parent_id].end for s in spans if s.parent_id
    )


def test_spans_ended_on_several_threads_while_batches_go_all_reach_the_collector(collector: Receiver) -> None:
    sink = Sink(f"{collector.url}/v1/traces", "a test", {}, "threads", 10.0)
    tracer = LightTracer(sink, 1.0)
    root = tracer.start_span("root")
    under = trace.set_span_in_context(root)
    sent = threading.Event()

    def spans(n: int) -> None:
        for i in range(400):
            tracer.start_span(f"t{n}", context=under, attributes={"i": i}).end()

    def batches() -> None:  # a batch goes as often as it can, racing the threads' ends
        for _ in range(1_000_000):
            if sent.is_set():
                return
            sink.flush()

    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as the interpreter lets them
    try:
        flusher = threading.Thread(target=batches)
        flusher.start()
        workers = [threading.Thread(target=spans, args=(n,)) for n in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        sent.set()
        flusher.join()
    finally:
        sys.setswitchinterval(switching)
    root.end()
    assert sink.close(wait_s=60)
    got = collector.wait_for(lambda got: len(got) >= 1601)
    assert len(got) == 1601 and len({s.span_id for s in got}) == 1601
    for n in range(4):
        assert sorted(s.attributes["i"] for s in got if s.name == f"t{n}") == list(range(400))


async def test_a_run_goes_on_when_its_exporter_process_is_gone(
    tmp_path: Path, collector: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    await _run(tmp_path / "a", collector.url)  # the first run's end starts the helper
    collector.wait_for(lambda got: any(s.name.startswith("invoke_agent") for s in got))
    (sink,) = _sinks_of(collector)
    assert sink._process is not None
    sink._process.kill()
    sink._process.wait()
    before = len(collector.spans)
    with caplog.at_level(logging.WARNING, logger="steward.telemetry._light"):
        await _run(tmp_path / "b", collector.url)  # its spans have nowhere to go: the run ends all the same
    assert any("spans are no longer sent" in r.getMessage() for r in caplog.records), caplog.text
    assert len(collector.spans) == before


def test_sampling_follows_the_parent_and_decides_a_new_trace_by_its_id() -> None:
    sink = Sink("http://127.0.0.1:9/v1/traces", "a test", {}, "s", 1.0)
    always, never = LightTracer(sink, 1.0), LightTracer(sink, 0.0)
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    under = _light(always.start_span("x", context=trace.set_span_in_context(NonRecordingSpan(remote))))
    assert (under.trace_id, under.parent_id) == (0xABC, 0xDEF)
    _light(never.start_span("x", context=trace.set_span_in_context(NonRecordingSpan(remote))))  # followed
    unsampled = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.DEFAULT))
    left = always.start_span("x", context=trace.set_span_in_context(NonRecordingSpan(unsampled)))
    assert not left.is_recording() and left.get_span_context().trace_id == 0xABC
    assert not never.start_span("root").is_recording()
    root = _light(always.start_span("root"))
    child = _light(always.start_span("child", context=trace.set_span_in_context(root)))  # type: ignore[arg-type]
    assert (child.trace_id, child.parent_id) == (root.trace_id, root.span_id)
    assert root.get_span_context().is_valid and root.get_span_context().trace_flags.sampled


def _light(span: object) -> LightSpan:
    """``span``, which must be a recording light span (mypy does not see ``Span.register``)."""
    assert isinstance(span, LightSpan), span
    return span
