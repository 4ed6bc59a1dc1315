"""CPU proxy of a guarded warm start: TorchInductor's FX-graph-cache hit path, stock against guarded, same run.

What a warm start adds under jitwarden on an FX-graph-cache hit is torch-side: ``TritonBundler.read_and_emit``
(its kernel dirs checked against their seals) and each statically launched kernel checked as it loads
(``StaticAutotunerFuture.result``, ``guards/inductor._loadable``). No GPU is needed for that part: real Triton
kernels are compiled on the CPU for sm_90 through the guard (sealed), then one interpreter replays the
hit R times over all of them, with the hooks installed (guarded) or not (stock): ``read_and_emit`` of a
bundle of every kernel dir already on disk, then Inductor's own ``reload_cubin_path`` for each kernel's
static launcher (stock) or the guarded check before it (guarded). Processes alternate, the order flips
each round; the figure is the median per hit and the ratio guarded / stock, both from this run.

    PYTHONPATH=src python benchmarks/bench_warm_proxy.py [--hits 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, os.pardir)
sys.path.insert(0, ROOT)  # tests.helpers: the real kernels

HIT = textwrap.dedent(
    """
    import json, os, sys, time, types
    sys.path.insert(0, os.environ["JW_KERNEL_DIR"])
    guarded = os.environ["JW_SIDE"] == "guarded"
    if guarded:
        from jitwarden.runtime import guards
        guards.install_torch()
    import triton
    from triton.compiler import ASTSource
    from triton.backends.compiler import GPUTarget
    from torch._inductor.triton_bundler import TritonBundler
    from torch._inductor.runtime.static_triton_launcher import StaticallyLaunchedCudaKernel
    from torch._inductor.runtime.triton_heuristics import StaticTritonCompileResult
    from torch._inductor import config
    import jw_test_kernels as K
    config.bundle_triton_into_fx_graph_cache = True
    compiled = []
    for job in json.loads(os.environ["JW_JOBS"]):  # cache hits: every kernel is on disk, sealed
        src = ASTSource(fn=getattr(K, job["kernel"]), signature=job["signature"], constexprs=job["constexprs"])
        compiled.append(triton.compile(src, target=GPUTarget("cuda", job["arch"], 32), options=job["options"]))
    TritonBundler.begin_compile()
    for k in compiled:
        TritonBundler.put(k.hash, 0)
    bundle, _ = TritonBundler.collect()
    if guarded:
        from jitwarden.runtime.guards.inductor import _loadable

    def results():
        out = []
        for k in compiled:
            k._cubin_path = ""
            sk = StaticallyLaunchedCudaKernel(k)
            sk.cubin_path = None  # as unpickled from the FX-graph entry
            out.append(StaticTritonCompileResult(sk, triton.Config({}), {"device": 0, "device_type": "cuda"}, {}))
        return out

    times = []
    for _ in range(int(os.environ["JW_HITS"])):
        rs = results()
        t = time.perf_counter()
        TritonBundler.read_and_emit(bundle)
        for r in rs:
            if guarded:
                assert _loadable(types.SimpleNamespace(compile_results=[r]))
            else:
                r.reload_cubin_path()
        times.append(time.perf_counter() - t)
    print(json.dumps({"kernels": len(compiled), "times": times}))
    """
)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hits", type=int, default=30, help="warm hits replayed per process")
    ap.add_argument(
        "--rounds", type=int, default=3, help="process pairs, the order flipping each round"
    )
    a = ap.parse_args(argv)
    from tests.helpers import kernels
    from tests.helpers.guarded import compile_jobs, kernel_dir

    tmp = tempfile.mkdtemp(prefix="jw-bench-warm-")
    try:
        cache = os.path.join(tmp, "triton")
        jobs = kernels.jobs_for(archs=(80, 90, 100))
        compile_jobs(cache, jobs=jobs, guarded=True)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "JITWARDEN_"))
        }
        env.update(
            TRITON_CACHE_DIR=cache,
            TRITON_CACHE_MANAGER="jitwarden.guard:GuardedCacheManager",
            JW_KERNEL_DIR=kernel_dir(),
            JW_JOBS=json.dumps(jobs),
            JW_HITS=str(a.hits),
            HOME=os.path.join(tmp, "home"),
            XDG_CACHE_HOME=os.path.join(tmp, "home", ".cache"),
            TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
            PYTHONWARNINGS="ignore",
            PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", ""),
        )
        got: dict[str, list[float]] = {"stock": [], "guarded": []}
        n = 0
        for i in range(a.rounds):
            for side in ("stock", "guarded") if i % 2 == 0 else ("guarded", "stock"):
                p = subprocess.run(
                    [sys.executable, "-c", HIT],
                    env=dict(env, JW_SIDE=side),
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                if p.returncode != 0:
                    print(f"{side} failed:\n{p.stderr[-3000:]}")
                    return 1
                doc = json.loads(p.stdout.strip().splitlines()[-1])
                n = doc["kernels"]
                got[side] += doc["times"][
                    1:
                ]  # the first hit warms Python's own caches on both sides
        s, g = (statistics.median(got[k]) * 1000 for k in ("stock", "guarded"))
        print(
            f"FX-graph-cache hit, {n} sealed Triton kernels on disk, {len(got['stock'])} hits per side "
            f"({a.rounds} process pairs, interleaved)"
        )
        print(f"stock   read_and_emit + reload_cubin_path      median {s:8.2f} ms per hit")
        print(
            f"guarded read_and_emit (seals) + check at load   median {g:8.2f} ms per hit  "
            f"(+{(g - s) * 1000 / max(n, 1):.0f} us per kernel)"
        )
        print(
            f"ratio guarded / stock: {g / s:.2f}  (the torch-side cost only: a whole warm start also imports torch, "
            "builds the model and runs it, which jitwarden does not touch)"
        )
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
