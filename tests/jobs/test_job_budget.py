"""`steward submit --budget-tokens`: the job carries the budget, and the worker that takes it
runs the job's run under it (a flag at the terminal, over the files)."""

from __future__ import annotations

from typing import Any

from fleet_kit import Fleet


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


def test_a_submitted_token_budget_stops_the_run_of_the_worker_that_takes_the_job(fleet: Fleet) -> None:
    fleet.persona("closer", [ended("finished")], tools="[]")
    capped = fleet.submit("closer", "close it", "--budget-tokens", "1k")
    free = fleet.submit("closer", "close it too")
    fleet.worker("--role", "closer")
    jobs = {job.id: job for job in fleet.ended(2)}
    assert jobs[free].status == "done" and jobs[free].budget is None
    assert jobs[capped].budget == {"tokens": 1000}
    assert jobs[capped].status == "failed"
    assert (jobs[capped].error or "").startswith("partial: Stopped: this run's budget has no room")
    shown = fleet.steward("runs", "show", capped)
    assert f"run {capped} · partial" in shown.stdout
    assert "budget has no room for another model call" in shown.stdout


def test_a_budget_that_is_no_amount_is_refused_before_anything_is_queued(fleet: Fleet) -> None:
    fleet.persona("closer", [ended("finished")], tools="[]")
    refused = fleet.steward("submit", "--role", "closer", "close it", "--budget-usd", "ten")
    assert refused.returncode == 2
    assert (
        refused.stderr
        == "steward: --budget-usd takes an amount of US dollars: write 0.50 or $0.50 (got 'ten')\n"
    )
    assert fleet.jobs() == []
