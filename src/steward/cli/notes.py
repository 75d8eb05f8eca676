"""``steward notes``: the notes runs left on files, jobs and runs of a workspace (issue 23).

``list`` shows the current folder's notes (``-w`` for another), newest first, optionally only
those on one thing (``--about file:src/app.py``) or written by one run (``--run ID``); ``add``
leaves one as a person (later runs see it like a run's); ``rm`` removes one by its id. Notes of
one workspace are never listed, shown or removed from another's.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Annotated

import typer

from steward.cli.options import whole_argument, whole_option

notes_app = typer.Typer(
    help="Notes on files, jobs and runs that later runs see: list, add, rm.", no_args_is_help=True
)

Workspace = Annotated[Path, typer.Option("--workspace", "-w", help="The workspace whose notes these are.")]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"steward: {message}", err=True)
    return typer.Exit(2)


def _about(about: str, workspace: Path) -> str:
    from steward.errors import ToolError
    from steward.memory.notes import about_key

    try:
        return about_key(about, workspace)
    except ToolError as exc:
        raise _fail(str(exc)) from None


@notes_app.command("list")
def list_notes(
    workspace: Workspace = Path(),
    about: Annotated[
        str | None, typer.Option("--about", help="Only notes on this: file:PATH, job:ID, run:ID.")
    ] = None,
    run: Annotated[str | None, typer.Option("--run", help="Only the notes this run left.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    limit: Annotated[
        int,
        whole_option(
            "--limit", unit="notes", example=100, least=1, most=1000, help="How many, newest first."
        ),
    ] = 100,
) -> None:
    """List the workspace's notes, newest first."""
    from steward.cli.runs import reading_url
    from steward.memory.notes import NoteStore
    from steward.store.events import open_store

    folder = str(workspace.resolve())
    wanted = [_about(about, workspace)] if about is not None else None

    async def main() -> None:
        async with await open_store(reading_url(workspace)) as store:
            found = await NoteStore(store.engine).list(
                workspace=folder, about=wanted, run_id=run, limit=limit
            )
        if not found and not as_json:
            typer.echo(
                "no notes here yet; runs leave them with the note tool, people with `steward notes add`"
            )
        for note in found:
            if as_json:
                typer.echo(json.dumps(note.as_dict(), ensure_ascii=False))
                continue
            by = f"run {note.run_id}" if note.run_id else "a person"
            who = f"{by} as {note.persona}" if note.persona else by
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(note.created_at))
            typer.echo(f"#{note.id}  {when}  [{note.about}]  {note.text}  ({who})")

    asyncio.run(main())


@notes_app.command("add")
def add_note(
    about: Annotated[
        str, typer.Argument(metavar="ABOUT", help="file:PATH (in the workspace), job:ID or run:ID.")
    ],
    text: Annotated[str, typer.Argument(metavar="TEXT", help="The note.")],
    workspace: Workspace = Path(),
) -> None:
    """Leave a note as a person: later runs that touch the same thing see it."""
    from steward.agent import store_url
    from steward.config import load_config
    from steward.errors import ToolError
    from steward.memory.notes import NoteStore
    from steward.store.events import open_store

    key = _about(about, workspace)

    async def main() -> int:
        async with await open_store(store_url(load_config(workspace), workspace)) as store:
            try:
                note = await NoteStore(store.engine).add(str(workspace.resolve()), key, text)
            except ToolError as exc:
                raise _fail(str(exc)) from None
        typer.echo(f"note #{note.id} on {key}")
        return 0

    raise typer.Exit(asyncio.run(main()))


@notes_app.command("rm")
def remove_note(
    note_id: Annotated[
        int,
        whole_argument(
            "ID",
            "the note's ID",
            unit="",
            example=12,
            least=1,
            help="The note's number (`steward notes list`).",
        ),
    ],
    workspace: Workspace = Path(),
) -> None:
    """Remove one of the workspace's notes."""
    from steward.cli.runs import reading_url
    from steward.memory.notes import NoteStore
    from steward.store.events import open_store

    async def main() -> int:
        async with await open_store(reading_url(workspace, wanted=f"note #{note_id}")) as store:
            removed = await NoteStore(store.engine).remove(note_id, workspace=str(workspace.resolve()))
        if not removed:
            raise _fail(f"no note #{note_id} in this workspace; `steward notes list` shows its notes")
        typer.echo(f"removed note #{note_id}")
        return 0

    raise typer.Exit(asyncio.run(main()))
