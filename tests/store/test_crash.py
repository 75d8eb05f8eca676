"""Real crashes: agent processes killed with SIGKILL at many points, then resumed to the end.

A child process runs the trajectory agent (``steward.testing.trajectory``: a scripted model
and a ``mark`` tool that appends to ``markers.txt``) against a real store, and dies by
SIGKILL: after its k-th streamed event, inside a tool call right after the tool's side
effect (``CRASH_ENV``), or from outside after a random delay. New processes then resume the
run until one finishes it. Whatever the crash point, the run ends done, its log is gap-free,
no recorded call ran twice, and every marker is written once or reported as unknown.

Python's start-up and imports cost ~0.4 s per process, too much for a hundred crashes, so the
children are forked from one process that imported everything once (a zygote, as in a fork
server); each is still a process of its own, with its own connections, killed for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sqlite3
import sys
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steward.events import ApprovalResultEvent, DoneEvent, Event, ToolResultEvent, ToolUse
from steward.store.events import EventStore, open_store
from steward.testing.trajectory import markers

ALL = ["a", "b", "c", "d", "e"]
KILLED = -9  # a child's exit code as the zygote reports it: killed by SIGKILL
PACE = 0.002  # seconds a child waits after each event, so its writer commits in between
CHILD_TIMEOUT_S = 60.0  # a child that takes longer hangs (a lock never released, say)

# The zygote imports once, then forks one child per command it reads from stdin. It is
# single-threaded and runs no event loop when it forks, so forking it is safe. It alone reaps
# its children, so a pid it has not reported as exited cannot have been reused: its "kill"
# command hits the right process. Each message is one JSON line written by one os.write,
# which a pipe keeps whole, so the lines of concurrent children never interleave.
#
# A child opens the store, starts its runs (or resumes them when the store has them) and
# streams them to the end: it answers the question "blue", approves the approval, and
# declines a call asked about again because its outcome is unknown (it may have run).
ZYGOTE = r"""
import asyncio, json, os, select, signal, time, traceback

from steward.store.events import open_store
from steward.testing.trajectory import CRASH_ENV, GOAL, trajectory_agent

def say(**message):
    if message["id"] == 0:  # the warm-up run's
        return
    os.write(1, (json.dumps(message) + "\n").encode()[:4000])

class Child:
    def __init__(self, spec, store):
        self.spec, self.store, self.seen, self.types, self.ready_at = spec, store, 0, [], None

    async def drive(self, run):
        spec, stream = self.spec, run.stream()
        for _ in range(20):
            async for event in stream:
                if self.ready_at is None:
                    if event.type == "run_start" and spec.get("durable_start", True):
                        await self.durable(run.id, event.seq)
                    self.ready_at = time.monotonic()
                    say(id=spec["id"], ready=True)
                self.seen += 1
                self.types.append(event.type)
                if self.seen == spec.get("k"):
                    os.kill(os.getpid(), signal.SIGKILL)
                await asyncio.sleep(spec.get("pace", 0))
            pending = run.pending
            if run.status != "waiting" or pending is None:
                return run.status
            approval = pending.approval
            if approval is not None and "outcome is unknown" in approval.reason:
                stream = run.deny_stream(reason="it already ran")
            elif approval is not None:
                stream = run.approve_stream()
            else:
                stream = run.answer_stream("blue")
        raise AssertionError("the run kept waiting")

    async def durable(self, run_id, seq):
        # Goes on only once the run's start is committed: a crash before that leaves a run
        # that cannot be resumed (test_killed_before_its_start_is_durable_the_run_resumes).
        for _ in range(500):
            if await self.store.last_seq(run_id) >= seq:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the run's start never became durable")

