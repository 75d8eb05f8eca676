"""The relation graph: what a run planned, delegated, touched and remembered, as nodes and edges.

Nothing is stored for it: every node and edge is read from what the store already records.
Nodes are runs (a job's run has the job's id, so a delegated child job is a run node too),
the sub-tasks of a run's plan (its ``plan`` events), the files its file tools got a path for
(from ``tool_use`` events whose call completed; ``bash`` is opaque and is not read), and the
long-term memory items it wrote (``memory_items.run_id``). Edges are typed:

    plans       run -> task        a sub-task of the run's latest plan
    depends_on  task -> task       the plan says one waits for the other
    child_job   run -> run         the parent delegated the child (``jobs.parent_id``)
    subtask_of  run -> task        the child was delegated while that sub-task was current
    touched     run -> file        write_file / edit_file changed it
    read        run -> file        read_file, list_dir, glob or grep looked at it
    remembered  run -> memory      the run wrote that memory item

Node ids: ``run:<id>`` (``job:<id>`` is the same node), ``task:<run id>/<n>``, ``file:<path>``
(relative to the run's workspace when it is inside it), ``memory:<id>``. Every query is bounded:
a graph keeps at most ``MAX_FILES`` files, ``MAX_MEMORIES`` memory items and ``MAX_CHILDREN``
child runs per run, and says when it cut something (``truncated``).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from steward.errors import StewardError, ToolError
from steward.safety.policy.rules import READ_TOOLS, WRITE_TOOLS
from steward.store.schema import events, jobs, memory_items, runs
from steward.tools.base import FunctionToolset, Tool, ToolContext

if TYPE_CHECKING:
    from steward.store.events import EventStore

__all__ = [
    "EDGE_KINDS",
    "Edge",
    "Graph",
    "MemoryScope",
    "Neighbour",
    "Node",
    "describe",
    "graph_for_run",
    "graph_toolset",
    "related",
]

EDGE_KINDS = ("plans", "depends_on", "child_job", "subtask_of", "touched", "read", "remembered")
MAX_FILES = 200
MAX_MEMORIES = 200
MAX_CHILDREN = 50
MAX_EVENTS = 20_000  # tool and plan events read per run
MAX_DEPTH = 3
TOOL_LIMIT = 30  # neighbours the related tool lists
FILE_TOOLS = (READ_TOOLS | WRITE_TOOLS) - {"recall_output"}
_SCAN = ("plan", "tool_use", "tool_result")

#: Whose memory items a graph may show: (user, persona, workspace). None: every scope (the operator).
MemoryScope = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    kind: str  # "run" | "task" | "file" | "memory"
    label: str
    status: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "label": self.label,
            "status": self.status,
            "data": dict(self.data),
        }


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "kind": self.kind, "data": dict(self.data)}


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A node next to the one asked about, the edge between them, and which way it points."""

    node: Node
    edge: Edge
    outgoing: bool  # the edge starts at the node asked about


@dataclass(slots=True)
class Graph:
    root: str
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    truncated: bool = False

    def add(self, node: Node) -> None:
        self.nodes.setdefault(node.id, node)

    def link(self, source: str, target: str, kind: str, **data: Any) -> None:
        self.edges.append(Edge(source, target, kind, data))

    def neighbours(self, node_id: str) -> list[Neighbour]:
        out = [Neighbour(self.nodes[e.target], e, True) for e in self.edges if e.source == node_id]
        return out + [Neighbour(self.nodes[e.source], e, False) for e in self.edges if e.target == node_id]

    def children(self, node_id: str) -> list[tuple[Edge, Node]]:
        """The nodes this one's edges point to, in the order they were found."""
        return [(e, self.nodes[e.target]) for e in self.edges if e.source == node_id]

    def as_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "nodes": [n.as_dict() for n in self.nodes.values()],
            "edges": [e.as_dict() for e in self.edges],
            "truncated": self.truncated,
        }


