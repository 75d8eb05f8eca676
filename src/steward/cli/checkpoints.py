"""``steward checkpoints RUN`` and ``steward rewind RUN --to STEP``: undo what a run did to files."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from steward.cli.options import whole_option

if TYPE_CHECKING:
    from steward.config import Config
    from steward.safety.checkpoints.around_calls import Checkpointer
    from steward.safety.checkpoints.shadow import Checkpoint, RewindReport

Workspace = Annotated[Path, typer.Option("--workspace", "-w", help="The workspace the run worked in.")]


@dataclass(slots=True)
class _Target:
    run_id: str
    workspace: Path
    config: Config
    recorded: bool  # the run is in the store (the rewind is logged there too)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"steward: {message}", err=True)
    return typer.Exit(2)


def _find(run: str, workspace: Path) -> _Target:
    """The run by id or prefix from the workspace's store; else a run id the shadow knows."""
    from steward.agent import store_url
    from steward.config import load_config
    from steward.errors import StewardError
    from steward.store.engine import parse_url, sqlite_path
    from steward.store.events import open_store

    config = load_config(workspace)
    url = store_url(config, workspace)
    path = sqlite_path(parse_url(url))
    if path is None or path.exists():

        async def lookup() -> tuple[str, str]:
            async with await open_store(url) as store:
                row = await store.find_run(run)
                return row.id, row.workspace

        try:
            run_id, where = asyncio.run(lookup())
        except StewardError:
            pass
        else:
            root = Path(where) if where else workspace.resolve()
            return _Target(run_id, root, load_config(root), True)
    return _Target(run, workspace.resolve(), config, False)


def _w(workspace: Path) -> str:
    """`` -w WORKSPACE`` for a command printed to be run from here, when it is not here."""
    import shlex

    return "" if workspace == Path.cwd().resolve() else f" -w {shlex.quote(str(workspace))}"


def _not_here(target: _Target, command: str) -> typer.Exit:
    """The run is neither in this workspace's store nor among its checkpoints: say so, and
    where it ran when another workspace's checkpoints hold it."""
    from steward.safety.checkpoints.around_calls import settings_from_config
    from steward.safety.checkpoints.shadow import workspace_holding

    found = workspace_holding(target.run_id, settings_from_config(target.config).state_dir)
    where = (
        f"it ran in {_name(found)}: steward {command}{_w(Path(found))}"
        if found
        else f"name the workspace it ran in: steward {command} -w DIR"
    )
    here = _name(str(target.workspace))
    return _fail(f"run {_name(target.run_id)} is not in this workspace's store ({here}); {where}")


def _checkpointer(target: _Target) -> Checkpointer:
    from steward.safety.checkpoints.around_calls import checkpointer_for

    return checkpointer_for(target.workspace, target.config)


def _label(checkpoint: Checkpoint) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(checkpoint.ts))
    if checkpoint.kind == "rewind":
        return f"#{checkpoint.n:<3} {when}  before a rewind"
    return f"#{checkpoint.n:<3} {when}  step {checkpoint.step:<4} before {checkpoint.tool}"


def _name(path: str) -> str:
    from steward.text import shown

    return shown(path)


def _names(paths: list[str], limit: int) -> str:
    listed = ", ".join(_name(p) for p in paths[:limit])
    return listed + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def _changes(changes: list[tuple[str, str]], limit: int = 8) -> str:
    if not changes:
        return "no files changed"
    shown = ", ".join(f"{letter} {_name(path)}" for letter, path in changes[:limit])
    more = f", and {len(changes) - limit} more" if len(changes) > limit else ""
    noun = "file" if len(changes) == 1 else "files"
    return f"{len(changes)} {noun} changed: {shown}{more}"


def checkpoints_command(
    run: Annotated[str, typer.Argument(help="The run's id (or a unique prefix, or 'last').")],
    workspace: Workspace = Path(),
) -> None:
    """List a run's checkpoints, with the files each call changed."""
    target = _find(run, workspace)
    checkpointer = _checkpointer(target)
    found = checkpointer.checkpoints(target.run_id)
    if not found and not target.recorded:
        raise _not_here(target, f"checkpoints {target.run_id}")
    if not found:
        typer.echo(f"no checkpoints for run {target.run_id} in {target.workspace}")
        raise typer.Exit(0)
    typer.echo(f"checkpoints of run {target.run_id} ({target.workspace}):")
    for index, checkpoint in enumerate(found):
        changes = checkpointer.changes_of(target.run_id, found, index)
        typer.echo(f"  {_label(checkpoint)}  {_changes(changes)}")
        if checkpoint.skipped:
            typer.echo(f"       not recorded (larger than the cap): {_names(checkpoint.skipped, 5)}")
        if checkpoint.special:
            typer.echo(
                f"       not recorded (not a file: a FIFO, socket or device): {_names(checkpoint.special, 5)}"
            )
    command = f"steward rewind {target.run_id}{_w(target.workspace)}"
    typer.echo(
        f"rewind: {command} --to STEP (as before that step's first call), "
        "--last (undo the last call), or --checkpoint N"
    )


