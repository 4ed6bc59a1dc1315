"""One guard per kind (runtime/guards, issue 46): every kind that has one names it first in its row, its module holds
a class with the protocol's members for that kind, every tool module wrapped names a function of its guard, a hook
that does not fit is its guard's one-line refusal, and installing imports no guard (each comes with its tool)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from jitwarden.model import kinds
from jitwarden.runtime import guards, hookshapes

CLASSES = {
    "triton": "GuardedCacheManager",
    "inductor": "GraphPickles",
    "jax": "GuardedJaxCache",
    "cupy": "GuardedCupyBackend",
    "numba": "NumbaCacheDir",
}
"""kind -> the class of its guard module that sits on one cache dir of the tool."""
PROVERS = {"triton", "jax", "cupy"}


def test_every_kind_with_a_guard_of_its_own_names_it_first_in_its_row():
    assert set(guards.MODULES) == set(CLASSES)
    for row in kinds.ROWS:  # vLLM's kernels are Triton's and Inductor's: guarded by theirs
        if row.guard and row.guard[0].startswith("guards.") and row.name not in guards.MODULES:
            assert row.guard[0].removeprefix("guards.") in guards.MODULES, row.name


@pytest.mark.parametrize("kind", sorted(guards.MODULES))
def test_each_guard_implements_the_protocol_for_its_kind(kind):
    cls = getattr(importlib.import_module(guards.MODULES[kind]), CLASSES[kind])
    assert kind == cls.KIND
    members = {"check_read", "seal_write"} | ({"prove"} if kind in PROVERS else set())
    assert all(callable(getattr(cls, m, None)) for m in members), members


def test_every_wrapped_tool_module_names_a_patch_of_its_guard_and_a_refusal():
    for module, (kind, fn) in guards.HOOKS.items():
        guard = importlib.import_module(guards.MODULES[kind])
        assert callable(getattr(guard, fn)), (module, fn)
        assert callable(guard.refused), kind
    assert set(guards.TORCH_MODULES) | set(guards.LOAD_MODULES) == set(guards.HOOKS)


@pytest.mark.parametrize("module", sorted(guards.HOOKS))
def test_a_hook_that_does_not_fit_is_refused_in_one_line(module, monkeypatch, recwarn, caplog):
    """Issue 42's fallback, each guard's own: the state says it is not guarded, and one line says so."""
    monkeypatch.setattr(hookshapes, "version_of", lambda kind: "9.9")
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.delenv("CUPY_CACHE_DIR", raising=False)
    state = guards._refused(module, hookshapes.ShapeError("f(x)"))
    assert state.startswith("not guarded: ") and "ShapeError: f(x)" in state
    said = [str(w.message) for w in recwarn] + [r.getMessage() for r in caplog.records]
    assert len([line for line in said if "ShapeError: f(x)" in line]) == 1, said


def test_installing_imports_no_guard_until_its_tool_is_imported():
    code = (
        "import json, sys\n"
        "from jitwarden.runtime import guards\n"
        "states = {**guards.install_torch({}), **guards.install_load_hooks({})}\n"
        "print(json.dumps([states, sorted(m for m in sys.modules if m.startswith('jitwarden.runtime.guards.'))]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    states, imported = json.loads(out.stdout)
    assert imported == []
    assert set(states) == set(guards.HOOKS)


def test_the_constants_the_guards_name_are_the_rows_hooks():
    named = {
        guards.BUNDLER,
        guards.CODECACHE,
        guards.AOTCACHE,
        guards.JAX_COMPILER,
        guards.JAX_CACHE,
        guards.CUPY_COMPILER,
        guards.NUMBA_CACHING,
    }
    assert named == set(guards.HOOKS)
    assert list(guards.HOOKS)[3:5] == [guards.JAX_COMPILER, guards.JAX_CACHE]  # the compiler first
    for module, (kind, fn) in guards.HOOKS.items():
        assert guards.module_of(fn, kind) == module
    with pytest.raises(KeyError):
        guards.module_of(
            "patch", "triton"
        )  # Triton's guard is its cache manager: it wraps no module


GUARD = '''"""The made-up kind's guard: what it wraps once its tool is imported."""
KIND = "madeup"


def patch(mod):
    mod.GUARDED = True


def refused(module, exc):
    return f"not guarded: {exc}"
'''


def test_a_made_up_kind_is_guarded_at_load_from_its_row_and_its_guard_alone(tmp_path):
    """Issue 46: a new JIT tool's guard at load is its row (``guard``, ``hooks``) and ``runtime/guards/<kind>.py``;
    with its adapter and reader (tests/unit/model/test_kinds.py), four files. Activation's hooks follow from the
    row: nothing else names the kind or its tool's module, and the guard is imported only with the tool."""
    (tmp_path / "guards").mkdir()
    (tmp_path / "guards" / "madeup.py").write_text(GUARD)
    (tmp_path / "tool").mkdir()
    (tmp_path / "tool" / "jw_madeup_tool.py").write_text("GUARDED = False\n")
    code = f"""
import json, sys
sys.path.insert(0, {str(tmp_path / "tool")!r})
from jitwarden.model import kinds
row = kinds.Kind("madeup", adapter="madeup", tool="MadeUp", var=None, partition=kinds.NOT, bundled=False,
                 needs=None, root="~/.madeup", reader="elf", guard=("guards.madeup",),
                 hooks=(("jw_madeup_tool", "patch"),))
kinds.ROWS = (*kinds.ROWS, row)  # as model/kinds.py would hold it
from jitwarden.runtime import guards
guards.__path__.append({str(tmp_path / "guards")!r})  # as runtime/guards/madeup.py would be
before = guards.install_load_hooks({{}})["jw_madeup_tool"]
imported = "jitwarden.runtime.guards.madeup" in sys.modules
import jw_madeup_tool
print(json.dumps([before, imported, jw_madeup_tool.GUARDED]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    before, imported, guarded = json.loads(out.stdout)
    assert (imported, guarded) == (False, True), (before, imported, guarded)
