"""``steward submit``, ``steward jobs`` and ``steward worker``: the job queue from the command line."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from steward.cli.options import (
    EXIT_ANSWERED,
    EXIT_NOT_SOLVED,
    EXIT_OK,
    budget_flags,
    budget_tokens_option,
    budget_usd_option,
    whole_option,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from steward.jobs.api import JobHandle, Queue
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
    priority: Annotated[
        int, whole_option("--priority", unit="", example=10, help="Higher runs first (may be negative).")
    ] = 0,
    idempotency_key: Annotated[
        str | None,
        typer.Option("--idempotency-key", help="A second submit with this key returns the first job."),
    ] = None,
    user: Annotated[str | None, typer.Option("--user", help="At most one active job per user.")] = None,
    max_attempts: Annotated[
        int,
        whole_option(
            "--max-attempts",
            unit="attempts",
            example=3,
            least=1,
            help="Workers it may lose before it is marked dead.",
        ),
    ] = 3,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until the job ends (or waits) and print it.")
    ] = False,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Show the job's events as they happen, then its end.")
    ] = False,
    json_lines: Annotated[bool, typer.Option("--json", help="With --follow: events as JSON lines.")] = False,
    schema: Annotated[
        Path | None,
        typer.Option("--schema", help="A JSON Schema file the job's answer must validate against."),
    ] = None,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            help="structured (ask before risky calls) or autonomous; default: as configured. "
            "Jobs it delegates to run no wider.",
        ),
    ] = None,
    budget_tokens: Annotated[int | None, budget_tokens_option("the job's run")] = None,
    budget_usd: Annotated[float | None, budget_usd_option("the job's run")] = None,
) -> None:
    """Queue a job for a worker of its role; prints the job's id."""
    from steward.answers import load_schema_file
    from steward.run import check_workspace

    ws = check_workspace(workspace)
    if mode is not None and mode not in ("structured", "autonomous"):
        from steward.cli.options import fail

        raise fail(f"--mode {mode!r} is not a mode; use structured or autonomous")
    output_schema = load_schema_file(schema) if schema is not None else None

    async def main() -> int:
        from steward.jobs.api import Queue

        async with await Queue.open(_store_url(ws)) as queue:
            before = await queue.jobs.by_key(idempotency_key) if idempotency_key else None
            handle = await queue.submit(
                role, goal, workspace=ws, priority=priority, idempotency_key=idempotency_key, user=user,
                max_attempts=max_attempts, output_schema=output_schema, mode=mode,
                budget=budget_flags(budget_tokens, budget_usd),
            )  # fmt: skip
            typer.echo(handle.id)
            if before is not None:
                typer.echo(
                    f"steward: the key {idempotency_key!r} names job {before.id} ({before.status})", err=True
                )
            if not (follow or wait):
                return EXIT_OK
            async with _saying_who_serves(queue, handle, role):
                if follow:
                    return await _follow(handle, json_lines=json_lines)
                job = await handle.wait()
                return _outcome(job, await _end_status(handle))

    raise typer.Exit(asyncio.run(main()))


_WHO_SERVES_S = 2.0  # how often a waiting submit looks at who serves its role


@contextlib.asynccontextmanager
async def _saying_who_serves(queue: Queue, handle: JobHandle, role: str) -> AsyncIterator[None]:
    """While the body waits for the job: say when no worker serves its role (the job would wait
    for good), and again when one arrives (or took the job before it was seen)."""
    who = _WhoServes(queue, handle, role)
    told = asyncio.create_task(who.watch())
    try:
        yield
    finally:
        told.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await told
        if who.nobody:  # the job ended between two looks: a worker came after all
            await who.look()


