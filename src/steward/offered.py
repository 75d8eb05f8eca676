"""What a run's model is offered: the tools it starts with, recorded in its ``run_start``, and
those offered later (found by ``discover_tools``, or an MCP server's list that grew), recorded
in its ``done``. A trajectory export reads both back as the chat the model saw; kept beside
``run`` so that the run does not depend on the exporters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from steward.loop import Loop
    from steward.models.base import ToolSpec


def openai_tool(spec: ToolSpec) -> dict[str, Any]:
    """A tool as OpenAI's ``tools`` parameter (and fine-tuning files) describe it."""
    function = {"name": spec.name, "description": spec.description, "parameters": dict(spec.parameters)}
    return {"type": "function", "function": function}


async def offered(loop: Loop) -> tuple[str, list[dict[str, Any]] | None]:
    """The run's fixed system prompt and the tools it starts with (None: they could not be listed)."""
    try:
        specs = [*await loop.toolset.get_tools(loop.ctx), loop.step_spec]
    except Exception:  # the first step lists them again, and ends the run cleanly if it fails there
        return loop.static_prompt, None
    return loop.static_prompt, [openai_tool(spec) for spec in specs]


class OfferedLater:
    """The tools a run's requests offered after its first one, each once (first schema seen).

    The first request offers what ``run_start`` recorded; a resumed run replays its steps from
    the first, so this is rebuilt from the same requests.
    """

    __slots__ = ("_later", "_seen")

    def __init__(self) -> None:
        self._seen: set[str] | None = None  # None: no request yet
        self._later: dict[str, ToolSpec] = {}  # bounded by the tools that exist

    def note(self, specs: Sequence[ToolSpec]) -> None:
        """A request offers ``specs``."""
        seen = self._seen
        if seen is None:
            self._seen = {spec.name for spec in specs}
            return
        for spec in specs:
            if spec.name not in seen:  # one set lookup per tool: about 1 us a step
                seen.add(spec.name)
                self._later[spec.name] = spec

    def tools(self) -> list[dict[str, Any]] | None:
        """The later tools as OpenAI's ``tools`` parameter describes them (None: there were none)."""
        return [openai_tool(spec) for spec in self._later.values()] or None
