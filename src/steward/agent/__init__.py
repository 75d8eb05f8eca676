"""The public face of the runtime: ``Agent``, ``Run`` and ``RunResult``.

An ``Agent`` is a definition (persona, model, tools, limits); it holds no run state, so one
agent serves many concurrent runs. Each ``run``/``run_stream`` creates a ``Run`` holding
that run's state; a run that waits for a human is answered through ``Run.answer``.

``Agent`` is made of two parts with modules of their own: ``kit`` (its model, policy,
sandbox, memory and toolset, made on first use) and ``runs`` (starting a run, resuming one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steward.agent.runs import AgentRuns
from steward.config import Config, Limits
from steward.models.base import Model
from steward.ownership import owner_alive, process_owner
from steward.phases import agent_step_spec, phase_guide
from steward.run import (
    Run,
    RunResult,
    RunStream,
    check_goal,
    check_workspace,
)
from steward.tools.base import CommandSandbox, Tool, Toolset

# Run and its helpers live in ``steward.run``; they are named here too for older imports.
__all__ = [
    "Agent",
    "Run",
    "RunResult",
    "RunStream",
    "check_goal",
    "check_workspace",
    "owner_alive",
    "process_owner",
    "store_url",
]

if TYPE_CHECKING:
    from steward.personas import Persona
    from steward.safety.policy.rules import Policy
    from steward.store.events import EventStore


def store_url(config: Config, workspace: Path) -> str:
    """Where runs are recorded: ``[store] url`` / ``STEWARD_DB``, else the workspace's state dir."""
    return config.store.url or f"sqlite:///{workspace.resolve() / '.steward' / 'steward.db'}"


def _static_prompt(name: str, instructions: str, prompt: str = "full") -> str:
    """The system prompt's fixed part; ``prompt`` ("full" or "compact") picks the phase guide."""
    parts = [
        f"You are {name}, an autonomous agent working in a workspace directory on the user's machine. "
        "Tool paths are relative to the workspace.",
    ]
    if instructions.strip():
        parts.append(instructions.strip())
    parts.append(phase_guide(prompt))
    return "\n\n".join(parts)


class Agent(AgentRuns):
    """A persona with a model, tools and limits. Constructing it does no I/O."""

    def __init__(
        self,
        model: str | Model | None = None,
        *,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        toolsets: Sequence[Toolset] = (),
        instructions: str = "",
        name: str = "Steward",
        builtin_tools: bool = True,
        limits: Limits | None = None,
        config: Config | None = None,
        policy: Policy | None = None,
        sandbox: bool | CommandSandbox = True,
        store: EventStore | None = None,
        memory: bool | None = None,
        persona: Persona | None = None,
    ) -> None:
        if config is None and persona is not None:
            # Without a loaded configuration the persona's model, policy and limits apply on
            # top of the defaults; ``load_config(persona=...)`` puts them in their place otherwise.
            from steward.config import validate_layer

            config = validate_layer(persona.layer(), f"persona {persona.name}")
        self.config = config or Config()
        #: Who the agent is and which tools it may use (``steward.personas``).
        self.persona = persona
        #: Core memory blocks (seed 002), shown in the system prompt and edited by the agent.
        #: On by default when runs are recorded (the blocks persist in the store), off otherwise.
        self._memory_choice = memory
        self._core_memory = None
        self._memory_loaded = False
        #: Where runs are recorded as they happen (``steward.store.open_store``); None keeps them in memory.
        self.store = store
        self._policy = policy
        self._sandbox_choice = sandbox
        self._sandbox = None
        #: Deny rules that could not be enforced by masking their program (``steward doctor``).
        self.mask_warnings = []
        self.config_file = None  # where "approve always" remembers rules
        self.model_spec = model if model is not None else self.config.model
        self._model = model if isinstance(model, Model) else None
        self.name = persona.name if persona is not None and name == "Steward" else name
        words = (self.config.instructions, persona.prompt() if persona else "", instructions)
        self.instructions = "\n\n".join(p for p in words if p.strip())
        self.limits = limits or self.config.limits
        self._user_tools = list(tools)
        self._toolsets = list(toolsets)
        self._builtin_tools = builtin_tools
        self._toolset = None
        self._toolset_store = None
        self._checkpointed = None  # the tools inside the guard (see ``_guarded``)
        self._mcp = None
        self._embedder = None  # ``[memory] embedder``, made on first use (``embedder()``)
        self._embedder_made = False
        self._long_term = None  # long-term memory, made on first use (``long_term``)
        self._static = _static_prompt(self.name, self.instructions, self.config.prompt)
        self._step_spec = agent_step_spec(self.config.prompt)  # the agent_step tool as offered
        self._owns_store = False  # see ``Agent.open``

    @classmethod
    async def open(
        cls,
        config: Config,
        *,
        workspace: str | Path = ".",
        model: str | Model | None = None,
        store: EventStore | None = None,
        **options: Any,
    ) -> Agent:
        """The agent an entry point runs: from ``config``, with its store open and its rules file.

        Every entry point (``steward run``, continuing a run, ``chat``, ``stdio``, and the worker
        and server) opens its agent here, so they all see the same model, settings and store.
        The store is ``[store] url`` (or ``STEWARD_DB``), else ``.steward/steward.db`` in the
        workspace; a ``store`` given is shared (the caller closes it), one opened here is closed
        by ``aclose``. ``model`` overrides the configured one.
        """
        from steward.store.events import open_store

        ws = check_workspace(workspace)  # a readable directory, or an error naming the fix
        owned = store is None
        if store is None:
            store = await open_store(store_url(config, ws))
        agent = cls(
            model if model is not None else (config.model or None), config=config, store=store, **options
        )
        agent.config_file = ws / "steward.toml"  # where "approve always" remembers its rules
        agent._owns_store = owned
        return agent

    async def aclose(self) -> None:
        """Release the model's connections, the toolsets' processes and the embedder, if any
        were made.

        An agent made by ``Agent.open`` closes the store it opened too.
        """
        if self._model is not None:
            await self._model.aclose()
        if self._toolset is not None:
            await self._toolset.aclose()
        for server in self._mcp or ():
            await server.aclose()  # already closed through the toolset when it was built; harmless
        if self._long_term is not None:
            await self._long_term.aclose()  # indexing still under way is cancelled
        if self._embedder is not None:
            await self._embedder.aclose()
        if self._owns_store and self.store is not None:
            await self.store.close()

    def warnings(self) -> list[str]:
        """What the user should hear once the agent is no longer used."""
        found = self._model.warnings() if self._model is not None else []
        mcp = self.mcp_toolset() if self._mcp else None
        return found + (mcp.warnings if mcp is not None else [])