def rewind_command(
    run: Annotated[str, typer.Argument(help="The run's id (or a unique prefix, or 'last').")],
    to: Annotated[
        int | None,
        whole_option("--to", unit="", example=3, least=1, help="Restore the workspace as before this step."),
    ] = None,
    last: Annotated[
        bool, typer.Option("--last", help="Undo the run's last call that changed files.")
    ] = False,
    checkpoint: Annotated[
        int | None, whole_option("--checkpoint", unit="", example=2, least=1, help="Restore checkpoint #N.")
    ] = None,
    workspace: Workspace = Path(),
) -> None:
    """Restore the workspace as it was before a call of the run (deleted files included)."""
    if sum(x is not None and x is not False for x in (to, checkpoint, last or None)) != 1:
        raise _fail("say where to rewind to: --to STEP, --last or --checkpoint N (one of them)")
    target = _find(run, workspace)
    checkpointer = _checkpointer(target)
    found = checkpointer.checkpoints(target.run_id)
    if not found and not target.recorded:
        where = f"--to {to}" if to is not None else ("--last" if last else f"--checkpoint {checkpoint}")
        raise _not_here(target, f"rewind {target.run_id} {where}")
    calls = [c for c in found if c.kind == "call"]
    chosen: Checkpoint | None
    if checkpoint is not None:
        chosen = next((c for c in found if c.n == checkpoint), None)
    elif last:
        chosen = calls[-1] if calls else None
    else:
        chosen = next((c for c in calls if c.step == to), None)
        if chosen is None:
            chosen = next((c for c in calls if c.step > (to or 0)), None)
    if chosen is None:
        steps = sorted({c.step for c in calls})
        listing = f"steward checkpoints {target.run_id}{_w(target.workspace)}"
        raise _fail(
            f"run {target.run_id} has no such checkpoint; steps with checkpoints: "
            f"{', '.join(map(str, steps)) or 'none'} (`{listing}` lists them)"
        )
    report = checkpointer.rewind(target.run_id, chosen)
    _print_report(target, report)
    if target.recorded:
        _log_rewind(target, report)
    if report.failed:
        raise typer.Exit(1)


def _print_report(target: _Target, report: RewindReport) -> None:
    typer.echo(
        f"rewound {target.workspace} to checkpoint #{report.to.n} ({_label(report.to).split('  ', 1)[1]})"
    )
    for label, paths in (("restored", report.restored), ("removed", report.removed)):
        if paths:
            typer.echo(f"  {label} {len(paths)}: {_names(paths, 20)}")
    if not report.restored and not report.removed:
        typer.echo("  nothing differed: the workspace was already as it was then")
    if report.left:
        typer.echo(
            f"  left as they are (never recorded: too large, or not a file): {_names(report.left, 10)}"
        )
    if report.failed:
        typer.echo(
            f"  could not restore {len(report.failed)}: {_names(report.failed, 20)}; the rest is restored. "
            "Clear what is in the way (a directory made read-only, a mount) and rewind again."
        )
    undo = f"steward rewind {target.run_id}{_w(target.workspace)} --checkpoint {report.before.n}"
    typer.echo(f"undo this rewind: {undo}")


def _log_rewind(target: _Target, report: RewindReport) -> None:
    from steward.agent import store_url
    from steward.events import RewindEvent
    from steward.store.events import open_store

    async def log() -> None:
        async with await open_store(store_url(target.config, target.workspace)) as store:
            events = await store.events(target.run_id)
            row = await store.find_run(target.run_id)
            event = RewindEvent(
                checkpoint=report.to.n,
                step=report.to.step,
                # As printed (escaped): a name that is not UTF-8 cannot be stored as text.
                restored=[_name(p) for p in report.restored[:1000]],
                removed=[_name(p) for p in report.removed[:1000]],
                undo_checkpoint=report.before.n,
                seq=(events[-1].seq if events else 0) + 1,
                run_id=target.run_id,
                session_id=row.session_id,
                ts=time.time(),
            )
            await store.append(target.run_id, [event])

    asyncio.run(log())
