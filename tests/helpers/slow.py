"""The ``slow`` marker, applied where it is true rather than where someone remembered it (pytest plugin).

A test is slow when it, a fixture it uses (directly or through other fixtures), or a helper either
calls (at any depth, by name, within ``tests/``) starts another process (``subprocess``, ``os.fork``,
``os.exec*``, ``os.system``, ``pty``, ``multiprocessing``) or compiles in-process (``triton.compile``,
``torch.compile``), whatever the fixture's scope (the session's real caches cost minutes to build:
Inductor and a torch extension over a minute each on two cores). Everything else is the maintainer's loop: ``pytest -m "not slow"``
(docs/development.md). Registered from ``tests/conftest.py``; the marker itself is declared in
``pyproject.toml``. A test may also be marked ``@pytest.mark.slow`` by hand.
"""

from __future__ import annotations

import ast
import functools
import os

import pytest

from tests.helpers.paths import TESTS

_MODULES = {"subprocess", "multiprocessing", "pty", "concurrent"}
_OS_CALLS = {
    "fork",
    "forkpty",
    "system",
    "popen",
    "spawnv",
    "spawnl",
    "posix_spawn",
    "posix_spawnp",
    "execv",
    "execve",
    "execvp",
    "execvpe",
    "execl",
    "execle",
    "execlp",
}
_COMPILERS = {("triton", "compile"), ("torch", "compile")}


def _root_name(node) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _spawns_directly(call: ast.Call) -> bool:
    f = call.func
    if isinstance(f, ast.Attribute):
        root = _root_name(f.value)
        if (
            root in _MODULES
            or (root == "os" and f.attr in _OS_CALLS)
            or (root, f.attr) in _COMPILERS
        ):
            return True
    return isinstance(f, ast.Name) and f.id in {"Popen", "check_output", "check_call"}


def _called_name(call: ast.Call, ours: set) -> str | None:
    """The name a call resolves to among tests' own functions: ``f(...)``, or ``mod.f(...)`` where ``mod`` is a
    module of ``tests`` (``json.load`` is not the ``load`` a test module defines)."""
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute) and _root_name(f.value) in ours:
        return f.attr
    return None


def _test_modules(tree: ast.Module) -> set:
    """Names this module binds to modules of ``tests`` (``from tests.helpers import kernels``)."""
    out = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tests":
            out |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {
                a.asname or a.name.split(".")[0]
                for a in node.names
                if a.name.split(".")[0] == "tests"
            }
    return out


@functools.cache
def _index() -> tuple[dict, frozenset]:
    """{(file, function name): (spawns directly, names it calls)} of every function in tests/, and the
    names (functions and classes) that spawn, closed over calls."""
    funcs: dict = {}
    classes: dict = {}
    aliases: dict = {}  # `from m import jw as run_cli`, `cli = jw`: the new name -> the name it stands for
    for d, _dirs, files in os.walk(TESTS):
        for n in files:
            if not n.endswith(".py"):
                continue
            path = os.path.join(d, n)
            try:
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read())
            except (OSError, SyntaxError, UnicodeDecodeError):
                continue
            ours = _test_modules(tree)
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)]
                    names = frozenset(n for c in calls if (n := _called_name(c, ours)))
                    funcs[(os.path.realpath(path), node.name)] = (
                        any(map(_spawns_directly, calls)),
                        names,
                    )
                elif isinstance(node, ast.ImportFrom):
                    aliases.update({a.asname: a.name for a in node.names if a.asname})
                elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
                    aliases.update(
                        {t.id: node.value.id for t in node.targets if isinstance(t, ast.Name)}
                    )
                elif isinstance(node, ast.ClassDef):
                    classes[node.name] = {
                        m.name
                        for m in node.body
                        if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                    }
    slow = {name for (_f, name), (direct, _c) in funcs.items() if direct}
    while True:
        grew = {
            name for (_f, name), (_d, calls) in funcs.items() if name not in slow and calls & slow
        }
        grew |= {cls for cls, methods in classes.items() if cls not in slow and methods & slow}
        grew |= {new for new, old in aliases.items() if new not in slow and old in slow}
        if not grew:
            return funcs, frozenset(slow)
        slow |= grew


def _func_is_slow(func) -> bool:
    func = getattr(func, "__wrapped__", func)
    code = getattr(func, "__code__", None)
    if code is None:
        return False
    funcs, slow = _index()
    direct, calls = funcs.get(
        (os.path.realpath(code.co_filename), func.__name__), (False, frozenset())
    )
    return direct or bool(calls & slow)


def is_slow(item) -> bool:
    """Whether ``item`` starts a process or compiles, itself or through its fixtures."""
    if item.get_closest_marker("slow"):
        return True
    if _func_is_slow(getattr(item, "function", None)):
        return True
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        for fdef in info.name2fixturedefs.get(name, ()) if info else ():
            if _func_is_slow(fdef.func):
                return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if is_slow(item) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
