"""Every load hook against the real shapes of every release it meets (runtime/hookshapes.py, issue 42).

JAX 0.11 dropped ``_cache_write``'s ``host_callbacks``: a wrapper that copied 0.10's signature raised ``TypeError``
into every guarded program on the H100. Each row below is a release's real signature, written from its source
(``jax/_src/compiler.py``, ``compilation_cache.py``; CuPy's ``cuda/_compiler_cache.py``; numba-cuda's
``cuda/core/caching.py``; torch's ``_inductor``; the H100's own in ``benchmarks/results/h100_tool_shapes.json``),
with the call that release makes. A function of that shape is put in a module, patched as the hook patches it and
called as the tool calls it: the call reaches the real function with every argument unchanged, and the hook reads
what it needs. A shape no release has is refused at patch time: no hook, the tool untouched, one line.
"""

from __future__ import annotations

import json
import os
import types

import pytest

from jitwarden.runtime import guards, hookshapes, postimport, say
from jitwarden.runtime.guards import cupy as cupy_guard
from jitwarden.runtime.guards import jax as jax_guard
from jitwarden.runtime.guards import numba as numba_guard

HERE = os.path.dirname(os.path.abspath(__file__))
H100 = os.path.join(HERE, "..", "..", "..", "benchmarks", "results", "h100_tool_shapes.json")

# JAX's _cache_write, by release: (signature, the call compile_or_get_cached's path makes)
JAX_CACHE_WRITE = {
    "0.9": (
        "cache_key, compile_time_secs, module_name, backend, executable, host_callbacks",
        ("k", 1.5, "jit_f", "backend", "exe", ["cb"]),
    ),
    "0.10": (
        "cache_key, compile_time_secs, module_name, backend, executable, host_callbacks",
        ("k", 1.5, "jit_f", "backend", "exe", ["cb"]),
    ),
    "0.11": (
        "cache_key, compile_time_secs, module_name, backend, executable",
        ("k", 1.5, "jit_f", "backend", "exe"),
    ),
    # 0.12 is not on this index: jax-ml/jax main as of 0.11.2 has 0.11's shape, called by keyword by some callers
    "0.12": (
        "cache_key, compile_time_secs, module_name, backend, executable",
        ("k", 1.5, "jit_f", "backend", "exe"),
    ),
}
UNKNOWN_CACHE_WRITE = "key, seconds, name, client, compiled"


def _fn(name: str, params: str, calls: list):
    """A function ``name(params)`` that records the arguments it was called with, by name."""
    names = [
        p.strip().split("=")[0].lstrip("*") for p in params.split(",") if p.strip() not in ("", "*")
    ]
    src = f"def {name}({params}):\n    calls.append(dict({', '.join(f'{n}={n}' for n in names)}))\n    return 'real'\n"
    ns: dict = {"calls": calls}
    exec(src, ns)
    return ns[name]


@pytest.mark.parametrize("release", sorted(JAX_CACHE_WRITE))
def test_jax_cache_write_of_every_release_passes_through_and_is_read(release, monkeypatch):
    params, call = JAX_CACHE_WRITE[release]
    calls: list = []
    mod = types.SimpleNamespace(_cache_write=_fn("_cache_write", params, calls))
    seen: list = []
    monkeypatch.setattr(jax_guard, "_prove_compiled", lambda k, b, e: seen.append((k, b, e)))
    jax_guard.patch_compiler(mod)
    assert (
        mod._cache_write(*call) == "real"
    )  # on main: TypeError (host_callbacks) for 0.11 and 0.12
    assert list(calls[0].values()) == list(call)  # every argument through, unchanged
    assert seen == [("k", "backend", "exe")]
    by_name = dict(zip([p.strip() for p in params.split(",")], call, strict=True))
    assert mod._cache_write(**by_name) == "real" and seen[-1] == ("k", "backend", "exe")


def test_the_h100s_jax_shape_is_the_one_in_the_table():
    """The signatures the H100 printed (benchmarks/gpu_facts.py) are those the table tests."""
    with open(H100) as f:
        facts = json.load(f)
    assert facts["versions"]["jax"] == "0.11.2"
    got = facts["signatures"]["jax._src.compiler:_cache_write"]
    names = [p.split(":")[0].strip() for p in got.split("->")[0].strip("() ").split(",")]
    assert ", ".join(names) == JAX_CACHE_WRITE["0.11"][0]


