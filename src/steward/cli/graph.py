"""``steward runs graph RUN``: what a run planned, delegated, touched and remembered.

A tree in the terminal; ``--dot`` prints Graphviz DOT (``| dot -Tsvg > run.svg``); ``--json``
prints the shape the server's ``GET /v1/runs/{id}/graph`` returns (one of the two, not both).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from steward.cli.options import whole_option

if TYPE_CHECKING:
    from rich.tree import Tree

    from steward.memory.graph import Graph, Node

_MARK = {"done": "✓", "failed": "✗", "in_progress": "→", "pending": "○"}


def graph_command(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="A run id (or a unique prefix of one).")],
    workspace: Annotated[
        Path, typer.Option("--workspace", "-w", help="Workspace whose runs to read.")
    ] = Path(),
    dot: Annotated[bool, typer.Option("--dot", help="Print Graphviz DOT instead of a tree.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the graph as JSON.")] = False,
    depth: Annotated[
        int,
        whole_option(
            "--depth", unit="levels", example=2, least=0, most=3, help="Levels of child jobs to include."
        ),
    ] = 2,
) -> None:
    """Show how a run relates to its plan's sub-tasks, child jobs, files and memory items."""
    from steward.cli.runs import reading_url
    from steward.errors import StewardError
    from steward.memory.graph import graph_for_run
    from steward.store.events import open_store

    if dot and as_json:
        typer.echo(
            "steward: --dot and --json are two formats; give one (--dot for Graphviz, --json for data)",
            err=True,
        )
        raise typer.Exit(2)

    async def main() -> int:
        async with await open_store(reading_url(workspace, wanted=f"run {run_id!r}")) as store:
            try:
                row = await store.find_run(run_id)
                graph = await graph_for_run(store.engine, row.id, depth=depth)
            except StewardError as exc:
                typer.echo(f"steward: {exc}", err=True)
                return 2
        if as_json:
            typer.echo(json.dumps(graph.as_dict(), indent=2, ensure_ascii=False))
        elif dot:
            typer.echo(to_dot(graph), nl=False)
        else:
            from rich.console import Console

            Console(highlight=False, soft_wrap=True).print(to_tree(graph))
        return 0

    raise typer.Exit(asyncio.run(main()))


# --- DOT -------------------------------------------------------------------------------------------

_SHAPE = {"run": "box", "task": "ellipse", "file": "note", "memory": "component"}


def dot_quote(text: str) -> str:
    """``text`` as a DOT double-quoted string: backslashes and quotes escaped, line breaks as
    ``\\n`` (the one escape DOT labels read), other control characters dropped."""
    kept = "".join(c for c in text if c == "\n" or c >= " ")
    escaped = kept.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def to_dot(graph: Graph) -> str:
    """The graph as a Graphviz digraph: one statement per line, every id quoted."""
    lines = ["digraph steward {", "  rankdir=LR;", '  node [fontname="Helvetica"];']
    for node in graph.nodes.values():
        label = node.label if node.kind != "run" else f"{node.id}\n{node.label}"
        if node.status:
            label += f"\n[{node.status}]"
        lines.append(
            f"  {dot_quote(node.id)} [label={dot_quote(label)}, shape={_SHAPE.get(node.kind, 'box')}];"
        )
    lines.extend(
        f"  {dot_quote(e.source)} -> {dot_quote(e.target)} [label={dot_quote(e.kind)}];" for e in graph.edges
    )
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- the tree ---------------------------------------------------------------------------------------


def _calls(n: int) -> str:
    return "1 call" if n == 1 else f"{n} calls"


def _run_line(node: Node) -> str:
    from steward.cli.render import escape

    d = node.data
    status = str(d.get("end_status") or node.status or "")
    role = f"{escape(str(d['role']))}: " if d.get("role") else ""
    return f"[bold]run {escape(str(d.get('run_id', '')))}[/] · {escape(status)} · {role}{escape(node.label)}"


def to_tree(graph: Graph) -> Tree:
    """The graph as a rich ``Tree`` from its root run: plan, files, child jobs, memory."""
    from rich.tree import Tree

    root = graph.nodes[graph.root]
    tree = Tree(_run_line(root))
    for source in (e.source for e in graph.edges if e.target == root.id and e.kind == "child_job"):
        tree.add(f"[dim]delegated by[/] {_run_line(graph.nodes[source])}")
    _branches(graph, root, tree, set())
    return tree


def _branches(graph: Graph, run: Node, tree: Tree, shown: set[str]) -> None:
    from steward.cli.render import escape

    shown.add(run.id)
    out = graph.children(run.id)
    tasks = [n for e, n in out if e.kind == "plans"]
    if tasks:
        plan = tree.add("[bold blue]plan[/]")
        for task in tasks:
            after = task.data.get("depends_on") or []
            needs = f" [dim](after {', '.join(map(str, after))})[/]" if after else ""
            plan.add(f"{_MARK.get(task.status or '', '○')} {escape(task.label)}{needs}")
    files = [(e, n) for e, n in out if e.kind in ("touched", "read")]
    if files:
        branch = tree.add("[bold]files[/]")
        for edge, node in sorted(files, key=lambda f: (f[0].kind != "touched", f[1].label)):
            tools = ", ".join(edge.data.get("tools", []))
            calls = edge.data.get("calls", 0)
            tasks_of = edge.data.get("tasks") or []
            during = f", sub-task {', '.join(map(str, tasks_of))}" if tasks_of else ""
            style = "yellow" if edge.kind == "touched" else "dim"
            how = f"{escape(tools)}, {_calls(calls)}{during}"
            branch.add(f"[{style}]{edge.kind}[/] {escape(node.label)} [dim]({how})[/]")
    children = [n for e, n in out if e.kind == "child_job"]
    if children:
        branch = tree.add("[bold]child jobs[/]")
        for child in children:
            under = [
                graph.nodes[e.target].label
                for e in graph.edges
                if e.source == child.id and e.kind == "subtask_of"
            ]
            note = f" [dim](for sub-task {escape(under[0])})[/]" if under else ""
            sub = branch.add(_run_line(child) + note)
            if child.id not in shown:
                _branches(graph, child, sub, shown)
    memories = [n for e, n in out if e.kind == "remembered"]
    if memories:
        branch = tree.add("[bold]remembered[/]")
        for item in memories:
            hidden = " [dim](hidden)[/]" if item.data.get("hidden") else ""
            branch.add(f"{escape(item.id)} {escape(item.label)}{hidden}")
