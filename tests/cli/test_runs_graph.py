"""`steward runs graph RUN`: a tree, Graphviz DOT that parses (odd file names quoted), and JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from .conftest import Cli

ODD = 'odd "name" \\ [b]x[i].txt'  # a quote, a backslash, and what rich would read as markup
SCRIPT = [
    {
        "agent_step": {
            "phase": "plan", "summary": "plan",
            "plan": {"goal": "g", "sub_tasks": [{"id": 1, "title": "write [it]"}, {"id": 2, "title": "check", "depends_on": [1]}]},
        }
    },
    {"agent_step": {"phase": "act", "summary": "w", "action": {"tool_name": "write_file", "tool_input": {"path": ODD, "content": "x"}}}},
    {"agent_step": {"phase": "verify", "summary": "ok", "sub_task_outcome": "done"}},
    {"tool": "read_file", "args": {"path": ODD}},
    {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "done"}},
]  # fmt: skip

_QUOTED = r'"((?:[^"\\]|\\.)*)"'
_NODE = re.compile(rf"^  {_QUOTED} \[label={_QUOTED}, shape=\w+\];$")
_EDGE = re.compile(rf"^  {_QUOTED} -> {_QUOTED} \[label={_QUOTED}\];$")


def unquote(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def parse_dot(dot: str) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """Nodes (id -> label) and edges of the DOT ``to_dot`` writes; fails on any other line."""
    lines = dot.splitlines()
    assert lines[0] == "digraph steward {" and lines[-1] == "}"
    nodes: dict[str, str] = {}
    edges = []
    for line in lines[1:-1]:
        if line.strip() in ("rankdir=LR;", 'node [fontname="Helvetica"];'):
            continue
        if node := _NODE.match(line):
            nodes[unquote(node[1])] = unquote(node[2])
        else:
            edge = _EDGE.match(line)
            assert edge, f"not a DOT statement: {line!r}"
            edges.append((unquote(edge[1]), unquote(edge[2]), unquote(edge[3])))
    return nodes, edges


def recorded_run(cli: Cli, tmp_path: Path) -> str:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump(SCRIPT))
    proc = cli("run", "write the odd file", "--model", f"scripted:{script}", "--no-sandbox")
    assert proc.returncode == 0, proc.stderr
    return cli("runs", "list").stdout.split()[0]


def test_graph_prints_a_tree_dot_and_json(cli: Cli, tmp_path: Path) -> None:
    run_id = recorded_run(cli, tmp_path)
    tree = cli("runs", "graph", run_id[:6])
    assert tree.returncode == 0, tree.stderr
    assert f"run {run_id} · solved · write the odd file" in tree.stdout
    assert "✓ 1. write [it]" in tree.stdout and "(after 1)" in tree.stdout
    assert f"touched {ODD} (write_file, 1 call, sub-task 1)" in tree.stdout
    assert f"read {ODD} (read_file, 1 call, sub-task 2)" in tree.stdout

    shown = cli("runs", "graph", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    graph: dict[str, Any] = json.loads(shown.stdout)
    assert graph["root"] == f"run:{run_id}" and graph["truncated"] is False
    ids = {n["id"] for n in graph["nodes"]}
    assert {f"run:{run_id}", f"task:{run_id}/1", f"task:{run_id}/2", f"file:{ODD}"} == ids
    kinds = sorted(e["kind"] for e in graph["edges"])
    assert kinds == ["depends_on", "plans", "plans", "read", "touched"]

    dot = cli("runs", "graph", run_id, "--dot")
    assert dot.returncode == 0, dot.stderr
    nodes, edges = parse_dot(dot.stdout)
    assert set(nodes) == ids and nodes[f"file:{ODD}"] == ODD
    assert sorted(kind for _, _, kind in edges) == kinds
    assert all(a in nodes and b in nodes for a, b, _ in edges)
    assert (f"run:{run_id}", f"file:{ODD}", "touched") in edges


def test_an_unknown_run_names_the_fix(cli: Cli, tmp_path: Path) -> None:
    recorded_run(cli, tmp_path)
    proc = cli("runs", "graph", "nope")
    assert proc.returncode == 2 and "`steward runs list`" in proc.stderr


def test_dot_and_json_together_are_refused_naming_each(cli: Cli, tmp_path: Path) -> None:
    run_id = recorded_run(cli, tmp_path)
    proc = cli("runs", "graph", run_id, "--dot", "--json")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--dot" in proc.stderr and "--json" in proc.stderr and "give one" in proc.stderr
