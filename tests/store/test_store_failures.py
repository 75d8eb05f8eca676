"""A store that fails mid-run: a clear one-line error, nothing recorded lost, a resume after the fix.

Each test runs the trajectory agent (``steward.testing.trajectory``) in a child process
until it waits for its question, breaks the store for real (another process holds the write
lock, the disk is full, a file may not grow, the file is read-only for the run's user,
PostgreSQL drops the connections or refuses new ones), lets the run go on, then repairs the
store and resumes the run to its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa

from steward.store.events import open_store
from steward.testing.trajectory import markers

ALL = ["a", "b", "c", "d", "e"]
TIMEOUT_S = 60.0
NOBODY = 65534  # the unprivileged user a read-only store is tried as (root may write anything)

# A child takes one JSON command per line and answers each with one JSON line: it opens the
# store, starts the run and streams it until it waits, answers ("blue"), approves and streams
# it to the end, resumes it, reads a log through a store of its own, limits how large its
# files may grow (ulimit -f: the kernel refuses the write with EFBIG), or fills a disk up to
# ENOSPC and frees it again. A StewardError is a reply; any other exception kills the child,
# and the test reports its traceback.
CHILD = r"""
import asyncio, errno, json, os, resource, signal, sys

import steward.store.engine as engine
from steward.errors import StewardError
from steward.store.events import open_store
from steward.testing.trajectory import GOAL, trajectory_agent

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file at its size limit fails the write instead

async def drive(run, stream, until_pause):
    for _ in range(20):
        async for _event in stream:
            pass
        pending = run.pending
        if run.status != "waiting" or pending is None or until_pause:
            return {"status": run.status, "seq": run.state.seq}
        approval = pending.approval
        if approval is not None and "outcome is unknown" in approval.reason:
            stream = run.deny_stream(reason="it already ran")
        elif approval is not None:
            stream = run.approve_stream()
        else:
            stream = run.answer_stream("blue")
    raise AssertionError("the run kept waiting")

async def main():
    store = agent = run = None
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "open":
                if cmd.get("busy_ms"):
                    engine.SQLITE_BUSY_TIMEOUT_MS = cmd["busy_ms"]
                store = await open_store(cmd["url"])
                agent = trajectory_agent()
                agent.store = store
                reply = {}
            elif op == "start":
                run = agent.start(GOAL, workspace=cmd["workspace"], run_id=cmd["run_id"])
                reply = await drive(run, run.stream(), until_pause=True)
            elif op == "go":
                reply = await drive(run, run.answer_stream("blue"), until_pause=False)
            elif op == "resume":
                run = await agent.resume(cmd["run_id"])
                reply = await drive(run, run.stream(), until_pause=False)
            elif op == "fsize":
                _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
                resource.setrlimit(resource.RLIMIT_FSIZE, (cmd["limit"] or hard, hard))
                reply = {}
            elif op == "fill":
                written, fd = 0, os.open(cmd["path"], os.O_WRONLY | os.O_CREAT, 0o644)
                try:
                    for size in (1 << 16, 1 << 10, 1):
                        try:
                            while True:
                                written += os.write(fd, b"x" * size)
                        except OSError as exc:
                            if exc.errno != errno.ENOSPC:
                                raise
                finally:
                    os.close(fd)
                reply = {"bytes": written}
            elif op == "free":
                os.remove(cmd["path"])
                reply = {}
            elif op == "log":
                async with await open_store(cmd["url"]) as other:
                    row = await other.get_run(cmd["run_id"])
                    events = await other.events(cmd["run_id"])
                reply = {
                    "status": row and row.status, "end_status": row and row.end_status,
                    "seqs": [e.seq for e in events], "types": [e.type for e in events],
                }
            elif op == "close":
                await store.close()
                reply = {}
        except StewardError as exc:
            reply = {"error": str(exc), "type": type(exc).__name__}
        print(json.dumps(reply), flush=True)

asyncio.run(main())
"""


class Child:
    """One process running the child script; ``do`` sends a command and returns its reply."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def do(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((json.dumps({"op": op, **args}) + "\n").encode())
        line = await asyncio.wait_for(self.proc.stdout.readline(), TIMEOUT_S)
        if not line:
            assert self.proc.stderr is not None
            stderr = (await self.proc.stderr.read()).decode(errors="replace")
            raise AssertionError(f"the child died at {op!r}:\n{stderr[-3000:]}")
        reply: dict[str, Any] = json.loads(line)
        return reply


@contextlib.asynccontextmanager
async def spawn(*prefix: str) -> AsyncIterator[Child]:
    """A child process (run through ``prefix``, e.g. as another user), stopped at the end."""
    proc = await asyncio.create_subprocess_exec(
        *prefix, sys.executable, "-c", CHILD, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        yield Child(proc)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), TIMEOUT_S)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


