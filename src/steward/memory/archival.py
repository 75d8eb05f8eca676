"""Archival memory as the agent sees it: the ``remember``, ``recall`` and ``forget`` tools, and
the summaries a run or session archives there without being asked.

Every call works in the calling run's scope (``Scope.of(ctx)``: its user, persona and
workspace); the store's queries enforce it (``steward.memory.longterm``). A write calls no
model: the text is searchable by its words at once. With an embedder, vectors are computed
after the write, in the background (``LongTermAccess.kick``); the run waits for that work when
it ends (``settle``) and the agent cancels what is left when it closes, so no task outlives
them. ``recall`` embeds what is still pending itself, so nothing fresh is missed.

Summaries already written for other reasons (a session's running and closing summaries, the
turns a run folded to save context) are copied into the same memory by an ``Archivist``, so a
later run can recall them; no model call is added for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from steward.errors import ToolError
from steward.tools.base import FunctionToolset, Tool, ToolContext

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from steward.config import MemorySettings
    from steward.embed.base import Embedder
    from steward.memory.longterm import Found, LongTermMemory

MAX_TEXT_CHARS = 4_000  # one remembered item: a fact, a decision, a preference; not a document
MAX_TAGS = 10
MAX_K = 20
ITEM_CHARS = 600  # of each recalled text in recall's answer
RECALL_SHARE = 0.1  # of the request budget, for one recall's answer
MIN_RECALL_CHARS = 1_000
ARCHIVED_CHARS = 8_000  # of an archived summary


@dataclass(slots=True)
class LongTermAccess:
    """One agent's long-term memory: the store's items and the background indexing of their
    vectors (one task at a time, started by writes when there is an embedder)."""

    engine: AsyncEngine
    settings: MemorySettings
    embedder: Embedder | None = None
    _memory: LongTermMemory | None = field(default=None, init=False)
    _task: asyncio.Task[int] | None = field(default=None, init=False)
    _again: bool = field(default=False, init=False)

    @property
    def memory(self) -> LongTermMemory:
        if self._memory is None:
            from steward.memory.longterm import LongTermMemory

            self._memory = LongTermMemory(self.engine, embedder=self.embedder, settings=self.settings)
        return self._memory

    def kick(self) -> None:
        """Embed the items that lack vectors, in the background; a write never waits for it."""
        if self.embedder is None:
            return
        if self._task is not None and not self._task.done():
            self._again = True  # items written since it started: one more pass when it ends
            return
        self._task = asyncio.get_running_loop().create_task(self._index(), name="steward-memory-index")

    async def _index(self) -> int:
        done = 0
        for _ in range(8):  # bounded: each pass is one batch of writes made while the last ran
            self._again = False
            try:
                done += await self.memory.index_pending()
            except Exception:  # an embedder that is down: recall embeds what is left, or says why
                break
            if not self._again:
                break
        return done

    async def settle(self) -> None:
        """Wait for the indexing under way (a run ends with its memory's vectors written)."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait({task})
        if task is not None and task.done() and not task.cancelled():
            task.exception()  # retrieved: a failure is not reported as never awaited

    async def aclose(self) -> None:
        """Cancel indexing still under way; what it did not embed is embedded by a later recall."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


# --- the tools ------------------------------------------------------------------------------


def item_ref(item_id: int) -> str:
    return f"m{item_id}"


def _item_id(given: int | str) -> int | None:
    text = str(given).strip().lower().removeprefix("m")
    return int(text) if text.isdigit() else None


def _check_tags(tags: Sequence[str]) -> list[str]:
    if len(tags) > MAX_TAGS:
        raise ToolError(f"At most {MAX_TAGS} tags; got {len(tags)}. Keep the few that say what it is about.")
    return [t for t in tags if t.strip()]


def recalled_line(found: Found, chars: int = ITEM_CHARS) -> str:
    """``m7 (2024-05-01, tags: a b): text``: one recalled item as the model reads it."""
    item = found.item
    about = [time.strftime("%Y-%m-%d", time.gmtime(item.created_at))]
    if item.kind != "fact":
        about.append(item.kind.replace("_", " "))
    if item.tags:
        about.append("tags: " + " ".join(item.tags))
    text = " ".join(item.text.split())
    if len(text) > chars:
        text = text[: chars - 1].rstrip() + "…"
    return f"{item_ref(item.id)} ({', '.join(about)}): {text}"


def archival_toolset(access: LongTermAccess, *, budget_chars: int) -> FunctionToolset:
    """``remember``, ``recall`` and ``forget`` over ``access``, in each calling run's scope."""
    from steward.memory.longterm import Scope

    default_k = access.settings.recall_k
    answer_chars = max(MIN_RECALL_CHARS, int(budget_chars * RECALL_SHARE))

    async def remember(ctx: ToolContext, text: str, tags: Sequence[str] = ()) -> str:
        """Keep a fact for later runs: a decision, a preference of the user, how something in
        this project works, a result worth not redoing. Use it when you learn something that
        will still be true and useful next time; not for this task's progress (the plan keeps
        that). Saying the same thing again merges it into the earlier item.

        Args:
            text: The fact in one or a few self-contained sentences (names and values spelled out).
            tags: Optional words to file it under, e.g. ["deploy", "user-preference"].
        """
        stripped = text.strip()
        if not stripped:
            raise ToolError("remember needs the text of the fact to keep; it was empty.")
        if len(stripped) > MAX_TEXT_CHARS:
            raise ToolError(
                f"The text is {len(stripped):,} characters; one memory holds at most {MAX_TEXT_CHARS:,}. "
                "Keep the facts that matter, or remember them as several items."
            )
        written = await access.memory.remember(
            Scope.of(ctx), stripped, tags=_check_tags(tags), run_id=ctx.run_id or None
        )
        access.kick()
        ref = item_ref(written.item.id)
        return f"Already remembered as {ref} (merged)" if written.merged else f"Remembered as {ref}"

    async def recall(ctx: ToolContext, query: str, k: int = default_k, tags: Sequence[str] = ()) -> str:
        """Search what was remembered or archived in earlier runs and sessions (facts, decisions,
        summaries of past work) by its words, and by meaning when an embedder is set up. Use it
        before work that may have been done or decided before, or when the user refers to
        something from earlier.

        Args:
            query: What you want to know, in a few words, e.g. "database migration decision".
            k: How many items to return, 1 to 20.
            tags: Optional: only items filed under all of these tags.
        """
        if not query.strip():
            raise ToolError('recall needs a query of a few words, e.g. "how tests are run".')
        if not 1 <= k <= MAX_K:
            raise ToolError(f"k must be between 1 and {MAX_K}; got {k}.")
        found = await access.memory.recall(Scope.of(ctx), query, k=k, tags=_check_tags(tags))
        if not found:
            return f"Nothing remembered matches {query!r}."
        lines: list[str] = []
        left = answer_chars
        for hit in found:
            line = recalled_line(hit, min(ITEM_CHARS, max(left - 40, 80)))
            if lines and len(line) > left:
                rest = len(found) - len(lines)
                lines.append(f"({rest} more not shown: ask with other words, or a smaller k)")
                break
            lines.append(line)
            left -= len(line) + 1
        return "\n".join(lines)

    async def forget(ctx: ToolContext, id: int | str) -> str:
        """Forget a remembered item that is wrong or no longer true, so it is never recalled
        again (the operator can still see it). Remember the corrected fact separately.

        Args:
            id: The item's id as recall shows it, e.g. "m7".
        """
        number = _item_id(id)
        ref = item_ref(number) if number is not None else str(id)
        if number is None or not await access.memory.forget(Scope.of(ctx), number):
            raise ToolError(f"no memory {ref} in this scope; use an id recall returned, e.g. m7")
        return f"Forgot {ref}: it will not be recalled again."

    return FunctionToolset(
        [Tool(remember, name="remember"), Tool(recall, name="recall"), Tool(forget, name="forget")]
    )


# --- summaries archived as they are written -------------------------------------------------


@dataclass(frozen=True, slots=True)
class Archivist:
    """Copies summaries into long-term memory, in one user's and persona's scope. Archiving is
    a copy of text kept elsewhere too: it never fails the work that wrote the summary."""

    access: LongTermAccess
    user: str
    persona: str

    async def keep(
        self,
        kind: str,
        text: str,
        *,
        workspace: str,
        run_id: str | None = None,
        session_id: str | None = None,
    ) -> None:
        from steward.memory.longterm import Scope

        if not text.strip():
            return
        scope = Scope(self.user, self.persona, workspace)
        try:
            await self.access.memory.remember(
                scope, text[:ARCHIVED_CHARS], kind=kind, run_id=run_id, session_id=session_id
            )
        except Exception:  # a copy: the summary is kept where it was written all the same
            return
        self.access.kick()

    async def keep_for_session(
        self, kind: str, text: str, *, session_id: str, run_id: str | None = None
    ) -> None:
        """``keep`` in the workspace of the session's newest run (a session has no workspace of its own)."""
        import sqlalchemy as sa

        from steward.store.schema import runs

        query = (
            sa.select(runs.c.workspace)
            .where(runs.c.session_id == session_id, runs.c.workspace != "")
            .order_by(runs.c.created_at.desc())
            .limit(1)
        )
        try:
            async with self.access.engine.connect() as conn:
                workspace = (await conn.execute(query)).scalar_one_or_none()
        except Exception:  # as in ``keep``: a copy never fails the work that wrote it
            return
        if workspace:
            await self.keep(kind, text, workspace=workspace, run_id=run_id, session_id=session_id)