def test_a_jax_compile_hook_of_no_known_shape_is_refused_and_the_tool_left_as_it_is():
    calls: list = []
    real = _fn("_cache_write", UNKNOWN_CACHE_WRITE, calls)
    mod = types.SimpleNamespace(_cache_write=real)
    with pytest.raises(hookshapes.ShapeError, match="no parameter cache_key, executable"):
        jax_guard.patch_compiler(mod)
    assert mod._cache_write is real


def test_an_error_inside_the_compile_hook_never_reaches_jax(monkeypatch, recwarn):
    calls: list = []
    mod = types.SimpleNamespace(_cache_write=_fn("_cache_write", JAX_CACHE_WRITE["0.11"][0], calls))

    def broken(*a):
        raise RuntimeError("prover broke")

    monkeypatch.setattr(jax_guard, "_prove_compiled", broken)
    monkeypatch.setattr(say, "_said", set())
    jax_guard.patch_compiler(mod)
    assert mod._cache_write(*JAX_CACHE_WRITE["0.11"][1]) == "real"
    assert mod._cache_write(*JAX_CACHE_WRITE["0.11"][1]) == "real"
    lines = [str(w.message) for w in recwarn if "prover broke" in str(w.message)]
    assert lines == [
        "jitwarden: JAX compile hook error (RuntimeError: prover broke); entries it could not check are compiled "
        "again"
    ]  # once, with the exception's type


# get_file_cache, by release: every release since 0.4.35 takes (path); one of no known shape
@pytest.mark.parametrize(
    "params, ok", [("path", True), ("path, *, extra=None", True), ("directory", False)]
)
def test_jax_get_file_cache_shapes(params, ok, tmp_path):
    calls: list = []
    real = _fn("get_file_cache", params, calls)
    mod = types.SimpleNamespace(get_file_cache=real, _cache=None)
    if not ok:
        with pytest.raises(hookshapes.ShapeError):
            jax_guard.patch_cache(mod)
        assert mod.get_file_cache is real
        return
    jax_guard.patch_cache(mod)
    assert (
        mod.get_file_cache(str(tmp_path)) == "real"
    )  # not a (cache, path) pair: returned as it is
    assert calls == [{"path": str(tmp_path), **({"extra": None} if "extra" in params else {})}]


# CuPy: 14 has the backend (load(self, name), save(self, name, cubin, source), _set_kernel_cache_backend(backend));
# 13 has neither (hooked() leaves it to the start-up check); a 15-like renamed one is refused.
CUPY = {
    "14": ("self, name", "self, name, cubin, source", "backend"),
    "renamed": ("self, key", "self, key, payload, source", "backend"),
}


@pytest.mark.parametrize("release", sorted(CUPY))
def test_cupy_backend_shapes(release, tmp_path):
    load_p, save_p, set_p = CUPY[release]
    log: list = []
    ns: dict = {"log": log}
    load_names = [p.strip() for p in load_p.split(",")]
    save_names = [p.strip() for p in save_p.split(",")]
    exec(
        f"class DiskKernelCacheBackend:\n"
        f"    def __init__(self, d): self._cache_dir = d\n"
        f"    def load({load_p}): log.append(('load', {load_names[1]})); return None\n"
        f"    def save({save_p}): log.append(('save', {', '.join(save_names[1:])}))\n",
        ns,
    )
    backend = ns["DiskKernelCacheBackend"](str(tmp_path))
    set_calls: list = []
    mod = types.SimpleNamespace(
        _kernel_cache_backend=backend,
        _set_kernel_cache_backend=_fn("_set_kernel_cache_backend", set_p, set_calls),
    )
    if release == "renamed":
        with pytest.raises(hookshapes.ShapeError, match="no parameter name"):
            cupy_guard.patch(mod)
        assert mod._kernel_cache_backend is backend
        return
    cupy_guard.patch(mod)
    guarded = mod._kernel_cache_backend
    assert isinstance(guarded, cupy_guard.GuardedCupyBackend)
    assert guarded.load("ab" * 20 + ".cubin") is None  # absent: a miss, read by the hook itself
    assert guarded.load(name="ab" * 20 + ".cubin") is None
    guarded.save("ab" * 20 + ".cubin", b"\x7fELF", "src")
    guarded.save(name="cd" * 20 + ".cubin", cubin=b"\x7fELF", source="src")
    assert log == [
        ("save", "ab" * 20 + ".cubin", b"\x7fELF", "src"),
        ("save", "cd" * 20 + ".cubin", b"\x7fELF", "src"),
    ]
    other = ns["DiskKernelCacheBackend"](str(tmp_path / "other"))
    mod._set_kernel_cache_backend(other)
    assert isinstance(set_calls[0]["backend"], cupy_guard.GuardedCupyBackend)
    mod._set_kernel_cache_backend(backend=object())  # not a disk backend: passed as it is
    assert type(set_calls[1]["backend"]) is object