def assert_clear(error: dict[str, Any], kind: str, *fix: str) -> None:
    """A StoreError/ConfigError whose message is one line that names the fix."""
    assert error.get("type") == kind, error
    message = error["error"]
    assert "\n" not in message and len(message) < 500, message
    assert "Traceback" not in message and "sqlalchemy" not in message.lower(), message
    for words in fix:
        assert words in message, (words, message)


async def read_log(url: str, run_id: str) -> dict[str, Any]:
    """The run's row and log as a store opened afresh sees them."""
    async with await open_store(url) as store:
        row = await store.get_run(run_id)
        events = await store.events(run_id)
    return {
        "status": row and row.status, "end_status": row and row.end_status,
        "seqs": [e.seq for e in events], "types": [e.type for e in events],
    }  # fmt: skip


Reader = Callable[[str, str], Awaitable[dict[str, Any]]]


async def assert_log_kept(url: str, run_id: str, paused_at: int, read: Reader = read_log) -> None:
    """The run's log is gap-free and holds at least everything up to where it paused."""
    log = await read(url, run_id)
    assert log["seqs"] == list(range(1, len(log["seqs"]) + 1)), log["seqs"]
    assert len(log["seqs"]) >= paused_at and log["types"][paused_at - 1] == "waiting", log["types"]


async def assert_finished(
    url: str, run_id: str, workspace: Path, reply: dict[str, Any], read: Reader = read_log
) -> None:
    assert reply == {"status": "done", "seq": reply.get("seq")}, reply
    log = await read(url, run_id)
    assert log["status"] == "done" and log["end_status"] == "solved", log
    assert log["seqs"] == list(range(1, len(log["seqs"]) + 1)), log["seqs"]
    assert log["types"][-1] == "done" and log["types"].count("done") == 1, log["types"]
    assert markers(workspace) == ALL  # every call ran, and none twice


