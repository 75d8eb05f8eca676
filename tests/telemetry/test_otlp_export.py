"""Spans sent over OTLP/HTTP by real ``steward`` processes to a receiver on loopback: a job that
delegates to another persona, both run by a real worker, in one trace with the right parents."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tests.telemetry.receiver import Received, Receiver, receiver

sys.path.insert(0, str(Path(__file__).parents[1] / "jobs" / "kit"))

from fleet_kit import Fleet


def end(message: str) -> dict[str, object]:
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


LEAD = [{"tool": "delegate", "args": {"role": "helper", "goal": "read the notes"}}, end("lead done")]
HELPER = [{"tool": "read_file", "args": {"path": "notes.txt"}}, end("the notes say hello")]


@pytest.fixture
def collector() -> Iterator[Receiver]:
    with receiver() as made:
        yield made


@pytest.fixture
def fleet(tmp_path: Path, db_url: str, collector: Receiver) -> Iterator[Fleet]:
    made = Fleet(tmp_path, db_url)
    (made.workspace / "notes.txt").write_text("hello\n")
    (made.workspace / "steward.toml").write_text(
        f'[telemetry]\nenabled = true\nendpoint = "{collector.url}"\nservice_name = "steward-test"\n'
        'headers_env = "TRACE_HEADERS"\n'
    )
    made.env |= {
        "TRACE_HEADERS": "x-team=agents,authorization=Bearer%20t0ken",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    made.persona("lead", LEAD, tools='["delegate"]')
    made.persona("helper", HELPER, tools='["read_file"]')
    try:
        yield made
    finally:
        made.stop()


def _one(spans: list[Received], name: str, **attributes: object) -> Received:
    found = [
        s for s in spans if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, (name, attributes, [(s.name, s.attributes) for s in spans])
    return found[0]


def test_a_delegated_child_s_run_hangs_under_the_parent_s_delegate_call_in_one_trace(
    fleet: Fleet, collector: Receiver
) -> None:
    lead = fleet.submit("lead", "get the notes read")
    fleet.worker("--lease", "10")
    jobs = fleet.wait_until(lambda jobs: any(j.id == lead and j.ended for j in jobs), what="the lead to end")
    assert next(j for j in jobs if j.id == lead).status == "done", [
        (j.role, j.status, j.error, j.result) for j in jobs
    ]
    child = next(j for j in jobs if j.parent_id == lead)
    # The lead runs twice (until it waits for its child, then with the child's answer); the child once.
    spans = collector.wait_for(
        lambda got: (
            sum(s.name.startswith("invoke_agent") for s in got) >= 3
            and sum(s.name.startswith("chat ") for s in got) >= 4
        )  # batched: whatever order they come in
    )
    first, again = sorted(
        (s for s in spans if s.name == "invoke_agent lead"),
        key=lambda s: bool(s.attributes["steward.run.resumed"]),
    )
    helper = _one(spans, "invoke_agent helper")
    delegate = _one(spans, "execute_tool delegate", **{"steward.tool.waits": child.id})
    answered = next(s for s in spans if s.name == "execute_tool delegate" and s is not delegate)
    read = _one(spans, "execute_tool read_file")
    assert len({s.trace_id for s in spans}) == 1  # one trace, across two jobs and three stretches
    assert first.parent_id == "" and first.attributes["gen_ai.agent.id"] == lead
    by_id = {s.span_id: s for s in spans}
    assert by_id[by_id[delegate.parent_id].parent_id] is first  # delegate: under a step of the lead
    assert helper.parent_id == delegate.span_id  # the child's run: under the call that made it
    assert by_id[by_id[read.parent_id].parent_id] is helper
    assert again.parent_id == first.span_id  # the lead going on: in its first stretch's trace
    assert answered.parent_id == again.span_id  # the approved call (the child's answer) runs there
    assert answered.attributes["gen_ai.tool.call.id"] == delegate.attributes["gen_ai.tool.call.id"]
    assert {s.service for s in spans} == {"steward-test"}
    assert all(
        h.get("x-team") == "agents" and h.get("authorization") == "Bearer t0ken" for h in collector.headers
    )
    # The jobs keep where their runs' traces are: the lead its first span, the child the delegate call.
    assert (fleet.job(lead).traceparent or "").split("-")[1:3] == [first.trace_id, first.span_id]
    assert (child.traceparent or "").split("-")[1:3] == [delegate.trace_id, delegate.span_id]


def _steward_run(tmp_path: Path, url: str, extra: str = "") -> subprocess.CompletedProcess[str]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("hello\n")
    (ws / "script.yaml").write_text(yaml.safe_dump(HELPER))
    (ws / "steward.toml").write_text(f'[telemetry]\nenabled = true\nendpoint = "{url}"\n{extra}')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OTEL_"))}
    env |= {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}
    done = subprocess.run(
        [sys.executable, "-m", "steward", "run", "--model", "scripted:script.yaml", "-q", "read the notes"],
        cwd=ws, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def test_a_short_steward_run_sends_its_spans_before_the_process_exits(
    tmp_path: Path, collector: Receiver
) -> None:
    """Spans are batched; a one-off ``steward run`` still delivers them (flushed at exit)."""
    _steward_run(tmp_path, collector.url)
    spans = collector.wait_for(lambda got: any(s.name.startswith("invoke_agent") for s in got), timeout=30)
    (run,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert run.parent_id == "" and run.attributes["steward.run.end_status"] == "solved"
    assert {s.name for s in spans} >= {"step", "execute_tool read_file"}
    assert all(s.trace_id == run.trace_id for s in spans)


def test_a_run_not_sampled_sends_nothing(tmp_path: Path, collector: Receiver) -> None:
    _steward_run(tmp_path, collector.url, "sample_ratio = 0.0\n")
    assert collector.spans == []  # the process has ended: whatever it would send was sent


def test_with_no_collector_listening_a_run_still_exits_and_says_its_spans_were_not_sent(
    tmp_path: Path,
) -> None:
    """The exporter would retry for its whole timeout at exit; a one-off run gives up soon, saying so."""
    with socket.socket() as taken:  # a port nobody listens on once it is closed
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    done = _steward_run(tmp_path, url)  # waited on: the subprocess's own timeout is the only bound
    warned = [line for line in done.stderr.splitlines() if "spans" in line and "not sent" in line]
    assert warned == [
        f"steward: spans not sent: the OpenTelemetry collector at {url}/v1/traces did not answer "
        "(from [telemetry] endpoint; gave up at exit)"
    ], done.stderr


def test_a_collector_that_answers_with_an_error_is_named_with_its_answer_and_the_fix(
    tmp_path: Path, collector: Receiver
) -> None:
    """A wrong path gets a 404: the run says the collector answered so, in Steward's words only
    (not "did not answer", and none of the exporter's own log lines)."""
    url = f"{collector.url}/otlp"  # the receiver takes /v1/traces only
    done = _steward_run(tmp_path, url)
    warned = [line for line in done.stderr.splitlines() if "spans" in line or "export" in line.lower()]
    assert len(warned) == 1, done.stderr
    assert warned[0].startswith(
        f"steward: spans not sent: the OpenTelemetry collector at {url}/v1/traces answered HTTP 404"
    ), warned
    assert "give [telemetry] endpoint the collector's base URL" in warned[0], warned
