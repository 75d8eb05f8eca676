"""How an agent makes its runs: a new one for a goal, or a recorded one rebuilt to go on.

A run gets its own state, working memory and loop; the agent's model and tools are shared
(``steward.agent.kit``). A run that goes on keeps what it started with: its goal, workspace,
output schema, rules and step limit (``steward.run_rules``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steward.agent.kit import AgentKit
from steward.answers import check_schema, schema_prompt
from steward.budget import attach_budget
from steward.config import Limits
from steward.context import ContextBuilder
from steward.continuation import Continuation, VerifierToolset
from steward.errors import ConfigError, StewardError
from steward.events import RunStart
from steward.loop import Loop
from steward.memory.tasks import TASKS_KEY
from steward.memory.working import WorkingMemory
from steward.models.base import AssistantMessage, ToolSpec
from steward.ownership import process_owner
from steward.run import Run, RunResult, RunStream, check_goal, check_workspace
from steward.run_rules import held
from steward.run_state import RunState
from steward.safety.policy.rules import ModeSwitch
from steward.settings import budget_settings, loop_settings, tool_settings
from steward.signals import LoopCounters
from steward.telemetry import trace_run
from steward.tools.base import FunctionToolset, ToolContext, Toolset

if TYPE_CHECKING:
    from steward.events import Event
    from steward.memory.archival import Archivist, LongTermAccess
    from steward.memory.compression import Compressor
    from steward.memory.notes import NoteBoard
    from steward.memory.session import History
    from steward.recovery import Recovered
    from steward.safety.policy.rules import Policy
    from steward.store.events import EventStore


class AgentRuns(AgentKit):
    """Starting and resuming the runs of an ``Agent``."""

    _static: str  # the system prompt's fixed part (``Agent.__init__``)
    _step_spec: ToolSpec  # the agent_step tool as offered (full or compact)

    async def resume(
        self,
        run_id: str,
        *,
        max_attempts: int = 3,
        force: bool = False,
        fence: int | None = None,
        output_schema: dict[str, Any] | None = None,
        user: str | None = None,
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
        job's newest claim is that one. ``user`` is whose long-term memories the run sees (a
        job's user key; default ``[memory] user``, else "local").
        """
        from steward.recovery import recover

        store = self.store
        if store is None:
            raise ConfigError("resuming a run needs its store: Agent(store=await open_store(url))")
        persona = self.persona.name if self.persona is not None else ""
        found = await recover(store, run_id, max_attempts=max_attempts, force=force, persona=persona)
        try:
            return await self._rebuilt(store, found, fence=fence, output_schema=output_schema, user=user)
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
        self,
        store: EventStore,
        found: Recovered,
        *,
        fence: int | None,
        output_schema: dict[str, Any] | None,
        user: str | None = None,
    ) -> Run:
        """The run ``recover`` took over, brought to where its log ends."""
        row, first, attempts = found.row, found.start, found.attempts
        history = None
        if row.session_id is not None:
            from steward.memory.session import session_history

            tokens = self.limits.request_token_budget
            history = await session_history(
                store, self.model, row.session_id, request_tokens=tokens, before_run=row.id,
                archivist=self.archivist(user),
            )  # fmt: skip
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
            output_schema=schema, policy=policy, limits=limits, user=user,
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
        user: str | None = None,
    ) -> Run:
        """Create a run for ``goal`` (nothing happens until it is streamed or awaited).

        ``output_schema`` (a JSON Schema; default: the persona's, if it has one) types the result:
        the run ends solved only with an answer that is JSON matching it, and that JSON is the
        run's output. A schema that is not valid is a ``ConfigError``. ``user`` is whose long-term
        memories the run sees (default ``[memory] user``, else "local").
        """
        return self._start(
            goal, workspace=workspace, run_id=run_id, session_id=session_id, history=history, fence=fence,
            output_schema=self._output_schema(output_schema), user=user,
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
        user: str | None = None,
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
            persona=self.persona.name if self.persona else "",
            user=user or self.config.memory.user or "local",
        )
        # --- notes, tasks and continuation (issue 23) ---
        ctx.scope(TASKS_KEY, lambda: memory.tasks)  # the tasks tool and the view share the list
        notes = self._note_board(ws, rid)
        memory.notes = notes
        toolset = self._guarded(rules)
        if lim.verify:
            toolset = VerifierToolset(toolset, lim.verify, self._checker())
        loop = _Loop(
            model=model,
            toolset=toolset,
            static_prompt=static,
            state=state,
            context=ContextBuilder(budget_settings(self.config, lim)),
            tool_context=ctx,
            settings=replace(loop_settings(self.config, lim), output_schema=schema),
        )
        loop.core_memory = self.core_memory
        loop.step_spec = self._step_spec
        loop.long_term, loop.archivist = self.long_term, self.archivist(ctx.user)
        loop.notes = notes
        if lim.verify or lim.max_continuations:
            loop.ending = Continuation(lim.verify, lim.max_continuations, lambda: rules.mode).checked
        attach_budget(loop, self.config, self.store)  # [budget]: tokens, money, time, tool calls
        run = Run(
            loop, model_name=model.name, max_steps=lim.max_steps, remember=self._remembering(rules),
            store=self.store, prepare=self.prepare, persona=self.persona.name if self.persona else "",
            fence=fence, modes=ModeSwitch(rules),
        )  # fmt: skip
        watch = lambda: self._secret_watch(ws)  # noqa: E731 - recorded content is redacted as the log is
        run.trace = trace_run(loop, self.config.telemetry, agent=ctx.persona, watch=watch)
        return run

    def _checker(self) -> Toolset:
        """Where ``[limits] verify`` runs: ``bash``, its output's secret values redacted."""
        from steward.safety.secrets.wrapper import RedactingToolset
        from steward.tools.shell import bash

        return RedactingToolset(FunctionToolset([bash]), self._secret_watch)

    def _note_board(self, workspace: Path, run_id: str) -> NoteBoard | None:
        """The notes the run may see (``steward.memory.notes``): with a store, unless
        ``[memory] notes_chars`` is 0."""
        if self.store is None or self.config.memory.notes_chars <= 0:
            return None
        from steward.memory.notes import NoteBoard, NoteStore

        budget = self.config.memory.notes_chars
        return NoteBoard(NoteStore(self.store.engine), str(workspace.resolve()), run_id, budget)

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


