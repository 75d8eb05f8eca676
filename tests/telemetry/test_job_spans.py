"""Jobs run by a real worker in this process, spans kept by the SDK's in-memory exporter: a
delegated child's run hangs under the parent's ``delegate`` call, and a run taken over from a
worker that died goes on in the trace its job kept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.telemetry.conftest import attrs, named, parent_of

from steward.events import ToolResultEvent
from steward.jobs.api import Queue
from steward.jobs.store import JobStore
from steward.jobs.worker import Worker, WorkerSettings
from steward.store.events import EventStore, open_store


def end(message: str) -> dict[str, Any]:
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    ws = tmp_path / "ws"
    (ws / "personas").mkdir(parents=True)
    (ws / "notes.txt").write_text("hello\n")
    (ws / "steward.toml").write_text("[telemetry]\nenabled = true\n")

    def persona(name: str, script: list[dict[str, Any]], tools: str) -> None:
        (ws / "personas" / f"{name}.yaml").write_text(yaml.safe_dump(script))
        (ws / "personas" / f"{name}.toml").write_text(
            f'role = "{name}"\ntools = {tools}\nmodel = "scripted:{name}.yaml"\n'
        )

    read = {"tool": "read_file", "args": {"path": "notes.txt"}}
    persona(
        "lead",
        [{"tool": "delegate", "args": {"role": "helper", "goal": "read it"}}, end("lead done")],
        '["delegate"]',
    )
    persona("helper", [read, end("it says hello")], '["read_file"]')
    persona("reader", [read, read, end("read twice")], '["read_file"]')
    return ws


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[EventStore]:
    opened = await open_store(db_url)
    try:
        yield opened
    finally:
        await opened.close()


async def _worked(store: EventStore, job_id: str) -> None:
    """A real worker runs until the job has ended."""
    stop = asyncio.Event()
    worker = asyncio.create_task(Worker(store, WorkerSettings(concurrency=2, poll_s=0.05)).run(stop))
    try:
        job = await Queue(store).job(job_id).wait(timeout=120, until_waiting=False)
    finally:
        stop.set()
        await worker
    assert job.status == "done", job


def _by_id(spans: tuple[ReadableSpan, ...]) -> dict[int, ReadableSpan]:
    return {s.context.span_id: s for s in spans if s.context is not None}


async def test_a_delegated_child_s_run_is_a_child_of_the_parent_s_delegate_span(
    spans: InMemorySpanExporter, store: EventStore, workspace: Path
) -> None:
    lead = await Queue(store).submit("lead", "get it read", workspace=workspace)
    await _worked(store, lead.id)
    got = spans.get_finished_spans()
    first, again = named(got, "invoke_agent lead")
    (helper,) = named(got, "invoke_agent helper")
    waited, answered = named(got, "execute_tool delegate")
    assert first.parent is None and attrs(waited)["steward.tool.waits"]
    assert parent_of(parent_of(waited, got), got) is first  # the call, in a step of the lead
    assert parent_of(helper, got) is waited  # the child's run under the call that made it
    assert parent_of(again, got) is first and parent_of(answered, got) is again
    assert len({s.context.trace_id for s in got if s.context is not None}) == 1


async def test_a_run_taken_over_from_a_dead_worker_goes_on_in_the_trace_its_job_kept(
    spans: InMemorySpanExporter, store: EventStore, workspace: Path
) -> None:
    queued = await Queue(store).submit("reader", "read it twice", workspace=workspace)
    jobs = JobStore(store.engine)
    claim = await jobs.claim("doomed-worker", lease_s=1.0)  # never renewed: it "dies" mid-run
    assert claim is not None and claim.job.id == queued.id
    agent, _ = await Worker(store, WorkerSettings())._open(claim.job)
    await Worker(store, WorkerSettings())._ensure_run(claim.job)
    run = await agent.resume(claim.job.id, force=True, fence=claim.fence, max_attempts=10)
    assert run.trace is not None
    began = run.trace.join(claim.job.traceparent)  # as the worker does
    assert began is not None
    await jobs.trace(claim, began)
    stream = run.stream()
    async for event in stream:  # the first call is made and recorded; then the process is gone
        if isinstance(event, ToolResultEvent):
            break
    kept = (await jobs.get(queued.id)).traceparent
    assert kept == began == run.trace.first
    await _worked(store, queued.id)  # another worker takes it over as the lease runs out
    got = spans.get_finished_spans()
    (resumed,) = named(got, "invoke_agent reader")  # the dead worker's own never ended: not sent
    _, trace_id, span_id, _ = kept.split("-")
    assert resumed.context is not None and resumed.parent is not None
    assert f"{resumed.context.trace_id:032x}" == trace_id and f"{resumed.parent.span_id:016x}" == span_id
    assert attrs(resumed)["steward.run.resumed"] is True
    first_call = named(got, "execute_tool read_file")[0]  # made by the dead worker, in the same trace
    assert first_call.context is not None and f"{first_call.context.trace_id:032x}" == trace_id
    await agent.aclose()
    del stream