async def main(spec):
    store = await open_store(spec["url"])
    try:
        agent = trajectory_agent(approvals=spec.get("approvals", True))
        agent.store = store
        child, runs, modes = Child(spec, store), [], []
        for run_id, workspace in spec["runs"]:
            row = await store.get_run(run_id)
            if row is None:  # new, or its first process died before creating it
                runs.append(agent.start(GOAL, workspace=workspace, run_id=run_id))
                modes.append("start")
            elif row.status == "done":  # killed after its end was recorded: nothing to resume
                runs.append(None)
                modes.append("finished")
            else:
                runs.append(await agent.resume(run_id))
                modes.append("resume:" + row.status)
        say(id=spec["id"], modes=modes)
        status = await asyncio.gather(*(child.drive(run) if run else finished() for run in runs))
        took = time.monotonic() - (child.ready_at or time.monotonic())
        return {"status": status, "events": child.seen, "types": child.types[:200], "took": took}
    finally:
        await store.close()

async def finished():
    return "done"

def warm_up():
    # One whole run here first, so that the children do not each pay for the imports and the
    # set-up that a run does on first use (drivers, dialects, lazily imported modules).
    import tempfile, threading

    async def run(folder):
        store = await open_store(f"sqlite:///{folder}/warm-up.db")
        try:
            agent = trajectory_agent()
            agent.store = store
            spec = {"id": 0, "durable_start": False}
            await Child(spec, store).drive(agent.start(GOAL, workspace=folder))
        finally:
            await store.close()

    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(run(folder))
    import asyncpg, sqlalchemy.dialects.postgresql.asyncpg  # for the children on PostgreSQL
    assert threading.active_count() == 1, threading.enumerate()  # so forking is safe

def serve():
    warm_up()
    children, buffered, lines = {}, b"", []
    while True:
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            say(id=children.pop(pid), exit=os.waitstatus_to_exitcode(status))
        if not lines:
            # Unbuffered reads: select() cannot see lines that a buffered reader holds.
            if not select.select([0], [], [], 0.005)[0]:
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                break
            *lines, buffered = (buffered + chunk).split(b"\n")
            continue
        spec = json.loads(lines.pop(0))
        if "kill" in spec:
            for pid, cid in children.items():
                if cid == spec["kill"]:
                    os.kill(pid, signal.SIGKILL)
            continue
        pid = os.fork()
        if pid:
            children[pid] = spec["id"]
            continue
        code = 1
        try:
            if spec.get("crash_in"):
                os.environ[CRASH_ENV] = spec["crash_in"]
            say(id=spec["id"], result=asyncio.run(main(spec)))
            code = 0
        except BaseException:
            say(id=spec["id"], error=traceback.format_exc()[-3000:])
        finally:
            os._exit(code)
    for pid in children:  # the test is over: children still running are stray
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)

serve()
"""


@dataclass
class Child:
    id: int
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    exited: asyncio.Future[int] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    result: dict[str, Any] | None = None
    error: str | None = None
    modes: list[str] = field(default_factory=list)

    def failure(self) -> str:
        """The last line of the child's traceback."""
        return ((self.error or "").strip().splitlines() or ["no error reported"])[-1]