def run_node_id(run_id: str) -> str:
    return f"run:{run_id}"


def task_node_id(run_id: str, task: int) -> str:
    return f"task:{run_id}/{task}"


def _label(text: str, limit: int = 80) -> str:
    words = " ".join(text.split())
    return words if len(words) <= limit else words[: limit - 1] + "…"


def file_path(raw: object, workspace: str) -> str | None:
    """The path a file tool got, as the graph names it: relative to the workspace when inside
    it, normalised; None for no path or the workspace itself."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    path = posixpath.normpath(raw.strip())
    if path.startswith("/") and workspace:
        root = posixpath.normpath(workspace)
        if path == root:
            return None
        if path.startswith(root.rstrip("/") + "/"):
            path = path[len(root.rstrip("/")) + 1 :]
    return None if path in (".", "") else path


# --- building a run's graph ------------------------------------------------------------------------


async def graph_for_run(
    engine: AsyncEngine, run_id: str, *, depth: int = 2, memory_scope: MemoryScope | None = None
) -> Graph:
    """The graph around ``run_id``: its plan, files, memory items, parent, and child runs down to
    ``depth`` levels (each child with its own plan, files and memory items)."""
    async with engine.connect() as conn:
        root = await _run_node(conn, run_id)
        if root is None:
            raise StewardError(
                f"no run {run_id!r} in this store; `steward runs list` shows the runs there are"
            )
        graph = Graph(root.id)
        graph.add(root)
        parent = root.data.get("parent")
        if isinstance(parent, str) and (above := await _run_node(conn, parent)) is not None:
            graph.add(above)
            graph.link(above.id, root.id, "child_job", role=root.data.get("role", ""))
        await _expand(conn, graph, root, max(0, min(depth, MAX_DEPTH)), memory_scope)
    return graph


async def _expand(
    conn: AsyncConnection, graph: Graph, run: Node, depth: int, memory_scope: MemoryScope | None
) -> None:
    run_id = str(run.data["run_id"])
    delegated = await _scan_events(conn, graph, run, str(run.data.get("workspace", "")))
    await _memories(conn, graph, run, memory_scope)
    if depth <= 0:
        return
    query = (
        sa.select(jobs.c.id)
        .where(jobs.c.parent_id == run_id)
        .order_by(jobs.c.created_at, jobs.c.id)
        .limit(MAX_CHILDREN + 1)
    )
    child_ids = list((await conn.execute(query)).scalars())
    if len(child_ids) > MAX_CHILDREN:
        graph.truncated, child_ids = True, child_ids[:MAX_CHILDREN]
    for child_id in child_ids:
        child = await _run_node(conn, child_id)
        if child is None or child.id in graph.nodes:
            continue
        graph.add(child)
        graph.link(run.id, child.id, "child_job", role=child.data.get("role", ""))
        task = delegated.get((str(child.data.get("role", "")), str(child.data.get("goal", ""))))
        if task is not None and task in graph.nodes:
            graph.link(child.id, task, "subtask_of")
        await _expand(conn, graph, child, depth - 1, memory_scope)


async def _run_node(conn: AsyncConnection, run_id: str) -> Node | None:
    """A run (or a job not started yet) as a node; None when neither is recorded."""
    row = (await conn.execute(sa.select(runs).where(runs.c.id == run_id))).mappings().one_or_none()
    job = (await conn.execute(sa.select(jobs).where(jobs.c.id == run_id))).mappings().one_or_none()
    if row is None and job is None:
        return None
    data: dict[str, Any] = {"run_id": run_id, "parent": None}
    status = ""
    if job is not None:  # not started yet: the queue's word is all there is
        data.update(goal=job["goal"], role=job["role"], parent=job["parent_id"], workspace=job["workspace"])
        data["job_status"] = status = str(job["status"])
    if row is not None:  # the run's own record says what happened
        data.update(
            goal=row["goal"], end_status=row["end_status"], model=row["model"], workspace=row["workspace"]
        )
        status = str(row["status"])
    goal = str(data["goal"])
    return Node(run_node_id(run_id), "run", _label(goal), status, data)


async def _scan_events(
    conn: AsyncConnection, graph: Graph, run: Node, workspace: str
) -> dict[tuple[str, str], str]:
    """Add the run's plan and files; return the task current at each delegation, by (role, goal)."""
    run_id = str(run.data["run_id"])
    query = (
        sa.select(events.c.type, events.c.data)
        .where(events.c.run_id == run_id, events.c.type.in_(_SCAN))
        .order_by(events.c.seq)
        .limit(MAX_EVENTS + 1)
    )
    rows = (await conn.execute(query)).all()
    if len(rows) > MAX_EVENTS:
        graph.truncated, rows = True, rows[:MAX_EVENTS]
    plan: dict[str, Any] | None = None
    current: int | None = None
    calls: dict[str, tuple[str, Mapping[str, Any], int | None]] = {}  # call id -> tool, input, task
    done: set[str] = set()
    for kind, raw in rows:
        data = json.loads(raw)
        if kind == "plan":
            plan, current = data, data.get("current")
        elif kind == "tool_use":
            calls[str(data.get("call_id"))] = (str(data.get("tool")), data.get("input") or {}, current)
        elif data.get("status") == "completed":
            done.add(str(data.get("call_id")))
    if plan is not None:
        _plan(graph, run, run_id, plan)
    _files(graph, run, run_id, workspace, [c for call_id, c in calls.items() if call_id in done])
    return {
        (str(args.get("role", "")), str(args.get("goal", ""))): task_node_id(run_id, task)
        for tool, args, task in calls.values()
        if tool == "delegate" and task is not None
    }


