"""``steward runs``: the recorded runs of a workspace — list, timeline, JSONL export."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from steward.cli.graph import graph_command
from steward.cli.options import whole_option

if TYPE_CHECKING:
    from steward.events import Event
    from steward.store.events import EventStore, RunRow
    from steward.trajectories._export import Format, Selection

runs_app = typer.Typer(
    help="Recorded runs: list them, show a timeline, export them (event logs, training data).",
    no_args_is_help=True,
)

Workspace = Annotated[Path, typer.Option("--workspace", "-w", help="Workspace whose runs to read.")]


def reading_url(workspace: Path, *, wanted: str = "") -> str:
    """The workspace's store; reading commands never create one (nor its folders)."""
    from steward.agent import store_url
    from steward.config import load_config
    from steward.store.engine import parse_url, sqlite_path

    url = store_url(load_config(workspace), workspace)
    path = sqlite_path(parse_url(url))
    if path is not None and not path.exists():
        if wanted:  # asked for something in particular: that is an error
            typer.echo(f"steward: no {wanted} here: nothing is recorded yet (no store at {path})", err=True)
            raise typer.Exit(2)
        typer.echo(f"nothing recorded here yet (no store at {path}); `steward run` or `chat` starts one")
        raise typer.Exit(0)
    return url


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


@runs_app.command("list")
def list_runs(
    workspace: Workspace = Path(),
    limit: Annotated[
        int, whole_option("--limit", unit="runs", example=20, least=1, help="How many runs, newest first.")
    ] = 20,
) -> None:
    """List the recorded runs, newest first."""
    from steward.store.events import open_store

    async def main() -> None:
        async with await open_store(reading_url(workspace)) as store:
            rows = await store.runs(limit=limit)
        if not rows:
            typer.echo("no runs recorded in this workspace yet")
        for row in rows:
            status = row.end_status or row.status
            goal = " ".join(row.goal.split())
            typer.echo(f"{row.id}  {_when(row.created_at)}  {status:<9} {goal[:80]}")

    asyncio.run(main())


@runs_app.command("show")
def show(run_id: Annotated[str, typer.Argument(metavar="RUN")], workspace: Workspace = Path()) -> None:
    """Show one run's timeline: phases, tool calls with durations, errors, approvals."""
    from steward.cli.render import run_cache_summary
    from steward.store.events import open_store

    async def main() -> int:
        async with await open_store(reading_url(workspace, wanted=f"run {run_id!r}")) as store:
            row = await _find(store, run_id)
            if row is None:
                return 2
            events = await store.events(row.id)
            worked = await _tasks_and_notes(store, row.id, events)  # issue 23
        resumed = f" · resumed after {row.attempts} crash(es)" if row.attempts else ""
        status = row.end_status or row.status
        typer.echo(f"run {row.id} · {status} · started {_when(row.created_at)}{resumed}")
        typer.echo(f"goal: {row.goal}")
        for event in events:
            # asked "are you done?" (issue 23), or the bound reached
            render = (
                _continuation_line if event.type == "continuation" else partial(_timeline_line, event.type)
            )
            line = render(event.data())
            if line:
                typer.echo(f"{event.seq:>5}  {line}")
        for line in worked:
            typer.echo(line)
        if cached := run_cache_summary(events):  # what the model cache saved
            typer.echo(cached)
        for line in _spent(events, workspace):  # tokens, money and time per phase and per tool
            typer.echo(line)
        if row.status == "waiting":
            gate = any(e.type == "approval_gate" for e in events[-2:])
            how = (
                f"steward approve {row.id}  or  steward deny {row.id}"
                if gate
                else f'steward answer {row.id} "..."'
            )
            typer.echo(f"waiting: {how}")
        elif row.status != "done":
            if crash := _internal_error(events):  # a bug, said in full: the timeline cuts it short
                typer.echo(f"internal error: {crash}")
            typer.echo(f"{row.status}: {_how_to_go_on(row, events)}")
        return 0

    raise typer.Exit(asyncio.run(main()))


def _spent(events: list[Event], workspace: Path) -> list[str]:
    from steward.budget.report import lines, run_cost
    from steward.config import load_config
    from steward.errors import ConfigError

    try:
        prices = load_config(workspace).prices
    except ConfigError:  # the run is still worth showing: table prices only
        prices = {}
    return lines(run_cost(events, prices))


