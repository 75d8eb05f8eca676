"""Replies to a waiting job: a human's answer or decision, or a child job's end, into its run's log.

A job whose run waits holds no worker. A reply is written where the run would have written
it had it been running, right after its ``waiting`` event (the same ``answer`` or
``approval_result`` event), and the job goes back to the queue; the worker that claims it
rebuilds the run from its log and meets the reply there, exactly as a run resumed by hand
does. Nothing is run here: whoever replies needs only the store, not the workspace or a model.

The log's own sequence numbers make a reply happen once: two replies racing for the same
wait append at the same seq, and the second is refused. A reply recorded by a process that
stopped before putting the job back in the queue is found by the next reply, which requeues.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from steward.errors import StewardError
from steward.events import AnswerEvent, ApprovalGateEvent, ApprovalResultEvent, Event, WaitingEvent
from steward.jobs.store import Job, JobError, JobStore

if TYPE_CHECKING:
    from steward.store.events import EventStore


@dataclass(frozen=True, slots=True)
class Answer:
    text: str


@dataclass(frozen=True, slots=True)
class Decision:
    approved: bool
    reason: str = ""
    by: str = "user"  # "user", or "job" when a child job ended
    job: str = ""  # with by="job": the job that ended (the wait must be for it)


Reply = Answer | Decision

_TAIL = 3  # the wait is announced by at most two events (an approval gate, then ``waiting``)


async def reply(store: EventStore, jobs: JobStore, job_id: str, given: Reply) -> Job:
    """Record ``given`` as the reply to what job ``job_id`` waits for, and queue the job again."""
    job = await jobs.get(job_id)
    if job.status != "waiting" or job.run_id is None:
        raise JobError(f"job {job.id} is {job.status}, not waiting; `steward jobs show {job.id}` says more")
    last_seq = await store.last_seq(job.run_id)
    tail = await store.events(job.run_id, after_seq=max(0, last_seq - _TAIL))
    if tail and isinstance(tail[-1], (AnswerEvent, ApprovalResultEvent)):
        return await jobs.requeue(job.id)  # replied before, by a process that stopped short of this
    wait = tail[-1] if tail else None
    if not isinstance(wait, WaitingEvent):
        raise JobError(
            f"job {job.id} is marked waiting but its run {job.run_id} is not; `steward jobs retry`"
        )
    gate = tail[-2] if len(tail) > 1 and isinstance(tail[-2], ApprovalGateEvent) else None
    event = _reply_event(job, wait, gate, given)
    event.seq, event.run_id, event.session_id, event.ts = (
        wait.seq + 1,
        wait.run_id,
        wait.session_id,
        time.time(),
    )
    try:
        await store.append(job.run_id, [event])
    except StewardError:
        raise JobError(f"job {job.id} was answered by someone else just now; nothing changed") from None
    return await jobs.requeue(job.id)


def _reply_event(job: Job, wait: WaitingEvent, gate: ApprovalGateEvent | None, given: Reply) -> Event:
    match wait.kind, given:
        case "question", Answer(text=text):
            return AnswerEvent(id=wait.id, answer=text)
        case "approval", Decision(by="user") if gate is not None:
            approved, by, reason = given.approved, given.by, given.reason
            if time.time() > gate.deadline:  # too late: what the gate said happens at its deadline
                approved, by = gate.default == "allow", "timeout"
                reason = reason or f"the approval expired; the default is to {gate.default}"
            decision = "approved" if approved else ("expired" if by == "timeout" else "denied")
            return ApprovalResultEvent(id=wait.id, tool=gate.tool, decision=decision, by=by, reason=reason)
        case "job", Decision(by="job") if gate is not None:
            if given.job and gate.waits_for != given.job:
                raise JobError(f"job {job.id} waits for job {gate.waits_for}, not {given.job}")
            return ApprovalResultEvent(
                id=wait.id, tool=gate.tool, decision="approved", by="job", reason=given.reason
            )
        case "question", Decision():
            raise JobError(
                f'job {job.id} asks a question, not for approval: steward answer {job.id} "ANSWER"'
            )
        case "approval", _:
            raise JobError(
                f"job {job.id} waits for an approval, not an answer: steward approve/deny {job.id}"
            )
        case "job", _:
            raise JobError(
                f"job {job.id} waits for the job it delegated to ({gate.waits_for if gate else '?'}), "
                "not for a person; it goes on by itself when that job ends"
            )
        case _:
            raise JobError(f"job {job.id} waits for something this Steward does not know ({wait.kind!r})")