def _plan(graph: Graph, run: Node, run_id: str, plan: Mapping[str, Any]) -> None:
    tasks = [
        t for t in plan.get("sub_tasks") or [] if isinstance(t, Mapping) and isinstance(t.get("id"), int)
    ]
    for task in tasks:
        node = Node(
            task_node_id(run_id, task["id"]), "task", _label(f"{task['id']}. {task.get('title', '')}"),
            str(task.get("status", "pending")),
            {"run_id": run_id, "task": task["id"], "depends_on": list(task.get("depends_on") or [])},
        )  # fmt: skip
        graph.add(node)
        graph.link(run.id, node.id, "plans")
    for task in tasks:
        for dep in task.get("depends_on") or []:
            if task_node_id(run_id, dep) in graph.nodes:
                graph.link(task_node_id(run_id, task["id"]), task_node_id(run_id, dep), "depends_on")


def _files(
    graph: Graph,
    run: Node,
    run_id: str,
    workspace: str,
    calls: Iterable[tuple[str, Mapping[str, Any], int | None]],
) -> None:
    seen: dict[tuple[str, str], dict[str, Any]] = {}  # (path, edge kind) -> counts
    for tool, args, task in calls:
        if tool not in FILE_TOOLS:
            continue
        path = file_path(args.get("path"), workspace)
        if path is None:
            continue
        kind = "touched" if tool in WRITE_TOOLS else "read"
        if (
            (path, kind) not in seen
            and len({p for p, _ in seen}) >= MAX_FILES
            and path not in {p for p, _ in seen}
        ):
            graph.truncated = True
            continue
        entry = seen.setdefault((path, kind), {"calls": 0, "tools": [], "tasks": []})
        entry["calls"] += 1
        if tool not in entry["tools"]:
            entry["tools"].append(tool)
        if task is not None and task not in entry["tasks"]:
            entry["tasks"].append(task)
    for (path, kind), counts in seen.items():
        graph.add(Node(f"file:{path}", "file", path, None, {"path": path}))
        graph.link(run.id, f"file:{path}", kind, **counts)


