"""The Python API of the queue (``Queue``, ``JobHandle``) against a real worker process, on both
engines: events followed live in order, waiting for the end, a question answered from Python,
replies and cancels refused or done with a clear message, typed results; and ``steward submit
--schema`` refusing a schema it cannot read before anything is queued."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fleet_kit import Fleet

from steward.errors import ConfigError, StewardError
from steward.events import Event, WaitingEvent
from steward.jobs.api import JobHandle, Queue
from steward.jobs.store import JobError


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


QUESTION = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Which colour?"}}
TIMEOUT_S = 180  # a bound on waiting for outcomes, not a figure: a busy machine must pass


@pytest.fixture
async def queue(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Queue]:
    """The fleet's queue, opened in this process (which sees the personas the workers see)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", fleet.env["XDG_CONFIG_HOME"])
    async with await Queue.open(fleet.db_url) as opened:
        yield opened


async def followed(job: JobHandle, after_seq: int = 0) -> list[Event]:
    async with asyncio.timeout(TIMEOUT_S):
        return [event async for event in job.events(after_seq=after_seq)]


def in_order(events: list[Event], first: int = 1) -> None:
    """Every seq once, in order, from ``first``: no gap, no duplicate."""
    assert [e.seq for e in events] == list(range(first, first + len(events))), [e.seq for e in events]


UNTIL_GO = "until [ -f go ]; do sleep 0.05; done"  # a call that lasts until the test says go


async def test_events_follow_the_run_in_order_as_the_worker_writes_them(fleet: Fleet, queue: Queue) -> None:
    fleet.persona(
        "appender",
        [{"tool": "bash", "args": {"command": f"{UNTIL_GO}; echo ran >> ran.txt"}}, ended("appended")],
    )
    job = await queue.submit("appender", "append a line", workspace=fleet.workspace)
    assert (await job.get()).status == "queued"
    fleet.worker("--lease", "5")
    events: list[Event] = []
    live = False  # an event was seen before the job ended: followed, not read afterwards
    async with asyncio.timeout(TIMEOUT_S):
        async for event in job.events():
            events.append(event)
            live = live or not (await job.get()).ended
            (fleet.workspace / "go").touch()  # the call ends only once an event was followed
    in_order(events)
    types = [e.type for e in events]
    assert types[0] == "run_start" and types[-1] == "done" and "tool_result" in types, types
    assert live, types
    assert all(e.run_id == job.id for e in events)
    done = await job.wait(timeout=TIMEOUT_S)
    assert done.status == "done" and done.result == "appended" and done.error is None, done
    assert (fleet.workspace / "ran.txt").read_text() == "ran\n"
    # Read again afterwards: the same events; from a seq on: the rest only; not following: at once.
    in_order(again := await followed(job))
    assert [e.type for e in again] == types
    assert [e.seq for e in await followed(job, after_seq=3)] == list(range(4, len(types) + 1))
    assert len([e async for e in job.events(follow=False)]) == len(types)
    assert (await queue.job(job.id[:6]).get()).id == job.id  # a handle by a prefix of the id


async def test_a_question_stops_the_events_and_an_answer_from_python_queues_it_again(
    fleet: Fleet, queue: Queue
) -> None:
    fleet.persona("asker", [QUESTION, ended("painted it green")])
    job = await queue.submit("asker", "paint the shed", workspace=fleet.workspace)
    fleet.worker("--lease", "5")
    asked = await followed(job)
    in_order(asked)
    wait = asked[-1]
    assert isinstance(wait, WaitingEvent) and wait.kind == "question" and "Which colour?" in wait.question
    waiting = await job.wait(timeout=TIMEOUT_S)
    assert waiting.status == "waiting" and waiting.lease_owner is None, waiting
    with pytest.raises(JobError, match="answer is empty"):
        await job.answer("  ")
    with pytest.raises(JobError, match="asks a question, not for approval"):
        await job.approve()
    requeued = await job.answer("green")
    assert requeued.status == "queued", requeued
    done = await job.wait(timeout=TIMEOUT_S)
    assert done.status == "done" and done.result == "painted it green", done
    rest = await followed(job, after_seq=wait.seq)
    in_order(rest, first=wait.seq + 1)
    assert rest[0].type == "answer" and getattr(rest[0], "answer", None) == "green"
    assert rest[-1].type == "done"
    with pytest.raises(JobError, match=f"job {job.id} is done, not waiting"):
        await job.answer("blue")  # the first answer was the answer


async def test_replies_to_a_job_that_does_not_wait_are_refused_and_a_queued_job_is_cancelled(
    fleet: Fleet, queue: Queue
) -> None:
    fleet.persona("quick", [ended("ok")], tools="[]")
    job = await queue.submit("quick", "nothing much", workspace=fleet.workspace)  # no worker runs it
    for reply in (job.answer("x"), job.approve(), job.deny("no")):
        with pytest.raises(JobError, match=f"job {job.id} is queued, not waiting"):
            await reply
    assert (await job.get()).status == "queued"
    cancelled = await job.cancel()
    assert cancelled.status == "cancelled" and cancelled.ended and cancelled.finished_at is not None
    assert cancelled.error == "cancelled by the user"
    assert (await job.wait(timeout=1)).status == "cancelled"
    assert [e async for e in job.events()] == []  # it never ran: nothing to follow, and no hang
    with pytest.raises(JobError, match="already ended"):
        await job.cancel()
    with pytest.raises(JobError, match="is cancelled, not waiting"):
        await job.answer("x")
    with pytest.raises(JobError, match="no job"):
        await queue.job("ffffffffffff").get()


