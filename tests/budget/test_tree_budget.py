"""Budgets across a job tree, with real worker processes on both engines: a delegated child
stopped by its own budget while its parent goes on with what it has, and children running at
once in two workers that together cannot pass the tree's budget (each model call holds its
share in the store first)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1] / "jobs" / "kit"))  # `from fleet_kit import Fleet`

import pytest
from fleet_kit import Fleet

from steward.budget.ledger import Ledger, RunTotals, ScopeState
from steward.events import SignalEvent, ToolResultEvent
from steward.jobs.store import JobStore
from steward.store.events import open_store


@pytest.fixture
def fleet(tmp_path: Path, db_url: str) -> Any:
    made = Fleet(tmp_path, db_url)
    for n in range(40):
        (made.workspace / f"notes{n}.txt").write_text(f"note {n}\n")
    try:
        yield made
    finally:
        made.stop()


def ended(message: str) -> dict[str, Any]:
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


def reads(count: int) -> list[dict[str, Any]]:
    """Reads of different files (the same call again and again would end the run as stuck)."""
    return [{"tool": "read_file", "args": {"path": f"notes{n}.txt"}} for n in range(count)]


def spent(fleet: Fleet, run_ids: list[str], scope: str) -> tuple[list[RunTotals], ScopeState]:
    async def read() -> tuple[list[RunTotals], ScopeState]:
        async with await open_store(fleet.db_url) as store:
            ledger = Ledger(store.engine)
            totals = [t for r in run_ids if (t := await ledger.run(r)) is not None]
            (state,) = await ledger.states([scope])
            return totals, state

    return asyncio.run(read())


def events_of(fleet: Fleet, run_id: str) -> list[object]:
    async def read() -> list[object]:
        async with await open_store(fleet.db_url) as store:
            return list(await store.events(run_id))

    return asyncio.run(read())


def test_a_child_out_of_budget_stops_and_its_parent_goes_on_with_what_it_has(fleet: Fleet) -> None:
    fleet.persona(
        "lead",
        [{"tool": "delegate", "args": {"role": "helper", "goal": "read the notes"}}, ended("lead done")],
        tools='["delegate", "read_file"]',
    )
    fleet.persona("helper", [*reads(6), ended("read it all")], tools='["read_file"]',
                  extra="[budget]\ntool_calls = 2\n")  # fmt: skip
    lead = fleet.submit("lead", "get the notes read")
    fleet.worker("--lease", "5")
    jobs = fleet.ended(2)
    parent = next(j for j in jobs if j.id == lead)
    child = next(j for j in jobs if j.parent_id == lead)
    assert child.status == "failed" and "budget of 2 tool calls is used up" in (child.error or ""), child
    assert parent.status == "done" and parent.result == "lead done", parent
    # The parent read why its child stopped, as the delegate call's result.
    delegated = [e for e in events_of(fleet, lead) if isinstance(e, ToolResultEvent) and e.tool == "delegate"]
    assert delegated and "budget of 2 tool calls" in delegated[-1].output
    (child_totals,), _ = spent(fleet, [child.id], f"run:{child.id}")
    assert child_totals.tool_calls == 2


def test_children_at_once_in_two_workers_cannot_pass_the_trees_budget(fleet: Fleet) -> None:
    limit = 40_000
    (fleet.workspace / "steward.toml").write_text(f"[budget]\ntree_tokens = {limit}\n")
    question = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Go on?"}}
    fleet.persona("lead", [question, ended("lead done")], tools='["read_file"]')
    fleet.persona("reader", [*reads(40), ended("read it all")], tools='["read_file"]')
    lead = fleet.submit("lead", "wait for the readers")
    fleet.worker("--lease", "5")
    fleet.wait_until(
        lambda jobs: any(j.id == lead and j.status == "waiting" for j in jobs), what="the lead waits"
    )

    async def children() -> list[str]:
        async with await open_store(fleet.db_url) as store:
            jobs = JobStore(store.engine)
            made = [await jobs.submit("reader", f"read the notes ({n})", workspace=str(fleet.workspace),
                                      parent_id=lead) for n in range(2)]  # fmt: skip
            return [job.id for job, _ in made]

    kids = asyncio.run(children())
    assert len(set(kids)) == 2
    fleet.worker("--lease", "5")  # a second process: the two children run at once
    jobs = fleet.wait_until(lambda jobs: all(j.ended for j in jobs if j.id in kids), what="both children end")
    ends = {j.id: j for j in jobs if j.id in kids}
    assert all(j.status == "failed" and "job tree's budget" in (j.error or "") for j in ends.values()), [
        (j.status, (j.error or "")[:300]) for j in ends.values()
    ]
    totals, tree = spent(fleet, [lead, *kids], f"tree:{lead}")
    used = sum(t.tokens for t in totals)
    # Each child alone would have used more than the whole tree may (40 reads).
    assert 0 < used <= limit and tree.spent.tokens == used, (used, tree)
    stops = [
        e
        for k in kids
        for e in events_of(fleet, k)
        if isinstance(e, SignalEvent) and e.code == "budget_exhausted"
    ]
    assert len(stops) == 2


def test_a_child_never_spends_more_than_what_is_left_of_its_parents_budget(fleet: Fleet) -> None:
    limit = 30_000
    fleet.persona(
        "lead",
        [{"tool": "delegate", "args": {"role": "helper", "goal": "read the notes"}}, ended("lead done")],
        tools='["delegate", "read_file"]',
        extra=f"[budget]\ntokens = {limit}\n",
    )
    fleet.persona("helper", [*reads(40), ended("read it all")], tools='["read_file"]')  # no budget of its own
    lead = fleet.submit("lead", "get the notes read")
    fleet.worker("--lease", "5")
    jobs = fleet.ended(2)
    parent = next(j for j in jobs if j.id == lead)
    child = next(j for j in jobs if j.parent_id == lead)
    assert child.status == "failed" and f"the delegating job {lead}'s budget" in (child.error or ""), child
    # The parent's budget went to its child: it ends partial too, with what it has.
    assert parent.status == "failed" and "partial" in (parent.error or ""), parent
    totals, own = spent(fleet, [lead, child.id], f"run:{lead}")
    assert 0 < sum(t.tokens for t in totals) <= limit and own.spent.tokens == sum(t.tokens for t in totals)


def test_a_parent_its_child_used_up_records_the_childs_answer_before_it_stops(fleet: Fleet) -> None:
    fleet.persona(
        "lead",
        [{"tool": "delegate", "args": {"role": "helper", "goal": "read the notes"}}, ended("lead done")],
        tools='["delegate", "read_file"]',
        extra="[budget]\ntool_calls = 3\n",
    )
    fleet.persona("helper", [*reads(6), ended("read it all")], tools='["read_file"]')
    lead = fleet.submit("lead", "get the notes read")
    fleet.worker("--lease", "5")
    jobs = fleet.ended(2)
    parent = next(j for j in jobs if j.id == lead)
    child = next(j for j in jobs if j.parent_id == lead)
    assert child.status == "failed" and f"the delegating job {lead}'s budget" in (child.error or ""), child
    assert parent.status == "failed" and "partial" in (parent.error or ""), parent
    # The child ran: its failure is the delegate call's result in the parent's log (what a
    # training export and the progress summary read), not a call that never ran.
    delegated = [e for e in events_of(fleet, lead) if isinstance(e, ToolResultEvent) and e.tool == "delegate"]
    assert len(delegated) == 1 and f"Job {child.id} (helper) ended failed" in delegated[0].output, delegated
    ending = parent.error or ""
    assert "Made 1 tool call" in ending and "Last step: Execute delegate" in ending, ending
    _, own = spent(fleet, [lead], f"run:{lead}")
    assert own.spent.tool_calls == 3  # the child's; taking its answer is not one more


def test_a_childs_running_tool_is_cut_short_at_what_is_left_of_its_parents_time(fleet: Fleet) -> None:
    fleet.persona(
        "lead",
        [{"tool": "delegate", "args": {"role": "sleeper", "goal": "sleep"}}, ended("lead done")],
        tools='["delegate", "bash"]',  # a child's tools are within its parent's
        extra="[budget]\ntime_s = 2\n",
    )
    sleep = {"tool": "bash", "args": {"command": "sleep 120; echo woke"}}
    fleet.persona(
        "sleeper", [sleep, ended("slept")], tools='["bash"]', extra='[policy]\nmode = "autonomous"\n'
    )
    lead = fleet.submit("lead", "have someone sleep")
    fleet.worker("--lease", "5")
    jobs = fleet.ended(2, timeout=100)  # the sleep would outlast this if nothing cut it short
    child = next(j for j in jobs if j.parent_id == lead)
    results = [e for e in events_of(fleet, child.id) if isinstance(e, ToolResultEvent) and e.tool == "bash"]
    assert len(results) == 1 and "Stopped by the run's time limit" in results[0].output, results
    assert "woke" not in results[0].output
    assert child.status == "failed" and "partial" in (child.error or ""), child


def test_a_job_its_budget_stops_cancels_the_jobs_it_left_running(fleet: Fleet) -> None:
    question = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Go on?"}}
    fleet.persona("lead", [question, *reads(3), ended("lead done")], tools='["read_file"]',
                  extra="[budget]\ntool_calls = 1\n")  # fmt: skip
    fleet.persona("asker", [question, ended("asked")], tools='["read_file"]')
    lead = fleet.submit("lead", "start readers, then read")
    fleet.worker("--lease", "5", "--concurrency", "2")
    fleet.wait_until(
        lambda jobs: any(j.id == lead and j.status == "waiting" for j in jobs), what="the lead waits"
    )

    async def child() -> str:
        async with await open_store(fleet.db_url) as store:
            job, _ = await JobStore(store.engine).submit(
                "asker", "wait", workspace=str(fleet.workspace), parent_id=lead
            )
            return job.id

    kid = asyncio.run(child())
    fleet.wait_until(
        lambda jobs: any(j.id == kid and j.status == "waiting" for j in jobs), what="the child waits"
    )
    answered = fleet.steward("answer", lead, "yes")
    assert answered.returncode == 0, answered.stderr
    jobs = fleet.wait_until(lambda jobs: all(j.ended for j in jobs if j.id in (lead, kid)), what="both end")
    parent, child_job = (next(j for j in jobs if j.id == i) for i in (lead, kid))
    assert parent.status == "failed" and "budget of 1 tool call is used up" in (parent.error or ""), parent
    assert child_job.status == "cancelled" and lead in (child_job.error or ""), child_job
