"""What ``run --record`` costs on a warm start (issue 44): real Triton cache hits through the guard, recording
on vs off, interleaved in one process. Goal: ratio <= 1.01.

Compiles N (default 200) kernels on the CPU (explicit GPUTarget) through the guard, then times rounds of
``triton.compile`` hits over all N with the recorder off and on (``jitwarden.runtime.record.configure``),
alternating; each "on" round ends with the flush a process makes at exit, counted in its time.

    PYTHONPATH=src:. python benchmarks/bench_record.py [--kernels 200] [--rounds 11]
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
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from tests.helpers import kernels

MANAGER = "jitwarden.guard:GuardedCacheManager"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=11)
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="jw-bench-record-")
    try:
        kdir = os.path.join(tmp, "kernels")
        os.makedirs(kdir)
        with open(os.path.join(kdir, "jw_test_kernels.py"), "w") as f:
            f.write(kernels.KERNEL_SOURCE)
        sys.path.insert(0, kdir)
        os.environ.update(
            TRITON_CACHE_DIR=os.path.join(tmp, "cache"),
            TRITON_CACHE_MANAGER=MANAGER,
            JITWARDEN_HOME=os.path.join(tmp, "home"),
        )
        import jw_test_kernels as K
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        import jitwarden.runtime.guards.triton as guard
        from jitwarden.runtime import record

        guard._pin_knob()
        todo = list(
            itertools.islice(
                itertools.product(
                    ("add_kernel", "sub_kernel", "fma_kernel"),
                    (64, 128, 256, 512, 1024),
                    (80, 90, 100, 120, 121),
                    (1, 2, 4, 8),
                ),
                args.kernels,
            )
        )

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

        t = time.perf_counter()
        compile_all()
        print(f"built {len(todo)} kernels in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        compile_all()  # warm the page cache
        off, on = [], []
        for _ in range(args.rounds):
            record.configure({})
            t = time.perf_counter()
            compile_all()
            off.append(time.perf_counter() - t)
            record.configure({"JITWARDEN_RECORD": "bench"})
            t = time.perf_counter()
            compile_all()
            record.flush()
            on.append(time.perf_counter() - t)
        record.configure({})
        log = os.path.join(tmp, "home", "records", "unpartitioned", "bench.jsonl")
        with open(log) as f:
            lines = sum(1 for _ in f)
        assert lines == len(todo) * args.rounds, (lines, len(todo) * args.rounds)
        s, g = statistics.median(off), statistics.median(on)
        n = len(todo)
        print(
            f"guard, no record   {s * 1e6 / n:8.1f} us per warm hit (median of {args.rounds} rounds of {n})"
        )
        print(f"guard, --record    {g * 1e6 / n:8.1f} us per warm hit ({lines} lines written)")
        print(
            f"ratio record/none {g / s:.4f} (goal <= 1.01); best rounds: {min(on) / min(off):.4f}"
        )
        print("PASS" if g / s <= 1.01 else "FAIL")
        return 0 if g / s <= 1.01 else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
