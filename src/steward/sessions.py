"""A session: one conversation of a user with an agent, a run per message (seed 000's clean
session memory). What a run of a session starts from (``History``) and the session's store
live in ``steward.memory``; this is the part that starts runs, so it sits beside the agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steward.memory.session import History, answer_of, session_history, session_store, turns_text

if TYPE_CHECKING:
    from steward.agent import Agent
    from steward.memory.session_store import SessionRow, SessionStore, Turn
    from steward.run import Run
    from steward.store.events import EventStore


class Session:
    """One conversation with an agent; ``start`` adds a run to it."""

    def __init__(self, agent: Agent, row: SessionRow) -> None:
        self.agent = agent
        self.row = row

    @property
    def id(self) -> str:
        return self.row.id

    @property
    def _sessions(self) -> SessionStore:
        return session_store(_store_of(self.agent))

    @classmethod
    async def open(cls, agent: Agent, session_id: str | None = None, *, title: str = "") -> Session:
        """The session ``session_id`` (an id, a prefix, or "last"), else a new one."""
        sessions = session_store(_store_of(agent))
        if session_id == "last":  # the open session used most recently, else a new one
            row = await sessions.latest_open() or await sessions.create(title or "chat")
        elif session_id:
            row = await sessions.get(session_id)
        else:
            row = await sessions.create(title or "chat")
        return cls(agent, row)

    async def turns(self) -> list[Turn]:
        return await self._sessions.turns(self.id)

    async def history(self, before_run: str | None = None) -> History:
        """The turns a new run (or the run ``before_run``) of this session starts from."""
        return await session_history(
            _store_of(self.agent),
            self.agent.model,
            self.id,
            request_tokens=self.agent.limits.request_token_budget,
            before_run=before_run,
            archivist=self.agent.archivist(),
        )

    async def start(
        self, goal: str, *, workspace: str | Path = ".", output_schema: Mapping[str, Any] | None = None
    ) -> Run:
        history = await self.history()
        await self._sessions.touch(self.id)
        return self.agent.start(
            goal, workspace=workspace, session_id=self.id, history=history, output_schema=output_schema
        )

    async def close(self) -> str:
        """Summarise the session (by the model), store the summary and close it; return it."""
        from steward.memory.compression import summarize

        turns = [t for t in await self.turns() if answer_of(t)]
        if not turns:
            summary = ""
        else:
            text = turns_text(turns)
            history = await self.history()
            if history.summary:
                text = f"Earlier: {history.summary}\n\n{text}"
            written = await summarize(self.agent.model, "session", text, goal=self.row.title, limit=2_000)
            summary = written.text
        self.row = await self._sessions.close(self.id, summary)
        if summary and (archivist := self.agent.archivist()) is not None:  # recallable by later runs
            await archivist.keep_for_session("session_summary", summary, session_id=self.id)
        return summary

    async def new(self, title: str = "") -> Session:
        """Close this session with a summary and start the next, which begins from that summary."""
        await self.close()
        row = await self._sessions.create(title or self.row.title, previous_id=self.id)
        return Session(self.agent, row)


def _store_of(agent: Agent) -> EventStore:
    from steward.errors import ConfigError

    if agent.store is None:
        raise ConfigError("sessions need a store: Agent(store=await open_store(url))")
    return agent.store
