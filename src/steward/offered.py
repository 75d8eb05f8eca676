"""What a run's model is offered before it starts, recorded in its ``run_start`` (a trajectory
export reads it back as the chat the model saw; kept beside ``run`` so that the run does not
depend on the exporters)."""

from __future__ import annotations

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
