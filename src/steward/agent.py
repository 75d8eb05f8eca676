"""The public face of the runtime: ``Agent``, ``Run`` and ``RunResult``.

An ``Agent`` is a definition (persona, model, tools, limits); it holds no run state, so one
agent serves many concurrent runs. Each ``run``/``run_stream`` creates a ``Run`` holding
that run's state; a run that waits for a human is answered through ``Run.answer``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steward.answers import check_schema, schema_prompt
from steward.config import Config, Limits, ProviderSettings
from steward.context import ContextBuilder
from steward.errors import ConfigError, StewardError
from steward.events import RunStart
from steward.loop import Loop
from steward.memory.recall import recall_toolset
from steward.memory.working import WorkingMemory
from steward.models.base import AssistantMessage, Model
from steward.ownership import owner_alive, process_owner
from steward.phases import PHASE_GUIDE
from steward.run import (
    Run,
    RunResult,
    RunStream,
    check_goal,
    check_workspace,
)
from steward.run_rules import held
from steward.run_state import RunState
from steward.safety.policy.rules import ModeSwitch
from steward.settings import budget_settings, loop_settings, tool_settings
from steward.signals import LoopCounters
from steward.tools.base import (
    CombinedToolset,
    CommandSandbox,
    FilteredToolset,
    FunctionToolset,
    Tool,
    ToolContext,
    Toolset,
)

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
    from steward.mcp.toolset import McpToolset
    from steward.memory.blocks import CoreMemory, MemoryBlock
    from steward.memory.session import History
    from steward.personas import Persona
    from steward.recovery import Recovered
    from steward.safety.checkpoints.around_calls import Checkpointer
    from steward.safety.policy.rules import Policy
    from steward.safety.secrets.values import SecretWatch
    from steward.store.events import EventStore


def store_url(config: Config, workspace: Path) -> str:
    """Where runs are recorded: ``[store] url`` / ``STEWARD_DB``, else the workspace's state dir."""
    return config.store.url or f"sqlite:///{workspace.resolve() / '.steward' / 'steward.db'}"


def _static_prompt(name: str, instructions: str) -> str:
    parts = [
        f"You are {name}, an autonomous agent working in a workspace directory on the user's machine. "
        "Tool paths are relative to the workspace.",
    ]
    if instructions.strip():
        parts.append(instructions.strip())
    parts.append(PHASE_GUIDE)
    return "\n\n".join(parts)


