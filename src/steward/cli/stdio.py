"""``steward stdio``: NDJSON requests on stdin, NDJSON events on stdout (seeds 001 and 002).

Requests, one JSON object per line, handled in order:

    {"prompt": "fix the tests", "workspace": "path", "model": "openai:...", "max_steps": 20}
    {"run_id": "<id of a waiting run>", "answer": "text"}

Every event of every run is written as one line in the shared event encoding. A line that
cannot be understood gets an ``error`` event (``recoverable: true``) and the server goes
on; it stops when stdin closes.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import IO, Any

from steward.agent import Agent, Run
from steward.config import load_config
from steward.errors import StewardError
from steward.events import ErrorEvent, Event, encode_event

_REQUEST_KEYS = {"prompt", "workspace", "model", "max_steps", "run_id", "answer"}
MAX_WAITING_RUNS = 100


class StdioServer:
    def __init__(self, out: IO[str], *, workspace: Path, model: str | None, max_steps: int | None) -> None:
        self.out = out
        self.workspace = workspace
        self.model = model
        self.max_steps = max_steps
        self.waiting: dict[str, Run] = {}
        self.agents: list[Agent] = []

    def write(self, event: Event) -> None:
        self.out.write(encode_event(event) + "\n")
        self.out.flush()

    def error(self, code: str, message: str, run_id: str = "") -> None:
        self.write(ErrorEvent(code=code, message=message, recoverable=True, run_id=run_id))

    async def handle(self, line: str) -> None:
        try:
            request = json.loads(line)
        except json.JSONDecodeError as exc:
            self.error(
                "bad_request", f"not valid JSON ({exc.msg} at column {exc.colno}); send one object per line"
            )
            return
        if not isinstance(request, dict):
            self.error("bad_request", 'a request must be a JSON object such as {"prompt": "..."}')
            return
        unknown = set(request) - _REQUEST_KEYS
        if unknown:
            self.error("bad_request", f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_REQUEST_KEYS)}")
            return
        try:
            if "answer" in request:
                await self._answer(request)
            elif isinstance(request.get("prompt"), str) and request["prompt"].strip():
                await self._start(request)
            else:
                self.error("bad_request", 'send {"prompt": "..."} or {"run_id": "...", "answer": "..."}')
        except StewardError as exc:
            self.error("config_error", str(exc))

    async def _start(self, request: dict[str, Any]) -> None:
        workspace = Path(request.get("workspace") or self.workspace)
        overrides: dict[str, Any] = {}
        if request.get("model") or self.model:
            overrides["model"] = request.get("model") or self.model
        max_steps = request.get("max_steps") or self.max_steps
        if max_steps is not None:
            overrides["limits"] = {"max_steps": max_steps}
        config = load_config(workspace, overrides=overrides)
        if not config.model:
            self.error("no_model", 'No model configured: pass --model, set STEWARD_MODEL, or send "model".')
            return
        agent = self._agent(config.model, config)
        await self._drive(agent.start(request["prompt"], workspace=workspace))

    def _agent(self, model: str, config: Any) -> Agent:
        # One agent per distinct model and configuration: a scripted model keeps its place
        # in the script across requests, and SDK clients are reused.
        for agent in self.agents:
            if agent.model_spec == model and agent.config == config:
                return agent
        agent = Agent(model, config=config)
        self.agents.append(agent)
        return agent

    async def _answer(self, request: dict[str, Any]) -> None:
        run = self.waiting.pop(str(request.get("run_id")), None)
        if run is None:
            self.error("unknown_run", f"no run {request.get('run_id')!r} is waiting for an answer")
            return
        if not isinstance(request["answer"], str):
            self.waiting[run.id] = run
            self.error("bad_request", "answer must be a string", run.id)
            return
        await self._drive_events(run, run.answer_stream(request["answer"]))

    async def _drive(self, run: Run) -> None:
        await self._drive_events(run, run.stream())

    async def _drive_events(self, run: Run, events: Any) -> None:
        async for event in events:
            self.write(event)
        if run.status == "waiting":
            if len(self.waiting) >= MAX_WAITING_RUNS:
                oldest = next(iter(self.waiting))
                del self.waiting[oldest]
                self.error("dropped", f"run {oldest} was dropped: too many runs waiting", oldest)
            self.waiting[run.id] = run

    async def close(self) -> None:
        for agent in self.agents:
            await agent.model.aclose()


async def serve(
    stdin: IO[str], stdout: IO[str], *, workspace: Path, model: str | None, max_steps: int | None
) -> None:
    server = StdioServer(stdout, workspace=workspace, model=model, max_steps=max_steps)
    try:
        while True:
            line = await asyncio.to_thread(stdin.readline)
            if not line:
                break
            if line.strip():
                await server.handle(line)
    finally:
        await server.close()
