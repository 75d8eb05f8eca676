"""Notes: what a run (or a person) leaves on a file, a job or a run for whoever touches it next.

``note(text, about)`` stores an annotation on one thing of the run's workspace:

    file:src/app.py     a path, relative to the workspace (a bare path means the same)
    run:<id>            a run; ``job:<id>`` names the same thing (a job's run has the job's id)

A later run of the same workspace, whatever its persona, sees the notes on what it touches in
its working-memory view (``[Notes]``, newest first, within ``[memory] notes_chars``): a file
its file tools got a path for, the run itself (a job's run, a resumed run), and a job or run
whose id a tool was given (``job_id``, ``run_id``). Notes are scoped by the resolved workspace:
one folder's notes are never shown in another's runs. A run does not see its own notes (it
wrote them). ``steward notes`` lists and removes them; ``steward runs show`` and the API show
those a run wrote.

The notes a run may see are read once when it starts or resumes (the newest ``MAX_LOADED`` of
its workspace), so its view does not query the store before every model call; a note written
by another run meanwhile shows from the run's next start.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from steward.errors import ToolError
from steward.memory.graph import file_path
from steward.safety.policy.rules import PATH_TOOLS
from steward.store.engine import write_transaction
from steward.store.schema import notes
from steward.tools.base import FunctionToolset, Tool, ToolContext

if TYPE_CHECKING:
    from steward.memory.working import WorkingMemory
    from steward.store.events import EventStore

__all__ = ["MAX_LOADED", "MAX_NOTE_CHARS", "Note", "NoteBoard", "NoteStore", "about_key", "notes_toolset"]

#: Characters of one note (a remark, not a document: long findings belong in ``remember``).
MAX_NOTE_CHARS = 2_000
#: Notes of a workspace a run reads when it starts (the newest); its view shows those it touches.
MAX_LOADED = 500
#: Notes one run may write (each call is a row: a runaway loop must not fill the store).
MAX_PER_RUN = 100
#: Most notes a listing returns.
MAX_LISTED = 1_000
# Tool arguments that name a job or a run (``delegate``'s, the job tools').
_ID_ARGUMENTS = ("job_id", "run_id")


@dataclass(slots=True, frozen=True)
class Note:
    id: int
    workspace: str
    about: str
    text: str
    run_id: str | None
    persona: str
    created_at: float

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id, "workspace": self.workspace, "about": self.about, "text": self.text,
            "run_id": self.run_id, "persona": self.persona, "created_at": self.created_at,
        }  # fmt: skip

    def line(self) -> str:
        by = f"run {self.run_id}" if self.run_id else "a person"
        who = f"{by}, persona {self.persona}" if self.persona else by
        day = time.strftime("%Y-%m-%d", time.gmtime(self.created_at))
        return f"  • [{self.about}] {self.text}  ({who}, {day})"


def about_key(about: str, workspace: Path | str) -> str:
    """The stored form of what a note is about; a ``ToolError`` naming the forms when unclear."""
    raw = about.strip()
    kind, sep, rest = raw.partition(":")
    if not sep or kind not in ("file", "job", "run"):
        kind, rest = "file", raw  # a bare path ("src/app.py")
    rest = rest.strip()
    if not rest:
        raise ToolError(
            "about names what the note is on: 'file:src/app.py' (a path in the workspace), "
            "'job:<id>' or 'run:<id>'."
        )
    if kind in ("job", "run"):
        if any(c.isspace() for c in rest) or len(rest) > 200:
            raise ToolError(f"{kind}: takes an id without spaces, e.g. '{kind}:3f9a1c2b7d4e' (got {rest!r}).")
        return f"run:{rest}"  # a job's run has the job's id: one thing, one key
    path = file_path(rest, str(Path(workspace).resolve()))
    if path is None or path.startswith(("/", "../")) or path == "..":
        raise ToolError(
            f"file: takes a path inside the workspace, relative to its root, e.g. 'file:src/app.py' "
            f"(got {rest!r})."
        )
    return f"file:{posixpath.normpath(path)}"


def _note(row: sa.Row[tuple[object, ...]]) -> Note:
    m = row._mapping
    return Note(
        int(m["id"]), str(m["workspace"]), str(m["about"]), str(m["text"]),
        str(m["run_id"]) if m["run_id"] is not None else None, str(m["persona"]), float(m["created_at"]),
    )  # fmt: skip


class NoteStore:
    """Notes in the store (table ``notes``, migration 10), on SQLite and PostgreSQL alike."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def add(
        self, workspace: str, about: str, text: str, *, run_id: str | None = None, persona: str = ""
    ) -> Note:
        body = text.strip()
        if not body:
            raise ToolError("A note needs text: note(text='why this file is fragile', about='file:...').")
        if len(body) > MAX_NOTE_CHARS:
            raise ToolError(
                f"A note holds at most {MAX_NOTE_CHARS} characters (this one has {len(body)}); "
                "keep it to the point, or use remember for longer findings."
            )
        now = time.time()
        async with write_transaction(self.engine) as conn:
            if run_id is not None:
                count = sa.select(sa.func.count()).select_from(notes).where(notes.c.run_id == run_id)
                if (await conn.execute(count)).scalar_one() >= MAX_PER_RUN:
                    raise ToolError(f"A run may leave at most {MAX_PER_RUN} notes; this one has.")
            values = {"workspace": workspace, "about": about, "text": body, "run_id": run_id,
                      "persona": persona, "created_at": now}  # fmt: skip
            note_id = (await conn.execute(notes.insert().values(**values).returning(notes.c.id))).scalar_one()
        return Note(int(note_id), workspace, about, body, run_id, persona, now)

    async def list(
        self,
        *,
        workspace: str | None = None,
        about: Sequence[str] | None = None,
        run_id: str | None = None,
        limit: int = 100,
    ) -> list[Note]:
        """Notes newest first, filtered by workspace, what they are about and the run that wrote them."""
        query = sa.select(notes).order_by(notes.c.created_at.desc(), notes.c.id.desc())
        if workspace is not None:
            query = query.where(notes.c.workspace == workspace)
        if about is not None:
            query = query.where(notes.c.about.in_(list(about)))
        if run_id is not None:
            query = query.where(notes.c.run_id == run_id)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query.limit(max(1, min(limit, MAX_LISTED))))).all()
        return [_note(r) for r in rows]

    async def remove(self, note_id: int, *, workspace: str | None = None) -> bool:
        """Delete one note (only in ``workspace`` when given); whether it was there."""
        query = sa.delete(notes).where(notes.c.id == note_id)
        if workspace is not None:
            query = query.where(notes.c.workspace == workspace)
        async with write_transaction(self.engine) as conn:
            return (await conn.execute(query)).rowcount > 0


