"""``search_history``: what earlier runs found, said and archived, searched by text."""

from __future__ import annotations

from typing import TYPE_CHECKING

from steward.tools.base import FunctionToolset, Tool, ToolContext

if TYPE_CHECKING:
    from steward.store.events import EventStore


def history_toolset(store: EventStore) -> FunctionToolset:
    async def search_history(ctx: ToolContext, query: str) -> str:
        """Search earlier runs and sessions: their goals and answers, tool outputs, and summaries
        archived when context was compressed. Use it to recall what was found or decided before.

        Args:
            query: Text to look for (case-insensitive), e.g. a file name, an error or a topic.
        """
        from steward.memory.archive import ArchiveStore

        hits = await ArchiveStore(store.engine).search(query, limit=8, exclude_run=ctx.run_id)
        if not hits:
            return f"Nothing earlier mentions {query!r}."
        lines = [f"{len(hits)} earlier mention(s) of {query!r}, newest first:"]
        for hit in hits:
            where = (
                f"run {hit.run_id}" + (f" event {hit.seq}" if hit.seq else "") if hit.run_id else "archive"
            )
            lines.append(f"- [{hit.where}, {where}] {hit.snippet}")
        return "\n".join(lines)

    return FunctionToolset([Tool(search_history, name="search_history")])