def _internal_error(events: list[Event]) -> str:
    """The message of the internal error the run ended on, if it did ("" if not)."""
    last = events[-2] if len(events) > 1 and events[-1].type == "done" else None
    return str(getattr(last, "message", "")) if getattr(last, "code", "") == "internal_error" else ""


def _how_to_go_on(row: RunRow, events: list[Event]) -> str:
    """What continues a run that did not finish, if anything does."""
    from steward.errors import ConfigError
    from steward.recovery import check_workspace_there, resumable_prefix

    if events and events[-1].type == "done" and len(resumable_prefix(events)) == len(events):
        return "it ended for good (it kept stopping its process); start a new run"
    try:
        check_workspace_there(row)
    except ConfigError:
        return f"its workspace {row.workspace} is gone or unreadable; put it back there to resume the run"
    import shlex

    here = "" if row.workspace == str(Path.cwd()) else f" -w {shlex.quote(row.workspace)}"
    return f"`steward resume {row.id}{here}` continues it where it stopped"


def _gate_line(d: dict[str, object]) -> str:
    gate = f"          ? approval for {d['tool']}: {_short(str(d['reason']))}"
    if d["tool"] in ("git_push", "create_pull_request"):  # steward-forge: what would leave, line by line
        gate += "".join(f"\n            {line}" for line in str(d.get("description", "")).splitlines()[:80])
    return gate


def _timeline_line(kind: str, d: dict[str, object]) -> str | None:  # noqa: PLR0911 - one line per kind
    from steward.cli.render import _count, tokens_label

    match kind:
        case "phase":
            return f"step {d['step']:<3} {str(d['phase']).upper():<8} {d['summary']}"
        case "tool_use":
            return f"          ▸ {d['tool']} {_short(d['input'])}"
        case "tool_result":
            mark = "✓" if d["status"] == "completed" else "✗"
            output = str(d["output"]).strip().splitlines() or [""]
            verdict = output[-1] if d["tool"] == "bash" else output[0]  # a command's verdict comes last
            return f"          {mark} {float(str(d['duration_ms'])):,.0f} ms  {_short(verdict)}"
        case "error":
            return f"          error ({d['code']}): {_short(d['message'])}"
        case "signal":  # loop warnings, a nudge, what the model said about how it is reached
            mark = "⚠" if d.get("level") == "warning" else "·"
            return f"          {mark} {_short(d['message'], 160)}"
        case "approval_gate":
            return _gate_line(d)
        case "approval_result":
            return f"          approval {d['decision']} ({d['by']}) {_short(d['reason'])}"
        case "waiting":
            return f"          waiting ({d['kind']}): {_short(d['question'])}"
        case "answer":
            return f"          answered: {_short(d['answer'])}"
        case "done":
            tokens = tokens_label(usage) if isinstance(usage := d.get("usage"), dict) else ""
            steps = d["steps"]
            counts = (_count(steps, "step") if isinstance(steps, int) else f"{steps} steps") + (
                f" · {tokens}" if tokens else ""
            )
            return f"■ {d['end_status'] or d['status']} · {counts} · {_short(d['message'])}"
        case "rewind":
            changed = len(d["restored"]) + len(d["removed"])  # type: ignore[arg-type]
            return f"↶ rewound to checkpoint #{d['checkpoint']} (before step {d['step']}): {changed} files"
        case _:
            return None


def _continuation_line(d: dict[str, object]) -> str:
    reasons = d["reasons"]
    why = _short("; ".join(map(str, reasons)) if isinstance(reasons, list) else reasons, 160)
    if d["asked"]:
        return f"          ↻ asked whether it is done (continuation {d['number']}): {why}"
    return f"          ↻ not asked again after {d['number']} continuation(s): {why}"


async def _tasks_and_notes(store: EventStore, run_id: str, events: list[Event]) -> list[str]:
    """The run's task list (from its log) and the notes it left (``steward notes`` for all)."""
    from steward.memory.notes import NoteStore
    from steward.memory.tasks import tasks_from_events

    lines: list[str] = []
    tasks = tasks_from_events(events)
    if tasks.items:
        lines.append(tasks.render().replace("[Tasks]", "tasks:", 1))
    written = await NoteStore(store.engine).list(run_id=run_id)
    if written:
        lines.append(f"notes left ({len(written)}):")
        lines.extend(f"  #{n.id} [{n.about}] {_short(n.text, 160)}" for n in written)
    return lines


