"""Sessions through the agent: turns without tool internals, summaries, core memory, search."""

from __future__ import annotations

from pathlib import Path

from steward import Agent, FunctionModel, Limits, tool
from steward.models.base import AssistantMessage, ModelRequest, ToolCall, ToolResultMessage, UserMessage
from steward.sessions import Session
from steward.store.events import EventStore, open_store


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"SECRET-TOOL-OUTPUT for {key}"


class Model:
    """Looks the goal's key up, then answers; edits memory when asked; records requests."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        if request.purpose == "summary":
            return AssistantMessage(text="SUMMARY: the user asked about alpha and beta")
        self.requests.append(request)
        goal = next(m.content for m in reversed(request.messages) if isinstance(m, UserMessage))
        done = isinstance(request.messages[-1], ToolResultMessage)
        if "remember" in goal and not done:
            return AssistantMessage(
                tool_calls=(ToolCall("m1", "memory_append", {"label": "user", "text": "prefers tabs"}),)
            )
        if "search" in goal and not done:
            return AssistantMessage(tool_calls=(ToolCall("h1", "search_history", {"query": "SECRET-TOOL"}),))
        if not done:
            return AssistantMessage(tool_calls=(ToolCall("l1", "lookup", {"key": goal.split()[-1]}),))
        return AssistantMessage(text=f"answer about {goal.split()[-1]}")


def agent(store: EventStore, model: Model) -> Agent:
    return Agent(
        FunctionModel(model, summaries=True),
        tools=[lookup],
        builtin_tools=False,
        store=store,
        limits=Limits(max_steps=5),
    )


async def test_a_session_run_sees_earlier_turns_but_not_their_tool_calls(
    store: EventStore, tmp_path: Path
) -> None:
    model = Model()
    a = agent(store, model)
    session = await Session.open(a, None, title="keys")
    first = await (await session.start("tell me about alpha", workspace=tmp_path)).result()
    assert first.answered  # it looked the key up and answered in text
    second = await (await session.start("and beta", workspace=tmp_path)).result()
    assert second.answered
    request = model.requests[-2]  # the first request of the second run
    texts = [m.content if not isinstance(m, AssistantMessage) else m.text for m in request.messages]
    assert texts[:3] == ["tell me about alpha", "answer about alpha", "and beta"]
    assert all("SECRET-TOOL-OUTPUT" not in t for t in texts[:2])  # earlier tool events stay out
    turns = await session.turns()
    assert [(t.goal, t.output) for t in turns] == [
        ("tell me about alpha", "answer about alpha"),
        ("and beta", "answer about beta"),
    ]
    assert all(t.run_id for t in turns)
    rows = await store.runs(session_id=session.id)
    assert len(rows) == 2 and all(r.session_id == session.id for r in rows)


async def test_new_closes_with_a_summary_that_the_next_session_starts_from(
    store: EventStore, tmp_path: Path
) -> None:
    model = Model()
    a = agent(store, model)
    session = await Session.open(a, None)
    await (await session.start("about alpha", workspace=tmp_path)).result()
    nxt = await session.new()
    assert session.row.summary == "SUMMARY: the user asked about alpha and beta" and not session.row.is_open
    assert nxt.row.previous_id == session.id and nxt.id != session.id
    await (await nxt.start("about gamma", workspace=tmp_path)).result()
    request = model.requests[-2]
    assert "## Summary of the previous session\nSUMMARY: the user asked" in request.system
    assert [m for m in request.messages if isinstance(m, AssistantMessage) and m.text] == []  # no old turns
    last = await Session.open(a, "last")
    assert last.id == nxt.id


async def test_core_memory_is_in_the_prompt_and_survives_a_new_agent(
    store: EventStore, tmp_path: Path
) -> None:
    model = Model()
    a = agent(store, model)
    result = await a.run("please remember my style", workspace=tmp_path)
    assert result.status == "done"
    assert "prefers tabs" in model.requests[-1].system
    later = Model()
    await agent(store, later).run("about delta", workspace=tmp_path)
    assert '<memory label="user"' in later.requests[0].system and "prefers tabs" in later.requests[0].system
    plain = Model()
    await Agent(FunctionModel(plain), tools=[lookup], builtin_tools=False).run("about x", workspace=tmp_path)
    assert "<memory" not in plain.requests[0].system  # no store: no memory, no memory tools
    assert all(t.name not in ("memory_append", "search_history") for t in plain.requests[0].tools)


async def test_earlier_work_is_searchable(store: EventStore, tmp_path: Path) -> None:
    model = Model()
    a = agent(store, model)
    await a.run("tell me about alpha", workspace=tmp_path)
    result = await a.run("search what we found", workspace=tmp_path)
    assert result.status == "done"
    found = next(
        m.content
        for m in model.requests[-1].messages
        if isinstance(m, ToolResultMessage) and m.call_id == "h1"
    )
    assert "SECRET-TOOL-OUTPUT for alpha" in found and "tool_result" in found


async def test_long_sessions_summarise_their_oldest_turns(tmp_path: Path) -> None:
    async with await open_store(f"sqlite:///{tmp_path}/s.db") as store:
        model = Model()
        a = Agent(
            FunctionModel(model, summaries=True),
            tools=[lookup],
            builtin_tools=False,
            store=store,
            limits=Limits(max_steps=5, request_token_budget=4_000),
        )
        session = await Session.open(a, None)
        for i in range(10):  # ~700 chars a turn; 30% of the budget holds ~6
            await (
                await session.start(f"question {i} " + "padding " * 80 + f"k{i}", workspace=tmp_path)
            ).result()
        history = await session.history()
        assert history.summary.startswith("SUMMARY")
        assert len(history.turns) == 4 and history.turns[-1][0].startswith("question 9")
        request = model.requests[-2]
        assert "## Earlier in this session (summarised)" in request.system
