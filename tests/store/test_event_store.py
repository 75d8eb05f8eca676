"""The event store: migrations, the gap-free append-only log, runs, concurrency and open errors."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from steward.errors import ConfigError, StewardError
from steward.events import (
    DoneEvent,
    Event,
    PlanEvent,
    RunStart,
    TextEvent,
    ToolResultEvent,
    ToolUse,
    decode_event,
    encode_event,
)
from steward.store.engine import make_engine
from steward.store.events import EventStore, open_store
from steward.store.schema import LATEST_VERSION, current_version, migrate


def _text(run_id: str, seq: int, session_id: str | None = None) -> TextEvent:
    return TextEvent(seq=seq, run_id=run_id, session_id=session_id, ts=1700000000.0 + seq, text=f"t{seq}")


def _texts(run_id: str, first: int, last: int) -> list[Event]:
    return [_text(run_id, seq) for seq in range(first, last + 1)]


# --- migrations -------------------------------------------------------------------------------


async def test_open_applies_the_migrations_once(store_url: str) -> None:
    async with await open_store(store_url) as store:
        await store.create_run("r1", goal="survive a reopen")
    engine = make_engine(store_url)
    try:
        assert await current_version(engine) == LATEST_VERSION
        assert await migrate(engine) == 0
    finally:
        await engine.dispose()
    async with await open_store(store_url) as store:
        assert (run := await store.get_run("r1")) is not None
        assert run.goal == "survive a reopen"


async def test_concurrent_opens_of_a_new_database_all_succeed(store_url: str) -> None:
    stores = await asyncio.gather(*(open_store(store_url) for _ in range(4)))
    for store in stores:
        await store.close()
    engine = make_engine(store_url)
    try:
        assert await current_version(engine) == LATEST_VERSION
    finally:
        await engine.dispose()


# --- the log ----------------------------------------------------------------------------------


async def test_events_round_trip_exactly(store: EventStore) -> None:
    await store.create_run("r1", goal="fix the bug", session_id="s1")
    envelope: dict[str, Any] = {"run_id": "r1", "session_id": "s1"}
    events: list[Event] = [
        RunStart(
            seq=1,
            ts=1700000000.123456,
            goal="fix the bug",
            model="m",
            workspace="/w",
            max_steps=5,
            output_schema={"type": "object", "required": ["count"]},
            **envelope,
        ),
        PlanEvent(
            seq=2,
            ts=1.5,
            version=1,
            goal="g",
            sub_tasks=[{"id": 1, "title": "read"}],
            current=None,
            **envelope,
        ),
        ToolUse(
            seq=3,
            ts=2.0,
            step=1,
            call_id="c1",
            tool="bash",
            input={"cmd": "ls -la", "n": [1, 2.5]},
            **envelope,
        ),
        ToolResultEvent(
            seq=4,
            ts=3.0,
            step=1,
            call_id="c1",
            tool="bash",
            status="failed",
            output="ünï ✓\n",
            duration_ms=12.5,
            error_category="timeout",
            **envelope,
        ),
        TextEvent(seq=5, ts=4.0, text="done", partial=True, **envelope),
        DoneEvent(
            seq=6,
            ts=5.0,
            status="done",
            end_status="solved",
            message="ok",
            steps=1,
            tool_calls=1,
            usage={"input_tokens": 10, "output_tokens": 3},
            **envelope,
        ),
    ]
    await store.append("r1", events[:2])
    await store.append("r1", events[2:])

    read = await store.events("r1")

    assert read == [decode_event(encode_event(event)) for event in events]
    assert [encode_event(event) for event in read] == [encode_event(event) for event in events]
    assert await store.events("r1", after_seq=4) == events[4:]
    assert await store.last_seq("r1") == 6


async def test_a_new_run_has_an_empty_log(store: EventStore) -> None:
    await store.create_run("r1", goal="g")
    assert await store.events("r1") == []
    assert await store.last_seq("r1") == 0


async def test_a_gap_is_rejected_and_nothing_is_written(store: EventStore) -> None:
    await store.create_run("r1", goal="g")
    await store.append("r1", _texts("r1", 1, 2))

    with pytest.raises(
        StewardError, match=r"seq 4 .* a gap: the log ends at 2, so the next event must have seq 3"
    ):
        await store.append("r1", [_text("r1", 4)])
    with pytest.raises(StewardError, match="a gap"):
        await store.append("r1", [_text("r1", 3), _text("r1", 5)])

    assert await store.last_seq("r1") == 2


async def test_a_duplicate_is_rejected_and_nothing_is_written(store: EventStore) -> None:
    await store.create_run("r1", goal="g")
    await store.append("r1", _texts("r1", 1, 3))

    with pytest.raises(StewardError, match=r"seq 3 .* a duplicate"):
        await store.append("r1", [_text("r1", 3)])
    with pytest.raises(StewardError, match=r"seq 4 .* a duplicate"):
        await store.append("r1", [_text("r1", 4), _text("r1", 4)])

    assert [event.seq for event in await store.events("r1")] == [1, 2, 3]


async def test_events_of_another_run_or_session_are_rejected(store: EventStore) -> None:
    await store.create_run("r1", goal="g", session_id="s1")
    with pytest.raises(StewardError, match="belongs to run 'r2'"):
        await store.append("r1", [_text("r2", 1, session_id="s1")])
    with pytest.raises(StewardError, match="session None"):
        await store.append("r1", [_text("r1", 1)])
    assert await store.last_seq("r1") == 0


async def test_appending_to_an_unknown_run_names_the_fix(store: EventStore) -> None:
    with pytest.raises(StewardError, match=r"no run nope in the store; call create_run\('nope'"):
        await store.append("nope", [_text("nope", 1)])


# --- runs -------------------------------------------------------------------------------------


async def test_runs_are_listed_newest_first(store: EventStore) -> None:
    for run_id in ("a", "b", "c"):
        await store.create_run(run_id, goal=f"goal {run_id}")
    assert [run.id for run in await store.runs()] == ["c", "b", "a"]
    assert [run.id for run in await store.runs(limit=2)] == ["c", "b"]


async def test_status_is_set_and_read_back(store: EventStore) -> None:
    await store.create_run("r1", goal="g", session_id="s1")
    created = await store.get_run("r1")
    assert created is not None
    assert (created.status, created.end_status, created.session_id) == ("running", None, "s1")

    await store.set_status("r1", "done", "partial")

    updated = await store.get_run("r1")
    assert updated is not None
    assert (updated.status, updated.end_status) == ("done", "partial")
    assert updated.updated_at >= created.updated_at
    assert await store.get_run("other") is None
    with pytest.raises(StewardError, match="no run other"):
        await store.set_status("other", "done")


async def test_a_run_id_is_created_once(store: EventStore) -> None:
    await store.create_run("r1", goal="g")
    with pytest.raises(StewardError, match="run r1 already exists"):
        await store.create_run("r1", goal="again")


# --- concurrency ------------------------------------------------------------------------------


async def _append_run(store: EventStore, run_id: str, count: int, batch: int) -> None:
    await store.create_run(run_id, goal="concurrent")
    for first in range(1, count + 1, batch):
        await store.append(run_id, _texts(run_id, first, min(first + batch - 1, count)))


async def test_concurrent_tasks_append_to_their_own_runs(store: EventStore) -> None:
    await asyncio.gather(*(_append_run(store, f"task{n}", 100, 4) for n in range(4)))
    for n in range(4):
        assert [event.seq for event in await store.events(f"task{n}")] == list(range(1, 101))


_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from steward.events import TextEvent
    from steward.store.events import open_store

    async def main(url, run_id, count):
        async with await open_store(url) as store:
            await store.create_run(run_id, goal="process writer")
            for seq in range(1, count + 1, 5):
                events = [TextEvent(seq=s, run_id=run_id, ts=float(s), text="x") for s in range(seq, seq + 5)]
                await store.append(run_id, events)

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


async def test_concurrent_processes_append_to_their_own_runs(store_url: str) -> None:
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", _WRITER, store_url, f"proc{n}", "300", stderr=asyncio.subprocess.PIPE
        )
        for n in range(3)
    ]
    results = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in processes)), timeout=60)
    assert [p.returncode for p in processes] == [0, 0, 0], [err.decode() for _, err in results]

    async with await open_store(store_url) as store:
        for n in range(3):
            assert [event.seq for event in await store.events(f"proc{n}")] == list(range(1, 301))
        assert len(await store.runs()) == 3


# --- opening ----------------------------------------------------------------------------------


def test_an_unknown_scheme_names_the_allowed_forms() -> None:
    with pytest.raises(
        ConfigError, match=r"scheme 'mysql' is not supported; use sqlite:///.* or postgresql://"
    ):
        make_engine("mysql://localhost/steward")
    with pytest.raises(ConfigError, match="is not a URL"):
        make_engine("steward.db")


async def test_a_sqlite_folder_that_cannot_be_created_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a folder")
    with pytest.raises(ConfigError, match=r"cannot open the SQLite store .*afile/db/steward.db: .*writable"):
        await open_store(f"sqlite:///{tmp_path}/afile/db/steward.db")


_OPEN = textwrap.dedent(
    """
    import asyncio, sys
    from steward.errors import ConfigError
    from steward.store.events import open_store

    try:
        asyncio.run(open_store(sys.argv[1]))
    except ConfigError as exc:
        print(exc)
    """
)


async def test_a_read_only_sqlite_file_is_a_config_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/steward.db"
    await (await open_store(url)).close()
    (tmp_path / "steward.db").chmod(0o444)
    prefix: list[str] = []
    if os.geteuid() == 0:  # root writes to read-only files unless it gives up that capability
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv, so a file cannot be made read-only")
        prefix = [setpriv, "--bounding-set", "-dac_override,-dac_read_search"]

    done = subprocess.run(
        [*prefix, sys.executable, "-c", _OPEN, url], capture_output=True, text=True, timeout=30
    )

    assert done.returncode == 0, done.stderr
    assert "cannot open the SQLite store" in done.stdout
    assert "readonly database" in done.stdout
    assert "writable" in done.stdout
    assert len(done.stdout.strip().splitlines()) == 1


async def test_an_unreachable_postgres_is_a_quick_config_error() -> None:
    # Quick by its outcome: the refused connection is reported as such ("is the server
    # running"), not after the connect timeout (which would say it timed out).
    with pytest.raises(
        ConfigError, match=r"cannot open the PostgreSQL store at 127.0.0.1:1/test: .*server is running"
    ):
        await open_store("postgresql://postgres@127.0.0.1:1/test")
