"""First-use proof cost: loading a stock (unsealed) Triton cache through the guard, against the plain load.

One run, real kernels compiled on the CPU for explicit targets (tests/helpers/kernels.py), every figure
measured here:

- cold: ``triton.compile`` of every kernel into an empty cache (stock manager);
- plain: the same compiles again, all cache hits, stock manager (what a warm start costs without us);
- first use: the same hits through the guard on a fresh copy of the stock cache: every entry is
  unsealed, so each is proven by a rebuild (one ptxas run per kernel, serially, as Triton asks for them);
- guarded warm: the same hits again, now sealed;
- sweep: the start-up sweep of another fresh copy (proofs on all cores in parallel), then the
  guarded hits that follow it.

Times are inside the interpreter (compile loop only), medians of ``--runs``. Beside each wall time the
sweep reports CPU seconds: the interpreter's own (digests, checks, seals, imports: what jitwarden adds
around the proofs) and its ptxas children's (the proofs' work), which a shared machine's load does not
move the way it moves wall time.

``--baseline-src DIR`` runs the same first uses with jitwarden's ``src`` from DIR too (the code before a
change, e.g. ``git archive main src | tar -x -C DIR``), interleaved with this tree's, on fresh copies of
the same stock cache: one run, both codes.

``--background`` adds the sweep whose proofs run beside the start (the default under activation): the
time from the sweep to the last kernel loaded, against the sweep that proves first.

    PYTHONPATH=src python benchmarks/bench_firstuse.py [--runs 3] [--archs 80,90,120] [--baseline-src DIR] [--background]
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
SRC = os.path.join(HERE, os.pardir, "src")
sys.path.insert(0, os.path.join(HERE, os.pardir))  # the repo root: tests.helpers
sys.path.insert(0, SRC)

DRIVER = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, os.environ["JW_KERNEL_DIR"])
    def cpu():
        t = os.times()
        return t.user + t.system, t.children_user + t.children_system
    t_start = time.perf_counter()
    if os.environ.get("JW_SWEEP") in ("1", "bg"):
        c0, t0 = cpu(), time.perf_counter()
        from jitwarden.runtime import sweep
        bg = [] if os.environ["JW_SWEEP"] == "bg" else None  # proofs beside the start, as activation does
        warnings, counts = sweep.sweep([os.environ["TRITON_CACHE_DIR"]], None, bg)
        if bg:
            from jitwarden.runtime import prover
            assert prover.launch(bg, True, os.environ)
        t_sweep, c1 = time.perf_counter() - t0, cpu()
        sweep_cpu = [c1[0] - c0[0], c1[1] - c0[1]]
    else:
        warnings, counts, t_sweep, sweep_cpu = [], {}, 0.0, [0.0, 0.0]
    import triton
    from triton.compiler import ASTSource
    from triton.backends.compiler import GPUTarget
    import jw_test_kernels as K
    jobs = json.loads(os.environ["JW_JOBS"])
    t0 = time.perf_counter()
    for job in jobs:
        src = ASTSource(fn=getattr(K, job["kernel"]), signature=job["signature"], constexprs=job["constexprs"])
        triton.compile(src, target=GPUTarget("cuda", job["arch"], 32), options=job["options"])
    t_end = time.perf_counter()
    print(json.dumps({"compile_s": t_end - t0, "total_s": t_end - t_start, "sweep_s": t_sweep, "warnings": warnings,
                      "proofs": counts.get("proofs"), "sweep_self_cpu_s": sweep_cpu[0], "sweep_ptxas_cpu_s": sweep_cpu[1]}))
    """
)


