"""A job whose run answered in plain text is a finished job: done, its run's row says `answered`,
and `steward submit --wait` exits 3 as `steward run` does."""

from __future__ import annotations

import asyncio

from fleet_kit import Fleet

from steward.store.events import open_store


def end_status(fleet: Fleet, run_id: str) -> str | None:
    async def read() -> str | None:
        async with await open_store(fleet.db_url) as store:
            row = await store.get_run(run_id)
            return row.end_status if row is not None else None

    return asyncio.run(read())


def test_a_job_whose_run_answered_is_done_and_says_so(fleet: Fleet) -> None:
    fleet.persona("asker", [{"text": "It is closed."}], tools="[]")
    fleet.worker("--role", "asker")
    waited = fleet.steward("submit", "--role", "asker", "is the ticket closed?", "--wait", timeout=120)
    assert waited.returncode == 3, waited.stderr
    job_id = waited.stdout.split()[0]
    assert f"job {job_id} done (answered): It is closed." in waited.stdout
    job = fleet.job(job_id)
    assert (job.status, job.result, job.error) == ("done", "It is closed.", None)
    assert end_status(fleet, job_id) == "answered"
    shown = fleet.steward("jobs", "show", job_id)
    assert f"run: {job_id} (answered)" in shown.stdout, shown.stdout


def test_a_job_whose_run_was_sent_back_twice_fails_as_partial(fleet: Fleet) -> None:
    fleet.persona("closer", [{"text": "Closed it."}, {"text": "Closed it, really."}], tools="[]")
    fleet.worker("--role", "closer")
    waited = fleet.steward("submit", "--role", "closer", "close the ticket", "--wait", timeout=120)
    assert waited.returncode == 1, waited.stderr
    job = fleet.job(waited.stdout.split()[0])
    assert (
        job.status == "failed"
        and job.error is not None
        and job.error.startswith("partial: Closed it, really.")
    )
    assert end_status(fleet, job.id) == "partial"