async def _memories(conn: AsyncConnection, graph: Graph, run: Node, scope: MemoryScope | None) -> None:
    m = memory_items.c
    query = sa.select(m.id, m.kind, m.text, m.hidden_at).where(m.run_id == str(run.data["run_id"]))
    if scope is not None:  # a run's own tool: only its scope's items, never hidden ones
        user, persona, workspace = scope
        query = query.where(
            m.scope_user == user,
            m.scope_persona == persona,
            m.scope_workspace == workspace,
            m.hidden_at.is_(None),
        )
    rows = (await conn.execute(query.order_by(m.id).limit(MAX_MEMORIES + 1))).all()
    if len(rows) > MAX_MEMORIES:
        graph.truncated, rows = True, rows[:MAX_MEMORIES]
    for item_id, kind, text, hidden_at in rows:
        node = Node(
            f"memory:{item_id}",
            "memory",
            _label(text),
            None,
            {"memory_kind": kind, "hidden": hidden_at is not None},
        )
        graph.add(node)
        graph.link(run.id, node.id, "remembered")


# --- what is next to a node ---------------------------------------------------------------------------


async def related(
    engine: AsyncEngine,
    node_id: str,
    *,
    workspace: str | None = None,
    memory_scope: MemoryScope | None = None,
    limit: int = 50,
) -> list[Neighbour]:
    """The nodes next to ``node_id`` (at most ``limit``). With ``workspace``, only runs recorded
    in that workspace are seen (a run's own tool); without, every run (the operator)."""
    kind, _, rest = node_id.partition(":")
    if not rest:
        raise StewardError(f"{node_id!r} is not a node id; write run:ID, task:RUN/N, file:PATH or memory:ID")
    match kind:
        case "run" | "job":
            return (await _run_graph(engine, rest, workspace, memory_scope)).neighbours(run_node_id(rest))[
                :limit
            ]
        case "task":
            run_id, _, n = rest.rpartition("/")
            graph = await _run_graph(engine, run_id, workspace, memory_scope)
            return graph.neighbours(f"task:{rest}")[:limit] if n.isdigit() else []
        case "file":
            return await _file_neighbours(engine, rest, workspace, limit)
        case "memory":  # memory:12, or memory:m12 as remember, recall and `steward memory` name it
            number = rest.strip().lower().removeprefix("m")
            if not number.isdigit():
                raise StewardError(
                    f"{node_id!r}: a memory item is memory:ID with the id remember or recall gave, "
                    "e.g. memory:m12 (or memory:12)"
                )
            return await _memory_neighbours(engine, str(int(number)), workspace, memory_scope)
        case _:
            raise StewardError(f"{node_id!r}: node ids start with run:, job:, task:, file: or memory:")


async def _run_graph(
    engine: AsyncEngine, run_id: str, workspace: str | None, memory_scope: MemoryScope | None
) -> Graph:
    graph = await graph_for_run(engine, run_id, depth=1, memory_scope=memory_scope)
    root = graph.nodes[graph.root]
    if workspace is not None and root.data.get("workspace") != workspace:
        raise StewardError(f"no run {run_id!r} in this store; `steward runs list` shows the runs there are")
    if workspace is not None:  # a parent or child elsewhere is not this workspace's to see
        keep = {n.id for n in graph.nodes.values() if n.kind != "run" or n.data.get("workspace") == workspace}
        graph.edges = [e for e in graph.edges if e.source in keep and e.target in keep]
        graph.nodes = {k: v for k, v in graph.nodes.items() if k in keep}
    return graph


