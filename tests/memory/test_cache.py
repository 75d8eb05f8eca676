"""The model cache: exact and similar hits, what is never kept, expiry, and the notes a run logs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from steward import Agent
from steward.config import CacheSettings, Config
from steward.errors import ConfigError
from steward.events import SignalEvent
from steward.memory.cache import CacheNote, CachingModel, cached_model
from steward.models.base import (
    AssistantMessage,
    Model,
    ModelRequest,
    ModelResponse,
    Notice,
    StreamItem,
    ToolCall,
    Usage,
    UserMessage,
)
from steward.models.openai_chat import OpenAIChatModel
from steward.phases import AGENT_STEP_SPEC
from steward.store.events import open_store
from steward.testing.fake_embed import HashEmbedder, hash_vectors
from steward.testing.fake_llm import FakeLLMServer, FakeReply, FakeToolCall


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Counting(Model):
    """Answers every request with ``reply``, counting the requests that reached it."""

    def __init__(self, reply: AssistantMessage) -> None:
        self.reply, self.calls, self.name = reply, 0, "counting:test"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        self.calls += 1
        yield ModelResponse(self.reply, Usage(input_tokens=900, output_tokens=100, requests=1))


def request(goal: str, *earlier: Any) -> ModelRequest:
    return ModelRequest(
        system="You are a test agent.", messages=[*earlier, UserMessage(goal)], tools=[AGENT_STEP_SPEC]
    )


async def ask(model: Model, req: ModelRequest) -> tuple[ModelResponse, list[CacheNote]]:
    notes, response = [], None
    async for item in model.stream(req):
        if isinstance(item, Notice):
            note = CacheNote.parse(item.message)
            assert note is not None
            notes.append(note)
        elif isinstance(item, ModelResponse):
            response = item
    assert response is not None
    return response, notes


ANSWER = AssistantMessage(text="notes.txt has 2 lines.")
WRITE = AssistantMessage(tool_calls=(ToolCall("c1", "write_file", {"path": "a.txt", "content": "x"}),))


def caching(inner: Model, engine: AsyncEngine, clock: Clock | None = None, **settings: Any) -> CachingModel:
    embedder = HashEmbedder() if settings.get("similar") else None
    return CachingModel(
        inner, engine=engine, settings=CacheSettings(**settings), embedder=embedder, clock=clock or Clock()
    )


# --- exact ---------------------------------------------------------------------------------


PLAN = FakeToolCall(
    "agent_step",
    {
        "phase": "plan",
        "summary": "plan",
        "plan": {"goal": "count", "sub_tasks": [{"id": 1, "title": "read it"}]},
    },
)
READ = FakeToolCall("read_file", {"path": "notes.txt"})
END = FakeToolCall(
    "agent_step", {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "2 lines"}
)


async def test_a_repeated_run_is_answered_from_the_cache_without_a_request(
    db_url: str, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("one\ntwo\n")
    if db_url.startswith("sqlite"):
        (tmp_path / "queue").mkdir()
    config = Config(cache=CacheSettings(exact=True))
    with FakeLLMServer(
        [FakeReply(tool_calls=[PLAN]), FakeReply(tool_calls=[READ]), FakeReply(tool_calls=[END])]
    ) as server:
        async with await open_store(db_url) as store:
            results = []
            for _ in range(2):
                chat = OpenAIChatModel(
                    "gpt-test", base_url=server.openai_base_url, api_key="k", max_retries=0
                )
                agent = Agent(
                    cached_model(chat, config, store.engine, None), config=config, store=store, sandbox=False
                )
                results.append(await agent.run("How many lines has notes.txt?", workspace=workspace))
                await agent.aclose()
            assert len(server.requests) == 3  # the second run asked the server nothing
            first, second = results
            assert second.solved and second.output == first.output == "2 lines"
            logged = [e for e in await store.events(second.run.id) if isinstance(e, SignalEvent)]
            notes = [CacheNote.parse(e.message) for e in logged if e.code == "model_notice"]
            assert [(n.hit, n.kind) for n in notes if n] == [(True, "exact")] * 3
            assert all(n.tokens_saved > 0 for n in notes if n)
            before = [
                CacheNote.parse(e.message)
                for e in await store.events(first.run.id)
                if isinstance(e, SignalEvent)
            ]
            assert [(n.hit, n.kind) for n in before if n] == [(False, "exact")] * 3
            assert second.usage.requests == 0 and first.usage.requests == 3


async def test_an_exact_hit_needs_the_same_request(engine: AsyncEngine) -> None:
    inner = Counting(ANSWER)
    model = caching(inner, engine, exact=True)
    await ask(model, request("How many lines has notes.txt?"))
    response, notes = await ask(model, request("How many lines has notes.txt?"))
    assert inner.calls == 1 and response.message == ANSWER and response.usage.requests == 0
    assert notes == [CacheNote(hit=True, kind="exact", tokens_saved=1000)]
    _, notes = await ask(model, request("How many lines has notes.txt??"))
    assert inner.calls == 2 and notes == [CacheNote(hit=False, kind="exact")]


# --- similar -------------------------------------------------------------------------------

GOAL = "Count the lines in notes.txt"
CLOSE = "count the lines in notes.txt please"  # cosine 0.92 under the test embedder
FARTHER = "count the words in notes.txt"  # cosine 0.83


async def test_a_similar_goal_above_the_threshold_is_a_hit(engine: AsyncEngine) -> None:
    a, b, c = hash_vectors([GOAL, CLOSE, FARTHER])
    assert float(a @ b) >= 0.9 > float(a @ c)
    inner = Counting(ANSWER)
    model = caching(inner, engine, similar=True, threshold=0.9)
    await ask(model, request(GOAL))
    response, notes = await ask(model, request(CLOSE))
    assert inner.calls == 1 and response.message == ANSWER
    [note] = notes
    assert note.hit and note.kind == "similar" and note.tokens_saved == 1000
    assert note.similarity == pytest.approx(float(a @ b), abs=1e-3)
    _, notes = await ask(model, request(FARTHER))  # below the threshold: asked, and kept in turn
    assert (
        inner.calls == 2 and not notes[0].hit and notes[0].similarity == pytest.approx(float(a @ c), abs=1e-3)
    )


async def test_a_goal_naming_another_file_is_never_a_similar_hit(engine: AsyncEngine) -> None:
    inner = Counting(ANSWER)
    model = caching(inner, engine, similar=True, threshold=0.5)
    await ask(model, request("How many lines does notes_01.txt have?"))
    _, notes = await ask(model, request("How many lines does notes_04.txt have?"))
    assert inner.calls == 2 and notes == [CacheNote(hit=False, kind="similar")]  # nothing comparable
    _, notes = await ask(model, request("how many lines has notes_01.txt"))
    assert inner.calls == 2 and notes[0].hit


async def test_similarity_serves_only_a_runs_first_step(engine: AsyncEngine) -> None:
    inner = Counting(ANSWER)
    model = caching(inner, engine, similar=True, threshold=0.9)
    earlier = [UserMessage("hello"), AssistantMessage(text="hi")]
    await ask(model, request(GOAL, *earlier))
    _, notes = await ask(model, request(GOAL, *earlier))
    assert inner.calls == 2 and notes == []  # a later turn: no lookup at all (exact is off)


async def test_a_similar_entry_is_bound_to_its_prompt_and_model(engine: AsyncEngine) -> None:
    inner = Counting(ANSWER)
    await ask(caching(inner, engine, similar=True), request(GOAL))
    other = ModelRequest(system="Another prompt.", messages=[UserMessage(GOAL)], tools=[AGENT_STEP_SPEC])
    _, notes = await ask(caching(inner, engine, similar=True), other)
    assert inner.calls == 2 and notes == [CacheNote(hit=False, kind="similar")]
    renamed = Counting(ANSWER)
    renamed.name = "counting:other"
    _, notes = await ask(caching(renamed, engine, similar=True), request(GOAL))
    assert renamed.calls == 1 and not notes[0].hit


# --- what is kept, for how long -------------------------------------------------------------------


async def test_an_expired_entry_is_not_served(engine: AsyncEngine) -> None:
    clock, inner = Clock(), Counting(ANSWER)
    model = caching(inner, engine, clock, exact=True, ttl_s=60)
    await ask(model, request(GOAL))
    clock.now += 59
    assert (await ask(model, request(GOAL)))[1][0].hit
    clock.now += 2
    _, notes = await ask(model, request(GOAL))
    assert inner.calls == 2 and not notes[0].hit
    async with engine.connect() as conn:  # the expired entry made way for the new one
        assert (await conn.execute(sa.text("SELECT count(*) FROM model_cache"))).scalar_one() == 1


async def test_a_reply_that_writes_is_never_kept_by_default(engine: AsyncEngine) -> None:
    inner = Counting(WRITE)
    model = caching(inner, engine, exact=True)
    for _ in range(2):
        _, notes = await ask(model, request("write a.txt"))
        assert not notes[0].hit
    assert inner.calls == 2
    async with engine.connect() as conn:
        assert (await conn.execute(sa.text("SELECT count(*) FROM model_cache"))).scalar_one() == 0


async def test_side_effects_true_keeps_a_reply_that_writes(engine: AsyncEngine) -> None:
    inner = Counting(WRITE)
    model = caching(inner, engine, exact=True, side_effects=True)
    await ask(model, request("write a.txt"))
    response, notes = await ask(model, request("write a.txt"))
    assert inner.calls == 1 and notes[0].hit and response.message.tool_calls[0].name == "write_file"


async def test_summaries_pass_through_uncached(engine: AsyncEngine) -> None:
    inner = Counting(ANSWER)
    model = caching(inner, engine, exact=True)
    summary = ModelRequest(system="Summarise.", messages=[UserMessage("long text")], purpose="summary")
    for _ in range(2):
        assert (await ask(model, summary))[1] == []
    assert inner.calls == 2


# --- turning it on -----------------------------------------------------------------------------


async def test_the_cache_is_off_unless_configured(engine: AsyncEngine) -> None:
    inner = Counting(ANSWER)
    assert cached_model(inner, Config(), engine, None) is inner
    on = Config(cache=CacheSettings(exact=True))
    assert cached_model(inner, on, None, None) is inner  # nothing recorded: nowhere to keep it
    assert isinstance(cached_model(inner, on, engine, None), CachingModel)


async def test_similar_without_an_embedder_names_the_fix(engine: AsyncEngine) -> None:
    with pytest.raises(ConfigError, match=r"\[memory\] embedder = \"local\".*similar = false"):
        cached_model(Counting(ANSWER), Config(cache=CacheSettings(similar=True)), engine, None)


async def test_a_scripted_run_answered_from_the_cache_leaves_no_reply_unused(
    db_url: str, tmp_path: Path
) -> None:
    """A scripted model moves past each reply the cache served instead, as past a replayed one: the
    repeated run ends with no "never used" warning, and a partly cached run stays in step."""
    from steward.models.scripted import ScriptedModel

    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("one\ntwo\n")
    script = [{"tool_calls": [{"name": c.name, "arguments": c.arguments}]} for c in (PLAN, READ, END)]
    config = Config(cache=CacheSettings(exact=True))
    async with await open_store(db_url) as store:
        models = []
        for _ in range(2):
            scripted = ScriptedModel.from_data(script)
            agent = Agent(
                cached_model(scripted, config, store.engine, None), config=config, store=store, sandbox=False
            )
            result = await agent.run("How many lines has notes.txt?", workspace=workspace)
            await agent.aclose()
            assert result.solved and result.output == "2 lines"
            models.append(scripted)
        assert [m.used for m in models] == [3, 3]
        assert models[1].warnings() == []
