"""Cache-hit cost of the guarded Triton cache manager against Triton's stock FileCacheManager.

Compiles N (default 200) distinct kernels once on the CPU (explicit GPUTarget), copies the
cache, lets the guard seal the copy, then times ``triton.compile`` cache hits over all N
kernels, alternating stock and guarded rounds in one process. Goal (issue 4): ratio <= 1.10.

    PYTHONPATH=src:tests python benchmarks/bench_guard.py [--kernels 200] [--rounds 7]
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repo root: tests.helpers
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from tests.helpers import kernels

MANAGER = "jitwarden.guard:GuardedCacheManager"


def specs(n: int):
    combos = itertools.product(
        ("add_kernel", "sub_kernel", "fma_kernel"),
        (64, 128, 256, 512, 1024),
        (80, 90, 100, 120, 121),
        (1, 2, 4, 8),
    )
    return list(itertools.islice(combos, n))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=11)
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="jw-bench-guard-")
    try:
        kdir = os.path.join(tmp, "kernels")
        os.makedirs(kdir)
        with open(os.path.join(kdir, "jw_test_kernels.py"), "w") as f:
            f.write(kernels.KERNEL_SOURCE)
        sys.path.insert(0, kdir)
        import jw_test_kernels as K
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        stock, guarded = os.path.join(tmp, "stock"), os.path.join(tmp, "guarded")
        todo = specs(args.kernels)

        def compile_all():
            for name, block, arch, warps in todo:
                src = ASTSource(
                    fn=getattr(K, name),
                    signature=kernels.SIGNATURES[name],
                    constexprs={"BLOCK": block},
                )
                triton.compile(
                    src, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps}
                )

        from triton import knobs

        def use(cache_dir, manager):
            """Switch like a fresh process would start: stock has no manager at all; guarded
            resolves TRITON_CACHE_MANAGER once (jitwarden.runtime.guards.triton pins Triton's knob on import)."""
            os.environ["TRITON_CACHE_DIR"] = cache_dir
            vars(knobs.cache).pop("manager_class", None)
            if manager:
                os.environ["TRITON_CACHE_MANAGER"] = manager
                import jitwarden.runtime.guards.triton

                jitwarden.runtime.guards.triton._pin_knob()
                assert (
                    knobs.cache.manager_class is jitwarden.runtime.guards.triton.GuardedCacheManager
                )
            else:
                os.environ.pop("TRITON_CACHE_MANAGER", None)
                assert knobs.cache.manager_class is None

        t = time.perf_counter()
        use(stock, None)
        compile_all()
        print(f"built {len(todo)} kernels in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        kernels.copy_cache(stock, guarded)
        use(guarded, MANAGER)
        compile_all()  # first guarded hit seals each (legacy) entry
        sealed = sum(
            os.path.exists(os.path.join(guarded, d, ".jitwarden-seal.json"))
            for d in os.listdir(guarded)
        )
        assert sealed == len(todo), f"{sealed} of {len(todo)} entries sealed"
        use(stock, None)
        compile_all()  # warm the page cache for both trees
        s_times, g_times = [], []
        for _ in range(args.rounds):
            for cache_dir, manager, out in ((stock, None, s_times), (guarded, MANAGER, g_times)):
                use(cache_dir, manager)
                t = time.perf_counter()
                compile_all()
                out.append(time.perf_counter() - t)
        s, g = statistics.median(s_times), statistics.median(g_times)
        n = len(todo)
        print(
            f"stock   FileCacheManager     {s * 1e6 / n:8.1f} us per cache hit (median of {args.rounds} rounds of {n})"
        )
        print(f"guarded GuardedCacheManager  {g * 1e6 / n:8.1f} us per cache hit")
        print(
            f"ratio guarded/stock {g / s:.3f} (goal <= 1.10); best rounds: {min(g_times) / min(s_times):.3f}"
        )
        print("PASS" if g / s <= 1.10 else "FAIL")
        return 0 if g / s <= 1.10 else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