# numba-cuda 0.2x-0.30: IndexDataCacheFile's methods; one of another shape is refused.
NUMBA = {
    "0.30": ("self", "self, name", "self, overloads", "self, name, data"),
    "renamed": ("self", "self, filename", "self, overloads", "self, filename, payload"),
}


@pytest.mark.parametrize("release", sorted(NUMBA))
def test_numba_cache_file_shapes(release, tmp_path):
    li, ld, si, sd = NUMBA[release]
    ns: dict = {}
    exec(
        "class IndexDataCacheFile:\n"
        f"    def _load_index({li}): return 'orig'\n"
        f"    def _load_data({ld}): return 'orig'\n"
        f"    def _save_index({si}): return 'orig'\n"
        f"    def _save_data({sd}): return 'orig'\n"
        "    def _dump(self, obj): return b''\n"
        "    def _open_for_write(self, p): pass\n",
        ns,
    )
    cls = ns["IndexDataCacheFile"]
    mod = types.SimpleNamespace(IndexDataCacheFile=cls, pickle=__import__("pickle"))
    if release == "renamed":
        with pytest.raises(hookshapes.ShapeError):
            numba_guard.patch(mod)
        assert cls._load_data(None, "x") == "orig"  # left as it was
        return
    numba_guard.patch(mod)
    obj = types.SimpleNamespace(_cache_path=str(tmp_path), _index_name="f.nbi")
    with pytest.raises(
        FileNotFoundError
    ):  # replaced: absent and unsealed is numba's miss, never 'orig'
        cls._load_data(obj, "f.1.nbc")
    with pytest.raises(FileNotFoundError):
        cls._load_data(obj, name="f.1.nbc")
    assert cls._load_index(obj) == {}
    with pytest.raises(
        FileNotFoundError
    ):  # an object of no shape numba makes: a miss, said, never raised else
        cls._load_data(None, "f.1.nbc")


# torch 2.9-2.13: the three loaders the Inductor guard wraps (their shapes are the same in every one of these releases).
TORCH = {
    "TritonBundler.read_and_emit": ("torch._inductor.triton_bundler", "bundle"),
    "GuardedCache.iterate_over_candidates": (
        "torch._inductor.codecache",
        "cls, local, remote_cache, key",
    ),
    "FxGraphCache._write_to_local_cache": ("torch._inductor.codecache", "key, content"),
    "AOTAutogradCache._write_to_local_cache": (
        "torch._functorch._aot_autograd.autograd_cache",
        "key, content",
    ),
}


@pytest.mark.parametrize("attr", sorted(TORCH))
def test_torch_loader_shapes_fit_and_a_renamed_one_does_not(attr):
    module, params = TORCH[attr]
    t = hookshapes.target(module, attr)
    assert hookshapes.fit(_fn("f", params, []), t) is not None
    with pytest.raises(hookshapes.ShapeError):
        hookshapes.fit(_fn("f", "a, b, c, d", []), t)


def test_a_refused_hook_says_one_line_and_is_not_guarded(monkeypatch, recwarn):
    """postimport's on_error for the flat hooks (a guard's refused): the state says why, one warning says what protection remains."""
    monkeypatch.setattr(hookshapes, "version_of", lambda kind: "0.13.0")
    state = jax_guard.refused(guards.JAX_CACHE, hookshapes.ShapeError("get_file_cache(directory)"))
    assert state.startswith("not guarded: JAX 0.13.0's cache functions are not ones this version")
    assert [str(w.message) for w in recwarn] == [
        "jitwarden: JAX 0.13.0's cache functions are not ones this version of jitwarden knows (ShapeError: "
        "get_file_cache(directory)); its cache is checked at start-up only"
    ]
    assert postimport.status("no.such.module") == "not asked for"
