"""A job whose run breaks off with an unexpected error is given back to the queue, and that
counts as an attempt: a job that breaks every time ends ``failed`` after ``max_attempts``,
saying why, instead of being claimed and given back for good (a busy loop that left runs
``running`` with no event written: one ``steward batch`` saw thousands of claims per job)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from steward.agent import Agent
from steward.jobs.api import Queue
from steward.jobs.notify import Notifier
from steward.jobs.store import Claim, Job
from steward.jobs.worker import Worker, WorkerSettings
from steward.run import Run
from steward.store.events import EventStore, open_store


class _Broken(Worker):
    """A worker whose first ``breaks`` runs break off with an error none of Steward's (a bug, say)."""

    def __init__(self, store: EventStore, settings: WorkerSettings, breaks: int) -> None:
        super().__init__(store, settings)
        self.tries, self.breaks = 0, breaks

    async def _go_on(self, claim: Claim, agent: Agent, notifier: Notifier) -> Run | str | None:
        self.tries += 1
        if self.tries <= self.breaks:
            raise RuntimeError(f"broken on try {self.tries}")
        return await super()._go_on(claim, agent, notifier)


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    ws = tmp_path / "ws"
    (ws / "personas").mkdir(parents=True)
    end: dict[str, Any] = {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved"}}
    (ws / "personas" / "s.yaml").write_text(yaml.safe_dump([end]))
    (ws / "personas" / "closer.toml").write_text('role = "closer"\ntools = []\nmodel = "scripted:s.yaml"\n')
    return ws


async def _served(db_url: str, workspace: Path, goal: str, breaks: int) -> tuple[Job, _Broken]:
    """A job of ``goal`` (3 attempts at most) served to its end by a worker whose first ``breaks``
    runs break off; the job as it ended, and the worker."""
    async with await open_store(db_url) as store, Queue(store) as queue:
        handle = await queue.submit("closer", goal, workspace=workspace, max_attempts=3)
        worker = _Broken(store, WorkerSettings(worker_id="broken"), breaks=breaks)
        stop = asyncio.Event()
        serving = asyncio.create_task(worker.run(stop))
        try:
            job = await handle.wait(timeout=120)  # the job's end is the event; the bound is for failure
        finally:
            stop.set()
            await serving
    return job, worker


async def test_a_job_that_breaks_every_time_fails_after_max_attempts(db_url: str, workspace: Path) -> None:
    job, worker = await _served(db_url, workspace, "break", breaks=10)
    assert job.status == "failed", job
    assert worker.tries == 3 and job.attempts == 3  # given back twice, then failed: no fourth claim
    assert job.error is not None and "RuntimeError: broken on try 3" in job.error
    assert f"steward jobs retry {job.id}" in job.error


async def test_a_job_given_back_once_goes_on_with_its_run(db_url: str, workspace: Path) -> None:
    job, worker = await _served(db_url, workspace, "break once", breaks=1)
    assert job.status == "done", job
    assert worker.tries == 2 and job.attempts == 1  # given back once, then run to its end