async def test_submit_refuses_bad_input_before_anything_is_queued(fleet: Fleet, queue: Queue) -> None:
    fleet.persona("quick", [ended("ok")], tools="[]")
    with pytest.raises(ConfigError, match=r"no persona 'nobody'.*quick"):
        await queue.submit("nobody", "x", workspace=fleet.workspace)
    with pytest.raises(ConfigError):
        await queue.submit("quick", "x", workspace=fleet.workspace / "no" / "such" / "dir")
    with pytest.raises(StewardError):
        await queue.submit("quick", "  ", workspace=fleet.workspace)
    assert await queue.list() == []


async def test_a_typed_job_ends_with_its_answer_as_normalized_json(fleet: Fleet, queue: Queue) -> None:
    schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    fleet.persona("counter", [{"text": "three"}, {"text": '```json\n{ "n" :3 }\n```'}], tools="[]")
    job = await queue.submit("counter", "count them", workspace=fleet.workspace, output_schema=schema)
    assert (await job.get()).output_schema == schema
    fleet.worker("--lease", "5")
    done = await job.wait(timeout=TIMEOUT_S)
    assert done.status == "done" and done.result == '{"n": 3}', done
    assert json.loads(done.result) == {"n": 3}


async def test_a_job_that_delegates_is_waited_for_until_it_ends(fleet: Fleet, queue: Queue) -> None:
    """Waiting for its child is not waiting for a person: ``wait`` and ``events`` go on through it."""
    fleet.persona(
        "lead",
        [{"tool": "delegate", "args": {"role": "helper", "goal": "say hello"}}, ended("lead done")],
        tools='["delegate", "bash"]',
    )
    fleet.persona("helper", [{"tool": "bash", "args": {"command": "echo ran > child.txt"}}, ended("hello")])
    job = await queue.submit("lead", "get a greeting", workspace=fleet.workspace)
    fleet.worker("--lease", "5")  # one slot: the lead gives it up while its child runs
    done = await job.wait(timeout=TIMEOUT_S)
    assert done.status == "done" and done.result == "lead done", done
    events = await followed(job)
    in_order(events)
    waits = [e for e in events if isinstance(e, WaitingEvent)]
    assert [w.kind for w in waits] == ["job"] and events[-1].type == "done"
    (child,) = [j for j in await queue.list() if j.parent_id == job.id]
    assert child.status == "done" and child.result == "hello"
    assert (fleet.workspace / "child.txt").read_text() == "ran\n"  # its call ran, while the lead waited


def test_submit_with_a_schema_file_it_cannot_read_says_so_and_queues_nothing(
    fleet: Fleet, tmp_path: Path
) -> None:
    fleet.persona("quick", [ended("ok")], tools="[]")
    missing = fleet.steward("submit", "--role", "quick", "x", "--schema", "no-such.schema.json")
    assert missing.returncode != 0 and "no-such.schema.json" in missing.stderr, missing.stderr
    assert "no such file" in missing.stderr and "Traceback" not in missing.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "object",')
    broken = fleet.steward("submit", "--role", "quick", "x", "--schema", str(bad))
    assert broken.returncode != 0 and "not valid JSON" in broken.stderr and "Traceback" not in broken.stderr
    bad.write_text('{"type": "no-such-type"}')
    invalid = fleet.steward("submit", "--role", "quick", "x", "--schema", str(bad))
    assert invalid.returncode != 0 and "JSON Schema" in invalid.stderr and "Traceback" not in invalid.stderr
    assert fleet.jobs() == []
    good = tmp_path / "good.json"
    good.write_text('{"type": "object", "required": ["n"]}')
    job_id = fleet.submit("quick", "x", "--schema", str(good))
    assert fleet.job(job_id).output_schema == {"type": "object", "required": ["n"]}


async def test_retrying_a_job_whose_user_has_another_active_job_says_which(tmp_path: Path) -> None:
    async with await Queue.open(f"sqlite:///{tmp_path}/q.db") as queue:
        first = await queue.submit("coder", "one", workspace=tmp_path, user="alice")
        await first.cancel()
        second = await queue.submit("coder", "two", workspace=tmp_path, user="alice")
        with pytest.raises(JobError, match=f"already has an active job {second.id}"):
            await queue.jobs.retry(first.id)
        assert (await first.get()).status == "cancelled"


async def test_a_delegated_job_cannot_be_switched_to_autonomous_whoever_asks(tmp_path: Path) -> None:
    async with await Queue.open(f"sqlite:///{tmp_path}/q.db") as queue:
        parent = await queue.submit("coder", "lead", workspace=tmp_path)
        child, _ = await queue.jobs.submit("coder", "help", workspace=str(tmp_path), parent_id=parent.id)
        with pytest.raises(JobError, match="keeps the mode its parent gave it"):
            await queue.job(child.id).switch_mode("autonomous")
        assert (await queue.job(child.id).switch_mode("structured")).mode == "structured"
        assert (await parent.switch_mode("autonomous")).mode == "autonomous"
