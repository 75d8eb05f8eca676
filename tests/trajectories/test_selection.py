"""Which runs an export takes: the ones named (each must have ended), or every ended run since a time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.trajectories.scenarios import WORK, Reply, agent, run, step

from steward.errors import StewardError
from steward.store.events import EventStore
from steward.trajectories._export import Selection, parse_since, selected

ASK: list[Reply] = [[step("feedback", feedback_message="Which file?")]]


async def test_a_run_still_waiting_is_refused_by_name_and_left_out_of_all(
    store: EventStore, tmp_path: Path
) -> None:
    ended = await run(store, tmp_path, WORK)
    waiting = agent(store, ASK).start("ask first", workspace=tmp_path)
    assert (await waiting.result()).waiting
    with pytest.raises(StewardError, match=f"run {waiting.id} is waiting: it has no outcome yet"):
        await selected(store, Selection(ids=(waiting.id,)))
    rows, left_out = await selected(store, Selection(every=True))
    assert ([r.id for r in rows], left_out) == ([ended], 1)
    rows, _ = await selected(store, Selection(every=True, since=time.time() + 60))
    assert rows == []


def test_since_takes_an_age_or_a_date() -> None:
    assert parse_since("2h", now=10_000.0) == 10_000.0 - 7200
    assert parse_since("7d", now=1e6) == 1e6 - 7 * 86400
    assert parse_since("2026-11-01") < parse_since("2026-11-01T09:30")
    with pytest.raises(StewardError, match=r"give e\.g\. 12h"):
        parse_since("soon")