async def _file_neighbours(
    engine: AsyncEngine, path: str, workspace: str | None, limit: int
) -> list[Neighbour]:
    """The runs whose completed file-tool calls named ``path``, newest first."""
    wanted = file_path(path, workspace or "")
    if wanted is None:
        return []
    e, r = events.c, runs.c
    name = PurePosixPath(wanted).name
    pattern = "%" + json.dumps(name)[1:-1].replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    query = (
        sa.select(e.run_id, e.data, r.workspace)
        .join(runs, r.id == e.run_id)
        .where(e.type == "tool_use", e.data.like(pattern, escape="\\"))
        .order_by(e.ts.desc())
        .limit(2_000)
    )
    if workspace is not None:
        query = query.where(r.workspace == workspace)
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
        found: dict[str, set[str]] = {}
        for run_id, raw, where in rows:
            data = json.loads(raw)
            tool = str(data.get("tool"))
            if tool in FILE_TOOLS and file_path((data.get("input") or {}).get("path"), where) == wanted:
                found.setdefault(run_id, set()).add("touched" if tool in WRITE_TOOLS else "read")
            if len(found) >= limit:
                break
        target = Node(f"file:{wanted}", "file", wanted, None, {"path": wanted})
        out = []
        for run_id, kinds in found.items():
            node = await _run_node(conn, run_id)
            if node is not None:
                out += [
                    Neighbour(node, Edge(node.id, target.id, k), False) for k in sorted(kinds, reverse=True)
                ]
    return out[:limit]


async def _memory_neighbours(
    engine: AsyncEngine, item_id: str, workspace: str | None, scope: MemoryScope | None
) -> list[Neighbour]:
    if not item_id.isdigit():
        return []
    m = memory_items.c
    query = sa.select(m.run_id, m.text).where(m.id == int(item_id))
    if scope is not None:
        user, persona, where = scope
        query = query.where(m.scope_user == user, m.scope_persona == persona, m.scope_workspace == where)
    async with engine.connect() as conn:
        row = (await conn.execute(query)).one_or_none()
        if row is None or row.run_id is None:
            return []
        node = await _run_node(conn, row.run_id)
    if node is None or (workspace is not None and node.data.get("workspace") != workspace):
        return []
    return [Neighbour(node, Edge(node.id, f"memory:{item_id}", "remembered"), False)]


def describe(neighbours: Sequence[Neighbour], node_id: str) -> str:
    """Neighbours as the ``related`` tool tells them: one line each."""
    if not neighbours:
        return f"Nothing is related to {node_id}."
    lines = [f"{len(neighbours)} node(s) related to {node_id}:"]
    for n in neighbours:
        arrow = f"{n.edge.kind} →" if n.outgoing else f"← {n.edge.kind}"
        status = f" [{n.node.status}]" if n.node.status else ""
        lines.append(f"- {arrow} {n.node.id}{status}: {n.node.label}")
    return "\n".join(lines)


def graph_toolset(store: EventStore) -> FunctionToolset:
    """The ``related`` tool: a run's agent asks what is next to a run, sub-task, file or memory
    item, within its workspace (and, for memory items, its own scope)."""

    async def related_tool(ctx: ToolContext, node: str) -> str:
        """List what is related to a node of the work record: the runs that read or changed a
        file, a run's plan sub-tasks, files, child jobs and remembered items, or the run that
        wrote a memory item. Use it to find earlier work on the same file or task.

        Args:
            node: A node id: file:PATH (e.g. file:src/app.py), run:RUN_ID, task:N (a sub-task of
                this run's plan) or task:RUN_ID/N, or memory:ID (e.g. memory:m12).
        """
        wanted = node.strip()
        if re.fullmatch(r"task:\d+", wanted):
            wanted = f"task:{ctx.run_id}/{wanted[5:]}"
        scope = (ctx.user, ctx.persona, str(ctx.workspace))
        try:
            found = await related(
                store.engine, wanted, workspace=str(ctx.workspace), memory_scope=scope, limit=TOOL_LIMIT
            )
        except StewardError as exc:
            raise ToolError(str(exc)) from None
        return describe(found, wanted)

    return FunctionToolset([Tool(related_tool, name="related")])