class Agent:
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
        self._core_memory: CoreMemory | None = None
        self._memory_loaded = False
        #: Where runs are recorded as they happen (``steward.store.open_store``); None keeps them in memory.
        self.store = store
        self._policy = policy
        self._sandbox_choice = sandbox
        self._sandbox: CommandSandbox | None = None
        #: Deny rules that could not be enforced by masking their program (``steward doctor``).
        self.mask_warnings: list[str] = []
        self.config_file: Path | None = None  # where "approve always" remembers rules
        self.model_spec = model if model is not None else self.config.model
        self._model: Model | None = model if isinstance(model, Model) else None
        self.name = persona.name if persona is not None and name == "Steward" else name
        words = (self.config.instructions, persona.prompt() if persona else "", instructions)
        self.instructions = "\n\n".join(p for p in words if p.strip())
        self.limits = limits or self.config.limits
        self._user_tools = list(tools)
        self._toolsets = list(toolsets)
        self._builtin_tools = builtin_tools
        self._toolset: Toolset | None = None
        self._toolset_store: EventStore | None = None
        self._checkpointed: Toolset | None = None  # the tools inside the guard (see ``_guarded``)
        self._mcp: list[Toolset] | None = None
        self._static = _static_prompt(self.name, self.instructions)
        self._owns_store = False  # see ``Agent.open``

    @property
    def model(self) -> Model:
        """The model, resolved from its ``provider:model`` string on first use."""
        if self._model is None:
            if not self.model_spec:
                raise ConfigError(
                    "No model configured. Set STEWARD_MODEL=openai:gpt-4o-mini (or pass --model, or set "
                    "model in steward.toml), or run `steward demo` to see a scripted run."
                )
            from steward.models.registry import resolve_model

            spec = str(self.model_spec)
            # The defaults of a provider section (timeout, retries) apply even without one.
            settings = self.config.models.get(spec.split(":", 1)[0]) or ProviderSettings()
            api_key = None
            if settings.api_key_env:
                # Never fall back to the provider's usual variable: that key may belong to
                # another server than the configured base_url.
                api_key = os.environ.get(settings.api_key_env)
                if not api_key:
                    raise ConfigError(
                        f"api_key_env names {settings.api_key_env}, which is not set. "
                        f"Export {settings.api_key_env}=<key>, or remove api_key_env from the config."
                    )
            self._model = resolve_model(
                spec,
                base_url=settings.base_url,
                api_key=api_key,
                timeout=settings.timeout_s,
                max_retries=settings.max_retries,
            )
        return self._model

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
        """Release the model's connections and the toolsets' processes, if any were made.

        An agent made by ``Agent.open`` closes the store it opened too.
        """
        if self._model is not None:
            await self._model.aclose()
        if self._toolset is not None:
            await self._toolset.aclose()
        for server in self._mcp or ():
            await server.aclose()  # already closed through the toolset when it was built; harmless
        if self._owns_store and self.store is not None:
            await self.store.close()

    def warnings(self) -> list[str]:
        """What the user should hear once the agent is no longer used."""
        found = self._model.warnings() if self._model is not None else []
        mcp = self.mcp_toolset() if self._mcp else None
        return found + (mcp.warnings if mcp is not None else [])

    @property
    def policy(self) -> Policy:
        """The allow/ask/deny rules, mode and write switch (from the config unless given)."""
        if self._policy is None:
            from steward.safety.policy.rules import Policy

            p = self.config.policy
            self._policy = Policy.from_lists(
                allow=p.allow, ask=p.ask, deny=p.deny, mode=p.mode, write=p.write
            )
        return self._policy

    def sandbox(self) -> CommandSandbox | None:
        """Where commands run: bubblewrap unless the user turned the sandbox off explicitly."""
        if self._sandbox is None and self._sandbox_choice is not False:
            if self._sandbox_choice is True:
                if not self.config.sandbox.enabled:
                    return None
                # Programs a deny rule forbids with any arguments are not there inside the sandbox;
                # the policy then need not fail closed on commands that might reach them.
                from steward.safety.sandbox.bubblewrap import agent_sandbox

                self._sandbox, plan = agent_sandbox(self.config, self.policy)
                self.policy.masked = plan.masked
                self.mask_warnings = list(plan.warnings)
            else:
                self._sandbox = self._sandbox_choice
        return self._sandbox

    def remember(self, rule: str) -> None:
        """Allow ``rule`` from now on, and write it to the project's config when there is one."""
        from steward.safety.policy.approvals import remember_rule
        from steward.safety.policy.rules import Rule

        self.policy.add(Rule.parse(rule, "allow", "approved"))
        if self.config_file is not None:
            remember_rule(self.config_file, rule)

    @property
    def core_memory(self) -> CoreMemory | None:
        """The agent's core memory blocks, or None when memory is off."""
        enabled = self._memory_choice
        if enabled is None:
            enabled = self.store is not None and self.config.memory.enabled
        if not enabled:
            return None
        if self._core_memory is None:
            from steward.memory.blocks import CoreMemory

            self._core_memory = CoreMemory.default()
        return self._core_memory

    async def prepare(self) -> None:
        """Load what lives in the store (core memory values) before the first run; idempotent."""
        memory = self.core_memory
        if memory is None or self._memory_loaded or self.store is None:
            return
        from steward.memory.block_store import MemoryStore

        self._memory_loaded = True
        for block in (await MemoryStore(self.store.engine).load(definitions=memory)).blocks:
            memory.set(block)

    async def _save_block(self, block: MemoryBlock) -> None:
        if self.store is not None:
            from steward.memory.block_store import MemoryStore

            await MemoryStore(self.store.engine).save(block)

    def toolset(self) -> Toolset:
        # Some tools exist only with a store (memory, history): set ``store`` before the first run.
        if self._toolset is not None and self._toolset_store is not self.store:
            self._toolset = None
        if self._toolset is None:
            self._toolset_store = self.store
            parts: list[Toolset] = []
            if self._builtin_tools:
                from steward.tools.builtin import builtin_toolset

                parts.append(builtin_toolset())
            if self._user_tools:
                parts.append(FunctionToolset(self._user_tools))
            parts.extend(self._toolsets)
            parts.append(recall_toolset())
            memory = self.core_memory
            if memory is not None:
                from steward.memory.blocks import memory_toolset

                parts.append(memory_toolset(memory, on_change=self._save_block))
            if self.store is not None:
                from steward.memory.history import history_toolset

                parts.append(history_toolset(self.store))
            parts.extend(self._mcp_toolsets())
            from steward.memory.budget import budget_chars
            from steward.rules import RulesToolset
            from steward.tools.discovery import DiscoveryToolset

            # Rules (nested AGENTS.md, skills) and discovery wrap every tool; the guard and the
            # policy wrap them all: one safety model for built-in, user and MCP tools alike.
            budget = budget_chars(self.limits.request_token_budget)
            from steward.safety.policy.rules import WRITE_TOOLS

            # The write switch and the persona's allowlist apply below discovery too: a hidden
            # tool must not be found.
            persona = self.persona
            writable = FilteredToolset(
                CombinedToolset(parts),
                lambda name: (
                    (self.policy.write or name not in WRITE_TOOLS)
                    and (persona is None or persona.allows(name))
                ),
            )
            offered = DiscoveryToolset(
                RulesToolset(writable, settings=self.config.rules),
                settings=self.config.tools,
                budget_chars=budget,
            )
            from steward.safety.checkpoints.wrapper import CheckpointToolset

            self._checkpointed = CheckpointToolset(offered, self.checkpointer)
            self._toolset = self._guarded(self.policy)
        return self._toolset

    def _guarded(self, policy: Policy) -> Toolset:
        """The agent's tools behind the guard and ``policy`` (a continued run's may be its own)."""
        if self._checkpointed is None or self._toolset_store is not self.store:
            self.toolset()
        assert self._checkpointed is not None
        if policy is self.policy and self._toolset is not None:
            return self._toolset
        from steward.safety.policy.guard import Guard
        from steward.safety.policy.wrapper import GuardedToolset
        from steward.safety.secrets.wrapper import RedactingToolset

        guarded = GuardedToolset(self._checkpointed, guard=Guard(), policy=policy)
        # Outermost: whatever any layer returns or notes has secret values redacted.
        return RedactingToolset(guarded, self._secret_watch)

    def _secret_watch(self, workspace: Path) -> SecretWatch:
        from steward.safety.secrets.watches import secret_watch

        # Secret files' values, and those the configuration hands to processes (MCP env, headers).
        return secret_watch(workspace, self.config)

    def checkpointer(self, workspace: Path) -> Checkpointer:
        """Checkpoints and change detection for ``workspace`` (one per workspace and process)."""
        from steward.safety.checkpoints.around_calls import checkpointer_for

        return checkpointer_for(workspace, self.config)

    def mcp_toolset(self) -> McpToolset | None:
        """The toolset of the configured MCP servers (None when there are none)."""
        from steward.mcp.toolset import McpToolset

        found = [t for t in self._mcp_toolsets() if isinstance(t, McpToolset)]
        return found[0] if found else None

    def _mcp_toolsets(self) -> list[Toolset]:
        """One toolset per configured MCP server, made once (they own processes/connections)."""
        if self._mcp is None:
            servers = {n: c for n, c in self.config.mcp_servers.items() if c.enabled}
            if servers:
                from steward.mcp import mcp_toolsets

                self._mcp = list(mcp_toolsets(servers, config=self.config))
            else:
                self._mcp = []
        return list(self._mcp)

    async def resume(
        self,
        run_id: str,
        *,
        max_attempts: int = 3,
        force: bool = False,
        fence: int | None = None,
        output_schema: dict[str, Any] | None = None,
    ) -> Run:
        """The run ``run_id`` (or a unique prefix of it) rebuilt from the store, ready to go on.

        A waiting run comes back waiting: answer or approve it. A run whose process died comes
        back where its log ends: a call that was running then is reported to the model as
        interrupted, with an unknown outcome, and is never run again silently. A run that has
        died ``max_attempts`` times is marked failed instead. Runs stopped by Ctrl-C or by a
        model or toolset failure continue too. Nothing runs until the result is streamed.

        A run recorded as running by a live process on this machine is refused; one recorded
        by another machine is refused unless ``force`` (this machine cannot tell if it lives).
        With a ``fence`` (a job's claim), the log takes this process's writes only while the
        job's newest claim is that one.
        """
        from steward.recovery import recover

        store = self.store
        if store is None:
            raise ConfigError("resuming a run needs its store: Agent(store=await open_store(url))")
        persona = self.persona.name if self.persona is not None else ""
        found = await recover(store, run_id, max_attempts=max_attempts, force=force, persona=persona)
        try:
            return await self._rebuilt(store, found, fence=fence, output_schema=output_schema)
        except BaseException:
            if fence is None:  # (a job's row is its worker's to settle)
                # Refused after all (a model that cannot load, a log that diverges, Ctrl-C): not
                # a crash, so the run is left as it was found.
                row = found.row
                with contextlib.suppress(StewardError):
                    await store.set_status(
                        row.id, row.status, row.end_status, output=row.output, owner=row.owner,
                        attempts=row.attempts,
                    )  # fmt: skip
            raise

    async def _rebuilt(
        self, store: EventStore, found: Recovered, *, fence: int | None, output_schema: dict[str, Any] | None
    ) -> Run:
        """The run ``recover`` took over, brought to where its log ends."""
        row, first, attempts = found.row, found.start, found.attempts
        history = None
        if row.session_id is not None:
            from steward.memory.session import session_history

            tokens = self.limits.request_token_budget
            history = await session_history(
                store, self.model, row.session_id, request_tokens=tokens, before_run=row.id
            )
        await self.prepare()
        # A run killed before its start was durable has no events: it starts over.
        goal, workspace = (
            (first.goal, first.workspace) if isinstance(first, RunStart) else (row.goal, row.workspace)
        )
        # It goes on with the output schema it was started with, or without one: as recorded.
        # (``output_schema`` is for a run that has not started yet: a job's first claim.)
        schema = first.output_schema if isinstance(first, RunStart) else self._output_schema(output_schema)
        # And under the rules and step limit it started with, whoever continues it (``run_rules``).
        policy, limits = None, self.limits
        if isinstance(first, RunStart):
            policy = held(self.policy, first.policy) if first.policy is not None else None
            limits = replace(limits, max_steps=first.max_steps)
        run = self._start(
            goal, workspace=workspace, run_id=row.id, session_id=row.session_id, history=history, fence=fence,
            output_schema=schema, policy=policy, limits=limits,
        )  # fmt: skip
        if found.log:
            await run._rebuild(found.log, found.last_seq)
        else:
            run._log = store.log(row.id, session_id=row.session_id, last_seq=0, fence=fence)
        await store.set_status(
            row.id, run.status, run.state.end_status, output=run.state.output,
            owner=process_owner() if run.status == "running" else None, attempts=attempts,
        )  # fmt: skip
        return run

    def start(
        self,
        goal: str,
        *,
        workspace: str | Path = ".",
        run_id: str | None = None,
        session_id: str | None = None,
        history: History | None = None,
        fence: int | None = None,
        output_schema: Mapping[str, Any] | None = None,
    ) -> Run:
        """Create a run for ``goal`` (nothing happens until it is streamed or awaited).

        ``output_schema`` (a JSON Schema; default: the persona's, if it has one) types the result:
        the run ends solved only with an answer that is JSON matching it, and that JSON is the
        run's output. A schema that is not valid is a ``ConfigError``.
        """
        return self._start(
            goal, workspace=workspace, run_id=run_id, session_id=session_id, history=history, fence=fence,
            output_schema=self._output_schema(output_schema),
        )  # fmt: skip

    def _output_schema(self, given: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        return given if given is not None or self.persona is None else self.persona.output_schema

    def _start(
        self,
        goal: str,
        *,
        workspace: str | Path,
        run_id: str | None,
        session_id: str | None,
        history: History | None,
        fence: int | None,
        output_schema: Mapping[str, Any] | None,
        policy: Policy | None = None,
        limits: Limits | None = None,
    ) -> Run:
        """``start`` with the output schema as given (a resumed run's is the recorded one), and
        for a continued run, the policy and limits it started with."""
        check_goal(goal)
        ws = check_workspace(workspace)
        from steward.safety.sandbox.bubblewrap import sweep_placeholders

        sweep_placeholders(ws)  # a killed process's placeholders (a resumed run's, a job taken over)
        schema = check_schema(output_schema) if output_schema is not None else None
        model = self.model
        lim = limits or self.limits
        sandbox = self.sandbox()  # sets the programs the agent's policy counts as masked
        rules = policy or self.policy
        rules.masked = self.policy.masked
        rid = run_id or os.urandom(6).hex()
        memory = WorkingMemory(rid)
        state = RunState(
            rid, goal, ws, memory, counters=LoopCounters(max_steps=lim.max_steps), session_id=session_id
        )
        static = self._static
        if self.config.rules.agents_md or self.config.rules.skill_dirs:
            from steward.rules import rules_prompt

            # The root AGENTS.md, the topics of the documents it links, and the skills' names.
            extra = rules_prompt(ws, self.config.rules)
            if extra:
                static += "\n\n" + extra
        if history is not None:
            # Earlier turns of the session: goals and final answers only, never their tool calls.
            for asked, answered in history.turns:
                state.transcript.add_user(asked)
                state.transcript.add_assistant(AssistantMessage(text=answered))
            if history.previous:
                static += f"\n\n## Summary of the previous session\n{history.previous}"
            if history.summary:
                static += f"\n\n## Earlier in this session (summarised)\n{history.summary}"
        if schema is not None:
            static += "\n\n" + schema_prompt(schema)
        state.transcript.add_goal(goal)
        from steward.safety.protected import protected_reason

        ctx = ToolContext(
            workspace=ws,
            run_id=rid,
            settings=tool_settings(self.config, lim),
            recall=_recaller(memory),
            sandbox=sandbox,
            writable=rules.write,
            protected=lambda path: protected_reason(ws, path),
        )
        loop = Loop(
            model=model,
            toolset=self._guarded(rules),
            static_prompt=static,
            state=state,
            context=ContextBuilder(budget_settings(self.config, lim)),
            tool_context=ctx,
            settings=replace(loop_settings(self.config, lim), output_schema=schema),
        )
        loop.core_memory = self.core_memory
        return Run(
            loop, model_name=model.name, max_steps=lim.max_steps, remember=self._remembering(rules),
            store=self.store, prepare=self.prepare, persona=self.persona.name if self.persona else "",
            fence=fence, modes=ModeSwitch(rules),
        )  # fmt: skip

    def _remembering(self, policy: Policy) -> Callable[[str], None]:
        """ "Approve always" for a run under ``policy``: the rule holds for the agent and the run."""
        if policy is self.policy:
            return self.remember

        def remember(rule: str) -> None:
            from steward.safety.policy.rules import Rule

            self.remember(rule)
            policy.add(Rule.parse(rule, "allow", "approved"))

        return remember

    async def run(
        self, goal: str, *, workspace: str | Path = ".", output_schema: Mapping[str, Any] | None = None
    ) -> RunResult:
        return await self.start(goal, workspace=workspace, output_schema=output_schema).result()

    def run_sync(
        self, goal: str, *, workspace: str | Path = ".", output_schema: Mapping[str, Any] | None = None
    ) -> RunResult:
        import asyncio  # deferred like every asyncio use: `import steward` stays fast

        return asyncio.run(self.run(goal, workspace=workspace, output_schema=output_schema))

    def run_stream(
        self, goal: str, *, workspace: str | Path = ".", output_schema: Mapping[str, Any] | None = None
    ) -> RunStream:
        """The run's events as they happen; ``.run`` is the run, to answer it when it waits."""
        return RunStream(self.start(goal, workspace=workspace, output_schema=output_schema))


def _recaller(memory: WorkingMemory) -> Callable[[str], str | None]:
    def recall(call_id: str) -> str | None:
        step = memory.find_output(call_id)
        return step.tool_output if step else None

    return recall
