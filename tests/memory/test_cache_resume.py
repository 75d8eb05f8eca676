"""A run whose log holds the cache's notes is rebuilt from it: the notes replay before their
replies (the path every model notice takes), and the run goes on through the cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from steward import Agent
from steward.config import CacheSettings, Config
from steward.events import SignalEvent
from steward.memory.cache import CacheNote, cached_model
from steward.models.scripted import ScriptedModel
from steward.store.events import open_store

SCRIPT: list[dict[str, Any]] = [
    {"tool": "list_dir", "args": {"path": "."}},
    {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Which colour?"}},
    {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "blue it is"}},
]


async def test_a_waiting_run_with_cache_notes_resumes_and_goes_on(db_url: str, tmp_path: Path) -> None:
    if db_url.startswith("sqlite"):
        (tmp_path / "queue").mkdir()
    config = Config(cache=CacheSettings(exact=True))
    async with await open_store(db_url) as store:
        first = Agent(
            cached_model(ScriptedModel.from_data(SCRIPT[:2]), config, store.engine, None),
            config=config, store=store, sandbox=False,
        )  # fmt: skip
        waiting = await first.start("pick a colour", workspace=tmp_path).result()
        await first.aclose()
        assert waiting.waiting

        script = ScriptedModel.from_data(SCRIPT)
        again = Agent(
            cached_model(script, config, store.engine, None), config=config, store=store, sandbox=False
        )
        run = await again.resume(waiting.run.id)
        await run.result()  # rebuilt from the log: it waits again, for the same question
        result = await run.answer("blue")
        await again.aclose()
        assert result.solved and result.output == "blue it is"
        script.assert_consumed()  # two replies taken from the log, the third asked for
        events = await store.events(waiting.run.id)
        notes = [CacheNote.parse(e.message) for e in events if isinstance(e, SignalEvent)]
        assert [(n.hit, n.kind) for n in notes if n] == [(False, "exact")] * 3
        replies = [e.seq for e in events if e.type == "model_reply"]
        notices = [e.seq for e in events if isinstance(e, SignalEvent) and e.code == "model_notice"]
        assert [r - 1 for r in replies] == notices  # each note just before its reply
