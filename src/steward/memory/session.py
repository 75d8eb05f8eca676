"""Sessions: a conversation of runs that share their turns (seed 000's clean session memory).

A run in a session sees the session's earlier turns (each the user's goal and the final
answer) and the summary of the session before it; never the tool calls, outputs or
agent-step internals of earlier runs, which stay in the store for audit. When the turns
outgrow their share of the request budget, the oldest are summarised by the model into a
running summary (archived in the store), and the newest stay verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from steward.errors import StewardError
from steward.memory.budget import budget_chars

if TYPE_CHECKING:
    from steward.memory.archival import Archivist
    from steward.memory.archive import ArchiveStore
    from steward.memory.session_store import SessionRow, SessionStore, Turn
    from steward.models.base import Model
    from steward.store.events import EventStore

HISTORY_SHARE = 0.3  # of the request budget, for earlier turns before they are summarised
KEEP_TURNS = 4  # the newest turns always verbatim
SUMMARY_KIND = "session_turns"  # archive rows holding a session's running summary
LONG_TERM_KIND = "session_summary"  # the same summaries (running and closing) in long-term memory


@dataclass(slots=True, frozen=True)
class History:
    """What a run of a session starts from."""

    turns: tuple[tuple[str, str], ...] = ()  # (goal, final answer), oldest first
    summary: str = ""  # of the turns before ``turns`` (running summary), if any
    previous: str = ""  # summary of the session this one continued from


async def find_session(sessions: SessionStore, session_id: str) -> SessionRow:
    """The session ``session_id`` names: an id, a unique prefix, or "last".

    "last" is the open session used most recently (the one ``steward chat`` continues), or the
    newest session when every one is closed.
    """
    if session_id != "last":
        return await sessions.get(session_id)
    row = await sessions.latest_open()
    if row is not None:
        return row
    newest = await sessions.list(limit=1)
    if not newest:
        raise StewardError("no sessions in this store yet; `steward chat` starts one")
    return newest[0]


async def session_history(
    store: EventStore,
    model: Model,
    session_id: str,
    *,
    request_tokens: int,
    before_run: str | None = None,
    archivist: Archivist | None = None,
) -> History:
    """The history of ``session_id`` for a new run, or for the run ``before_run`` (turns before it).

    Turns beyond ``HISTORY_SHARE`` of a request budget of ``request_tokens`` are summarised by
    ``model`` into the session's running summary, kept in the store's archive (and with an
    ``archivist``, in long-term memory too, where later runs can recall it).
    """
    from steward.memory.archive import ArchiveStore

    sessions = session_store(store)
    archive = ArchiveStore(store.engine)
    turns = await sessions.turns(session_id)
    if before_run is not None:
        index = next((i for i, t in enumerate(turns) if t.run_id == before_run), len(turns))
        turns = turns[:index]
    finished = [t for t in turns if answer_of(t)]
    previous = await sessions.previous_summary(session_id) or ""
    summary, covered = await _running_summary(archive, session_id)
    if covered is not None:
        ids = [t.run_id for t in finished]
        finished = finished[ids.index(covered) + 1 :] if covered in ids else finished
    budget = budget_chars(request_tokens, HISTORY_SHARE)
    if sum(len(t.goal) + len(answer_of(t)) for t in finished) > budget and len(finished) > KEEP_TURNS:
        old, finished = finished[:-KEEP_TURNS], finished[-KEEP_TURNS:]
        summary = await _summarise_turns(model, archive, session_id, summary, old, archivist)
    return History(tuple((t.goal, answer_of(t)) for t in finished), summary, previous)


def answer_of(turn: Turn) -> str:
    """A turn's answer as the session remembers it; "" while its run has not ended.

    Only a run that ended on its own has a final answer. A cancelled or failed run's message
    ("Cancelled before it finished.", an API error) is not one: the session says what became
    of the turn instead, so the model knows it was asked and that it did not answer.
    """
    if turn.status == "done":
        return turn.output
    if turn.status == "cancelled":
        return "(no answer: this turn was cancelled before it finished)"
    if turn.status == "failed":
        return "(no answer: this turn failed before it finished)"
    return ""


async def _running_summary(archive: ArchiveStore, session_id: str) -> tuple[str, str | None]:
    latest = await archive.latest(SUMMARY_KIND, session_id=session_id)
    return ("", None) if latest is None else (latest.content, latest.ref)


async def _summarise_turns(
    model: Model,
    archive: ArchiveStore,
    session_id: str,
    earlier: str,
    turns: list[Turn],
    archivist: Archivist | None,
) -> str:
    from steward.memory.compression import summarize

    text = turns_text(turns)
    if earlier:
        text = f"Earlier: {earlier}\n\n{text}"
    written = await summarize(model, "turns", text, goal="(a conversation of several goals)", limit=2_000)
    await archive.put(SUMMARY_KIND, written.text, session_id=session_id, ref=turns[-1].run_id)
    if archivist is not None:
        await archivist.keep_for_session(
            LONG_TERM_KIND, written.text, session_id=session_id, run_id=turns[-1].run_id
        )
    return written.text


def turns_text(turns: list[Turn]) -> str:
    return "\n".join(f"user: {t.goal}\nassistant: {answer_of(t)}" for t in turns)


def session_store(store: EventStore) -> SessionStore:
    from steward.memory.session_store import SessionStore

    return SessionStore(store.engine, where=store.where)
