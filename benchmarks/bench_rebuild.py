"""How close ``verify --rebuild`` comes to the physical floor: ptxas itself.

Usage: PYTHONPATH=src python benchmarks/bench_rebuild.py [CACHE_DIR] [--jobs N] [--json OUT]

Without CACHE_DIR it compiles ~48 distinct real Triton kernels (constexprs, num_warps,
archs 80/90/120 varied, so every PTX differs) on the CPU into a fresh cache. Then, in
the same run, it measures

1. the floor: the summed wall time of bare ptxas runs on the same PTX files with the
   same flags (Triton's command, as :func:`jitwarden.ops.rebuild.ptxas_flags` reconstructs it),
   one at a time;
2. jitwarden: the wall time of :func:`jitwarden.ops.rebuild.verify_entries` with jobs = cores.

and prints kernels/s and ratio = jitwarden_wall / (floor / cores); the goal is <= 1.25.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "src"))
sys.path.insert(0, os.path.join(HERE, os.pardir))  # the repo root: tests.helpers

from jitwarden.adapters import triton as tri
from jitwarden.env import ptxas
from jitwarden.model.entries import Judge
from jitwarden.ops import rebuild


def bench_jobs() -> list[dict]:
    from tests.helpers import kernels

    jobs = []
    for arch in (80, 90, 120):
        for bm, bn, bk in (
            (32, 32, 32),
            (64, 64, 32),
            (64, 128, 32),
            (128, 128, 32),
            (128, 64, 64),
        ):
            for warps in (4, 8):
                jobs.append(
                    {
                        "label": f"mm_{bm}x{bn}x{bk}_w{warps}_sm{arch}",
                        "variant": "matmul",
                        "kernel": "matmul_kernel",
                        "signature": kernels.SIGNATURES["matmul_kernel"],
                        "constexprs": {"BM": bm, "BN": bn, "BK": bk},
                        "options": {"num_warps": warps},
                        "arch": arch,
                    }
                )
        for block in (128, 512, 2048):
            for kern in ("add_kernel", "fma_kernel"):
                jobs.append(
                    {
                        "label": f"{kern}_{block}_sm{arch}",
                        "variant": kern,
                        "kernel": kern,
                        "signature": kernels.SIGNATURES[kern],
                        "constexprs": {"BLOCK": block},
                        "options": {},
                        "arch": arch,
                    }
                )
    return jobs


def scan(root: str):
    names, _ = tri.list_entry_names(root)
    return [e for e in (tri.inspect_entry(root, n, Judge()) for n in names) if e.type == "kernel"]


def floor_seconds(entries, tmp: str) -> tuple[float, int]:
    """Summed wall time of bare ptxas runs, one at a time, on each entry's own PTX."""
    total = 0.0
    for i, e in enumerate(entries):
        md = json.load(open(os.path.join(e.path, f"{e.name}.json")))
        arch, flags = rebuild.ptxas_flags(md)
        exe = ptxas.for_arch(arch)
        cmd = [
            exe,
            *flags,
            os.path.join(e.path, f"{e.name}.ptx"),
            "-o",
            os.path.join(tmp, f"{i}.o"),
        ]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        total += time.perf_counter() - t0
    return total, len(entries)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache", nargs="?", help="an existing Triton cache dir (default: compile one)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", help="write the figures here as JSON")
    args = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="jw-bench-") as tmp:
        root = args.cache
        if root is None:
            from tests.helpers import kernels

            root = os.path.join(tmp, "cache")
            t0 = time.perf_counter()
            kernels.build_cache(root, jobs=bench_jobs())
            print(
                f"compiled {len(bench_jobs())} kernels in {time.perf_counter() - t0:.1f} s",
                file=sys.stderr,
            )
        t0 = time.perf_counter()
        entries = scan(root)
        scan_s = time.perf_counter() - t0
        # Warm the page cache and ptxas identities for both sides alike.
        ptxas.selected()
        floor_dir = os.path.join(tmp, "floor")
        os.makedirs(floor_dir)
        floor, n = floor_seconds(entries, floor_dir)
        stats: dict = {}
        t0 = time.perf_counter()
        res = rebuild.verify_entries(entries, rebuild.RebuildOptions(jobs=args.jobs), stats=stats)
        wall = time.perf_counter() - t0
        verdicts = rebuild.summarize(res)
    ideal = floor / min(cores, args.jobs)
    out = {
        "kernels": n,
        "cores": cores,
        "jobs": args.jobs,
        "scan_s": round(scan_s, 3),
        "floor_serial_s": round(floor, 3),
        "floor_per_core_s": round(ideal, 3),
        "jitwarden_wall_s": round(wall, 3),
        "kernels_per_s": round(n / wall, 1),
        "ratio": round(wall / ideal, 3),
        "goal": 1.25,
        "verdicts": verdicts,
        "ptxas_runs": stats.get("ptxas_runs"),
        "ptxas_seconds_in_jitwarden": round(stats.get("ptxas_seconds", 0.0), 3),
    }
    print(
        f"{n} kernels, {cores} cores: floor {floor:.2f} s serial ({ideal:.2f} s per core); "
        f"jitwarden {wall:.2f} s = {n / wall:.1f} kernels/s; ratio {wall / ideal:.3f} (goal <= 1.25); "
        f"verdicts {verdicts}"
    )
    print(json.dumps(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if verdicts.get("verified") == n else 1


if __name__ == "__main__":
    sys.exit(main())