def run(cache: str, jobs, guarded: bool, sweep=False, kdir: str = "", src: str = SRC) -> dict:
    """One driver process; ``sweep``: False, True (proofs before the start) or "bg" (beside it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "JITWARDEN_"))}
    env.update(
        TRITON_CACHE_DIR=cache,
        JW_KERNEL_DIR=kdir,
        JW_JOBS=json.dumps(jobs),
        PYTHONPATH=src + os.pathsep + env.get("PYTHONPATH", ""),
        JW_SWEEP="bg" if sweep == "bg" else "1" if sweep else "0",
    )
    if guarded:
        env["TRITON_CACHE_MANAGER"] = "jitwarden.guard:GuardedCacheManager"
    p = subprocess.run(
        [sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=3600
    )
    if p.returncode != 0:
        raise SystemExit(f"driver failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def jobs_for(archs) -> list[dict]:
    from tests.helpers import kernels

    variants = (
        list(kernels.VARIANTS)
        + [(f"add_b{b}", "add_kernel", {"BLOCK": b}, {}) for b in (32, 512, 1024)]
        + [(f"sub_b{b}", "sub_kernel", {"BLOCK": b}, {}) for b in (64, 256, 512)]
        + [(f"mm{b}", "matmul_kernel", {"BM": b, "BN": b, "BK": 32}, {}) for b in (16, 64)]
    )
    return kernels.jobs_for(archs=archs, variants=tuple(variants))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--archs", default="80,90,120")
    ap.add_argument(
        "--baseline-src",
        default=None,
        help="jitwarden's src before a change, measured in the same run",
    )
    ap.add_argument(
        "--background",
        action="store_true",
        help="also the sweep with its proofs beside the start "
        "(a prover process, as activation does), on its own copy; timed to the last kernel loaded",
    )
    args = ap.parse_args(argv)
    from tests.helpers.guarded import kernel_dir
    from tests.helpers.kernels import (
        copy_cache,
    )  # group files name absolute paths: a copy must point at itself

    jobs = jobs_for(tuple(int(a) for a in args.archs.split(",")))
    n = len(jobs)
    kdir = kernel_dir()
    codes = {"new": SRC}
    if args.baseline_src:
        codes["old"] = os.path.abspath(args.baseline_src)
    tmp = tempfile.mkdtemp(prefix="jw-bench-firstuse-")
    try:
        stock = os.path.join(tmp, "stock")
        cold = run(stock, jobs, guarded=False, kdir=kdir)["compile_s"]
        res: dict = {"plain": []}
        for i in range(args.runs):
            res["plain"].append(run(stock, jobs, guarded=False, kdir=kdir)["compile_s"])
            for code, src in codes.items():
                r = res.setdefault(
                    code,
                    {
                        k: []
                        for k in (
                            "first",
                            "warm",
                            "sweep",
                            "after_sweep",
                            "self_cpu",
                            "ptxas_cpu",
                            "tail",
                        )
                    },
                )
                a = os.path.join(tmp, f"first-{code}{i}")
                copy_cache(stock, a)
                r["first"].append(run(a, jobs, guarded=True, kdir=kdir, src=src)["compile_s"])
                r["warm"].append(run(a, jobs, guarded=True, kdir=kdir, src=src)["compile_s"])
                b = os.path.join(tmp, f"sweep-{code}{i}")
                copy_cache(stock, b)
                s = run(b, jobs, guarded=True, sweep=True, kdir=kdir, src=src)
                r["sweep"].append(s["sweep_s"])
                r["after_sweep"].append(s["compile_s"])
                r["self_cpu"].append(s.get("sweep_self_cpu_s", 0.0))
                r["ptxas_cpu"].append(s.get("sweep_ptxas_cpu_s", 0.0))
                r["tail"].append(s["sweep_s"] - ((s.get("proofs") or {}).get("seconds") or 0.0))
                r["line"] = next((w for w in s["warnings"] if w.startswith("proved ")), None)
                r.setdefault("total", []).append(s["total_s"])
                if args.background and code == "new":
                    c = os.path.join(tmp, f"bg-{code}{i}")
                    copy_cache(stock, c)
                    r.setdefault("bg_total", []).append(
                        run(c, jobs, guarded=True, sweep="bg", kdir=kdir, src=src)["total_s"]
                    )
        plain = statistics.median(res["plain"])
        print(
            f"{n} Triton kernels (archs {args.archs}), {os.cpu_count()} cores, medians of {args.runs} runs"
        )
        print(f"cold compile (stock)                 {cold * 1e3:9.1f} ms")
        print(
            f"plain warm load (stock, unguarded)   {plain * 1e3:9.1f} ms  = {plain / n * 1e3:6.2f} ms/kernel"
        )
        for code in codes:
            med = {k: statistics.median(v) for k, v in res[code].items() if isinstance(v, list)}
            extra = med["first"] - plain
            print(f"--- {code} code ({codes[code]})")
            print(
                f"first use through the guard (proofs) {med['first'] * 1e3:9.1f} ms  extra {extra * 1e3:8.1f} ms "
                f"= {extra / n * 1e3:6.2f} ms/kernel proof cost"
            )
            print(
                f"guarded warm load (sealed)           {med['warm'] * 1e3:9.1f} ms  ratio to plain {med['warm'] / plain:.3f}"
            )
            print(
                f"start-up sweep, proofs in parallel   {med['sweep'] * 1e3:9.1f} ms  = {med['sweep'] / n * 1e3:6.2f} ms/kernel "
                f"(then the hits: {med['after_sweep'] * 1e3:.1f} ms)"
            )
            print(
                f"  its CPU: jitwarden's own {med['self_cpu'] * 1e3:7.1f} ms, ptxas {med['ptxas_cpu'] * 1e3:7.1f} ms; "
                f"wall after the proofs' own time (serial sealing): {med['tail'] * 1e3:7.1f} ms"
            )
            print(
                f"first-use cost / cold compile: guard {extra / cold:.3f}, sweep "
                f"{(med['sweep'] + med['after_sweep'] - plain) / cold:.3f}"
            )
            if med.get("bg_total"):
                print(
                    f"start-up to the last kernel loaded (sweep, import triton, the hits): proving first "
                    f"{med['total'] * 1e3:.1f} ms, beside the start {med['bg_total'] * 1e3:.1f} ms "
                    f"(ratio {med['bg_total'] / med['total']:.3f})"
                )
            if res[code].get("line"):
                print(f"the sweep's line: jitwarden: {res[code]['line']}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
