"""``steward stdio``: NDJSON requests on stdin, NDJSON events on stdout (seeds 001 and 002).

Requests, one JSON object per line:

    {"prompt": "fix the tests", "run_id": "my-1", "workspace": "path", "model": "openai:...",
     "max_steps": 20}                                  start a run (only "prompt" is required)
    {"run_id": "my-1", "answer": "text"}               answer a run's question
    {"run_id": "my-1", "approve": true, "remember": false}   approve its pending call
    {"run_id": "my-1", "deny": "why not"}              deny its pending call
    {"run_id": "my-1", "resume": true}                 continue a recorded run (crashed, waiting...)

Every run is recorded in the workspace's store, so a waiting run can be answered by id after
the server restarts, and a run whose process died can be resumed.

An approval that is not answered by its deadline takes its default action on its own.

A recorded run goes on with the model it was started with (its ``run_start`` names it), not
with the server's ``--model``, which is for new runs; a request that answers, decides or
resumes it may name another with ``"model"``.

Runs proceed concurrently (a waiting run can be answered while another works); every event
carries its ``run_id``, which the client may choose so it can match events to requests. A
request that cannot be served gets an ``error`` event (``recoverable: true``) carrying the
request's ``run_id`` when it had one, and the server goes on. Such an error is the server's
word, not part of any run's log, so it has ``seq`` 0 like streamed text deltas (a run's own
events count from 1); it carries the time it was written (``ts``), and the stream's order is
the order things happened. The server stops when stdin closes and the runs it started have
finished or are waiting.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

from steward.agent import Agent, store_url
from steward.cli._stdin import LineReader
from steward.cli.driving import final_warnings
from steward.config import Config, load_config
from steward.errors import ModelError, StewardError
from steward.events import ErrorEvent, Event, encode_event
from steward.run import Run, check_workspace
from steward.store.events import EventStore, RunRow, open_store

_KEYS = {
    "prompt", "workspace", "model", "max_steps", "run_id", "answer", "approve", "remember", "deny", "resume",
}  # fmt: skip
_RUN_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
MAX_CONCURRENT_RUNS = 8
MAX_KNOWN_RUNS = 1000


class BadRequestError(Exception):
    """A request the client must fix; the message says how."""


def _field(request: dict[str, Any], key: str, kind: type, what: str) -> Any:
    value = request.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadRequestError(f'"{key}" must be {what}, got {json.dumps(value)[:60]}')
    return value


def _check_request(request: Any) -> str:
    """Check the envelope of a request; return its run_id (may be empty)."""
    if not isinstance(request, dict):
        raise BadRequestError('a request must be a JSON object such as {"prompt": "..."}')
    run_id: str = _field(request, "run_id", str, "a string") or ""
    if run_id and not _RUN_ID.match(run_id):
        raise BadRequestError('"run_id" must be 1-64 letters, digits or _ . : -')
    unknown = set(request) - _KEYS
    if unknown:
        raise BadRequestError(f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS)}")
    return run_id


class StdioServer:
    def __init__(self, out: IO[str], *, workspace: Path, model: str | None, max_steps: int | None) -> None:
        self.out = out
        self.workspace = workspace
        self.model = model
        self.max_steps = max_steps
        self.runs: dict[str, Run] = {}
        self.agent_of: dict[str, Agent] = {}  # which agent drives each known run
        self.agents: list[tuple[Agent, str]] = []
        self.stores: dict[str, EventStore] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.timers: set[asyncio.Task[None]] = set()
        self.active: dict[str, asyncio.Task[None]] = {}  # the newest stream of each run
        self.slots = asyncio.Semaphore(MAX_CONCURRENT_RUNS)

    def write(self, event: Event) -> None:
        self.out.write(encode_event(event) + "\n")
        self.out.flush()

    def error(self, code: str, message: str, run_id: str = "") -> None:
        # seq 0: not an event of the run's log (see the module's docstring).
        self.write(ErrorEvent(code=code, message=message, recoverable=True, run_id=run_id, ts=time.time()))

    async def handle(self, line: str) -> None:
        run_id = ""
        try:
            request = json.loads(line)
            run_id = _check_request(request)
            if "answer" in request:
                await self._answer(request, run_id)
            elif "approve" in request or "deny" in request:
                await self._decide(request, run_id)
            elif "resume" in request:
                await self._resume(request, run_id)
            else:
                await self._start(request, run_id)
        except json.JSONDecodeError as exc:
            self.error(
                "bad_request", f"not valid JSON ({exc.msg} at column {exc.colno}); send one object per line"
            )
        except BadRequestError as exc:
            self.error("bad_request", str(exc), run_id)
        except StewardError as exc:
            self.error("config_error", str(exc), run_id)
        except OSError as exc:
            self.error("config_error", f"{exc.strerror or exc}: {exc.filename or ''}".strip(": "), run_id)

    async def _start(self, request: dict[str, Any], run_id: str) -> None:
        prompt = _field(request, "prompt", str, "a non-empty string")
        if not prompt or not prompt.strip():
            raise BadRequestError(
                'send {"prompt": "..."} to start a run, or {"run_id": "...", "answer": "..."}'
            )
        if run_id in self.runs:
            raise BadRequestError(f"run_id {run_id!r} is already in use; choose another or leave it out")
        workspace = Path(_field(request, "workspace", str, "a directory path") or self.workspace)
        max_steps = _field(request, "max_steps", int, "a whole number of at least 1")
        if max_steps is not None and max_steps < 1:
            raise BadRequestError('"max_steps" must be at least 1')
        overrides: dict[str, Any] = {}
        model = _field(request, "model", str, "a provider:model string") or self.model
        if model:
            overrides["model"] = model
        if (max_steps or self.max_steps) is not None:
            overrides["limits"] = {"max_steps": max_steps or self.max_steps}
        config = load_config(workspace, overrides=overrides)
        if not config.model:
            raise BadRequestError('no model configured: pass --model, set STEWARD_MODEL, or send "model"')
        check_workspace(workspace)  # before its store is opened (which would create folders)
        agent = await self._agent(config, workspace)
        assert agent.store is not None
        if run_id and await agent.store.get_run(run_id) is not None:
            raise BadRequestError(
                f'run_id {run_id!r} is already recorded; choose another, or send {{"run_id": "{run_id}", '
                '"resume": true} to continue it'
            )
        run = agent.start(prompt, workspace=workspace, run_id=run_id or None)
        self._remember(run, agent)
        self._spawn(run.stream(), run.id)

    async def _known(self, request: dict[str, Any], run_id: str) -> Run | None:
        """A run of this server, or one recorded in the workspace's store (e.g. before a restart)."""
        run = self.runs.get(run_id)
        if run is not None or not run_id:
            return run
        row = await (await self._store()).get_run(run_id)
        if row is None:
            return None
        if row.status != "waiting":
            hint = ' (send {"run_id": ..., "resume": true} to continue it)' if row.status != "done" else ""
            raise BadRequestError(f"run {run_id!r} is {row.end_status or row.status}, not waiting{hint}")
        return await self._rebuild(row, request)

    async def _resume(self, request: dict[str, Any], run_id: str) -> None:
        if request.get("resume") is not True or not run_id:
            raise BadRequestError('resume a recorded run with {"run_id": "...", "resume": true}')
        known = self.runs.get(run_id)
        if known is not None:
            if known.status != "waiting":
                raise BadRequestError(f"run {run_id!r} is {known.status} in this server already")
            # Held here already: rebuilding it again would replay its log against the model
            # twice (a script would lose its place). Show what it waits for.
            self._spawn(_replay_waiting(known), run_id)
            return
        run = await self._rebuild(await (await self._store()).find_run(run_id), request)
        self._spawn(_replay_waiting(run) if run.status == "waiting" else run.stream(), run.id)

    async def _store(self) -> EventStore:
        """The store of the server's own workspace (where earlier servers recorded their runs)."""
        return await self._store_at(store_url(load_config(self.workspace), self.workspace))

    async def _store_at(self, url: str) -> EventStore:
        store = self.stores.get(url)
        if store is None:
            store = self.stores[url] = await open_store(url)
        return store

    async def _rebuild(self, row: RunRow, request: dict[str, Any]) -> Run:
        """Rebuild a recorded run with the model it was started with, or the one the request names."""
        # Not the server's --model: that is for new runs, and a run's log only makes sense with
        # the model that wrote it (a script's place in particular).
        model = _field(request, "model", str, "a provider:model string") or row.model or self.model
        config = load_config(self.workspace, overrides={"model": model} if model else None)
        if not config.model:
            raise BadRequestError(f'run {row.id!r} names no model; send "model" to continue it with one')
        agent = await self._agent(config, self.workspace)
        try:
            agent.model.check()
            run = await agent.resume(row.id)
        except ModelError as exc:
            raise BadRequestError(
                f"{exc} (run {row.id!r} was started with {row.model or 'an unknown model'}; "
                'send "model" to continue it with another)'
            ) from None
        self._remember(run, agent)
        return run

    async def _answer(self, request: dict[str, Any], run_id: str) -> None:
        text = _field(request, "answer", str, "a string")
        if text is None or not run_id:
            raise BadRequestError('answer with {"run_id": "<id of the waiting run>", "answer": "..."}')
        run = await self._known(request, run_id)
        if run is None:
            self.error(
                "unknown_run",
                f"no run {run_id!r} is known here; answer the run_id of a waiting event",
                run_id,
            )
            return
        if run.status != "waiting":
            raise BadRequestError(f"run {run_id!r} is {run.status}, not waiting for an answer")
        self._spawn(run.answer_stream(text), run.id)

    async def _decide(self, request: dict[str, Any], run_id: str) -> None:
        run = await self._known(request, run_id)
        if run is None:
            self.error(
                "unknown_run",
                f"no run {run_id!r} is known here; use the run_id of an approval_gate event",
                run_id,
            )
            return
        if run.pending is None or run.pending.approval is None:
            raise BadRequestError(f"run {run_id!r} is {run.status}, not waiting for an approval")
        if request.get("approve") is True:
            remember = _field(request, "remember", bool, "true or false") or False
            self._spawn(run.approve_stream(remember=remember), run.id)
        elif "deny" in request:
            reason = request["deny"]
            self._spawn(run.deny_stream(reason=reason if isinstance(reason, str) else ""), run.id)
        else:
            raise BadRequestError('send "approve": true, or "deny": "reason"')

    async def _agent(self, config: Config, workspace: Path) -> Agent:
        # One agent per configuration and store: a scripted model keeps its place across
        # requests, and provider clients and store connections are reused.
        url = store_url(config, workspace)
        for agent, agent_url in self.agents:
            if agent.config == config and agent_url == url:
                return agent
        agent = await Agent.open(config, workspace=workspace, store=await self._store_at(url))
        self.agents.append((agent, url))
        return agent

    def _watch_deadline(self, run: Run) -> None:
        pending = run.pending
        if pending is None or pending.approval is None:
            return
        deadline, pending_id = pending.approval.deadline, pending.id

        async def expire() -> None:
            await asyncio.sleep(max(0.0, deadline - time.time()))
            still = run.pending
            if run.status == "waiting" and still is not None and still.id == pending_id:
                await self._drive(run.expire_stream())

        task = asyncio.create_task(expire())
        self.timers.add(task)
        task.add_done_callback(self.timers.discard)

    def _remember(self, run: Run, agent: Agent) -> None:
        if len(self.runs) >= MAX_KNOWN_RUNS:
            for old in [rid for rid, r in self.runs.items() if r.status in ("done", "failed")][:100]:
                del self.runs[old]
                self.agent_of.pop(old, None)
        self.runs[run.id], self.agent_of[run.id] = run, agent

    def _spawn(self, events: AsyncIterator[Event], run_id: str) -> None:
        # A run's streams are written one after another: a client may answer an approval as
        # soon as it sees the gate, before the stream that paused has written its last event.
        before = self.active.get(run_id)

        async def drive() -> None:
            if before is not None:
                await asyncio.gather(before, return_exceptions=True)
            await self._drive(events)

        task = asyncio.create_task(drive())
        self.active[run_id] = task
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(lambda done: self._forget(run_id, done))

    def _forget(self, run_id: str, task: asyncio.Task[None]) -> None:
        if self.active.get(run_id) is task:
            del self.active[run_id]

    async def _drive(self, events: AsyncIterator[Event]) -> None:
        async with self.slots:
            run_id = ""
            try:
                async for event in events:
                    run_id = event.run_id
                    self.write(event)
            except Exception as exc:  # one broken run must not take the server down
                self.error("internal_error", f"{type(exc).__name__}: {exc}", run_id)
        run = self.runs.get(run_id)
        if run is not None and run.status == "waiting":
            self._watch_deadline(run)

    async def close(self) -> None:
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        for timer in list(self.timers):  # waiting runs stay waiting; nobody is left to answer
            timer.cancel()
        for agent, _url in self.agents:
            await agent.aclose()
            paused = any(
                run.status == "waiting" and self.agent_of.get(run_id) is agent
                for run_id, run in self.runs.items()
            )
            for warning in final_warnings(agent, paused=paused):
                sys.stderr.write(f"steward: warning: {warning}\n")
        for store in self.stores.values():
            await store.close()