async def test_a_database_locked_by_another_process_stops_the_run_clearly(tmp_path: Path) -> None:
    db = tmp_path / "state" / "steward.db"
    url = f"sqlite:///{db}"
    ws = tmp_path / "ws"
    ws.mkdir()
    async with spawn() as c:
        assert await c.do("open", url=url, busy_ms=200) == {}
        paused = await c.do("start", run_id="r1", workspace=str(ws))
        assert paused["status"] == "waiting", paused
        holder = sqlite3.connect(db, isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")  # held well past the busy timeout and every retry
            failed = await c.do("go")
            assert_clear(failed, "StoreError", "database is locked", "write lock", "steward resume")
            # Recorded before is readable (WAL readers do not wait for the writer) and gap-free.
            seqs = [s for (s,) in holder.execute("SELECT seq FROM events WHERE run_id = 'r1' ORDER BY seq")]
            assert seqs == list(range(1, paused["seq"] + 1)), seqs
            # Resuming while the lock is still held fails as clearly.
            again = await c.do("resume", run_id="r1")
            assert_clear(again, "StoreError", "database is locked", "write lock", "steward resume")
        finally:
            holder.rollback()
            holder.close()
        await assert_log_kept(url, "r1", paused["seq"])
        # The same process goes on once the lock is gone: its store recovered from the failure.
        await assert_finished(url, "r1", ws, await c.do("resume", run_id="r1"))


def _private_disk(folder: Path, size: str) -> tuple[str, ...]:
    """A prefix that runs a command with a tmpfs of ``size`` mounted on ``folder``, seen only by it.

    Skips the test where mount namespaces are not allowed (not root, a locked-down container).
    """
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("a small private disk needs root and unshare")
    prefix = (unshare, "-m", "--propagation", "private", "sh", "-c",
              f'mount -t tmpfs -o size={size} steward-test "$0" && exec "$@"', str(folder))  # fmt: skip
    if subprocess.run([*prefix, "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("mount namespaces are not allowed here")
    return prefix


async def test_a_full_disk_stops_the_run_clearly(tmp_path: Path) -> None:
    disk, ws = tmp_path / "disk", tmp_path / "ws"
    disk.mkdir()
    ws.mkdir()
    async with spawn(*_private_disk(disk, "4m")) as c:
        url = f"sqlite:///{disk}/steward.db"

        async def read(url: str, run_id: str) -> dict[str, Any]:
            # The store is on the child's own disk: another process in its mount namespace reads it.
            async with spawn("nsenter", "-t", str(c.proc.pid), "-m") as reader:
                return await reader.do("log", url=url, run_id=run_id)

        assert await c.do("open", url=url) == {}
        paused = await c.do("start", run_id="r1", workspace=str(ws))
        assert paused["status"] == "waiting", paused
        filled = await c.do("fill", path=str(disk / "filler"))  # until the disk says ENOSPC
        assert filled["bytes"] > 1_000_000, filled
        failed = await c.do("go")
        assert_clear(failed, "StoreError", "database or disk is full", "free disk space", "steward resume")
        await assert_log_kept(url, "r1", paused["seq"], read)
        assert await c.do("free", path=str(disk / "filler")) == {}
        await assert_finished(url, "r1", ws, await c.do("resume", run_id="r1"), read)


async def test_a_file_size_limit_stops_the_run_clearly(tmp_path: Path) -> None:
    db = tmp_path / "state" / "steward.db"
    url = f"sqlite:///{db}"
    ws = tmp_path / "ws"
    ws.mkdir()
    async with spawn() as c:
        assert await c.do("open", url=url) == {}
        paused = await c.do("start", run_id="r1", workspace=str(ws))
        assert paused["status"] == "waiting", paused
        # No file of the process may grow any more (ulimit -f); the next commit needs a longer WAL.
        largest = max(p.stat().st_size for p in db.parent.iterdir())
        assert await c.do("fsize", limit=largest) == {}
        failed = await c.do("go")
        assert_clear(failed, "StoreError", "disk I/O error", "check the disk it is on", "steward resume")
        await assert_log_kept(url, "r1", paused["seq"])
        assert await c.do("fsize", limit=None) == {}
        await assert_finished(url, "r1", ws, await c.do("resume", run_id="r1"))


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder the unprivileged user can reach (pytest's own are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="steward-ro-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


async def test_a_read_only_database_stops_the_run_clearly(shared_dir: Path) -> None:
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:  # root writes through any permission: run the agent as nobody
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: a read-only file cannot be made")
        prefix = (setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")
    state, ws = shared_dir / "state", shared_dir / "ws"
    for folder in (state, ws):
        folder.mkdir()
        if os.geteuid() == 0:
            os.chown(folder, NOBODY, NOBODY)
    db = state / "steward.db"
    url = f"sqlite:///{db}"
    async with spawn(*prefix) as c:
        assert await c.do("open", url=url) == {}
        paused = await c.do("start", run_id="r1", workspace=str(ws))
        assert paused["status"] == "waiting", paused
        assert await c.do("close") == {}
    # While the run waits, its database becomes read-only; the process that would go on with
    # it is told so when it opens the store, before anything runs.
    files = [db, *state.glob("steward.db-*")]
    for path in [*files, state]:
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        async with spawn(*prefix) as c:
            failed = await c.do("open", url=url)
            assert_clear(failed, "ConfigError", "readonly database", "writable")
    finally:
        for path in [state, *files]:
            path.chmod(path.stat().st_mode | 0o200)
    await assert_log_kept(url, "r1", paused["seq"])
    async with spawn(*prefix) as c:
        assert await c.do("open", url=url) == {}
        await assert_finished(url, "r1", ws, await c.do("resume", run_id="r1"))


async def _admin(url: str, *statements: str) -> int:
    """From the server's maintenance database: run ``statements``, then end every connection to
    the test database (as an administrator or a failover would); how many were ended."""
    target = sa.make_url(url)
    conn = await asyncpg.connect(
        target.set(database="postgres").render_as_string(hide_password=False), timeout=5
    )
    try:
        for statement in statements:
            await conn.execute(statement.format(db=target.database))
        ended = await conn.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", target.database
        )
        return len(ended)
    finally:
        await conn.close()


async def _empty(url: str) -> None:
    conn = await asyncpg.connect(url, timeout=5)
    try:
        await conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    finally:
        await conn.close()


@pytest.mark.postgres
async def test_dropped_postgresql_connections_are_reconnected(postgres_url: str, tmp_path: Path) -> None:
    """A dropped connection is transient: the writer reconnects and the run goes on, losing nothing."""
    url = postgres_url
    await _empty(url)
    ws = tmp_path / "ws"
    ws.mkdir()
    async with spawn() as c:
        assert await c.do("open", url=url) == {}
        paused = await c.do("start", run_id="r1", workspace=str(ws))
        assert paused["status"] == "waiting", paused
        assert await _admin(url) >= 1  # the child's pooled connections
        await assert_finished(url, "r1", ws, await c.do("go"))


@pytest.mark.postgres
async def test_a_postgresql_database_that_refuses_connections_stops_the_run_clearly(
    postgres_url: str, tmp_path: Path
) -> None:
    url = postgres_url
    await _empty(url)
    ws = tmp_path / "ws"
    ws.mkdir()
    async with spawn() as c:
        assert await c.do("open", url=url) == {}
        paused = await c.do("start", run_id="r1", workspace=str(ws))
        assert paused["status"] == "waiting", paused
        # The server goes away for this database: its connections end and new ones are refused.
        await _admin(url, 'ALTER DATABASE "{db}" WITH ALLOW_CONNECTIONS false')
        try:
            failed = await c.do("go")
        finally:
            await _admin(url, 'ALTER DATABASE "{db}" WITH ALLOW_CONNECTIONS true')
        assert_clear(failed, "StoreError", "not currently accepting connections", "steward resume")
        await assert_log_kept(url, "r1", paused["seq"])
        await assert_finished(url, "r1", ws, await c.do("resume", run_id="r1"))
