"""Fixed costs of a guarded process on the GPU host, and small-model warm starts per mode (issue 35).

Not run by CI: a later session runs it on the H200 host (no GPU here). Two parts, each printing ratios
against stock measured in the same run:

1. ``activate()`` and ``jitwarden run -- python -c pass`` over a bare interpreter, and ``import torch``
   bare against under ``run``, in a venv with jitwarden only and in one that sees the image's
   site-packages (its torch, its NVML, its 18,000 names): :mod:`bench_fixed_costs` with ``--parts
   --import-torch --profile`` (``--ref REV`` times another revision in the same rounds).
2. A small model's warm start, guarded (``jitwarden run``) against stock, per mode: default with the FX
   graph cache on, default with it off, ``max-autotune-no-cudagraphs`` with it on. The model is a Phi3 of
   4 layers (transformers, random weights, no download: ``h200_warm_modes.MODEL`` with ``JW_ARCH=phi3``),
   compiled cold once per side and mode in its own root, then ``--pairs`` (>= 6) interleaved warm pairs;
   printed: medians of process wall and compile-to-first-result, guarded / stock. ``--profile`` adds one
   cProfile'd warm start per side of the last mode, the jitwarden functions the guarded one spends in, and
   the functions whose time differs most between the two (what the guarded start does more of).

    PYTHONPATH=src python3 benchmarks/h200_fixed_costs.py --out $OUT [--pairs 6] [--ref REV] [--profile]

The goals (issue 35): activate() <= 30 ms and run <= 60 ms over a bare interpreter in the venv with torch;
a small model's guarded warm start <= 1.03 of stock to first result in each mode.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_fixed_costs  # the fixed costs, as on the CPU machine
from bench_small_model import (  # the same interleaved pairs and profiles as the CPU proxy
    SIDES,
    profile_diff,
    ratios,
    warm_pairs,
)
from h200_warm_modes import MODEL, one, top_jitwarden

MODES = (("default", "on"), ("default", "off"), ("max-autotune-no-cudagraphs", "on"))


def small_model(out: str, pairs: int, profile: bool) -> None:
    os.environ["JW_ARCH"] = (
        "phi3"  # read by MODEL in each child (h200_warm_modes.env_for copies it)
    )
    script = os.path.join(out, "phi3.py")
    with open(script, "w") as f:
        f.write(MODEL)
    for mode in dict.fromkeys(m for m, _fx in MODES):
        roots = {s: os.path.join(out, f"{mode}-{s}") for s in SIDES}
        for side, root in roots.items():
            cold = one(script, mode, root, side == "guarded", "on")
            print(f"{mode} cold {side}: rc {cold['rc']}, wall {cold['wall_s']} s", flush=True)
        for fx in (fx for m, fx in MODES if m == mode):
            runs = warm_pairs(script, mode, roots, fx, pairs)
            print(f"\n{mode}, FX graph cache {fx}, {pairs} interleaved pairs:\n{ratios(runs)}")
    if profile:
        mode = MODES[-1][0]
        for side in SIDES:
            path = os.path.join(out, f"prof-{side}.pstats")
            one(script, mode, os.path.join(out, f"{mode}-{side}"), side == "guarded", "on", path)
        print("\n".join(top_jitwarden(os.path.join(out, "prof-guarded.pstats"))))
        print("\nguarded - stock, by cumulative time:")
        print("\n".join(profile_diff(*(os.path.join(out, f"prof-{s}.pstats") for s in SIDES))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "fixed-costs-out")
    ap.add_argument("--pairs", type=int, default=6, help="warm pairs per mode (>= 6)")
    ap.add_argument("--fixed-pairs", type=int, default=15, help="rounds of part 1")
    ap.add_argument("--ref", help="also time this git revision in part 1")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--skip-model", action="store_true", help="part 1 only")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    fixed = ["--pairs", str(args.fixed_pairs), "--parts", "--import-torch", "--profile"]
    bench_fixed_costs.main(fixed + (["--ref", args.ref] if args.ref else []))
    if not args.skip_model:
        small_model(os.path.abspath(args.out), args.pairs, args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