class Zygote:
    """The test's side of the zygote: spawn children, kill them, learn how they ended."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self._children: dict[int, Child] = {}
        self._next = 0
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        assert self._proc.stdout is not None
        async for line in self._proc.stdout:
            message = json.loads(line)
            child = self._children[message["id"]]
            if "modes" in message:
                child.modes = message["modes"]
            elif "ready" in message:
                child.ready.set()
            elif "result" in message:
                child.result = message["result"]
            elif "error" in message:
                child.error = message["error"]
            elif "exit" in message:
                child.ready.set()
                child.exited.set_result(message["exit"])
        for child in self._children.values():
            if not child.exited.done():
                child.exited.set_exception(AssertionError("the zygote died; see zygote.log"))

    def spawn(self, **spec: Any) -> Child:
        self._next += 1
        child = self._children[self._next] = Child(self._next)
        self._send({"id": child.id, **spec})
        return child

    def kill(self, child: Child) -> None:
        self._send({"kill": child.id})

    async def exit_code(self, child: Child) -> int:
        try:
            return await asyncio.wait_for(asyncio.shield(child.exited), CHILD_TIMEOUT_S)
        except TimeoutError:
            self.kill(child)
            await child.exited
            raise AssertionError(f"a child hung for {CHILD_TIMEOUT_S:g} s and was killed") from None

    def _send(self, message: dict[str, Any]) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write((json.dumps(message) + "\n").encode())


@contextlib.asynccontextmanager
async def zygote(log: Path) -> AsyncIterator[Zygote]:
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", ZYGOTE, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )  # fmt: skip
        z = Zygote(proc)
        try:
            yield z
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
                await z.reader


@dataclass
class Scenario:
    name: str
    k: int = 0  # the first process is killed after its k-th streamed event (0: not so)
    crash_in: str | None = None  # mark(NAME) kills the first process right after writing NAME
    kill_after: float | None = None  # the test kills the first process this long after it is ready
    then_k: int = 0  # the first resuming process is killed too, after its then_k-th event


@dataclass
class Outcome:
    scenario: Scenario
    workspace: Path
    exits: list[int] = field(default_factory=list)
    modes: list[str] = field(default_factory=list)


async def play(z: Zygote, url: str, root: Path, scenario: Scenario, **spec: Any) -> Outcome:
    """The scenario's first process, then resuming processes until one finishes the run."""
    ws = root / scenario.name
    ws.mkdir()
    out = Outcome(scenario, ws)
    base = {"url": url, "runs": [[scenario.name, str(ws)]], "pace": PACE, **spec}
    for attempt in range(3):  # at most two crashes, each followed by a resume
        crash: dict[str, Any] = {}
        if attempt == 0:
            crash = {"k": scenario.k, "crash_in": scenario.crash_in}
        elif attempt == 1:
            crash = {"k": scenario.then_k}
        child = z.spawn(**base, **crash)
        if attempt == 0 and scenario.kill_after is not None:
            await child.ready.wait()
            await asyncio.sleep(scenario.kill_after)
            z.kill(child)
        code = await z.exit_code(child)
        out.exits.append(code)
        out.modes.extend(child.modes)
        if code == 0:
            assert child.result is not None and child.result["status"] == ["done"], child.result
            return out
        if code != KILLED:
            raise AssertionError(f"process {attempt + 1} exited with {code}: {child.failure()}")
    raise AssertionError(f"no process finished the run: {out}")


async def check(store: EventStore, out: Outcome) -> None:
    """The run is done; its log and its side effects are what a correct resume leaves."""
    run_id = out.scenario.name
    row = await store.get_run(run_id)
    assert row is not None and row.status == "done" and row.end_status == "solved", row
    assert row.owner is None, row
    events = await store.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), [e.seq for e in events]
    assert isinstance(events[-1], DoneEvent) and events[-1].status == "done", events[-1]
    assert sum(isinstance(e, DoneEvent) for e in events) == 1, "two done events"
    # Each resume of a run left 'running' by its dead process is an attempt.
    assert row.attempts == out.modes.count("resume:running"), (row.attempts, out.modes)

    uses = [e for e in events if isinstance(e, ToolUse) and e.tool == "mark"]
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    by_call = {e.call_id: e for e in results}
    assert len({u.call_id for u in uses}) == len(uses), "a call was started twice"
    assert len(by_call) == len(results), "a call has two results"
    written = Counter(markers(out.workspace))
    assert set(written) <= set(ALL), written
    unknown = set()
    for use in uses:
        result = by_call.get(use.call_id)
        assert result is not None, f"call {use.call_id} has no result"
        marker = use.input["name"]
        if result.status == "completed":
            assert written[marker] == 1, (marker, written)  # ran exactly once: not lost, not repeated
        else:
            # Interrupted, or asked about again and declined: it may have run, at most once.
            assert result.error_category == "interrupted" or "it already ran" in result.output, result
            assert written[marker] <= 1, (marker, written)
            unknown.add(marker)
    for marker in ALL:
        assert written[marker] == 1 or marker in unknown, (marker, written, unknown)
    # A call runs again only with a human's fresh approval, and this human never gives one.
    approvals = [e for e in events if isinstance(e, ApprovalResultEvent) and e.decision == "approved"]
    assert len(approvals) <= 1, approvals


