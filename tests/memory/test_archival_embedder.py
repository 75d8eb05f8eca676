"""The memory tools with an embedder served over HTTP (the real client, the fake server's hashed
vectors): a remembered fact is embedded after the write, and that work is done when the run ends."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from steward import Agent, ScriptedModel
from steward.config import load_config
from steward.events import ToolResultEvent
from steward.store.events import EventStore
from steward.store.schema import memory_vectors
from steward.testing.fake_llm import FakeLLMServer

END = {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "finished"}}


@pytest.fixture
def embeddings() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def workspace(tmp_path: Path, embeddings: FakeLLMServer) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "steward.toml").write_text(
        f'[memory]\nembedder = "openai:hash-embed"\n[models.openai]\nbase_url = "{embeddings.openai_base_url}"\n'
    )
    return ws


async def vectors(store: EventStore) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(memory_vectors))).scalar_one())


async def run_once(
    store: EventStore, workspace: Path, replies: Sequence[dict[str, Any]]
) -> tuple[Agent, list[str]]:
    agent = Agent(
        ScriptedModel.from_data([*replies, END]), config=load_config(workspace), store=store,
        builtin_tools=False, sandbox=False,
    )  # fmt: skip
    events = [e async for e in agent.start("do the task", workspace=workspace).stream()]
    return agent, [e.output for e in events if isinstance(e, ToolResultEvent)]


async def test_a_remembered_fact_is_embedded_by_the_time_its_run_ends(
    store: EventStore, workspace: Path, embeddings: FakeLLMServer
) -> None:
    remember = {"tool": "remember", "args": {"text": "Invoices are exported every Friday at noon."}}
    agent, said = await run_once(store, workspace, [remember])
    try:
        assert said[0].startswith("Remembered as m")
        # The write did not wait for the vector; the run's end did: it is there now.
        assert await vectors(store) == 1
        assert embeddings.embedding_requests
    finally:
        await agent.aclose()
    recall = {"tool": "recall", "args": {"query": "when are invoice exports"}}
    agent, said = await run_once(store, workspace, [recall])
    await agent.aclose()
    assert "Invoices are exported every Friday at noon." in said[0]
