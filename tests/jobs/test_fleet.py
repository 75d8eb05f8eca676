"""The fleet with real worker processes, on both engines: a job that waits gives its worker back and
an answer queues it again; delegation to a child job and back, with no wider permissions; a
worker frozen past its lease is fenced; stopping drains at a safe point, twice stops at once;
cancelling a running job stops its processes; dead letters; priorities."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from typing import Any

from fleet_kit import Fleet

from steward.events import ToolResultEvent
from steward.store.events import open_store


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


UNTIL_GO = "until [ -f go ]; do sleep 0.05; done"  # a call that lasts until the test says go


def said_stopping(worker: subprocess.Popen[str]) -> None:
    """Until the worker said it heard the stop (its stderr, line by line)."""
    assert worker.stderr is not None
    for line in worker.stderr:  # bounded by the worker's output: it ends when the worker does
        if "stopping" in line:
            return
    raise AssertionError("the worker ended without saying it was stopping")


def events_of(fleet: Fleet, run_id: str) -> list[object]:
    async def read() -> list[object]:
        async with await open_store(fleet.db_url) as store:
            return list(await store.events(run_id))

    return asyncio.run(read())


def tool_results(fleet: Fleet, run_id: str) -> list[ToolResultEvent]:
    return [e for e in events_of(fleet, run_id) if isinstance(e, ToolResultEvent)]


def test_a_waiting_job_frees_its_worker_and_an_answer_queues_it_again(fleet: Fleet) -> None:
    question = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Which colour?"}}
    fleet.persona("asker", [question, ended("painted it")])
    fleet.persona("appender", [{"tool": "bash", "args": {"command": "echo ran >> ran.txt"}}, ended("ok")])
    asker = fleet.submit("asker", "paint the shed")
    fleet.worker("--lease", "5")  # one slot
    fleet.wait_until(lambda jobs: any(j.id == asker and j.status == "waiting" for j in jobs), what="a wait")
    other = fleet.submit("appender", "append")
    fleet.wait_until(
        lambda jobs: any(j.id == other and j.status == "done" for j in jobs), what="the other job"
    )
    wrong = fleet.steward("approve", asker)
    assert wrong.returncode != 0 and "asks a question" in wrong.stderr
    answered = fleet.steward("answer", asker, "green")
    assert answered.returncode == 0, answered.stderr
    assert "queued again" in answered.stdout or "is queued" in answered.stdout
    again = fleet.steward("answer", asker, "blue")
    (job,) = [j for j in fleet.ended(2) if j.id == asker]
    assert job.status == "done" and job.result == "painted it", job
    assert again.returncode != 0  # the first answer was the answer
    answers = [e for e in events_of(fleet, asker) if type(e).__name__ == "AnswerEvent"]
    assert [getattr(a, "answer", None) for a in answers] == ["green"]


def test_delegation_runs_a_child_job_and_returns_its_answer_without_wider_permissions(fleet: Fleet) -> None:
    fleet.persona(
        "lead",
        [{"tool": "delegate", "args": {"role": "helper", "goal": "say hello"}}, ended("lead done")],
        tools='["delegate"]',
    )
    fleet.persona(
        "helper",
        [{"tool": "bash", "args": {"command": "touch escaped"}}, ended("hello from the helper")],
        tools='["bash", "read_file"]',
    )
    lead = fleet.submit("lead", "get a greeting")
    fleet.worker("--lease", "5")  # one slot: the lead must give it up for its child to run
    jobs = fleet.ended(2)
    parent = next(j for j in jobs if j.id == lead)
    child = next(j for j in jobs if j.parent_id == lead)
    assert parent.status == "done" and parent.result == "lead done", parent
    assert child.status == "done" and child.role == "helper" and child.result == "hello from the helper"
    (delegated,) = [r for r in tool_results(fleet, lead) if r.call_id and "hello from the helper" in r.output]
    assert delegated.status == "completed"
    # The helper may use bash, but the lead may not: its child may not either.
    assert not (fleet.workspace / "escaped").exists()
    shown = fleet.steward("jobs", "show", lead)
    assert f"child: {child.id}" in shown.stdout and "done" in shown.stdout
    assert f"parent: {lead}" in fleet.steward("jobs", "show", child.id).stdout
    refused = tool_results(fleet, child.id)[0]
    assert refused.status == "failed" and "bash" in refused.output


def test_a_worker_frozen_past_its_lease_is_fenced_out(fleet: Fleet) -> None:
    fleet.persona(
        "slow",
        [
            {"tool": "bash", "args": {"command": f"echo first >> ran.txt; touch started; {UNTIL_GO}"}},
            {"tool": "bash", "args": {"command": "echo second >> ran.txt"}},
            ended("finished"),
        ],
    )
    job_id = fleet.submit("slow", "two calls")
    frozen = fleet.worker("--lease", "2")
    fleet.wait_for_file("started")
    frozen.send_signal(signal.SIGSTOP)  # paused mid-call; its lease runs out
    # The one that takes over holds a long lease: on a loaded machine a 2 s lease of its own
    # could lapse between heartbeats too, and the job would be taken a third time.
    fleet.worker("--lease", "60", host="machine-b")
    fleet.wait_until(lambda jobs: jobs[0].fence == 2, what="the takeover")
    # The frozen worker comes back while the other goes on: its call ends, and whatever it
    # records for the job now is refused (the other waits for the workspace until then).
    frozen.send_signal(signal.SIGCONT)
    (fleet.workspace / "go").touch()
    (job,) = fleet.ended(1)
    assert job.status == "done" and job.result == "finished" and job.attempts == 1, job
    assert job.lease_owner is None and job.fence == 2
    assert frozen.poll() is None  # it lives on as a worker; only that job is no longer its
    assert (fleet.workspace / "ran.txt").read_text() == "first\nsecond\n"  # nothing ran twice
    first_call = tool_results(fleet, job_id)[0]
    assert first_call.error_category == "interrupted"  # the new worker's record, not the frozen one's
    assert fleet.job(job_id).status == "done"


def test_stopping_lets_the_call_finish_and_a_second_signal_stops_at_once(fleet: Fleet) -> None:
    fleet.persona(
        "steps",
        [
            {"tool": "bash", "args": {"command": f"touch started; {UNTIL_GO}; echo one >> ran.txt"}},
            {"tool": "bash", "args": {"command": "echo two >> ran.txt"}},
            ended("both"),
        ],
    )
    drained = fleet.submit("steps", "drain me")
    first = fleet.worker("--lease", "5")
    fleet.wait_for_file("started")
    first.send_signal(signal.SIGTERM)
    said_stopping(first)
    (fleet.workspace / "go").touch()  # the call ends after the stop was asked for
    first.communicate(timeout=60)
    assert (fleet.workspace / "ran.txt").read_text() == "one\n"  # the call finished; the next did not start
    job = fleet.job(drained)
    assert job.status == "queued" and job.attempts == 0, job  # given back, not lost
    fleet.worker("--lease", "5")
    fleet.wait_until(lambda jobs: jobs[0].ended, what="the drained job")
    assert fleet.job(drained).status == "done"
    assert (fleet.workspace / "ran.txt").read_text() == "one\ntwo\n"

    (fleet.workspace / "started").unlink()
    (fleet.workspace / "go").unlink()
    fleet.stop()
    (fleet.workspace / "ran.txt").unlink()
    cut = fleet.submit("steps", "cut me short")
    hasty = fleet.worker("--lease", "5")
    fleet.wait_for_file("started")
    hasty.send_signal(signal.SIGTERM)
    said_stopping(hasty)  # the first one was heard: this is a second
    hasty.send_signal(signal.SIGTERM)
    hasty.communicate(timeout=60)
    assert fleet.job(cut).status == "queued"
    (fleet.workspace / "go").touch()
    fleet.worker("--lease", "5")
    fleet.wait_until(lambda jobs: fleet.job(cut).ended, what="the cut job")
    assert fleet.job(cut).status == "done"
    assert (fleet.workspace / "ran.txt").read_text() == "two\n"  # the cut call was not run again


def test_cancelling_a_running_job_stops_its_processes_within_seconds(fleet: Fleet) -> None:
    fleet.persona(
        "sleeper", [{"tool": "bash", "args": {"command": "touch started; sleep 37.25"}}, ended("x")]
    )
    job_id = fleet.submit("sleeper", "sleep")
    fleet.worker("--lease", "10")
    fleet.wait_for_file("started")
    cancelled = fleet.steward("jobs", "cancel", job_id)
    assert cancelled.returncode == 0, cancelled.stderr
    fleet.wait_until(lambda jobs: jobs[0].status == "cancelled", what="the cancel")

    def sleeping() -> bool:
        return subprocess.run(["pgrep", "-f", "sleep 37.25"], capture_output=True).returncode == 0

    # Stopped, not left to end by itself (it would take 37 s): the outcome, waited for.
    fleet.wait_until(lambda _jobs: not sleeping(), timeout=30, what="the job's processes to stop")


def test_a_job_that_keeps_losing_its_worker_is_dead_with_the_reason(fleet: Fleet) -> None:
    crash = {"tool": "bash", "args": {"command": "touch started; sleep 30"}}
    fleet.persona("crashy", [crash, crash, crash, ended("x")])  # each takeover meets the next call
    job_id = fleet.submit("crashy", "crash", "--max-attempts", "2")
    for _ in range(2):
        worker = fleet.worker("--lease", "1")
        fleet.wait_for_file("started")
        (fleet.workspace / "started").unlink()
        worker.kill()
        worker.communicate()  # the next worker takes the job over when its lease runs out
    fleet.worker("--lease", "1")
    (job,) = fleet.ended(1)
    assert job.status == "dead" and "stopped 2 times" in (job.error or ""), job
    shown = fleet.steward("jobs", "show", job_id)
    assert "dead" in shown.stdout and "steward jobs retry" in shown.stdout


def test_higher_priority_jobs_start_first(fleet: Fleet) -> None:
    fleet.persona("quick", [ended("ok")], tools="[]")
    low = fleet.submit("quick", "low", "--priority", "0")
    high = fleet.submit("quick", "high", "--priority", "9")
    mid = fleet.submit("quick", "mid", "--priority", "5")
    fleet.worker()
    jobs = fleet.ended(3)
    started = sorted(jobs, key=lambda j: j.started_at or 0)
    assert [j.id for j in started] == [high, mid, low]


def test_submit_refuses_bad_input_at_once(fleet: Fleet) -> None:
    fleet.persona("quick", [ended("ok")], tools="[]")
    unknown = fleet.steward("submit", "--role", "nobody", "x")
    assert unknown.returncode != 0 and "nobody" in unknown.stderr and "Traceback" not in unknown.stderr
    missing = fleet.steward("submit", "--role", "quick", "x", "-w", "no/such/dir")
    assert missing.returncode != 0 and "no/such/dir" in missing.stderr and "Traceback" not in missing.stderr
    (fleet.workspace / "personas" / "broken.toml").write_text('role = "x"\ntools = "bash"\n')
    broken = fleet.steward("submit", "--role", "broken", "x")
    assert broken.returncode != 0 and "tools" in broken.stderr and "Traceback" not in broken.stderr
    first = fleet.submit("quick", "one", "--user", "ana")
    second = fleet.steward("submit", "--role", "quick", "two", "--user", "ana")
    assert second.returncode != 0 and first in second.stderr and "Traceback" not in second.stderr
    assert fleet.jobs() and all(j.status == "queued" for j in fleet.jobs())
    bogus = fleet.steward("jobs", "list", "--status", "bogus")
    assert bogus.returncode != 0 and "not a job state" in bogus.stderr and "queued" in bogus.stderr


def test_follow_streams_the_job_s_events_as_a_worker_writes_them(fleet: Fleet) -> None:
    fleet.persona("appender", [{"tool": "bash", "args": {"command": "echo ran >> ran.txt"}}, ended("ok")])
    fleet.worker("--lease", "5")
    followed = fleet.steward("submit", "--role", "appender", "append", "--follow", "--json")
    assert followed.returncode == 0, followed.stderr
    lines = followed.stdout.splitlines()
    job_id = lines[0]
    types = [json.loads(line)["type"] for line in lines[1:-1]]
    assert types[0] == "run_start" and "tool_result" in types and types[-1] == "done"
    assert lines[-1] == f"job {job_id} done: ok"


def test_the_hook_is_told_when_a_job_waits_and_when_it_ends(fleet: Fleet) -> None:
    heard = fleet.workspace.parent / "heard.jsonl"
    record = f"import sys; open({str(heard)!r}, 'a').write(sys.stdin.read() + chr(10))"
    (fleet.workspace / "steward.toml").write_text(
        f'[notify]\ncommand = [{json.dumps(sys.executable)}, "-c", {json.dumps(record)}]\n'
    )
    question = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Go on?"}}
    fleet.persona("asker", [question, ended("went on")])
    job_id = fleet.submit("asker", "ask first")
    fleet.worker("--lease", "5")
    fleet.wait_until(lambda jobs: jobs[0].status == "waiting", what="the wait")
    assert fleet.steward("answer", job_id, "yes").returncode == 0
    fleet.ended(1)
    deadline = time.monotonic() + 120  # the hook runs after the job ended: waited for, not timed
    while len(heard.read_text().splitlines() if heard.exists() else []) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    told = [json.loads(line) for line in heard.read_text().splitlines()]
    assert [(t["event"], t["job"]["id"], t["job"]["status"]) for t in told] == [
        ("waiting", job_id, "waiting"),
        ("done", job_id, "done"),
    ]
    assert told[1]["job"]["result"] == "went on"


def test_random_kills_of_workers_on_two_machines_lose_no_job_and_run_no_call_twice(fleet: Fleet) -> None:
    """N workers on two "machines" (host ids), M jobs, workers SIGKILLed at random mid-call and
    replaced: every job ends done exactly once, and no call of any job ran twice."""
    import random
    import shutil

    script = [
        {"tool": "bash", "args": {"command": "echo a >> ran.txt; sleep 0.4"}},
        {"tool": "bash", "args": {"command": "echo b >> ran.txt; sleep 0.4"}},
        ended("finished"),
    ]
    fleet.persona("worker", script)
    workspaces = []
    for n in range(8):  # one workspace per job: each job's calls are counted in its own file
        ws = fleet.workspace.parent / f"ws{n}"
        shutil.copytree(fleet.workspace / "personas", ws / "personas")
        workspaces.append(ws)
    ids = [
        fleet.submit("worker", f"job {n}", "-w", str(ws), "--max-attempts", "20")
        for n, ws in enumerate(workspaces)
    ]
    chance = random.Random(13)
    hosts = ["machine-a", "machine-b"]
    live = [fleet.worker("--lease", "1.5", host=hosts[n % 2]) for n in range(3)]
    kills = 0
    for _ in range(10):  # counted kills, not a time window: a busy machine gets as many
        if all(j.ended for j in fleet.jobs()):
            break
        time.sleep(chance.uniform(0.6, 1.4))  # the chaos's pace, not a wait for anything
        victim = live.pop(chance.randrange(len(live)))
        victim.kill()
        victim.communicate()
        kills += 1
        live.append(fleet.worker("--lease", "1.5", host=chance.choice(hosts)))
    jobs = fleet.ended(8, timeout=90)
    assert kills >= 5
    assert sorted(j.id for j in jobs) == sorted(ids)  # none lost, none made twice
    assert all(j.status == "done" and j.result == "finished" for j in jobs), jobs
    assert any(j.attempts > 0 for j in jobs)  # some were taken over
    for ws in workspaces:
        lines = (ws / "ran.txt").read_text().split()
        assert lines in (["a", "b"], ["a"], ["b"], []), (ws, lines)  # each call ran at most once
    for job in jobs:
        results = [r.call_id for r in tool_results(fleet, job.id)]
        assert len(results) == len(set(results))  # one result per call


def test_an_approval_is_given_from_the_command_line_or_expires_by_its_deadline(fleet: Fleet) -> None:
    script = [{"tool": "bash", "args": {"command": "echo approved >> ran.txt"}}, ended("over")]
    # The approved job's deadline is far off, so that CLI start-ups on a loaded machine cannot
    # outlast it; the forgotten one's is short, since the test waits for it to pass.
    fleet.persona("careful", script, extra='[policy]\nask = ["bash"]\napproval_timeout_s = 600\n')
    fleet.persona("hasty", script, extra='[policy]\nask = ["bash"]\napproval_timeout_s = 2\n')
    first = fleet.submit("careful", "ask and be approved")
    fleet.worker("--lease", "5")
    fleet.wait_until(lambda jobs: jobs[0].status == "waiting", what="the approval")
    refused = fleet.steward("answer", first, "yes")
    assert refused.returncode != 0 and "approve/deny" in refused.stderr
    approved = fleet.steward("approve", first)
    assert approved.returncode == 0, approved.stderr
    fleet.ended(1)
    assert fleet.job(first).status == "done", fleet.job(first)
    assert (fleet.workspace / "ran.txt").read_text() == "approved\n", events_of(fleet, first)

    second = fleet.submit("hasty", "ask and be forgotten")
    fleet.ended(2)  # nobody answers: at the deadline its default (deny) applies
    assert fleet.job(second).status == "done"
    assert (fleet.workspace / "ran.txt").read_text() == "approved\n"  # the expired call did not run
    decisions = [
        getattr(e, "decision", "")
        for e in events_of(fleet, second)
        if type(e).__name__ == "ApprovalResultEvent"
    ]
    assert decisions == ["expired"]


def test_a_child_cancelled_from_the_command_line_wakes_its_waiting_parent(fleet: Fleet) -> None:
    fleet.persona(
        "lead",
        [{"tool": "delegate", "args": {"role": "helper", "goal": "never runs"}}, ended("lead done")],
        tools='["delegate"]',
    )
    fleet.persona("helper", [ended("unused")], tools="[]")
    lead = fleet.submit("lead", "delegate, then go on")
    fleet.worker("--lease", "5", "--role", "lead")  # nobody takes the helper's job
    jobs = fleet.wait_until(lambda jobs: any(j.parent_id == lead for j in jobs), what="the child")
    child = next(j for j in jobs if j.parent_id == lead)
    fleet.wait_until(lambda jobs: fleet.job(lead).status == "waiting", what="the parent's wait")
    assert fleet.steward("jobs", "cancel", child.id).returncode == 0
    fleet.wait_until(lambda jobs: fleet.job(lead).ended, timeout=30, what="the parent's end")
    assert fleet.job(lead).status == "done"
    (told,) = [r for r in tool_results(fleet, lead) if child.id in r.output]
    assert told.status == "failed" and "cancelled" in told.output
