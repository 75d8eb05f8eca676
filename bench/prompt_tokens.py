"""What the compact prompt saves: the first request of a run, full against compact.

    .venv/bin/python bench/prompt_tokens.py

Each row is an agent as ``steward run`` makes it (``Agent.open``: a SQLite store in a scratch
workspace, so the memory and history tools are there), asked one goal; the first request it
sends is taken from a model that answers ``agent_step end`` at once. Counted with
``steward.models.tokens``, the estimate Steward uses when a server reports no usage (about
what a byte-pair tokenizer gives; a real tokenizer differs by some percent): the system prompt
(static part and working-memory view), the tool schemas (descriptions, parameters,
``agent_step`` included) and the whole request. Rows: every built-in tool (``fetch_url``
needs an allowed domain, so one is set), the default agent, and the shipped ``coder`` persona.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from steward.agent import Agent
from steward.config import Config, load_config
from steward.models.base import AssistantMessage, ModelRequest, ToolCall
from steward.models.scripted import FunctionModel
from steward.models.tokens import estimate_tokens, request_tokens, tools_tokens
from steward.personas import Persona, find_persona

GOAL = "The tests in this project fail. Find the bug and fix it, then confirm the tests pass."
END = {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "done"}


async def first_request(config: Config, persona: Persona | None, workspace: Path) -> ModelRequest:
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest) -> AssistantMessage:
        seen.append(request)
        return AssistantMessage(tool_calls=(ToolCall("end-1", "agent_step", END),))

    agent = await Agent.open(
        config, workspace=workspace, model=FunctionModel(answer), persona=persona, sandbox=False
    )
    try:
        await agent.run(GOAL, workspace=workspace)
    finally:
        await agent.aclose()
    return seen[0]


def counts(request: ModelRequest) -> tuple[int, int, int]:
    """Tokens of the system prompt, of the tool schemas, and of the whole request."""
    return estimate_tokens(request.system_text), tools_tokens(request.tools), request_tokens(request)


async def main() -> None:
    rows: list[tuple[str, str, ModelRequest]] = []
    for label, persona_name, layer in (
        ("every built-in tool", None, {"sandbox": {"allowed_domains": ["example.org"]}}),
        ("default agent", None, {}),
        ("coder persona", "coder", {}),
    ):
        for style in ("full", "compact"):
            with tempfile.TemporaryDirectory(prefix="steward-bench-") as scratch:
                workspace = Path(scratch)
                persona = find_persona(persona_name, workspace) if persona_name else None
                config = load_config(
                    workspace,
                    user_file=workspace / "no-user-config.toml",
                    environ={},
                    persona=persona.layer() if persona else None,
                    overrides={**layer, "prompt": style},
                )
                rows.append((label, style, await first_request(config, persona, workspace)))
    print("| agent | prompt | tools | system prompt | tool schemas | whole request |")
    print("|---|---|---|---|---|---|")
    full: tuple[int, int, int] = (0, 0, 0)
    for label, style, request in rows:
        measured = counts(request)
        if style == "full":
            full = measured
            cells = [f"{n:,}" for n in measured]
        else:
            cells = [f"{n:,} ({(n - f) / f:+.0%})" for n, f in zip(measured, full, strict=True)]
        print(f"| {label} | {style} | {len(request.tools)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    asyncio.run(main())
