"""Continuing a recorded run from the command line: ``answer``, ``approve``, ``deny``, ``resume``.

The run is rebuilt from the store (``Agent.resume``) with the persona, rules and model it was
started with, the human's decision given on the command line is applied, and the run is driven
on at the terminal. A job's run is answered through the queue instead: its worker goes on.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from steward.cli.driving import check_model, drive, no_always, run_async, warn_about_sandbox
from steward.cli.options import EXIT_NOT_SOLVED, config_from_flags, fail

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from steward.agent import Agent
    from steward.config import Config
    from steward.events import Event
    from steward.personas import Persona
    from steward.run import Run
    from steward.store.events import RunRow


def persona_named(name: str | None, workspace: Path) -> Persona | None:
    """The persona named on the command line, read before anything runs (a bad file is an error now)."""
    if name is None:
        return None
    from steward.personas import find_persona

    return find_persona(name, workspace.resolve())


def continue_run(
    run_id: str,
    action: tuple[str, str] | None,
    *,
    workspace: Path,
    model: str | None,
    json_lines: bool,
    quiet: bool,
    force: bool = False,
    no_sandbox: bool = False,
    mode: str | None = None,
) -> None:
    """Rebuild a recorded run from the store, apply ``action`` if any, and drive it on.

    A run started as a persona goes on as that persona (its tools, policy and limits).
    """
    config = config_from_flags(workspace, model, None, mode=mode, no_sandbox=no_sandbox)
    if asyncio.run(_reply_to_job(config, workspace, run_id, action)):
        return
    started_as = asyncio.run(_started_as(config, workspace, run_id, waiting=action is not None))
    persona = persona_named(started_as, workspace) if started_as else None
    if persona is not None:
        config = config_from_flags(workspace, model, None, mode=mode, no_sandbox=no_sandbox, persona=persona)

    async def go(agent: Agent) -> int:
        from steward.ownership import owner_alive

        assert agent.store is not None
        row = await _find_run(agent, run_id, waiting=action is not None)
        if action is not None and row.status != "waiting":
            hint = f"; `steward resume {row.id}` continues it" if row.status != "done" else ""
            if row.status == "running" and row.owner and owner_alive(row.owner):
                hint = f" (process {row.owner} is running it)"
            raise fail(f"run {row.id} is {row.end_status or row.status}, not waiting{hint}", EXIT_NOT_SOLVED)
        _check_there(row, workspace)
        if not agent.model_spec:
            agent.model_spec = row.model  # the model the run was started with
        check_model(agent, f" (run {row.id} used {row.model or 'an unknown model'}; pass --model)")
        warn_about_sandbox(agent, flag_given=no_sandbox)  # only once there is a run to go on with
        run = await agent.resume(row.id, force=force)
        if mode is not None:  # it goes on under the rules it started with; a new mode is a switch
            run.switch_mode(mode)
        first = _apply(run, action)
        if not json_lines and first is None and run.status == "running":
            typer.echo(f"steward: resuming run {run.id} at step {run.state.counters.step}", err=True)
        return await drive(run, json_lines=json_lines, quiet=quiet, first=first)

    raise typer.Exit(run_async(go, config, workspace, persona=persona))


def _check_there(row: RunRow, workspace: Path) -> None:
    """A run whose folder is gone is refused first, saying what ``-w`` did and did not do."""
    from steward.errors import ConfigError
    from steward.recovery import check_workspace_there

    try:
        check_workspace_there(row)
    except ConfigError as exc:
        given = workspace.resolve()
        moved = f". (Its store was found through {given}; the run itself stays tied to {row.workspace}.)"
        raise fail(f"{exc}{moved if str(given) != row.workspace else ''}") from None


async def _reply_to_job(config: Config, workspace: Path, run_id: str, action: tuple[str, str] | None) -> bool:
    """When the run is a job's, reply to it through the queue (a worker goes on with it); whether
    it was a job's. A job's run is never continued here: its worker holds it, or will."""
    from steward.agent import store_url
    from steward.errors import StewardError
    from steward.jobs.replies import Answer, Decision, Reply, reply
    from steward.jobs.store import JobStore
    from steward.store.events import open_store

    async with await open_store(store_url(config, workspace)) as store:
        jobs = JobStore(store.engine, where=store.where)
        try:
            row = await store.find_run(run_id, last=("waiting",) if action else ("running", "waiting"))
            job = await jobs.get(row.id)
        except StewardError:
            return False  # not a job's run (or no such run: the error comes when it is looked up)
        if action is None:
            if job.ended:
                return False  # an ended job's run may be continued by hand like any run
            raise fail(
                f"run {row.id} is job {job.id} ({job.status}); a worker goes on with it. "
                f"`steward jobs show {job.id}` says where it stands"
            )
        kind, value = action
        given: Reply = (
            Answer(value)
            if kind == "answer"
            else Decision(kind == "approve", reason=value if kind == "deny" else "")
        )
        try:
            queued = await reply(store, jobs, job.id, given)
        except StewardError as exc:
            raise fail(str(exc)) from None
    if kind == "approve" and value == "always":
        typer.echo(
            "steward: a job's approval is for this call only; add an allow rule to steward.toml", err=True
        )
    typer.echo(f"steward: job {queued.id} is {queued.status} again; a worker goes on with it")
    return True


async def _started_as(config: Config, workspace: Path, run_id: str, *, waiting: bool) -> str:
    """The persona a recorded run was started as ("" for none, or when the run is not found:
    the error comes, worded for the user, when the run is looked up to go on)."""
    from steward.agent import store_url
    from steward.errors import StewardError
    from steward.events import RunStart
    from steward.store.events import open_store

    last = ("waiting",) if waiting else ("running", "waiting", "cancelled", "failed")
    async with await open_store(store_url(config, workspace)) as store:
        try:
            row = await store.find_run(run_id, last=last)
        except StewardError:
            return ""
        first = await store.first_event(row.id)
    return first.persona if isinstance(first, RunStart) else ""


async def _find_run(agent: Agent, run_id: str, *, waiting: bool) -> RunRow:
    assert agent.store is not None
    # "last": the newest run that waits (to answer or approve it), or that did not finish.
    last = ("waiting",) if waiting else ("running", "waiting", "cancelled", "failed")
    return await agent.store.find_run(run_id, last=last)


def _apply(run: Run, action: tuple[str, str] | None) -> AsyncIterator[Event] | None:
    """The stream that starts with the human's decision given on the command line."""
    if action is None:
        return None
    kind, value = action
    pending = run.pending
    if run.status != "waiting" or pending is None:
        raise fail(f"run {run.id} is {run.status}, not waiting; `steward runs show {run.id}` says more", 1)
    if kind == "answer":
        if pending.approval is not None:
            raise fail(f"run {run.id} waits for an approval, not an answer: steward approve/deny {run.id}", 1)
        return run.answer_stream(value)
    if pending.approval is None:
        raise fail(f'run {run.id} asks a question, not for approval: steward answer {run.id} "ANSWER"', 1)
    if kind == "approve":
        if value == "always" and not pending.approval.suggestion:
            typer.echo(f"steward: {no_always(pending.approval)}; approving it once.", err=True)
        return run.approve_stream(remember=value == "always")
    return run.deny_stream(reason=value)