@dataclass(slots=True)
class NoteBoard:
    """The notes one run may see, and the ``[Notes]`` section of its view (``NotesSection``)."""

    store: NoteStore
    workspace: str
    run_id: str
    budget_chars: int
    loaded: list[Note] = field(default_factory=list)
    _touched: set[str] = field(default_factory=set)
    _scanned: int = 0  # steps of the run already looked at (steps are only ever appended)

    async def load(self) -> None:
        if self.budget_chars <= 0:
            return
        found = await self.store.list(workspace=self.workspace, limit=MAX_LOADED)
        self.loaded = [n for n in found if n.run_id != self.run_id]

    def touched(self, memory: WorkingMemory) -> set[str]:
        """What the run has touched so far: itself, the files and the jobs its tools were given."""
        self._touched.add(f"run:{self.run_id}")
        for step in memory.steps[self._scanned :]:
            self._touched.update(_touched_by(step.tool_name, step.tool_input or {}, self.workspace))
        self._scanned = len(memory.steps)
        return self._touched

    def render(self, memory: WorkingMemory) -> str:
        if not self.loaded or self.budget_chars <= 0:
            return ""
        touched = self.touched(memory)
        relevant = [n for n in self.loaded if n.about in touched]
        if not relevant:
            return ""
        lines, used = ["[Notes] (left by earlier runs on what you touch; newest first)"], 0
        for shown, note in enumerate(relevant):
            line = note.line()
            if used + len(line) > self.budget_chars:
                lines.append(f"  ({len(relevant) - shown} older note(s) not shown)")
                break
            lines.append(line)
            used += len(line)
        return "\n".join(lines) if len(lines) > 1 else ""


def _touched_by(tool: str | None, arguments: Mapping[str, object], workspace: str) -> set[str]:
    found: set[str] = set()
    if tool in PATH_TOOLS and (path := file_path(arguments.get("path"), workspace)) is not None:
        found.add(f"file:{path}")
    for name in _ID_ARGUMENTS:
        value = arguments.get(name)
        if isinstance(value, str) and value.strip():
            found.add(f"run:{value.strip()}")
    return found


def notes_toolset(store: EventStore) -> FunctionToolset:
    async def note(ctx: ToolContext, text: str, about: str) -> str:
        """Leave a note on a file, a job or a run for whoever works on it later (other runs and
        personas see it when they touch the same thing), e.g. why a file is fragile or what a
        job still needs.

        Args:
            text: The note, short and specific.
            about: What it is on: 'file:src/app.py' (a path in the workspace), 'job:<id>' or 'run:<id>'.
        """
        workspace = str(ctx.workspace.resolve())
        key = about_key(about, workspace)
        made = await NoteStore(store.engine).add(
            workspace, key, text, run_id=ctx.run_id or None, persona=ctx.persona
        )
        return f"Noted on {key} (note {made.id}); later runs that touch it will see it."

    return FunctionToolset([Tool(note, name="note")])
