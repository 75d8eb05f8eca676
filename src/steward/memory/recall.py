"""``recall_output``: the way back to a tool output elided from the transcript."""

from __future__ import annotations

from steward.errors import ToolError
from steward.tools.base import FunctionToolset, Tool, ToolContext


def recall_output(ctx: ToolContext, call_id: str) -> str:
    """Return the full output of an earlier tool call of this run whose output was elided.

    Args:
        call_id: The call id named in the elision notice, e.g. "call_7".
    """
    found = ctx.recall(call_id) if ctx.recall else None
    if found is None:
        raise ToolError(
            f"No recorded output for call id {call_id!r} in this run; use the id from the notice."
        )
    return found


_TOOLSET: list[FunctionToolset] = []


def recall_toolset() -> FunctionToolset:
    """The shared toolset holding ``recall_output`` (built on first use: schemas cost time)."""
    if not _TOOLSET:
        _TOOLSET.append(FunctionToolset([Tool(recall_output, name="recall_output")]))
    return _TOOLSET[0]
