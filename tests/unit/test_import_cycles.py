"""No import cycle in ``src/jitwarden``, counting imports inside functions (ARCHITECTURE.md, "Layers").

import-linter's contracts see only what grimp sees; an import inside a function that closes a
cycle is invisible to an ``ImportError`` too (it runs late), yet it is still a knot a reader must
untie. This test builds the graph from the AST of every module, module-level and function-level
imports alike, relative imports resolved, and fails naming every cycle it finds. A second test
plants a cycle in a copy of the tree and sees it caught.
"""

from __future__ import annotations

import ast
import os
import shutil

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")
PACKAGE = "jitwarden"


def _modules(src: str) -> dict[str, str]:
    """Dotted module name -> file, for every ``.py`` under ``src/jitwarden`` (packages by their ``__init__``)."""
    out = {}
    top = os.path.join(src, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        rel = os.path.relpath(dirpath, src).split(os.sep)
        for f in filenames:
            if not f.endswith(".py"):
                continue
            name = rel if f == "__init__.py" else rel + [f[:-3]]
            out[".".join(name)] = os.path.join(dirpath, f)
    return out


def _targets(node, module: str, is_pkg: bool, known) -> set[str]:
    """The modules of the package that one ``import`` / ``from … import`` statement names."""
    found = set()
    if isinstance(node, ast.Import):
        for a in node.names:
            found.add(a.name)
    else:
        if node.level:
            base = module.split(".") if is_pkg else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
        for a in node.names:
            sub = f"{stem}.{a.name}"
            found.add(sub if sub in known else stem)  # ``from pkg import mod`` names the submodule
    out = set()
    for name in found:
        while (
            name and name not in known
        ):  # ``import a.b.c`` of a name that is an attribute: its module
            name = name.rpartition(".")[0]
        if name and name.split(".")[0] == PACKAGE:
            out.add(name)
    return out


def import_graph(src: str) -> dict[str, set[str]]:
    """module -> the package's modules it imports anywhere in its body (functions, methods, branches)."""
    mods = _modules(src)
    graph = {}
    for name, path in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        is_pkg = path.endswith("__init__.py")
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _targets(node, name, is_pkg, mods)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (each is at least one cycle), sorted (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        group.append(w)
                        if w == node:
                            break
                    if len(group) > 1:
                        out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def _one_cycle(graph, group) -> list[str]:
    """One concrete cycle inside ``group``, as the path a reader follows (a -> b -> … -> a)."""
    members = set(group)
    start = group[0]
    path, seen = [start], {start}
    parent = {start: None}
    queue = [start]
    while queue:  # breadth-first back to start: the shortest cycle through it
        nxt = []
        for v in queue:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return (
                        [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, v, start]
                    )
                if w not in seen:
                    seen.add(w)
                    parent[w] = v
                    nxt.append(w)
        queue = nxt
    return group


def _describe(graph, found) -> str:
    return "; ".join(" -> ".join(_one_cycle(graph, g)) for g in found)


def test_src_has_no_import_cycle_counting_imports_inside_functions():
    graph = import_graph(SRC)
    assert len(graph) > 50 and "jitwarden.runtime.activation" in graph  # the walk found the package
    assert (
        "jitwarden.runtime.proof" in graph["jitwarden.runtime.sweep"]
    )  # function-level imports are edges
    found = cycles(graph)
    assert found == [], f"import cycles: {_describe(graph, found)}"


def test_a_cycle_planted_in_a_copy_of_the_tree_through_a_function_level_relative_import_is_found(
    tmp_path,
):
    copy = tmp_path / "src"
    shutil.copytree(
        os.path.join(SRC, PACKAGE), copy / PACKAGE, ignore=shutil.ignore_patterns("__pycache__")
    )
    leaf = (
        copy / PACKAGE / "runtime" / "tree.py"
    )  # a leaf of the runtime: nothing of the runtime below it
    with open(leaf, "a", encoding="utf-8") as f:
        f.write("\n\ndef _planted():\n    from . import sweep  # noqa: F401\n")
    graph = import_graph(str(copy))
    found = cycles(graph)
    [group] = [g for g in found if {"jitwarden.runtime.sweep", "jitwarden.runtime.tree"} <= set(g)]
    path = _one_cycle(graph, group)
    assert (
        path[0] == path[-1]
        and "jitwarden.runtime.tree" in path
        and "jitwarden.runtime.sweep" in path
    )
    assert all(b in graph[a] for a, b in zip(path, path[1:])), path  # a real cycle, edge by edge
    assert found == [group]  # nothing else in the tree is a cycle


def test_the_graph_resolves_relative_and_submodule_imports():
    src = {
        "jitwarden.a": "from .b import c\nimport jitwarden.b.d\n",
        "jitwarden.b": "",
        "jitwarden.b.c": "",
        "jitwarden.b.d": "def f():\n    from ..a import x\n",
    }
    known = dict.fromkeys(src)
    got = {}
    for name, text in src.items():
        is_pkg = name == "jitwarden.b"
        got[name] = set().union(
            *[
                _targets(n, name, is_pkg, known)
                for n in ast.walk(ast.parse(text))
                if isinstance(n, (ast.Import, ast.ImportFrom))
            ]
            or [set()]
        )
    assert got["jitwarden.a"] == {"jitwarden.b.c", "jitwarden.b.d"}
    assert got["jitwarden.b.d"] == {"jitwarden.a"}
    assert cycles(got) == [["jitwarden.a", "jitwarden.b.d"]]
