"""A job's run remembers under the job's user key: a worker process writes it, and only a run
of that user recalls it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "jobs" / "kit"))

from fleet_kit import Fleet

from steward.config import MemorySettings
from steward.jobs.store import JobStore
from steward.memory.archival import LongTermAccess
from steward.memory.longterm import MemoryItem, Scope
from steward.store.events import open_store

END = {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "kept"}}


async def _submit(fleet: Fleet, user: str) -> str:
    async with await open_store(fleet.db_url) as store:
        job, _ = await JobStore(store.engine).submit(
            "keeper", "keep the fact", workspace=str(fleet.workspace), user_key=user
        )
    return job.id


async def _items(fleet: Fleet) -> list[MemoryItem]:
    async with await open_store(fleet.db_url) as store:
        return await LongTermAccess(store.engine, MemorySettings()).memory.items(None)


async def _recall(fleet: Fleet, user: str) -> list[str]:
    async with await open_store(fleet.db_url) as store:
        memory = LongTermAccess(store.engine, MemorySettings()).memory
        found = await memory.recall(
            Scope(user, "keeper", str(fleet.workspace.resolve())), "vault combination"
        )
        return [f.item.text for f in found]


def test_a_jobs_memory_belongs_to_its_user_key(tmp_path: Path, db_url: str) -> None:
    fleet = Fleet(tmp_path, db_url)
    try:
        remember = {"tool": "remember", "args": {"text": "The vault combination is 4-8-15."}}
        fleet.persona("keeper", [remember, END], tools='["remember", "recall"]')
        job_id = asyncio.run(_submit(fleet, "ada"))
        fleet.worker("--role", "keeper")
        fleet.ended(1)
    finally:
        fleet.stop()
    assert fleet.job(job_id).status == "done"
    items = asyncio.run(_items(fleet))
    assert [(i.scope.user, i.scope.persona, i.run_id) for i in items] == [("ada", "keeper", job_id)]
    assert asyncio.run(_recall(fleet, "ada")) == ["The vault combination is 4-8-15."]
    assert asyncio.run(_recall(fleet, "local")) == []
    assert asyncio.run(_recall(fleet, "grace")) == []
