"""``steward submit``, ``steward jobs`` and ``steward worker``: the job queue from the command line."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from steward.cli.options import EXIT_NOT_SOLVED, EXIT_OK

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from steward.jobs.store import Job, JobStore
    from steward.store.events import EventStore

jobs_app = typer.Typer(help="Jobs: list them, show one, cancel or retry it.", no_args_is_help=True)

Workspace = Annotated[
    Path, typer.Option("--workspace", "-w", help="Directory whose configuration names the store.")
]


def _store_url(workspace: Path) -> str:
    from steward.agent import store_url
    from steward.config import load_config

    return store_url(load_config(workspace), workspace)


async def _with_jobs(workspace: Path) -> tuple[EventStore, JobStore]:
    from steward.jobs.store import JobStore
    from steward.store.events import open_store

    store = await open_store(_store_url(workspace))
    return store, JobStore(store.engine, where=store.where)


def _line(job: Job) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(job.created_at))
    goal = job.goal if len(job.goal) <= 60 else job.goal[:59] + "…"
    return f"{job.id}  {when}  {job.status:<9} {job.role:<12} p{job.priority:<3} {goal}"


def submit(
    goal: Annotated[str, typer.Argument(help="What the agent should achieve.", metavar="GOAL")],
    role: Annotated[
        str, typer.Option("--role", "-r", help="The persona the job is for (steward personas list).")
    ],
    workspace: Annotated[
        Path, typer.Option("--workspace", "-w", help="Directory the job works in.")
    ] = Path(),
    priority: Annotated[int, typer.Option("--priority", help="Higher runs first.")] = 0,
    idempotency_key: Annotated[
        str | None,
        typer.Option("--idempotency-key", help="A second submit with this key returns the first job."),
    ] = None,
    user: Annotated[str | None, typer.Option("--user", help="At most one active job per user.")] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until the job ends (or waits) and print it.")
    ] = False,
) -> None:
    """Queue a job for a worker of its role; prints the job's id."""
    from steward.personas import find_persona
    from steward.run import check_goal, check_workspace

    check_goal(goal)
    ws = check_workspace(workspace)
    find_persona(role, ws)  # an unknown role or a bad persona file is an error now, not a dead job later

    async def main() -> int:
        store, jobs = await _with_jobs(ws)
        try:
            job, new = await jobs.submit(
                role,
                goal,
                workspace=str(ws),
                priority=priority,
                idempotency_key=idempotency_key,
                user_key=user,
            )
            typer.echo(job.id)
            if not new:
                typer.echo(
                    f"steward: the key {idempotency_key!r} names job {job.id} ({job.status})", err=True
                )
            if not wait:
                return EXIT_OK
            for _ in range(10**9):  # until it ends or waits (Ctrl-C stops waiting, not the job)
                job = await jobs.get(job.id)
                if job.ended or job.status == "waiting":
                    break
                await asyncio.sleep(0.2)
            typer.echo(f"{job.status}: {job.result or job.error or ''}".rstrip(": "))
            return EXIT_OK if job.status == "done" else EXIT_NOT_SOLVED
        finally:
            await store.close()

    raise typer.Exit(asyncio.run(main()))


@jobs_app.command("list")
def list_jobs(
    workspace: Workspace = Path(),
    status: Annotated[list[str] | None, typer.Option("--status", help="Only jobs in this state.")] = None,
) -> None:
    """List jobs, newest first."""

    async def main() -> None:
        store, jobs = await _with_jobs(workspace)
        try:
            found = await jobs.list(status=status or ())
            if not found:
                typer.echo('no jobs in this store yet; `steward submit --role coder "GOAL"` queues one')
            for job in found:
                typer.echo(_line(job))
        finally:
            await store.close()

    asyncio.run(main())


def _one(workspace: Path, job_id: str, action: Callable[[JobStore, str], Awaitable[Job]]) -> Job:
    """Open the store, apply ``action`` to the job, close the store; the job as it is after."""

    async def main() -> Job:
        store, jobs = await _with_jobs(workspace)
        try:
            return await action(jobs, job_id)
        finally:
            await store.close()

    return asyncio.run(main())


JobId = Annotated[str, typer.Argument(help="The job: its id or a unique prefix.")]


@jobs_app.command("show")
def show_job(job_id: JobId, workspace: Workspace = Path()) -> None:
    """Show one job: its state, run, attempts, result or error."""
    job = _one(workspace, job_id, lambda jobs, key: jobs.get(key))
    typer.echo(_line(job))
    typer.echo(f"workspace: {job.workspace}")
    typer.echo(f"run: {job.run_id or '(not started)'}  attempts: {job.attempts} of {job.max_attempts}")
    for label, value in (("held by", job.lease_owner), ("result", job.result), ("error", job.error)):
        if value:
            typer.echo(f"{label}: {value}")


@jobs_app.command("cancel")
def cancel_job(job_id: JobId, workspace: Workspace = Path()) -> None:
    """Cancel a job; a running one is stopped by its worker within a heartbeat."""
    typer.echo(_line(_one(workspace, job_id, lambda jobs, key: jobs.cancel(key))))


@jobs_app.command("retry")
def retry_job(job_id: JobId, workspace: Workspace = Path()) -> None:
    """Queue a failed, cancelled or dead job again."""
    typer.echo(_line(_one(workspace, job_id, lambda jobs, key: jobs.retry(key))))


def worker(
    role: Annotated[
        list[str] | None,
        typer.Option("--role", "-r", help="Take jobs of this role (repeatable); default: any."),
    ] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, help="Jobs run at once.")] = 1,
    workspace: Workspace = Path(),
    lease_s: Annotated[
        float, typer.Option("--lease", min=1.0, help="Seconds a claim holds without a heartbeat.")
    ] = 30.0,
) -> None:
    """Run jobs from the queue until stopped (SIGTERM or Ctrl-C: its jobs go back to the queue)."""
    from steward.jobs.worker import Worker, WorkerSettings
    from steward.store.events import open_store

    settings = WorkerSettings(
        roles=tuple(role or ()), concurrency=concurrency, lease_s=lease_s, heartbeat_s=max(0.5, lease_s / 3)
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        store = await open_store(_store_url(workspace))
        try:
            typer.echo(
                f"steward: worker {settings.worker_id} taking {', '.join(settings.roles) or 'any'} jobs",
                err=True,
            )
            await Worker(store, settings).run(stop)
        finally:
            await store.close()

    asyncio.run(main())
    raise typer.Exit(EXIT_OK)