class _Loop(Loop):
    """The loop with the agent's long-term memory around it: turns it folds to save context are
    archived there too, and its stream ends once the memory's background indexing has, so no
    task outlives the run."""

    long_term: LongTermAccess | None = None
    archivist: Archivist | None = None
    notes: NoteBoard | None = None  # read when the run starts or resumes

    @property
    def compressor(self) -> Compressor:
        made = super().compressor
        if self.archivist is not None:
            made.archive = self._archive_turns
        return made

    async def _archive_turns(self, turns: str, text: str) -> None:
        if self.archivist is not None:
            st = self.state
            await self.archivist.keep(
                "turns", text, workspace=str(st.workspace), run_id=st.run_id, session_id=st.session_id
            )

    async def run(self) -> AsyncIterator[Event]:
        ended = False
        if self.notes is not None:
            await self.notes.load()
        try:
            async for event in super().run():
                yield event
            ended = True  # finished or waiting: the vectors of what it remembered are written now
        finally:
            if self.long_term is not None:  # stopped (Ctrl-C, cancelled): the indexing stops too
                await (self.long_term.settle() if ended else self.long_term.aclose())


def _recaller(memory: WorkingMemory) -> Callable[[str], str | None]:
    def recall(call_id: str) -> str | None:
        step = memory.find_output(call_id)
        return step.tool_output if step else None

    return recall
