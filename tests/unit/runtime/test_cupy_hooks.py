"""CuPy's kernel cache under the load hook (runtime/guards/cupy.py, issue 33), on the CPU: CuPy's real module is
imported (it needs no GPU until a kernel runs) and its real disk backend wrapped as ``_boot`` wraps it; the entries
are the real ones captured on the H200 (``tests/data/real/jax_cupy/cupy_cache``). CuPy cannot compile here, so
"what CuPy's compile makes now" is the payload CuPy itself wrote for that key on the H200 (``save`` is called with
it, as ``_compile_with_cache_cuda`` calls it after compiling). The whole flow with NVRTC runs on a GPU:
``benchmarks/h200_jax_cupy_hooks.py``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from jitwarden.runtime import flathooks, flatseal, guards, say
from jitwarden.runtime.guards import cupy as cupy_guard
from tests.unit.adapters.test_cupy import unpack

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("cupy") is None, reason="CuPy not installed"
)
A = "e2864911f8465e8fbb5ac39d14f46c579b02112b.cubin"  # RawKernel f
B = "1f073b36c7dc0c08f88e0dfc36bd6c0501f42343.cubin"  # cupy_sum


@pytest.fixture
def cache(tmp_path, monkeypatch):
    # importing CuPy's compiler makes its default backend's dir: never the caller's ~/.cupy
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "default"))
    return unpack("cupy_cache", tmp_path)


def _backend(d: str):
    from cupy.cuda._compiler_cache import DiskKernelCacheBackend

    return cupy_guard.GuardedCupyBackend(DiskKernelCacheBackend(d))


def _payload(d: str, name: str) -> bytes:
    with open(os.path.join(d, name), "rb") as f:
        return f.read()[40:]


def _quarantined(d: str) -> list[str]:
    q = os.path.join(d, "jitwarden-quarantine")
    return sorted(os.listdir(q)) if os.path.isdir(q) else []


def test_the_hook_wraps_cupys_real_backend(tmp_path):
    """Installed before CuPy imports its compiler, as _boot does: the backend CuPy compiles through is guarded."""
    code = (
        "from jitwarden.runtime import guards, postimport\n"
        "guards.install_load_hooks()\n"
        "import cupy.cuda.compiler as c\n"
        "print(type(c._kernel_cache_backend).__name__, postimport.status('cupy.cuda.compiler'))\n"
    )
    env = dict(os.environ, CUPY_CACHE_DIR=str(tmp_path / "k"))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.split() == ["GuardedCupyBackend", "guarded"]
    assert "cupy" in guards.hooked({})


def test_an_honest_unsealed_entry_is_proven_by_cupys_compile_and_sealed(cache):
    be = _backend(cache)
    honest = _payload(cache, A)
    assert be.load(A) is None  # unsealed: a miss, CuPy compiles it
    be.save(A, honest, "source")  # what it compiled: the same cubin
    assert _quarantined(cache) == [] and A in flatseal.sealed_files(cache)
    assert be.load(A) == honest  # sealed: served


def test_another_kernels_cubin_under_a_key_is_refuted_unsealed(cache, recwarn):
    """B's file over A's key (as the captured swap: CuPy's own SHA-1 header still holds)."""
    be = _backend(cache)
    honest = _payload(cache, A)
    shutil.copyfile(os.path.join(cache, B), os.path.join(cache, A))
    assert be.load(A) is None  # never handed to CuPy
    be.save(A, honest, "source")
    assert len(_quarantined(cache)) == 1 and "not-reproducible" in str(recwarn[0].message)
    assert _payload(cache, A) == honest and be.load(A) == honest  # the fresh one, sealed as written


def test_a_swap_after_the_write_is_refused(cache, recwarn):
    be = _backend(cache)
    honest = _payload(cache, A)
    os.remove(os.path.join(cache, A))
    be.save(A, honest, "source")  # written by CuPy under the hook: sealed at once
    assert A in flatseal.sealed_files(cache)
    shutil.copyfile(os.path.join(cache, B), os.path.join(cache, A))  # inside what was the window
    assert be.load(A) is None
    assert "does not match its seal" in str(recwarn[0].message) and len(_quarantined(cache)) == 1


def test_real_captures_load_without_false_alarm_once_sealed(cache):
    """Every captured entry proven (CuPy's compile giving its own bytes back) then served: no quarantine."""
    be = _backend(cache)
    names = [n for n in os.listdir(cache) if n.endswith(".cubin")]
    for n in names:
        assert be.load(n) is None
        be.save(n, _payload(cache, n), "source")
    assert all(be.load(n) == _payload(cache, n) for n in names)
    assert _quarantined(cache) == []


def test_an_error_of_jitwardens_own_is_a_miss_never_raised_into_cupy(cache, monkeypatch, recwarn):
    """The net under the hooks: whatever fails inside jitwarden, the tool gets a miss (it compiles again) and one
    warning; it never gets an unchecked payload nor an exception."""

    def broken(d):
        raise RuntimeError("seal reader broke")

    be = _backend(cache)
    monkeypatch.setattr(flatseal, "_sealed", broken)
    monkeypatch.setattr(flathooks, "_failures", [])
    monkeypatch.setattr(say, "_said", set())
    assert be.load(A) is None and be.load(B) is None
    assert [str(w.message) for w in recwarn].count(
        "jitwarden: load hook error (RuntimeError: seal reader broke); entries it could not check are "
        "compiled again"
    ) == 1
