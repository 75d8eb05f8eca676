"""The architecture, checked on the source: packages depend one way, and the loop stays small
and unaware of replay.

The graph counts every import, lazy ones and those made only for type checking included: a
cycle hidden in a function body is still a cycle a reader has to untangle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "src" / "steward"


def _unit(module: str) -> str:
    """The package (or top-level module) a dotted module name belongs to, below ``steward``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "steward"


def _imports(path: Path, module: str) -> Iterator[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                yield ".".join([*base, node.module] if node.module else base)
            elif node.module:
                yield node.module


def package_graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in SOURCE.rglob("*.py"):
        relative = path.relative_to(SOURCE.parent).with_suffix("")
        module = ".".join(relative.parts).removesuffix(".__init__")
        source = _unit(module)
        for target in _imports(path, module):
            if target == "steward" or not target.startswith("steward."):
                continue
            if (unit := _unit(target)) != source:
                edges.setdefault(source, set()).add(unit)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one package (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_packages_depend_one_way() -> None:
    graph = package_graph()
    assert "tools" in graph and "loop" in graph  # the walk found the code
    found = cycles(graph)
    described = [
        " <-> ".join(group) + f" ({ {p: sorted(graph[p] & set(group)) for p in group} })" for group in found
    ]
    assert not found, "package cycles: " + "; ".join(described)


def test_a_cycle_is_found_when_there_is_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_foundations_do_not_reach_up() -> None:
    graph = package_graph()
    runtime = {"loop", "agent", "run", "recovery", "cli", "sessions", "memory", "safety", "store"}
    for foundation in ("events", "models", "tools", "config", "text", "secret_paths"):
        assert not (graph.get(foundation, set()) & runtime), (foundation, graph.get(foundation))
    assert not (graph.get("store", set()) & {"memory", "loop", "agent", "run"})  # the store knows no loop


def test_the_loop_is_small_and_does_not_know_about_replay() -> None:
    loop = (SOURCE / "loop.py").read_text(encoding="utf-8")
    assert len(loop.splitlines()) <= 410
    imported = set(_imports(SOURCE / "loop.py", "steward.loop"))
    assert not {m for m in imported if "recovery" in m or "replay" in m}
    names = {
        node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else node.name
        for node in ast.walk(ast.parse(loop))
        if isinstance(node, ast.Name | ast.Attribute | ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert not {n for n in names if "replay" in n.lower() or "recorded" in n.lower()}


def test_safety_shows_its_layers() -> None:
    """Each safety layer is a sub-package a reader can find by name; only shared pieces stay flat."""
    safety = SOURCE / "safety"
    layers = {p.name for p in safety.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert {"policy", "sandbox", "checkpoints", "secrets"} <= layers
    flat = {p.stem for p in safety.glob("*.py")} - {"__init__"}
    assert len(flat) <= 4, f"modules at safety's top level belong to a layer: {sorted(flat)}"


def _server_modules() -> dict[str, Path]:
    server = SOURCE / "server"
    return {
        ".".join(p.relative_to(SOURCE.parent).with_suffix("").parts).removesuffix(".__init__"): p
        for p in server.rglob("*.py")
    }


def test_server_modules_import_one_way() -> None:
    """The server's modules (app, routes, channels, state...) form no import cycle; a name
    imported from a package (``from steward.server.routes import runs``) counts as its module."""
    modules = _server_modules()
    edges: dict[str, set[str]] = {}
    for module, path in modules.items():
        named: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                named |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                named |= {a.name for a in node.names}
        edges[module] = {t for t in named if t in modules and t not in (module, "steward.server")}
    assert {"steward.server.app", "steward.server.routes.runs"} <= set(edges)
    assert "steward.server.routes.runs" in edges["steward.server.app"]  # the walk sees the routers
    found = cycles(edges)
    assert not found, "server modules that import each other: " + "; ".join(" <-> ".join(g) for g in found)


def test_the_agent_and_the_command_line_stay_readable_in_one_sitting() -> None:
    """``Agent`` and the command table grew past this once; they are split along names instead."""
    for folder, most in (("agent", 450), ("cli", 500)):
        for path in sorted((SOURCE / folder).glob("*.py")):
            length = len(path.read_text(encoding="utf-8").splitlines())
            assert length <= most, f"{path.relative_to(SOURCE)} has {length} lines (at most {most})"
    assert not (SOURCE / "agent.py").exists()  # the package steward.agent holds it