async def _find(store: EventStore, run_id: str) -> RunRow | None:
    from steward.errors import StewardError

    try:
        return await store.find_run(run_id)
    except StewardError as exc:
        typer.echo(f"steward: {exc}", err=True)
        return None


def _short(value: object, limit: int = 100) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@runs_app.command("export")
def export(
    run_ids: Annotated[
        list[str] | None, typer.Argument(metavar="RUN", help="Runs to export (ids or unique prefixes).")
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="events: the event log (audit trail), one event a line. chat: one OpenAI-format "
            "training record a run (messages, tools, phases, reward). tasks: one row a task (prompt, "
            "verifier) for GRPO.",
        ),
    ] = "events",
    every: Annotated[bool, typer.Option("--all", help="Every run that has ended, oldest first.")] = False,
    since: Annotated[
        str | None, typer.Option(help="Only runs started since: an age (12h, 7d) or a date (2026-11-01).")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file, not stdout.")
    ] = None,
    thinking: Annotated[
        bool, typer.Option(help="chat: add the model's reasoning as reasoning_content (not for OpenAI).")
    ] = False,
    workspace: Workspace = Path(),
) -> None:
    """Export runs as JSONL: their event logs, or as training data (chat trajectories, task sets)."""
    from steward.errors import StewardError
    from steward.trajectories._export import FORMATS, Selection, parse_since

    if fmt not in FORMATS:
        typer.echo(f"steward: --format {fmt!r}: use one of {', '.join(FORMATS)}", err=True)
        raise typer.Exit(2)
    if bool(run_ids) == (every or since is not None):
        typer.echo("steward: give runs to export (RUN ...), or --all or --since WHEN (ended runs)", err=True)
        raise typer.Exit(2)
    try:
        selection = Selection(tuple(run_ids or ()), every, parse_since(since) if since is not None else None)
    except StewardError as exc:
        typer.echo(f"steward: {exc}", err=True)
        raise typer.Exit(2) from None
    url = reading_url(workspace, wanted=f"run {run_ids[0]!r}" if run_ids else "runs")
    raise typer.Exit(asyncio.run(_export(url, selection, fmt, output, thinking=thinking)))


async def _export(url: str, selection: Selection, fmt: Format, output: Path | None, *, thinking: bool) -> int:
    """Write the selected runs; to ``output`` whole or not at all (through a ``.part`` file)."""
    from steward.errors import StewardError
    from steward.store.events import open_store
    from steward.trajectories._export import lines, selected

    part = output.with_name(output.name + ".part") if output is not None else None
    async with await open_store(url) as store:
        try:
            rows, unfinished = await selected(store, selection)
            if unfinished:
                typer.echo(f"steward: left out {unfinished} run(s) that have not ended", err=True)
            if not rows:
                typer.echo(f"steward: no runs matched: {_none_matched(selection, unfinished)}", err=True)
            target = contextlib.nullcontext(sys.stdout) if part is None else part.open("w", encoding="utf-8")
            with target as out:
                async for line in lines(store, rows, fmt, thinking=thinking):
                    out.write(line + "\n")
            if output is not None and part is not None:
                part.replace(output)
        except StewardError as exc:
            typer.echo(f"steward: {exc}", err=True)
            if part is not None:
                part.unlink(missing_ok=True)
            return 2
        except OSError as exc:
            if part is None:  # stdout: a closed pipe is the shell's business, not a file to name
                raise
            part.unlink(missing_ok=True)
            typer.echo(
                f"steward: cannot write {output}: {exc.strerror or exc}; choose another file with -o",
                err=True,
            )
            return 2
    if output is not None:
        typer.echo(f"wrote {len(rows)} run(s) as {fmt} to {output}", err=True)
    return 0


def _none_matched(selection: Selection, unfinished: int) -> str:
    """Why an export by ``--all`` or ``--since`` found nothing, and what to do."""
    import time
    from datetime import datetime

    if selection.since is None:
        return "none has ended yet" if unfinished else "this store has no runs yet (`steward runs list`)"
    when = datetime.fromtimestamp(selection.since).strftime("%Y-%m-%d %H:%M")
    future = " (that is in the future)" if selection.since > time.time() else ""
    ended = "ended " if unfinished else ""
    return f"no {ended}run started since {when}{future}; `steward runs list` shows when each started"


runs_app.command("graph")(graph_command)  # `steward runs graph RUN` (steward.cli.graph)
