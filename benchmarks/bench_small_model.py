"""A small model's warm start on the CPU, guarded (``jitwarden run``) against stock, with the FX graph cache on.

The CPU stand-in for the H200's small-model warm starts (``h200_fixed_costs.py``): what a guarded warm start
adds that does not grow with the model (activation, the torch hooks' installation and their checks of FX and
AOTAutograd pickles, the boot ``sitecustomize``) shows as well on a tiny model compiled by Inductor's CPU
backend. Each side compiles cold once in its own root, then warm starts run in interleaved pairs (the order
alternates). Printed: medians of process wall and of compile-to-first-result per side, and the ratios
guarded / stock, both from this run. ``--profile`` adds one cProfile'd warm start per side and the
jitwarden functions the guarded one spends in (shared with ``h200_warm_modes.py``).

    PYTHONPATH=src python benchmarks/bench_small_model.py [--pairs 6] [--fx on,off] [--profile]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from h200_warm_modes import med, one, top_jitwarden  # the same runner as the GPU's

SIDES = ("stock", "guarded")
MODEL = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.perf_counter()
    import torch
    t_import = time.perf_counter() - t0
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128), torch.nn.Linear(128, 64)]
    m = torch.nn.Sequential(*layers).eval()
    x = torch.randn(8, 64)
    mode = sys.argv[1]
    with torch.no_grad():
        ref = m(x)
        t1 = time.perf_counter()
        y = torch.compile(m, mode=None if mode == "default" else mode)(x)
        t_first = time.perf_counter() - t1
    err = (y - ref).abs().max().item()
    print("RESULT " + json.dumps({"t_import": round(t_import, 3), "t_first": round(t_first, 3),
                                  "t_total": round(time.perf_counter() - t0, 3), "max_abs_err": err}))
    """
)


def warm_pairs(script: str, mode: str, roots: dict, fx: str, pairs: int) -> dict[str, list]:
    """``pairs`` warm starts per side (stock, guarded), interleaved, the order flipping every pair."""
    runs: dict[str, list] = {"stock": [], "guarded": []}
    for i in range(pairs):
        for side in ("stock", "guarded") if i % 2 == 0 else ("guarded", "stock"):
            r = one(script, mode, roots[side], side == "guarded", fx)
            if r["rc"] != 0:
                raise RuntimeError(f"{side} warm start failed: {r['err']}")
            runs[side].append(r)
    return runs


def ratios(runs: dict[str, list]) -> str:
    """Medians per side of process wall and compile-to-first-result, guarded / stock, and each pair's ratio
    (their spread is this run's noise)."""
    lines = []
    for key, what in (("wall_s", "process wall"), ("t_first", "compile to first result")):
        st, gu = (med(r.get(key) for r in runs[s]) for s in ("stock", "guarded"))
        pairs = [g[key] / s[key] for s, g in zip(runs["stock"], runs["guarded"])]
        lines.append(
            f"  {what:24} stock {st:7.3f} s  guarded {gu:7.3f} s  "
            f"ratio {gu / st:.3f}  ({(gu - st) * 1000:+.0f} ms); pairs "
            + " ".join(f"{x:.2f}" for x in pairs)
        )
    return "\n".join(lines)


def profile_diff(stock: str, guarded: str, n: int = 25) -> list[str]:
    """The functions whose cumulative time differs most between a stock and a guarded warm start's cProfile:
    what the guarded one does more (or less) of, jitwarden's or torch's (a recompile, a cache miss)."""
    import pstats

    def cum(path: str) -> dict:
        stats = pstats.Stats(path).stats  # type: ignore[attr-defined]
        return {f"{os.path.basename(f)}:{ln}:{fn}": v[3] for (f, ln, fn), v in stats.items()}

    a, b = cum(stock), cum(guarded)
    rows = sorted(((b.get(k, 0.0) - a.get(k, 0.0), k) for k in a.keys() | b.keys()), reverse=True)
    return [
        f"{d * 1000:+9.1f} ms  stock {a.get(k, 0) * 1000:8.1f}  guarded {b.get(k, 0) * 1000:8.1f}  {k}"
        for d, k in rows[:n]
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--fx", default="on")
    ap.add_argument("--mode", default="default")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--keep", help="a dir to work in and keep (else a temp dir, removed)")
    args = ap.parse_args(argv)
    work = args.keep or tempfile.mkdtemp(prefix="jw-bench-small-")
    os.makedirs(work, exist_ok=True)
    try:
        script = os.path.join(work, "model.py")
        with open(script, "w") as f:
            f.write(MODEL)
        roots = {s: os.path.join(work, s) for s in SIDES}
        for s, root in roots.items():
            cold = one(script, args.mode, root, s == "guarded", "on")
            assert cold["rc"] == 0, cold["err"]
            print(f"cold {s}: wall {cold['wall_s']} s, first result {cold.get('t_first')} s")
        for fx in args.fx.split(","):
            runs = warm_pairs(script, args.mode, roots, fx, args.pairs)
            print(f"\nmode {args.mode}, FX graph cache {fx}, {args.pairs} interleaved pairs:")
            print(ratios(runs))
        if args.profile:
            for s in SIDES:
                path = os.path.join(work, f"prof-{s}.pstats")
                r = one(script, args.mode, roots[s], s == "guarded", "on", profile=path)
                print(f"\nprofile {s}: wall {r['wall_s']} s, first result {r.get('t_first')} s")
            print("\n".join(top_jitwarden(os.path.join(work, "prof-guarded.pstats"))))
            print("\nguarded - stock, by cumulative time:")
            print("\n".join(profile_diff(*(os.path.join(work, f"prof-{s}.pstats") for s in SIDES))))
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
