"""``steward sessions``: the chat sessions of a workspace — list them, show one's turns."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Annotated

import typer

from steward.cli.runs import reading_url

sessions_app = typer.Typer(help="Sessions: list them, show one's turns.", no_args_is_help=True)

Workspace = Annotated[Path, typer.Option("--workspace", "-w", help="Workspace whose sessions to read.")]


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


@sessions_app.command("list")
def list_sessions(workspace: Workspace = Path()) -> None:
    """List sessions, newest first."""
    from steward.memory.session_store import SessionStore
    from steward.store.events import open_store

    async def main() -> None:
        async with await open_store(reading_url(workspace)) as store:
            sessions = SessionStore(store.engine, where=store.where)
            rows = await sessions.list(limit=50)
            if not rows:
                typer.echo("no sessions in this workspace yet; `steward chat` starts one")
            for row in rows:
                turns = len(await sessions.turns(row.id))
                state = "open" if row.is_open else "closed"
                typer.echo(f"{row.id}  {_when(row.updated_at)}  {state:<6} {turns:>3} turns  {row.title}")

    asyncio.run(main())


@sessions_app.command("show")
def show(
    session_id: Annotated[
        str, typer.Argument(metavar="SESSION", help="The session: its id, a unique prefix, or 'last'.")
    ],
    workspace: Workspace = Path(),
) -> None:
    """Show a session's turns and summaries."""
    from steward.errors import StewardError
    from steward.memory.session import answer_of, find_session
    from steward.memory.session_store import SessionStore
    from steward.store.events import open_store

    async def main() -> int:
        async with await open_store(reading_url(workspace, wanted=f"session {session_id!r}")) as store:
            sessions = SessionStore(store.engine, where=store.where)
            try:
                row = await find_session(sessions, session_id)
            except StewardError as exc:
                typer.echo(f"steward: {exc}", err=True)
                return 2
            previous = await sessions.previous_summary(row.id)
            turns = await sessions.turns(row.id)
        typer.echo(f"session {row.id} · {'open' if row.is_open else 'closed'} · {row.title}")
        if previous:
            typer.echo(f"continues {row.previous_id}: {previous}")
        for turn in turns:
            typer.echo(f"> {turn.goal}\n  {answer_of(turn) or '(' + turn.status + ')'}  [run {turn.run_id}]")
        if row.summary:
            typer.echo(f"summary: {row.summary}")
        return 0

    raise typer.Exit(asyncio.run(main()))
