"""What JAX's load hook costs (runtime/guards/jax.py), on JAX's CPU backend, every figure from one run.

A child Python runs a workload of ``--functions`` jitted functions (matmul chains of growing depth, each its own
module) against a persistent cache dir named in code, and prints the seconds from the first call to the last
result (compiles or cache loads included), with the hook installed as ``_boot`` installs it, or stock:

- cold: stock, empty dir (every function compiled and written);
- warm stock: stock, the filled dir (every function loaded from the cache);
- first use: guarded, a fresh copy of the stock-built (unsealed) dir: each entry proven by the compile its miss
  makes, then sealed (the proof's cost, against cold);
- warm guarded: guarded, the now-sealed dir (each entry checked against its seal: the warm-hit ratio).

Warm stock and warm guarded run in interleaved pairs (``--pairs``); medians are printed with their ratios, of wall
time and of the child's CPU time (which a shared machine's load moves less).

    PYTHONPATH=src python benchmarks/bench_jax_hooks.py [--functions 8] [--pairs 6]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, time
if sys.argv[2] == "guarded":
    from jitwarden.runtime import guards
    guards.install_load_hooks()
import jax, jax.numpy as jnp
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
n = int(sys.argv[3])
fs = []
for depth in range(1, n + 1):
    def f(x, w, depth=depth):
        for _ in range(depth):
            x = jnp.tanh(x @ w) + x
        return x.sum()
    fs.append(jax.jit(f))
x = jnp.ones((64, 64)) / 64
t, c = time.perf_counter(), time.process_time()
for f in fs:
    f(x, x).block_until_ready()
print(time.perf_counter() - t, time.process_time() - c)
"""


def run(cache: str, mode: str, n: int) -> tuple[float, float]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    p = subprocess.run(
        [sys.executable, "-c", CHILD, cache, mode, str(n)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    if "jitwarden" in p.stderr:
        print("  (the hook said:", p.stderr.strip().splitlines()[-1][:160], ")")
    wall, cpu = p.stdout.split()[-2:]
    return float(wall), float(cpu)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--functions", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=6)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    try:
        stock = os.path.join(tmp, "stock")
        colds, firsts = [], []
        for i in range(3):
            shutil.rmtree(stock, ignore_errors=True)
            colds.append(run(stock, "stock", args.functions))
            # the same path for the guarded copy: the cache key holds the dir's path (XLA's autotune dir)
            guarded = os.path.join(tmp, "g")
            shutil.rmtree(guarded, ignore_errors=True)
            shutil.copytree(stock, guarded)
            os.rename(stock, stock + f".{i}")
            os.rename(guarded, stock)
            firsts.append(run(stock, "guarded", args.functions))
        warm_s, warm_g = [], []
        plain = stock + ".0"
        for _ in range(args.pairs):
            warm_s.append(run(plain, "stock", args.functions))
            warm_g.append(run(stock, "guarded", args.functions))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for what, i in (("wall", 0), ("CPU", 1)):
        cold = statistics.median(r[i] for r in colds)
        first = statistics.median(r[i] for r in firsts)
        ws = statistics.median(r[i] for r in warm_s)
        wg = statistics.median(r[i] for r in warm_g)
        print(f"{args.functions} functions, JAX's CPU backend, {what} seconds (medians)")
        print(f"  cold (stock, empty dir)            {cold * 1000:8.1f} ms")
        print(
            f"  first use (guarded, unsealed copy) {first * 1000:8.1f} ms   {first / cold:.2f}x cold"
        )
        print(f"  warm stock                         {ws * 1000:8.1f} ms")
        print(
            f"  warm guarded (sealed)              {wg * 1000:8.1f} ms   {wg / ws:.3f}x warm stock "
            f"over {args.pairs} pairs; pairwise {[round(g[i] / s_[i], 2) for g, s_ in zip(warm_g, warm_s)]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
