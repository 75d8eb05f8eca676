"""Notes (``steward.memory.notes``): left by one run on a file, a job or a run, stored on both
engines, and seen in the working-memory view of a later run, of any persona, that touches the
same thing in the same workspace, never in another workspace's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.core.conftest import RecordingScript

from steward import Agent, ScriptedModel
from steward.errors import ToolError
from steward.memory.notes import MAX_NOTE_CHARS, NoteBoard, NoteStore, about_key
from steward.memory.working import Step, WorkingMemory
from steward.personas import Persona
from steward.store.events import EventStore


@pytest.mark.parametrize(
    ("about", "key"),
    [
        ("file:src/app.py", "file:src/app.py"),
        ("src/./lib/../app.py", "file:src/app.py"),
        ("job:3f9a1c", "run:3f9a1c"),
        ("run:3f9a1c", "run:3f9a1c"),
    ],
)
def test_what_a_note_is_about_is_normalised(tmp_path: Path, about: str, key: str) -> None:
    assert about_key(about, tmp_path) == key


def test_an_absolute_path_inside_the_workspace_is_made_relative(tmp_path: Path) -> None:
    assert about_key(f"file:{tmp_path.resolve()}/src/app.py", tmp_path) == "file:src/app.py"


@pytest.mark.parametrize("about", ["file:../elsewhere.py", "file:/etc/passwd", "run:two words", "file:", " "])
def test_a_note_about_something_unclear_or_outside_says_the_forms(tmp_path: Path, about: str) -> None:
    with pytest.raises(ToolError, match=r"file:|run:|job:"):
        about_key(about, tmp_path)


async def test_notes_are_stored_listed_and_removed(store: EventStore) -> None:
    notes = NoteStore(store.engine)
    first = await notes.add("/ws", "file:a.py", "fragile: keep the order", run_id="r1", persona="coder")
    await notes.add("/ws", "run:r9", "needs a second look", run_id=None)
    await notes.add("/other", "file:a.py", "another folder's")
    assert [n.text for n in await notes.list(workspace="/ws")] == [
        "needs a second look",
        "fragile: keep the order",
    ]
    assert [n.id for n in await notes.list(run_id="r1")] == [first.id]
    assert [n.workspace for n in await notes.list(about=["file:a.py"])] == ["/other", "/ws"]
    assert (first.persona, first.run_id) == ("coder", "r1")
    assert not await notes.remove(first.id, workspace="/other")  # not that folder's note
    assert await notes.remove(first.id)
    assert not await notes.remove(first.id)
    with pytest.raises(ToolError, match=f"at most {MAX_NOTE_CHARS}"):
        await notes.add("/ws", "file:a.py", "x" * (MAX_NOTE_CHARS + 1))


def _touch(memory: WorkingMemory, tool: str, arguments: Mapping[str, Any]) -> None:
    n = len(memory.steps) + 1
    memory.add_step(Step(n, "act", "", "s", tool, dict(arguments), "ok", "success", 1.0, f"c{n}"))


async def test_the_view_shows_notes_on_what_the_run_touched_newest_first_within_budget(
    store: EventStore,
) -> None:
    notes = NoteStore(store.engine)
    for k in range(5):
        await notes.add("/ws", "file:src/app.py", f"remark {k} " + "x" * 60, run_id="old")
    await notes.add("/ws", "file:src/other.py", "not touched", run_id="old")
    await notes.add("/ws", "run:job7", "the job needs the staging URL", run_id="old")
    board = NoteBoard(notes, "/ws", "now", budget_chars=300)
    await board.load()
    memory = WorkingMemory("now", notes=board)
    assert board.render(memory) == ""  # nothing touched yet
    _touch(memory, "read_file", {"path": "/ws/src/app.py"})
    _touch(memory, "delegate_status", {"job_id": "job7"})
    view = memory.render_view()
    section = view[view.index("[Notes]") :].split("\n\n")[0].splitlines()
    assert "the job needs the staging URL" in section[1]
    assert "remark 4" in section[2] and "remark 3" in section[3]
    assert section[4] == "  (3 older note(s) not shown)"
    assert "not touched" not in view


async def _run(agent: Agent, goal: str, workspace: Path) -> None:
    await agent.start(goal, workspace=workspace).result()


def _agent(store: EventStore, replies: Sequence[Mapping[str, Any]], persona: Persona | None = None) -> Agent:
    model = RecordingScript(ScriptedModel.from_data(replies))
    return Agent(model, sandbox=False, store=store, persona=persona, memory=False)


async def test_a_later_run_of_another_persona_sees_the_note_when_it_touches_the_file(
    store: EventStore, tmp_path: Path
) -> None:
    workspace, elsewhere = tmp_path / "ws", tmp_path / "other"
    for folder in (workspace, elsewhere):
        (folder / "src").mkdir(parents=True)
        (folder / "src" / "app.py").write_text("print('hi')\n")
    note = {"tool": "note", "args": {"text": "parse() must stay pure: the cache relies on it",
                                     "about": "file:src/app.py"}}  # fmt: skip
    writer = _agent(store, [note, {"text": "Left a note."}])
    await _run(writer, "look at the app", workspace)
    [stored] = await NoteStore(store.engine).list()
    assert (stored.about, stored.workspace) == ("file:src/app.py", str(workspace.resolve()))

    read = {"tool": "read_file", "args": {"path": "src/app.py"}}
    reviewer = Persona(name="reviewer", role="reviewer")
    later = _agent(store, [read, {"text": "Read it."}], persona=reviewer)
    await _run(later, "what does the app print?", workspace)
    model = later.model
    assert isinstance(model, RecordingScript)
    assert "parse() must stay pure" not in model.requests[0].system_text  # not touched yet
    assert "parse() must stay pure" in model.requests[-1].system_text
    assert f"(run {stored.run_id}" in model.requests[-1].system_text

    other = _agent(store, [read, {"text": "Read it."}], persona=reviewer)
    await _run(other, "what does the app print?", elsewhere)
    model = other.model
    assert isinstance(model, RecordingScript)
    assert "parse() must stay pure" not in model.requests[-1].system_text  # another workspace
