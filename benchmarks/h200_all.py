"""Every GPU benchmark in one call within one budget (issue 43): fixed costs, the JAX/CuPy hook proofs, the small
model's warm starts per mode, OCI, trust, coverage, cold compiles stock against guarded, in that order.

Each part is its own process, given what is left of the budget (at most its cap) as ``--budget``, and killed at
that limit plus a grace if it overruns; each writes its JSON into ``--out`` after every measurement, so a part
killed mid-way keeps what it measured, and ``h200_all.json`` says which parts ran, how long, with what exit, and
which were skipped for lack of budget. Scratch (models, caches) lives under /tmp, never in ``--out``: at most
eight files come back from a GPU call, and these are they (h200_all.json and one JSON per part).

    PYTHONPATH=src python3 benchmarks/h200_all.py --budget 540 --out $OUT            # the whole set
    PYTHONPATH=src python3 benchmarks/h200_all.py --budget 540 --out $OUT --only warm  # one heavy part alone

Parts (``--only`` takes a comma list): fixed, hooks, hookcost, warm, oci, trust, coverage, cold. ``--registry PATH`` is handed to
the OCI part (carry ``.dev/docker-registry``); signed bundles need ``cryptography`` (carry the ``.whl``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _budget import Budget

# (name, cap in seconds when run with the others, the least worth starting, argv after the script, JSON name)
PARTS = (
    (
        "fixed",
        75,
        30,
        ["h200_fixed_costs.py", "--only", "fixed", "--fixed-pairs", "9"],
        "fixed_costs.json",
    ),
    ("hooks", 300, 40, ["h200_jax_cupy_hooks.py", "{work}"], "jax_cupy_hooks.json"),
    (
        "hookcost",
        170,
        40,
        ["h200_jax_cupy_hooks.py", "{work}", "--steps=cost,phases", "--pairs=10"],
        "hook_cost.json",
    ),
    ("warm", 330, 90, ["h200_fixed_costs.py", "--only", "warm", "--work", "{work}"], "warm.json"),
    ("oci", 150, 90, ["h200_oci.py", "--reps", "5"], "oci.json"),
    ("trust", 130, 45, ["h200_trust.py"], "trust.json"),
    ("coverage", 220, 60, ["h200_coverage.py"], "coverage.json"),
    ("cold", 200, 90, ["h200_fixed_costs.py", "--only", "cold", "--work", "{work}"], "cold.json"),
)
ALONE_CAP = 580  # a part run alone (--only NAME) may take the whole call
GRACE = 20  # seconds past its budget before a part is killed (it writes as it goes)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "h200-all-out")
    ap.add_argument(
        "--budget",
        type=float,
        default=540,
        metavar="SECONDS",
        help="for the whole set (default 540)",
    )
    ap.add_argument(
        "--only",
        default=",".join(p[0] for p in PARTS),
        help="parts, comma separated, run in the set's order",
    )
    ap.add_argument("--registry", default=None, help="the docker-registry binary, for the OCI part")
    ap.add_argument("--uid", type=int, default=1000, help="the user of the trust part")
    ap.add_argument("--pairs", type=int, default=6, help="warm pairs per mode (>= 6)")
    ap.add_argument("--layers", type=int, default=2, help="the small Phi3's layers")
    ap.add_argument(
        "--warm-modes", default=None, help="MODE:FX pairs of the warm part (its default: all)"
    )
    ap.add_argument(
        "--profile", action="store_true", help="the warm part profiles one start per side"
    )
    ap.add_argument(
        "--cold-models", default=None, help="the cold part's models (its default: phi3,block)"
    )
    ap.add_argument("--dry-run", action="store_true", help="print each part's command, run none")
    args = ap.parse_args(argv)
    chosen = args.only.split(",")
    unknown = set(chosen) - {p[0] for p in PARTS}
    if unknown:
        ap.error(
            f"--only: unknown part {', '.join(sorted(unknown))} (one of {', '.join(p[0] for p in PARTS)})"
        )
    os.makedirs(args.out, exist_ok=True)
    out = os.path.abspath(args.out)
    b = Budget(
        "h200_all",
        args.budget,
        os.path.join(out, "h200_all.json"),
        {"only": chosen, "budget": args.budget},
    )
    scratch = tempfile.mkdtemp(prefix="jw-h200-all-")
    # As an installed wheel is: its modules compiled once (pip does it at install), so no start pays for it; a
    # copied tree under PYTHONDONTWRITEBYTECODE=1 would compile jitwarden's modules again in every process.
    src = os.path.join(os.path.dirname(HERE), "src")
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", src], check=False, capture_output=True
    )
    alone = len(chosen) == 1
    for name, cap, least, cmd, json_name in PARTS:
        if name not in chosen:
            continue
        left = b.left() - GRACE
        give = min(ALONE_CAP if alone else cap, left)
        if give < least:
            b.skip(
                name,
                f"{max(left, 0):.0f} s left of the {args.budget:.0f} s budget, the part needs >= {least} s",
            )
            continue
        work = os.path.join(scratch, name)
        os.makedirs(work, exist_ok=True)
        argv_ = [a.replace("{work}", work) for a in cmd]
        full = [sys.executable, os.path.join(HERE, argv_[0]), *argv_[1:]]
        if argv_[0] != "h200_jax_cupy_hooks.py":
            full += ["--out", work]
        full += ["--budget", f"{give:.0f}", "--json", os.path.join(out, json_name)]
        if name == "warm":
            full += ["--pairs", str(args.pairs), "--layers", str(args.layers)]
            full += ["--warm-modes", args.warm_modes] if args.warm_modes else []
            full += ["--profile"] if args.profile else []
        if name == "cold":
            full += ["--layers", str(args.layers)]
            full += ["--cold-models", args.cold_models] if args.cold_models else []
        if name in ("oci", "coverage") and args.registry:
            full += ["--registry", os.path.abspath(args.registry)]
        if name == "trust":
            full += ["--uid", str(args.uid)]
        print(f"=== {name}: {give:.0f} s: {' '.join(full)}", flush=True)
        if args.dry_run:
            b.put(name, {"command": full, "budget_s": round(give)})
            continue
        t = time.monotonic()
        rc = run_part(full, give + GRACE)
        b.put(
            name,
            {
                "rc": rc,
                "wall_s": round(time.monotonic() - t, 1),
                "budget_s": round(give),
                "json": json_name,
            },
        )
        summarize(os.path.join(out, json_name))
    b.finish()
    return 0


def run_part(cmd: list[str], limit: float) -> int:
    """Run one part in its own process group; past ``limit`` it is stopped (TERM, then KILL): exit 124."""
    env = dict(os.environ, JW_BUDGET="")  # the part's budget is its --budget, never this one's
    p = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        return p.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(p.pid, sig)
                return p.wait(timeout=wait) and 124
            except (subprocess.TimeoutExpired, ProcessLookupError):
                continue
        return 124


def summarize(path: str) -> None:
    """One line per result of a part's JSON (its ratios, when it has them), and what it skipped."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        print(f"--- {os.path.basename(path)}: no results file", flush=True)
        return
    for key, val in doc.get("results", {}).items():
        if isinstance(val, dict) and isinstance(val.get("t_first"), dict):
            w, t = val.get("wall_s", {}), val["t_first"]
            print(
                f"--- {key}: pairs {val.get('pairs')}, to first result {t.get('ratio')}x, wall {w.get('ratio')}x"
            )
    for s in doc.get("skipped", []):
        print(f"--- skipped {s['what']}: {s['why']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