class _WhoServes:
    def __init__(self, queue: Queue, handle: JobHandle, role: str) -> None:
        self.queue, self.handle, self.role = queue, handle, role
        self.nobody = False  # "no worker serves" was said, and no arrival since

    async def watch(self) -> None:
        for _ in range(10**9):  # bounded by the job: the caller stops it when the wait ends
            await self.look()
            await asyncio.sleep(_WHO_SERVES_S)

    async def look(self) -> None:
        from steward.jobs import presence

        with contextlib.suppress(Exception):  # a store that hiccups: the wait itself says so
            job = await self.handle.get()
            queued = job.status == "queued"
            serving = await presence.serving(self.queue.store.engine, self.role) if queued else []
            which = f"role {self.role!r}" if self.role else "jobs without a role"
            if queued and not serving and not self.nobody:
                start = f"steward worker --role {self.role}" if self.role else "steward worker"
                typer.echo(
                    f"steward: no worker serves {which}; job {job.id} waits until one starts "
                    f"(`{start}`, with the same store)",
                    err=True,
                )
                self.nobody = True
            elif self.nobody and (serving or not queued):  # one came (and maybe took the job)
                who = serving[0] if serving else job.lease_owner or "a worker"
                typer.echo(f"steward: worker {who} serves {which} now", err=True)
                self.nobody = False


async def _follow(handle: JobHandle, *, json_lines: bool) -> int:
    """Print the job's events as its workers write them, until it ends or waits for a person."""
    from steward.cli.render import TerminalRenderer
    from steward.events import encode_event

    renderer = TerminalRenderer(quiet=False)
    waits_on = ""
    try:
        async for event in handle.events():
            waits_on = getattr(event, "kind", waits_on) if event.type == "waiting" else waits_on
            if json_lines:
                typer.echo(encode_event(event))
            else:
                renderer.show(event)
    finally:
        renderer.close()
    job = await handle.get()
    return _outcome(job, await _end_status(handle), waits_on)


async def _end_status(handle: JobHandle) -> str | None:
    """How the job's run ended (solved, answered, partial, stuck), once it has."""
    row = await handle.queue.store.get_run(handle.id)
    return row.end_status if row is not None else None


def _outcome(job: Job, end_status: str | None, waits_on: str = "") -> int:
    """Print how the job stands; its exit code (as ``steward run``'s, from how its run ended).
    ``waits_on``: the kind of its wait, if known."""
    how = " (answered)" if job.status == "done" and end_status == "answered" else ""  # done alone: solved
    typer.echo(f"job {job.id} {job.status}{how}: {job.result or job.error or ''}".rstrip(": "))
    if job.status == "waiting":
        answer, decide = f'`steward answer {job.id} "ANSWER"`', f"`steward approve|deny {job.id}`"
        hint = {"question": answer, "approval": decide}.get(waits_on, f"{answer}, or {decide}")
        typer.echo(f"steward: it waits for you: {hint}", err=True)
    if job.status != "done":
        return EXIT_NOT_SOLVED
    return EXIT_ANSWERED if end_status == "answered" else EXIT_OK  # a job is done only when it finished


@jobs_app.command("list")
def list_jobs(
    workspace: Workspace = Path(),
    status: Annotated[list[str] | None, typer.Option("--status", help="Only jobs in this state.")] = None,
) -> None:
    """List jobs, newest first."""
    from steward.cli.options import fail
    from steward.jobs.store import ACTIVE, ENDED

    known = (*ACTIVE, *ENDED)
    for wrong in [s for s in status or () if s not in known]:
        raise fail(f"--status {wrong!r} is not a job state; use one of {', '.join(known)}")

    async def main() -> None:
        store, jobs = await _with_jobs(workspace)
        try:
            found = await jobs.list(status=status or ())
            if not found and status:
                typer.echo(f"no {' or '.join(status)} jobs in this store")
            elif not found:
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

    async def main() -> tuple[Job, list[Job], str | None]:
        store, jobs = await _with_jobs(workspace)
        try:
            job = await jobs.get(job_id)
            row = await store.get_run(job.id) if job.run_id else None
            return job, await jobs.list(parent_id=job.id, limit=100), row.end_status if row else None
        finally:
            await store.close()

    job, children, end_status = asyncio.run(main())
    typer.echo(_line(job))
    typer.echo(f"workspace: {job.workspace}")
    ended = f" ({end_status})" if end_status else ""  # how the run ended: solved, answered, partial, stuck
    typer.echo(f"run: {job.run_id or '(not started)'}{ended}  attempts: {job.attempts} of {job.max_attempts}")
    for label, value in (
        ("held by", job.lease_owner), ("parent", job.parent_id), ("result", job.result), ("error", job.error)
    ):  # fmt: skip
        if value:
            typer.echo(f"{label}: {value}")
    for child in children:
        typer.echo(f"child: {_line(child)}")