async def reference(z: Zygote, url: str, root: Path) -> dict[str, Any]:
    """What one process streams for a whole run without a crash: event types, time taken."""
    ws = root / "reference"
    ws.mkdir()
    child = z.spawn(url=url, runs=[["reference", str(ws)]], pace=PACE)
    assert await z.exit_code(child) == 0, child.failure()
    assert child.result is not None and child.result["status"] == ["done"], child.result
    return child.result


async def run_scenarios(z: Zygote, url: str, root: Path, scenarios: list[Scenario]) -> None:
    """Play the scenarios, four at a time, then check every one of them."""
    gate = asyncio.Semaphore(4)

    async def one(scenario: Scenario) -> Outcome:
        async with gate:
            return await play(z, url, root, scenario)

    played = await asyncio.gather(*(one(s) for s in scenarios), return_exceptions=True)
    failures: list[str] = []  # all of them, so one failing test names every bad crash point
    async with await open_store(url) as store:
        for scenario, out in zip(scenarios, played, strict=True):
            try:
                if isinstance(out, BaseException):
                    raise out
                await check(store, out)
            except AssertionError as exc:
                failures.append(f"{scenario}: {str(exc).splitlines()[0][:1000]}")
    assert not failures, f"{len(failures)} of {len(scenarios)} crash points failed:\n" + "\n".join(failures)


async def test_killed_after_any_streamed_event_the_resumed_run_completes(
    store_url: str, tmp_path: Path
) -> None:
    async with zygote(tmp_path / "zygote.log") as z:
        types = (await reference(z, store_url, tmp_path))["types"]
        # Every kind of step is in there: plan, act, verify, a question, an approval, the end.
        for needed in ("tool_use", "tool_result", "waiting", "answer", "approval_result", "done"):
            assert needed in types
        # The first point is covered by test_killed_before_its_start_is_durable_the_run_resumes
        # and the last (after done) by test_killed_after_the_done_event_the_run_is_recorded_done.
        # PostgreSQL gets every other point: the crash points are the same, its commits slower.
        points = range(2, len(types), 1 if store_url.startswith("sqlite") else 2)
        await run_scenarios(z, store_url, tmp_path, [Scenario(f"k{k}", k=k) for k in points])


async def test_killed_inside_a_tool_call_the_call_is_reported_unknown(store_url: str, tmp_path: Path) -> None:
    # Each marker's call dies right after its side effect; "c" had been approved, so its human
    # is asked again and declines. Some resuming processes are killed too.
    scenarios = [Scenario(f"in-{m}", crash_in=m) for m in ALL]
    scenarios += [
        Scenario(f"in-{m}-then-{k}", crash_in=m, then_k=k) for m in ("a", "b", "d", "e") for k in (1, 3)
    ]
    # "c" again after its re-ask was shown but before it was answered (not yet durable).
    scenarios += [Scenario("in-c-then-1", crash_in="c", then_k=1)]
    async with zygote(tmp_path / "zygote.log") as z:
        await run_scenarios(z, store_url, tmp_path, scenarios)


async def test_killed_from_outside_at_random_times_the_resumed_run_completes(
    store_url: str, tmp_path: Path
) -> None:
    rng = random.Random(20240601)  # the delays are reproducible, if not where they land
    async with zygote(tmp_path / "zygote.log") as z:
        took = (await reference(z, store_url, tmp_path))["took"]
        # Within the run, clear of its very end: a kill after the done event is a known bug
        # (test_killed_after_the_done_event_the_run_is_recorded_done).
        delays = [rng.uniform(0.0, 0.8 * took) for _ in range(12)]
        scenarios = [Scenario(f"random{n}", kill_after=delay) for n, delay in enumerate(delays)]
        await run_scenarios(z, store_url, tmp_path, scenarios)


