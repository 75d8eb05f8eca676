"""Replies to a waiting job: a human's answer or decision, a deadline passed, or a child job's end.

A job whose run waits holds no worker. A reply is kept on the job's row, naming the wait it
answers, and the job goes back to the queue in the same statement. The worker that claims it
rebuilds the run, which comes back waiting, and gives it the reply as a person at the terminal
would (``Run.answer_stream``, ``approve_stream``...): the reply's event is recorded by the
process that then goes on with the run. So an approved call runs in the process that recorded
its approval, and if that process dies mid-call, the next one sees an approval followed by
nothing and asks again: the call is never run twice on the strength of one approval.

Nothing is run here: whoever replies needs only the store, not the workspace or a model. The
row's status makes a reply happen once: of two replies to one wait, the second finds the job
queued already and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from steward.events import ApprovalGateEvent, WaitingEvent
from steward.jobs.store import Job, JobError, JobStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from steward.events import Event
    from steward.run import Run
    from steward.store.events import EventStore


@dataclass(frozen=True, slots=True)
class Answer:
    text: str


@dataclass(frozen=True, slots=True)
class Decision:
    approved: bool
    reason: str = ""
    by: str = "user"  # "user"; "job" when a child job ended; "timeout" when the deadline passed
    job: str = ""  # with by="job": the job that ended (the wait must be for it)


Reply = Answer | Decision

_TAIL = 3  # the wait is announced by at most two events (an approval gate, then ``waiting``)


async def reply(
    store: EventStore, jobs: JobStore, job_id: str, given: Reply, *, wait_id: str | None = None
) -> Job:
    """Keep ``given`` as the reply to what job ``job_id`` waits for, and queue the job again.
    With ``wait_id``, only if that is what it waits for (a person answers what they were shown)."""
    job = await jobs.get(job_id)
    if job.status != "waiting" or job.run_id is None:
        raise JobError(f"job {job.id} is {job.status}, not waiting; `steward jobs show {job.id}` says more")
    last_seq = await store.last_seq(job.run_id)
    tail = await store.events(job.run_id, after_seq=max(0, last_seq - _TAIL))
    wait = tail[-1] if tail else None
    if not isinstance(wait, WaitingEvent):
        raise JobError(
            f"job {job.id} is marked waiting but its run {job.run_id} is not; `steward jobs retry`"
        )
    if wait_id is not None and wait.id != wait_id:
        raise JobError(f"job {job.id} waits for {wait.id} now, not for {wait_id}; look again before replying")
    gate = tail[-2] if len(tail) > 1 and isinstance(tail[-2], ApprovalGateEvent) else None
    kept = _kept(job, wait, gate, given)
    return await jobs.requeue(job.id, reply=kept)


def _kept(job: Job, wait: WaitingEvent, gate: ApprovalGateEvent | None, given: Reply) -> dict[str, Any]:
    """The reply as the job's row keeps it, checked against the wait it answers."""
    match wait.kind, given:
        case "question", Answer(text=text):
            return {"wait": wait.id, "answer": text}
        case "approval", Decision(by="user" | "timeout") if gate is not None:
            return {"wait": wait.id, "approved": given.approved, "reason": given.reason, "by": given.by}
        case "job", Decision(by="job") if gate is not None:
            if given.job and gate.waits_for != given.job:
                raise JobError(f"job {job.id} waits for job {gate.waits_for}, not {given.job}")
            return {"wait": wait.id, "approved": True, "reason": given.reason, "by": "job"}
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


def replied(run: Run, kept: dict[str, Any] | None) -> AsyncIterator[Event] | None:
    """The run's stream, starting with the reply kept for it, if it answers what the run waits
    for now (a reply to an earlier wait, already given before a crash, is left alone)."""
    pending = run.pending
    if kept is None or run.status != "waiting" or pending is None or kept.get("wait") != pending.id:
        return None
    if "answer" in kept:
        return run.answer_stream(str(kept["answer"]))
    reason, by = str(kept.get("reason", "")), str(kept.get("by", "user"))
    if by == "timeout":
        return run.expire_stream()
    if kept.get("approved"):
        return run.approve_stream(by=by)
    return run.deny_stream(reason=reason)
