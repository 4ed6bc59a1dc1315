"""JAX's persistent cache under the load hook (runtime/guards/jax.py, issue 33), on JAX's CPU backend, which writes
the same cache as on a GPU: two functions both named ``f`` (gelu(x @ w) and relu(x @ w)) share a module name, so
relu's ``jit_f-<key>-cache`` copied over gelu's passes every name check. The program names its cache dir in code
(``jax.config.update``), as JAX programs do; it prints the fraction of negative outputs (gelu's is 0.5 here,
relu's 0.0). Stock JAX serves the swapped file (the attack is real); a guarded run (``jitwarden run``, through
``_boot``) never does: unsealed, sealed, and swapped inside the write window.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("jax")
pytestmark = pytest.mark.slow

PROG = r"""
import sys, jax, jax.numpy as jnp
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
if sys.argv[2] == "gelu":
    def f(x, w): return jax.nn.gelu(x @ w)
else:
    def f(x, w): return jax.nn.relu(x @ w)
x = (jnp.arange(64.0).reshape(8, 8) - 32) / 8
print(float((jax.jit(f)(x, jnp.eye(8)) < 0).mean()))
"""
GELU, RELU = 0.5, 0.0


def _run(tmp, cache: str, which: str, guarded: bool) -> tuple[float, str]:
    prog = os.path.join(tmp, "prog.py")
    with open(prog, "w") as f:
        f.write(PROG)
    cmd = [sys.executable, prog, cache, which]
    if guarded:
        cmd = [sys.executable, "-m", "jitwarden", "run", "--", *cmd]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=tmp)
    assert p.returncode == 0, p.stderr[-2000:]
    return float(p.stdout.split()[-1]), p.stderr


def _sealed_in_verify(cache: str) -> bool:
    """``verify``'s ``sealed`` for gelu's entry (the adapters' fact: sealed and unchanged, or judged structurally only)."""
    import json

    p = subprocess.run(
        [sys.executable, "-m", "jitwarden", "verify", "--format", "json", cache],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-1000:] + p.stderr[-1000:]
    name = os.path.basename(_entry(cache))
    (e,) = [e for e in json.loads(p.stdout)["entries"] if e["id"] == name]
    assert [f["code"] for f in e["findings"] if f["severity"] == "error"] == []
    return e["sealed"]


def _entry(cache: str) -> str:
    (name,) = [n for n in os.listdir(cache) if n.startswith("jit_f-") and n.endswith("-cache")]
    return os.path.join(cache, name)


def _swap(tmp, cache: str) -> None:
    """relu's executable over gelu's key: relu compiled with the same cache dir path (the key holds it)."""
    other = os.path.join(tmp, "relu")
    os.makedirs(other)
    shutil.copytree(cache, os.path.join(other, "c"))
    for n in os.listdir(os.path.join(other, "c")):
        if n.startswith("jit_f-"):
            os.remove(os.path.join(other, "c", n))
    _run(other, "c", "relu", guarded=False)
    shutil.copyfile(_entry(os.path.join(other, "c")), _entry(cache))


@pytest.fixture
def where(tmp_path):
    return str(tmp_path), os.path.join(str(tmp_path), "c")


def test_stock_serves_the_swap_and_a_guarded_run_refutes_it_unsealed(where):
    tmp, cache = where
    assert _run(tmp, "c", "gelu", guarded=False)[0] == GELU  # a stock-built cache: nothing sealed
    _swap(tmp, cache)
    assert _run(tmp, "c", "gelu", guarded=False)[0] == RELU  # the attack is real
    got, err = _run(tmp, "c", "gelu", guarded=True)
    assert got == GELU and "not-reproducible" in err and "jit_f-" in err
    got, err = _run(tmp, "c", "gelu", guarded=True)  # the fresh compile was written and sealed
    assert got == GELU and "quarantined" not in err


def test_written_under_the_guard_is_sealed_at_once_and_a_swap_in_the_window_is_refused(where):
    tmp, cache = where
    assert _run(tmp, "c", "gelu", guarded=True)[0] == GELU
    from jitwarden.runtime import flatseal

    assert os.path.basename(_entry(cache)) in flatseal.sealed_files(
        cache
    )  # sealed by the run that wrote it
    _swap(tmp, cache)  # before any later start could have sealed it
    got, err = _run(tmp, "c", "gelu", guarded=True)
    assert got == GELU and "does not match its seal" in err


def test_an_honest_unsealed_entry_is_proven_kept_and_served(where):
    """A stock-built entry: the guarded run's compile differs from it only in debug info (the caller's frames under
    ``jitwarden run``, module ids), so it is proven, kept byte for byte and sealed, with no line."""
    tmp, cache = where
    assert _run(tmp, "c", "gelu", guarded=False)[0] == GELU
    with open(_entry(cache), "rb") as f:
        before = f.read()
    assert (
        _sealed_in_verify(cache) is False
    )  # judged structurally only: what verify counts as unproven
    got, err = _run(tmp, "c", "gelu", guarded=True)
    from jitwarden.runtime import flatseal

    assert _sealed_in_verify(cache) is True  # sealed by the proof, unchanged since

    assert got == GELU and "quarantined" not in err
    with open(_entry(cache), "rb") as f:
        assert f.read() == before  # kept, not replaced
    assert os.path.basename(_entry(cache)) in flatseal.sealed_files(cache)
    assert not os.path.exists(os.path.join(cache, "jitwarden-quarantine"))


LATE = r"""
import os, sys, jax, jax.numpy as jnp
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
jax.jit(lambda x: x + 1)(1.0)  # JAX's cache object made before the hook
from jitwarden.runtime import guards, postimport
print(guards.install_load_hooks())
from jax._src import compilation_cache
print(type(compilation_cache._cache).__name__)
def f(x): return jnp.sin(x) * 3
print(float(jax.jit(f)(1.0)))
"""


def test_installed_after_jax_made_its_cache_guards_from_then_on(where):
    """``activate()`` called after ``import jax``: the cache object JAX already made is wrapped in place, and what
    JAX writes from then on is sealed as written."""
    tmp, cache = where
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    p = subprocess.run(
        [sys.executable, "-c", LATE, cache], capture_output=True, text=True, env=env, timeout=300
    )
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    assert "'jax._src.compilation_cache': 'guarded'" in lines[0] and lines[1] == "GuardedJaxCache"
    from jitwarden.runtime import flatseal

    (f,) = [n for n in os.listdir(cache) if n.startswith("jit_f-")]
    assert f in flatseal.sealed_files(cache)


DEGRADED = (
    r"""
import sys
from jitwarden.runtime import guards
from jitwarden.runtime.guards import jax as jax_guard
def unknown_shape(mod):
    raise AttributeError("_cache_write")  # a JAX whose compiler the hook does not know
jax_guard.patch_compiler = unknown_shape
guards.install_load_hooks()
import jax
from jitwarden.runtime import postimport
print(postimport.status("jax._src.compiler"), postimport.status("jax._src.compilation_cache"))
"""
    + PROG
)


def test_without_the_compiler_hook_an_unsealed_entry_is_judged_and_sealed_as_found(where):
    """The degraded path (docs/caches.md): no proof, so an honest stock-built entry is judged as ``verify`` judges
    it and sealed as found (trust on first use, as the start-up check), and a damaged one is refused."""
    tmp, cache = where
    assert _run(tmp, "c", "gelu", guarded=False)[0] == GELU
    prog = os.path.join(tmp, "degraded.py")
    with open(prog, "w") as f:
        f.write(DEGRADED)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    p = subprocess.run(
        [
            sys.executable,
            prog,
            "c",
            "gelu",
        ],  # "c" as the stock run named it: JAX's key holds the path
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("not guarded: JAX ") and "compile hook is not one" in p.stdout
    assert p.stderr.count("compile hook is not one") == 1  # said once, as one warning line
    assert "guarded\n" in p.stdout and float(p.stdout.split()[-1]) == GELU  # the cache object is
    from jitwarden.runtime import flatseal

    assert os.path.basename(_entry(cache)) in flatseal.sealed_files(cache)
    (other,) = [n for n in os.listdir(cache) if n.startswith("jit_iota-")][:1]
    with open(os.path.join(cache, other), "r+b") as f:  # damaged before anything sealed it
        f.truncate(os.path.getsize(os.path.join(cache, other)) // 2)
    seal = os.path.join(cache, ".jitwarden-seal.json")
    os.remove(seal)
    p = subprocess.run(
        [
            sys.executable,
            prog,
            "c",
            "gelu",
        ],  # "c" as the stock run named it: JAX's key holds the path
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp,
    )
    assert p.returncode == 0 and float(p.stdout.split()[-1]) == GELU
    assert f"quarantined JAX cache entry {other}" in p.stderr


def test_a_recorded_run_lists_jax_compiles_then_hits_and_coverage_reads_them(where, tmp_path):
    """``run --record`` (issue 44) through the JAX hook: the first start's compiles, the second's hits (sealed files
    served), under the key of each ``-cache`` file; ``coverage --cache`` of the dir finds every one of them."""
    import json

    tmp, cache = where

    def run(*args):
        cmd = [sys.executable, "-m", "jitwarden", "run", "--record", "jx", "--"]
        cmd += [sys.executable, os.path.join(tmp, "prog.py"), "c", "gelu"]
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=tmp)
        assert p.returncode == 0, p.stderr[-2000:]

    _run(tmp, "c", "gelu", guarded=True)  # writes prog.py; the entries sealed as written
    for n in os.listdir(cache):
        if n.endswith("-cache"):
            os.remove(os.path.join(cache, n))  # a cold start for the record
    run()
    run()
    top = os.path.join(os.environ["XDG_CACHE_HOME"], "jitwarden", "records")
    (digest,) = os.listdir(top)
    with open(os.path.join(top, digest, "jx.jsonl")) as f:
        lines = [json.loads(x) for x in f if '"jax"' in x]
    starts = sorted({ln["start"] for ln in lines}, key=[ln["start"] for ln in lines].index)
    assert len(starts) == 2
    first = [ln for ln in lines if ln["start"] == starts[0]]
    second = [ln for ln in lines if ln["start"] == starts[1]]
    assert first and {ln["event"] for ln in first} == {"compile"}
    assert second and {ln["event"] for ln in second} == {"hit"}
    keys = {n[: -len("-cache")] for n in os.listdir(cache) if n.endswith("-cache")}
    assert {ln["key"] for ln in second} <= keys and "jit_f" in {ln["name"] for ln in second}
    uses = os.path.join(
        cache, ".jitwarden-uses"
    )  # what budget evicts by: the files the second start was served
    served = set()
    for n in os.listdir(uses):
        with open(os.path.join(uses, n)) as f:
            served |= {line.split("\t")[1].strip() for line in f if "\t" in line}
    assert {f"{ln['key']}-cache" for ln in second} <= served
    p = subprocess.run(
        [sys.executable, "-m", "jitwarden", "coverage", "jx", "--cache", cache, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    doc = json.loads(p.stdout)
    assert doc["missing"] == 0 and doc["kernels"] >= len({ln["key"] for ln in second}), doc
