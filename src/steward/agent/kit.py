"""What an agent works with: its model, policy, sandbox, memory, embedder and toolset.

Each is made on first use from the agent's configuration and kept: ``Agent`` is built on this
(``steward.agent``), and the runs it makes (``steward.agent.runs``) take them from here. The
toolset is a stack: built-in, user and MCP tools under the persona's allowlist and the write
switch, rules and discovery (described briefly with ``prompt = "compact"``), checkpoints, then
the guard and the policy, with secret values redacted outermost. With a store, the memory tools
(core blocks, ``search_history``, and ``remember``/``recall``/``forget`` over long-term memory)
are among them, and ``note`` with the built-in tools, as ``tasks`` is; the embedder ``[memory]
embedder`` names is shared by memory recall, tool discovery and the skill and rule searches.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from steward.config import Config, Limits, ProviderSettings
from steward.errors import ConfigError
from steward.memory.recall import recall_toolset
from steward.models.base import Model
from steward.tools.base import (
    CombinedToolset,
    CommandSandbox,
    FilteredToolset,
    FunctionToolset,
    Tool,
    Toolset,
)

if TYPE_CHECKING:
    from steward.embed.base import Embedder
    from steward.mcp.toolset import McpToolset
    from steward.memory.archival import Archivist, LongTermAccess
    from steward.memory.blocks import CoreMemory, MemoryBlock
    from steward.personas import Persona
    from steward.safety.checkpoints.around_calls import Checkpointer
    from steward.safety.policy.rules import Policy
    from steward.safety.policy.wrapper import Previewer
    from steward.safety.secrets.values import SecretWatch
    from steward.store.events import EventStore


class AgentKit:
    """The model, policy, sandbox, memory and tools of an ``Agent`` (whose ``__init__`` sets
    the attributes named here)."""

    config: Config
    persona: Persona | None
    store: EventStore | None
    limits: Limits
    model_spec: str | Model | None
    config_file: Path | None
    mask_warnings: list[str]
    _model: Model | None
    _policy: Policy | None
    _sandbox_choice: bool | CommandSandbox
    _sandbox: CommandSandbox | None
    _memory_choice: bool | None
    _core_memory: CoreMemory | None
    _memory_loaded: bool
    _user_tools: list[Tool | Callable[..., Any]]
    _toolsets: list[Toolset]
    _builtin_tools: bool
    _toolset: Toolset | None
    _toolset_store: EventStore | None
    _checkpointed: Toolset | None
    _mcp: list[Toolset] | None
    _embedder: Embedder | None
    _embedder_made: bool
    _long_term: LongTermAccess | None
    _forge_previews: Mapping[str, Previewer] = MappingProxyType({})  # steward-forge

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
            resolved = resolve_model(
                spec,
                base_url=settings.base_url,
                api_key=api_key,
                timeout=settings.timeout_s,
                max_retries=settings.max_retries,
                stream=settings.stream,
            )
            from steward.memory.cache import cached_model

            # Itself unless [cache] turns reuse on (and there is a store to keep replies in).
            engine = self.store.engine if self.store is not None else None
            embedder = self.embedder() if self.config.cache.similar else None
            self._model = cached_model(resolved, self.config, engine, embedder)
        return self._model

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

    def embedder(self) -> Embedder | None:
        """What ``[memory] embedder`` names (None: search by keyword only), made once and closed
        with the agent; memory recall, tool discovery and the skill and rule searches share it."""
        if not self._embedder_made:
            from steward.embed.resolve import embedder_from_config

            self._embedder = embedder_from_config(self.config)  # a bad value: ConfigError naming the forms
            self._embedder_made = True
        return self._embedder

    @property
    def long_term(self) -> LongTermAccess | None:
        """Long-term memory (``remember``/``recall``/``forget``, archived summaries): with a store,
        unless ``[memory] long_term`` is off or the agent was made with ``memory=False``."""
        if self.store is None or not self.config.memory.long_term or self._memory_choice is False:
            return None
        if self._long_term is None or self._long_term.engine is not self.store.engine:
            from steward.memory.archival import LongTermAccess

            self._long_term = LongTermAccess(self.store.engine, self.config.memory, self.embedder())
        return self._long_term

    def archivist(self, user: str | None = None) -> Archivist | None:
        """What copies summaries into long-term memory for ``user`` (default ``[memory] user``,
        else "local") and this agent's persona; None without long-term memory."""
        access = self.long_term
        if access is None:
            return None
        from steward.memory.archival import Archivist

        persona = self.persona.name if self.persona is not None else ""
        return Archivist(access, user or self.config.memory.user or "local", persona)

    async def _save_block(self, block: MemoryBlock) -> None:
        if self.store is not None:
            from steward.memory.block_store import MemoryStore

            await MemoryStore(self.store.engine).save(block)

    def toolset(self) -> Toolset:
        # Some tools exist only with a store (memory, history): set ``store`` before the first run.
        if self._toolset is not None and self._toolset_store is not self.store:
            self._toolset = None
        if self._toolset is None:
            from steward.memory.budget import budget_chars

            self._toolset_store = self.store
            parts: list[Toolset] = []
            if self._builtin_tools:
                from steward.tools.builtin import builtin_toolset

                parts.append(builtin_toolset())
                from steward.tools.git import git_toolset  # git tools: offered in a git repository

                parts.append(git_toolset())
                parts.append(self._forge())  # steward-forge: git_push, create_pull_request
            if self._builtin_tools and self.config.code.enabled:  # [code]: execute_code
                from steward.tools.code import code_tools

                parts.append(FunctionToolset(code_tools()))
            if self._user_tools:
                parts.append(FunctionToolset(self._user_tools))
            parts.extend(self._toolsets)
            parts.append(recall_toolset())
            parts.extend(self._work_notes())  # tasks, note (issue 23)
            memory = self.core_memory
            if memory is not None:
                from steward.memory.blocks import memory_toolset

                parts.append(memory_toolset(memory, on_change=self._save_block))
            if self.store is not None:
                from steward.memory.history import history_toolset

                parts.append(history_toolset(self.store))
                from steward.memory.graph import graph_toolset

                parts.append(graph_toolset(self.store))  # related(node): the record's relation graph
            long_term = self.long_term
            if long_term is not None:
                from steward.memory.archival import archival_toolset

                tokens = self.limits.request_token_budget
                parts.append(archival_toolset(long_term, budget_chars=budget_chars(tokens)))
            parts.extend(self._mcp_toolsets())
            from steward.rules import RulesToolset
            from steward.tools.discovery import DiscoveryToolset

            # Rules (nested AGENTS.md, skills) and discovery wrap every tool; the guard and the
            # policy wrap them all: one safety model for built-in, user and MCP tools alike.
            budget = budget_chars(self.limits.request_token_budget)
            from steward.safety.policy.rules import WRITE_TOOLS
            from steward.tools.git import COMMITS  # git_commit: only where writing is on

            # The write switch and the persona's allowlist apply below discovery too: a hidden
            # tool must not be found.
            persona = self.persona
            writable = FilteredToolset(
                CombinedToolset(parts),
                lambda name: (
                    (self.policy.write or (name not in WRITE_TOOLS and name not in COMMITS))
                    and (persona is None or persona.allows(name))
                ),
            )
            embedder = self.embedder()
            offered: Toolset = DiscoveryToolset(
                RulesToolset(writable, settings=self.config.rules, embedder=embedder),
                settings=self.config.tools,
                budget_chars=budget,
                embedder=embedder,
            )
            if self.config.prompt == "compact":  # short descriptions, bare parameter schemas
                from steward.tools.compact import CompactToolset

                offered = CompactToolset(offered)
            from steward.safety.checkpoints.wrapper import CheckpointToolset

            self._checkpointed = CheckpointToolset(offered, self.checkpointer)
            self._toolset = self._guarded(self.policy)
        return self._toolset

    def _work_notes(self) -> list[Toolset]:
        """``tasks`` (the run's checklist beside its plan) and, with a store, ``note`` (what later
        runs see on what they touch): ``steward.memory.tasks`` and ``steward.memory.notes``. Built-in
        tools, so an agent made without them may have its own of these names."""
        if not self._builtin_tools:
            return []
        from steward.memory.tasks import TasksToolset

        made: list[Toolset] = [TasksToolset()]
        if self.store is not None:
            from steward.memory.notes import notes_toolset

            made.append(notes_toolset(self.store))
        return made

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

        guarded = GuardedToolset(
            self._checkpointed, guard=Guard(), policy=policy, previews=self._forge_previews
        )
        # Whatever any layer returns or notes has secret values redacted.
        redacted: Toolset = RedactingToolset(guarded, self._secret_watch)
        if not self.config.code.enabled:
            return redacted
        from steward.tools.code import CodeToolset

        # [code]: outermost, so each call of a program goes through every layer, recorded.
        return CodeToolset(redacted, max_tool_calls=self.config.code.max_tool_calls)

    def _forge(self) -> Toolset:
        """git_push and create_pull_request, run by the host's hardened git (steward-forge)."""
        from steward.safety.hostgit import HostGit
        from steward.tools.forge import forge_toolset

        forge = forge_toolset(self.config.git, HostGit())
        # What their approvals show (the commits that leave) and are bound to (the commit).
        self._forge_previews = forge.previews
        return forge

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