async def test_concurrent_writers_to_one_sqlite_file_lose_nothing(tmp_path: Path) -> None:
    """Processes writing many runs into one SQLite file at once: no corruption, no lost event."""
    url = f"sqlite:///{tmp_path}/shared/steward.db"
    processes, runs_each = 4, 5
    plan = [[[f"p{p}r{r}", str(tmp_path / f"p{p}r{r}")] for r in range(runs_each)] for p in range(processes)]
    for runs in plan:
        for _, ws in runs:
            Path(ws).mkdir()
    async with zygote(tmp_path / "zygote.log") as z:
        children = [z.spawn(url=url, runs=runs, approvals=False) for runs in plan]
        for child in children:
            assert await z.exit_code(child) == 0, child.failure()
            assert child.result is not None and child.result["status"] == ["done"] * runs_each
    logs: dict[str, list[Event]] = {}
    async with await open_store(url) as store:
        for runs in plan:
            for run_id, ws in runs:
                row = await store.get_run(run_id)
                assert row is not None and row.status == "done" and row.end_status == "solved", row
                logs[run_id] = await store.events(run_id)
                assert [e.seq for e in logs[run_id]] == list(range(1, len(logs[run_id]) + 1)), run_id
                assert markers(Path(ws)) == ALL, run_id
    # Every run did the same, so every log has the same events (their times aside).
    shapes = {tuple(e.type for e in log) for log in logs.values()}
    assert len(shapes) == 1, shapes
    db = sqlite3.connect(tmp_path / "shared" / "steward.db")
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("SELECT count(*) FROM events").fetchone()[0] == sum(map(len, logs.values()))
    finally:
        db.close()


# --- the narrow windows: a kill before the start is durable, right after an answer, between
# the done event and the row's status, and after an interrupted call was asked about again.


async def test_killed_before_its_start_is_durable_the_run_resumes(store_url: str, tmp_path: Path) -> None:
    async with zygote(tmp_path / "zygote.log") as z:
        # No pause: the process dies before its writer ever ran.
        out = await play(z, store_url, tmp_path, Scenario("k1", k=1), durable_start=False, pace=0)
    async with await open_store(store_url) as store:
        await check(store, out)


async def test_killed_after_an_answer_the_crash_is_counted(store_url: str, tmp_path: Path) -> None:
    async with zygote(tmp_path / "zygote.log") as z:
        types = (await reference(z, store_url, tmp_path))["types"]
        k = types.index("answer") + 2  # the answer is durable (a barrier); one step on from it
        ws = tmp_path / "after-answer"
        ws.mkdir()
        child = z.spawn(url=store_url, runs=[[ws.name, str(ws)]], pace=PACE, k=k)
        assert await z.exit_code(child) == KILLED, child.failure()
    async with await open_store(store_url) as store:
        row = await store.get_run(ws.name)
        assert row is not None and row.status == "running" and row.owner, row


async def test_killed_after_the_done_event_the_run_is_recorded_done(store_url: str, tmp_path: Path) -> None:
    async with zygote(tmp_path / "zygote.log") as z:
        types = (await reference(z, store_url, tmp_path))["types"]
        out = await play(z, store_url, tmp_path, Scenario("at-done", k=len(types)))
    async with await open_store(store_url) as store:
        await check(store, out)


async def test_killed_after_an_interrupted_call_was_asked_about_again(store_url: str, tmp_path: Path) -> None:
    async with zygote(tmp_path / "zygote.log") as z:
        # mark(c) dies in the call; the resuming process re-asks, is denied, then dies too.
        out = await play(z, store_url, tmp_path, Scenario("in-c-then-3", crash_in="c", then_k=3))
    async with await open_store(store_url) as store:
        await check(store, out)
