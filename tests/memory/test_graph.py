"""The relation graph, read from what real runs recorded: a plan with sub-tasks, files read and
written during them, a delegated child job with its own run, memory items, on both engines."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from steward import Agent
from steward.errors import StewardError
from steward.jobs.delegation import DelegateToolset
from steward.jobs.store import JobStore
from steward.memory.graph import Graph, graph_for_run, graph_toolset, related
from steward.models.scripted import ScriptedModel
from steward.store.events import EventStore, open_store
from steward.store.schema import memory_items
from steward.tools.base import ToolContext


def step(phase: str, **fields: Any) -> dict[str, Any]:
    return {"agent_step": {"phase": phase, "summary": phase, **fields}}


def act(tool: str, **args: Any) -> dict[str, Any]:
    return step("act", action={"tool_name": tool, "tool_input": args})


PLAN = step(
    "plan",
    plan={
        "goal": "summarise the notes",
        "sub_tasks": [
            {"id": 1, "title": "read the notes"},
            {"id": 2, "title": "write it", "depends_on": [1]},
        ],
    },
)
DONE = step("verify", sub_task_outcome="done")
PARENT = [
    PLAN,
    act("read_file", path="notes.txt"),
    DONE,
    act("write_file", path="out/summary.md", content="two notes\n"),
    {"tool": "read_file", "args": {"path": "missing.txt"}},  # failed: read nothing
    {"tool": "delegate", "args": {"role": "reviewer", "goal": "review out/summary.md"}},
]
CHILD = [
    {"tool": "read_file", "args": {"path": "out/summary.md"}},
    {"tool": "edit_file", "args": {"path": "out/summary.md", "old_text": "two", "new_text": "2"}},
    step("end", end_status="solved", end_message="reviewed"),
]


@dataclass
class Recorded:
    store: EventStore
    workspace: Path
    parent: str
    child: str


async def run_as(store: EventStore, replies: list[dict[str, Any]], goal: str, ws: Path, run_id: str) -> None:
    jobs = JobStore(store.engine, where=store.where)
    agent = Agent(
        ScriptedModel.from_data(replies), store=store, sandbox=False, toolsets=[DelegateToolset(jobs)]
    )
    await agent.start(goal, workspace=ws, run_id=run_id).result()
    await agent.aclose()


@pytest.fixture
async def recorded(db_url: str, tmp_path: Path) -> AsyncIterator[Recorded]:
    if db_url.startswith("sqlite"):
        (tmp_path / "queue").mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("one\ntwo\n")
    store = await open_store(db_url)
    try:
        jobs = JobStore(store.engine, where=store.where)
        parent, _ = await jobs.submit("coder", "summarise the notes", workspace=str(ws.resolve()))
        await run_as(store, PARENT, "summarise the notes", ws, parent.id)  # it waits for its child now
        (child,) = await jobs.list(parent_id=parent.id)
        await run_as(store, CHILD, child.goal, ws, child.id)
        now = time.time()
        async with store.engine.begin() as conn:
            for text, user, hidden in (("notes are short", "local", None), ("secret of bob", "bob", None),
                                       ("hidden one", "local", now)):  # fmt: skip
                await conn.execute(
                    memory_items.insert().values(
                        scope_user=user,
                        scope_persona="",
                        scope_workspace=str(ws.resolve()),
                        kind="fact",
                        text=text,
                        content_hash=text,
                        run_id=parent.id,
                        created_at=now,
                        updated_at=now,
                        hidden_at=hidden,
                    )
                )
        yield Recorded(store, ws.resolve(), parent.id, child.id)
    finally:
        await store.close()


def edges(graph: Graph) -> set[tuple[str, str, str]]:
    return {(e.source, e.kind, e.target) for e in graph.edges}


async def test_a_runs_graph_holds_its_plan_files_child_job_and_memories(recorded: Recorded) -> None:
    p, c = recorded.parent, recorded.child
    graph = await graph_for_run(recorded.store.engine, p)
    run, t1, t2 = f"run:{p}", f"task:{p}/1", f"task:{p}/2"
    assert (
        graph.root == run
        and graph.nodes[run].status == "waiting"
        and graph.nodes[run].data["role"] == "coder"
    )
    assert {(n.id, n.status) for n in graph.nodes.values() if n.kind == "task"} == {
        (t1, "done"),
        (t2, "in_progress"),
    }
    memories = {n.label: n.data["hidden"] for n in graph.nodes.values() if n.kind == "memory"}
    assert memories == {
        "notes are short": False,
        "secret of bob": False,
        "hidden one": True,
    }  # the operator's view
    found = edges(graph)
    assert {
        (run, "plans", t1), (run, "plans", t2), (t2, "depends_on", t1),
        (run, "read", "file:notes.txt"), (run, "touched", "file:out/summary.md"),
        (run, "child_job", f"run:{c}"), (f"run:{c}", "subtask_of", t2),
        (f"run:{c}", "read", "file:out/summary.md"), (f"run:{c}", "touched", "file:out/summary.md"),
    } <= found  # fmt: skip
    assert "file:missing.txt" not in graph.nodes  # a call that failed touched nothing
    read = next(e for e in graph.edges if e.kind == "read" and e.source == run)
    assert read.data == {"calls": 1, "tools": ["read_file"], "tasks": [1]}
    wrote = next(e for e in graph.edges if e.kind == "touched" and e.source == run)
    assert wrote.data["tasks"] == [2]
    assert graph.nodes[f"run:{c}"].data["role"] == "reviewer" and graph.nodes[f"run:{c}"].data["parent"] == p
    assert all(e.source in graph.nodes and e.target in graph.nodes for e in graph.edges)
    assert not graph.truncated


async def test_a_childs_graph_names_its_parent_and_depth_zero_stops_there(recorded: Recorded) -> None:
    graph = await graph_for_run(recorded.store.engine, recorded.child)
    assert (f"run:{recorded.parent}", "child_job", f"run:{recorded.child}") in edges(graph)
    shallow = await graph_for_run(recorded.store.engine, recorded.parent, depth=0)
    assert f"run:{recorded.child}" not in shallow.nodes


async def test_related_walks_from_a_file_a_task_and_a_memory_item(recorded: Recorded) -> None:
    engine, p, c = recorded.store.engine, recorded.parent, recorded.child
    around_file = await related(engine, "file:out/summary.md")
    assert {(n.node.id, n.edge.kind) for n in around_file} == {
        (f"run:{p}", "touched"), (f"run:{c}", "touched"), (f"run:{c}", "read")
    }  # fmt: skip
    absolute = await related(
        engine, f"file:{recorded.workspace}/notes.txt", workspace=str(recorded.workspace)
    )
    assert [(n.node.id, n.edge.kind) for n in absolute] == [(f"run:{p}", "read")]
    around_task = await related(engine, f"task:{p}/2")
    assert {(n.node.id, n.edge.kind, n.outgoing) for n in around_task} == {
        (f"task:{p}/1", "depends_on", True), (f"run:{p}", "plans", False), (f"run:{c}", "subtask_of", False)
    }  # fmt: skip
    item = next(n for n in await related(engine, f"job:{p}") if n.edge.kind == "remembered")
    assert [n.node.id for n in await related(engine, item.node.id)] == [f"run:{p}"]
    number = item.node.id.removeprefix("memory:")
    for written in (f"memory:m{number}", f"memory:M{number}", f"memory: m{number}"):  # as the tools name it
        assert [n.node.id for n in await related(engine, written)] == [f"run:{p}"], written
    with pytest.raises(StewardError, match="memory:ID with the id remember or recall gave"):
        await related(engine, "memory:abc")
    with pytest.raises(StewardError, match="node ids start with"):
        await related(engine, "plan:3")


async def test_another_workspace_sees_none_of_it(recorded: Recorded, tmp_path: Path) -> None:
    engine, elsewhere = recorded.store.engine, str(tmp_path / "elsewhere")
    assert await related(engine, "file:notes.txt", workspace=elsewhere) == []
    with pytest.raises(StewardError, match="no run"):
        await related(engine, f"run:{recorded.parent}", workspace=elsewhere)


async def test_the_related_tool_keeps_to_the_runs_scope(recorded: Recorded) -> None:
    tools = graph_toolset(recorded.store)
    ctx = ToolContext(workspace=recorded.workspace, run_id=recorded.parent, step=1)
    [spec] = await tools.get_tools(ctx)
    assert spec.name == "related" and "node" in spec.parameters["properties"]
    shown = (await tools.call_tool("related", {"node": f"run:{recorded.parent}"}, ctx)).content
    assert f"plans → task:{recorded.parent}/1 [done]: 1. read the notes" in shown
    assert "notes are short" in shown and "secret of bob" not in shown and "hidden one" not in shown
    by_number = (await tools.call_tool("related", {"node": "task:2"}, ctx)).content
    assert f"← subtask_of run:{recorded.child}" in by_number
    bad = await tools.call_tool("related", {"node": "nothing"}, ctx)
    assert bad.is_error and "run:ID, task:RUN/N, file:PATH or memory:ID" in bad.content
    async with recorded.store.engine.connect() as conn:
        bob = (
            await conn.execute(sa.select(memory_items.c.id).where(memory_items.c.scope_user == "bob"))
        ).scalar_one()
    assert "Nothing is related" in (await tools.call_tool("related", {"node": f"memory:{bob}"}, ctx)).content
