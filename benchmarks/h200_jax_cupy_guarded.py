"""The swapped-entry attack on JAX's and CuPy's caches, stock vs guarded, on a GPU (issue 24; docs/gpu_proof.md).

Run on the GPU machine from the repository root, with JAX (CUDA plugin) and CuPy installed in the Python
that runs it: ``python3 benchmarks/h200_jax_cupy_guarded.py OUT [jax] [cupy]``. For each tool, in fresh processes:

1. ``jitwarden run`` builds an ``add`` and a ``sub`` entry (JAX: ``jit_f_add``/``jit_f_sub``; CuPy: two
   RawKernels both named ``k``) into the fingerprint partition of a fresh cache dir, then starts once more
   (the start-up seals what the last run wrote);
2. the ``sub`` entry's file is copied over the ``add`` entry's inside the partition;
3. stock: the program that calls ``add`` runs with the cache variable pointing straight at the partition;
4. guarded: the same program runs under ``jitwarden run`` with the variable at the cache dir.

Expected: stock prints add5 = 3.0 (x-y) with no warning; guarded quarantines the swapped file at start-up,
recompiles and prints 7.0. ``OUT/results.json`` holds every step's output.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))
OUT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "jax-cupy-guarded-out")

JAX = textwrap.dedent("""
    import json, sys, jax, jax.numpy as jnp
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    x = jnp.arange(1024, dtype=jnp.float32); y = jnp.full((1024,), 2.0, jnp.float32)
    def f_add(x, y): return x + y
    def f_sub(x, y): return x - y
    f = {"add": f_add, "sub": f_sub}[sys.argv[1]]
    print("JW " + json.dumps({sys.argv[1] + "5": float(jax.jit(f)(x, y)[5])}), flush=True)
""")
CUPY = textwrap.dedent("""
    import json, sys, cupy as cp
    op = {"add": "+", "sub": "-"}[sys.argv[1]]
    src = 'extern "C" __global__ void k(const float* x, const float* y, float* z, int n) ' \\
          '{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) z[i] = x[i] %s y[i]; }' % op
    x = cp.arange(1024, dtype=cp.float32); y = cp.full(1024, 2.0, cp.float32); z = cp.empty_like(x)
    cp.RawKernel(src, "k")((4,), (256,), (x, y, z, cp.int32(1024)))
    print("JW " + json.dumps({sys.argv[1] + "5": float(z[5])}), flush=True)
""")
TOOLS = {"jax": ("JAX_COMPILATION_CACHE_DIR", JAX), "cupy": ("CUPY_CACHE_DIR", CUPY)}
ONLY = [t for t in sys.argv[2:] if t in TOOLS] or list(TOOLS)


def run(cmd: list[str], env: dict) -> dict:
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    outs = [json.loads(line[3:]) for line in p.stdout.splitlines() if line.startswith("JW ")]
    return {
        "rc": p.returncode,
        "out": outs,
        "jitwarden": [ln for ln in p.stderr.splitlines() if "jitwarden" in ln],
        "err_tail": p.stderr[-600:] if p.returncode else "",
    }


def files(d: str) -> set[str]:
    return {
        n
        for n in os.listdir(d)
        if os.path.isfile(os.path.join(d, n)) and not n.startswith(".jitwarden")
    }


def tool(name: str, results: dict) -> None:
    var, prog = TOOLS[name]
    work = os.path.join(OUT, name)
    shutil.rmtree(work, ignore_errors=True)
    base = os.path.join(work, "cache")
    os.makedirs(base)
    script = os.path.join(work, "prog.py")
    with open(script, "w") as f:
        f.write(prog)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            filter(None, [os.path.join(REPO, "src"), os.environ.get("PYTHONPATH")])
        ),
        **{var: base},
    )
    guarded = [sys.executable, "-m", "jitwarden", "run", "-v", "--"]
    r = {"build_add": run(guarded + [sys.executable, script, "add"], env)}
    part = next(
        ln.split("=", 1)[1]
        for ln in r["build_add"]["jitwarden"]
        if ln.startswith(f"jitwarden: {var}=")
    )
    before = files(part)
    r["build_sub"] = run(guarded + [sys.executable, script, "sub"], env)
    sub_files = files(part) - before
    from jitwarden.runtime.flatseal import SETTLE_S

    time.sleep(
        SETTLE_S + 1
    )  # a start seals only files that have settled (a file may still be being written)
    r["seal_start"] = run(guarded + ["true"], env)
    if name == "jax":
        add = next(n for n in files(part) if n.startswith("jit_f_add-") and n.endswith("-cache"))
        sub = next(n for n in files(part) if n.startswith("jit_f_sub-") and n.endswith("-cache"))
    else:  # the kernel named k in each build (the others, arange and fill, are shared)
        from jitwarden.adapters import cupy as cupy_adapter
        from jitwarden.model.entries import Judge

        def k_of(names):
            return next(
                n for n in sorted(names) if cupy_adapter.inspect_entry(part, n, Judge()).name == "k"
            )

        add, sub = k_of(before), k_of(sub_files)
    shutil.copyfile(os.path.join(part, sub), os.path.join(part, add))
    r["swapped"] = {"partition": part, "target": add, "copied_from": sub}
    r["stock"] = run([sys.executable, script, "add"], dict(env, **{var: part}))
    r["guarded"] = run(guarded + [sys.executable, script, "add"], env)
    r["verify_after"] = run(
        [sys.executable, "-m", "jitwarden", "verify", "--format", "json", part], env
    )
    results[name] = r


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    results: dict = {}
    for name in ONLY:
        try:
            tool(name, results)
        except Exception as exc:
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    for name, r in results.items():
        if "error" in r:
            print(f"{name}: {r['error']}")
            continue
        print(
            f"{name}: stock add5={r['stock']['out']} guarded add5={r['guarded']['out']}; "
            f"guarded start: {r['guarded']['jitwarden']}"
        )


if __name__ == "__main__":
    main()