async def _replay_waiting(run: Run) -> AsyncIterator[Event]:
    """What a client that resumes a waiting run needs to see: what it waits for."""
    from steward.events import ApprovalGateEvent, WaitingEvent

    pending = run.pending
    if pending is None:
        return
    # Shown again, not appended: seq 0 marks them as not part of the log (it has them already).
    shown: list[Event] = []
    if pending.approval is not None:
        a = pending.approval
        gate = ApprovalGateEvent(
            id=pending.id, tool=a.tool, input=a.arguments, reason=a.reason, deadline=a.deadline,
            default=a.default, suggestion=a.suggestion, call_hash=a.call_hash, description=a.description,
        )  # fmt: skip
        shown.append(gate)
    shown.append(WaitingEvent(kind=pending.kind, id=pending.id, question=pending.question))
    for event in shown:
        event.run_id, event.session_id, event.ts = run.id, run.state.session_id, time.time()
        yield event


async def serve(
    stdin: IO[str], stdout: IO[str], *, workspace: Path, model: str | None, max_steps: int | None
) -> None:
    server = StdioServer(stdout, workspace=workspace, model=model, max_steps=max_steps)
    lines = LineReader(stdin)
    try:
        while True:  # until stdin closes
            line = await lines.readline()
            if not line:
                break
            if line.strip():
                await server.handle(line)
    finally:
        await server.close()