@jobs_app.command("follow")
def follow_job(
    job_id: JobId,
    workspace: Workspace = Path(),
    json_lines: Annotated[bool, typer.Option("--json", help="Events as JSON lines.")] = False,
) -> None:
    """Show a job's events from its start and as they happen, until it ends or waits."""

    async def main() -> int:
        from steward.jobs.api import Queue

        async with await Queue.open(_store_url(workspace)) as queue:
            job = await queue.jobs.get(job_id)
            return await _follow(queue.job(job.id), json_lines=json_lines)

    raise typer.Exit(asyncio.run(main()))


@jobs_app.command("cancel")
def cancel_job(job_id: JobId, workspace: Workspace = Path()) -> None:
    """Cancel a job; a running one is stopped by its worker within a heartbeat."""

    async def main() -> Job:
        from steward.jobs.api import cancel_job

        store, jobs = await _with_jobs(workspace)
        try:
            return await cancel_job(store, jobs, job_id)
        finally:
            await store.close()

    job = asyncio.run(main())
    if job.status == "cancelled":  # ended here (a running job is ended, and told of, by its worker)
        from steward.jobs.worker import notifier_for

        notifier = notifier_for(job)
        if notifier is not None:
            for problem in asyncio.run(notifier.notify(job, "cancelled")):
                typer.echo(f"steward: notify: {problem}", err=True)
    typer.echo(_line(job))


@jobs_app.command("retry")
def retry_job(job_id: JobId, workspace: Workspace = Path()) -> None:
    """Queue a failed, cancelled or dead job again."""
    typer.echo(_line(_one(workspace, job_id, lambda jobs, key: jobs.retry(key))))


def worker(
    role: Annotated[
        list[str] | None,
        typer.Option("--role", "-r", help="Take jobs of this role (repeatable); default: any."),
    ] = None,
    concurrency: Annotated[
        int, whole_option("--concurrency", "-c", unit="jobs", example=4, least=1, help="Jobs run at once.")
    ] = 1,
    workspace: Workspace = Path(),
    lease_s: Annotated[
        float, typer.Option("--lease", min=1.0, help="Seconds a claim holds without a heartbeat.")
    ] = 30.0,
) -> None:
    """Run jobs from the queue until stopped.

    SIGTERM or Ctrl-C: stop claiming, let running jobs finish their step, and give them back to
    the queue (a second signal stops them at once; another worker goes on with them). Set
    STEWARD_HOST_ID to name the machine when host names are not unique (containers).
    """
    from steward.jobs.worker import Worker, WorkerSettings
    from steward.store.events import open_store

    settings = WorkerSettings(
        roles=tuple(role or ()), concurrency=concurrency, lease_s=lease_s, heartbeat_s=max(0.5, lease_s / 3)
    )

    async def main() -> None:
        stop, now = asyncio.Event(), asyncio.Event()

        def stopping() -> None:  # the first signal drains, the second stops at once
            if stop.is_set():
                now.set()
                return
            stop.set()
            typer.echo(
                "steward: stopping: running jobs finish their step, then go back to the queue "
                "(signal again to stop at once)",
                err=True,
            )

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping)
        store = await open_store(_store_url(workspace))
        try:
            typer.echo(
                f"steward: worker {settings.worker_id} taking {', '.join(settings.roles) or 'any'} jobs",
                err=True,
            )
            await Worker(store, settings).run(stop, now)
        finally:
            await store.close()

    asyncio.run(main())
    raise typer.Exit(EXIT_OK)
