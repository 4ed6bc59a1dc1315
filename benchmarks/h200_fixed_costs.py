"""Fixed costs of a guarded process on the GPU host, small-model warm starts per mode, cold compiles (issue 43).

Not run by CI: a GPU session runs it (``h200_all.py`` runs every part in one call). Three parts, each printing
ratios against stock measured in the same run, each result written to ``--json`` the moment it is measured, so a
killed run keeps what it had (``--budget``: parts and pairs that would not fit are skipped and said):

``fixed``
    ``activate()`` and ``jitwarden run -- python -c pass`` over a bare interpreter, and ``import torch`` bare
    against under ``run``, in a venv with jitwarden only and in one that sees the image's site-packages:
    :mod:`bench_fixed_costs` with ``--parts --import-torch --profile`` (``--ref REV`` times another revision).
``warm``
    the headline: a small Phi3's warm start, guarded (``jitwarden run``) against stock, to first result. One cold
    fill per compile mode (stock and guarded at once, each in its own root: it is not what is timed), then
    interleaved warm pairs (the order flips every pair), >= 6 each: default with the FX graph cache on, default
    with it off, ``max-autotune-no-cudagraphs``. Issue 43 part 2 never gave this answer because two serial cold
    compiles of the 4-layer Phi3 ate the limit: the model is 2 layers by default (``--layers``, ``--hidden``).
    ``--profile`` adds one cProfile'd warm start per side of the last mode and what the guarded one does more of.
``cold``
    cold compiles, stock against guarded (each in a fresh root, interleaved, the order flipping every pair), for
    the small Phi3 and gpu_proof's transformer block (issue 43 item 4: guarded <= 1.05x stock).

    PYTHONPATH=src python3 benchmarks/h200_fixed_costs.py --out $OUT --budget 540 [--only warm,cold] [--pairs 6]

The goals: activate() <= 30 ms and run <= 60 ms over a bare interpreter in the venv with torch; the guarded warm
start <= 1.03x stock to first result in each mode; the guarded cold compile <= 1.05x stock.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _budget import Budget, add_arguments
from h200_warm_modes import MODEL, med, one, top_jitwarden

SIDES = ("stock", "guarded")
MODES = (("default", "on"), ("default", "off"), ("max-autotune-no-cudagraphs", "on"))
PARTS = ("fixed", "warm", "cold")
FIXED_NEED = 90  # s: the fixed-cost rounds, a rough H100 figure (part 1 of issue 43's run)
COLD_NEED = 60  # s: one cold fill (both sides at once) before any was measured


def model_env(args) -> None:
    """The small model's shape, read by :data:`MODEL` in every child (``env_for`` copies the environment)."""
    os.environ.update(JW_ARCH="phi3", JW_LAYERS=str(args.layers), JW_HIDDEN=str(args.hidden))


STAGES = ("wall_s", "t_first", "t_before", "t_import", "t_build", "t_exit", "t_after")


def row_of(runs: dict[str, list], key_fields=STAGES) -> dict:
    """Medians per side, guarded / stock, and every run's figure: the row a pair adds to."""
    row: dict = {
        "pairs": min(len(runs["stock"]), len(runs["guarded"])),
        "all_ok": all(r["rc"] == 0 for rs in runs.values() for r in rs),
    }
    for key in key_fields:
        s, g = (med(r.get(key) for r in runs[side]) for side in SIDES)
        row[key] = {
            "stock": s,
            "guarded": g,
            "ratio": round(g / s, 3) if s and g else None,
            "stock_all": [r.get(key) for r in runs["stock"]],
            "guarded_all": [r.get(key) for r in runs["guarded"]],
        }
    row["guarded_lines"] = sorted({x for r in runs["guarded"] for x in r.get("jw", [])})[:12]
    row["errors"] = [r["err"][-400:] for rs in runs.values() for r in rs if r["rc"]][:2]
    return row


def parse_variants(text: str) -> dict[str, dict[str, str]]:
    """``NAME:K=V+K=V;NAME:...`` -> {NAME: {K: V}}: guarded starts with settings of their own, per round."""
    out: dict[str, dict[str, str]] = {}
    for part in filter(None, (text or "").split(";")):
        name, _, kvs = part.partition(":")
        out[name] = dict(kv.split("=", 1) for kv in kvs.split("+") if "=" in kv)
    return out


def variant_row(rs: list) -> dict:
    """Medians of a variant's runs, by stage, with every run's figure."""
    return {
        k: {"median": med(r.get(k) for r in rs), "all": [r.get(k) for r in rs]}
        for k in ("wall_s", "t_first", "t_before", "t_exit")
    }


def part_fixed(b: Budget, args) -> None:
    import subprocess

    cmd = [
        sys.executable,
        os.path.join(HERE, "bench_fixed_costs.py"),
        "--pairs",
        str(args.fixed_pairs),
    ]
    cmd += ["--parts", "--import-torch", "--profile"] + (["--ref", args.ref] if args.ref else [])
    if not b.fits("fixed", FIXED_NEED * args.fixed_pairs / 15):
        return
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=b.timeout())
        rc, text = p.returncode, p.stdout + p.stderr[-2000:]
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
        rc, text = (
            124,
            (out.decode() if isinstance(out, bytes) else out) + "\n(killed at the budget)",
        )
    print(text, flush=True)
    b.put(
        "fixed", {"rc": rc, "rounds": args.fixed_pairs, "table": text.splitlines()[:60]}, show=False
    )


def part_warm(b: Budget, args, work: str) -> None:
    """One cold fill per compile mode, then the interleaved warm pairs of each FX setting: the headline first;
    ``--profile``: one cProfile'd warm start per side after the first mode's first FX setting."""
    script = os.path.join(work, "phi3.py")
    with open(script, "w") as f:
        f.write(MODEL)
    modes = tuple(tuple(m.split(":")) for m in args.warm_modes.split(","))
    variants = parse_variants(args.variants)
    if args.pycache:  # both sides: bytecode compiled once, not at every start
        os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(work, "pycache")
    cold_seen = 0.0
    for n, mode in enumerate(dict.fromkeys(m for m, _fx in modes)):
        roots = {s: os.path.join(work, f"warm-{mode}-{s}") for s in SIDES}
        if not b.fits(f"warm {mode}: cold fill", max(COLD_NEED, cold_seen * 1.5)):
            continue
        with ThreadPoolExecutor(2) as ex:  # both at once: the fill is not what is timed
            futs = {s: ex.submit(one, script, mode, roots[s], s == "guarded", "on") for s in SIDES}
            cold = {s: f.result() for s, f in futs.items()}
        cold_seen = max(cold_seen, *(c["wall_s"] for c in cold.values()))
        b.put(
            f"warm/{mode}/cold-fill",
            {s: {k: c.get(k) for k in ("rc", "wall_s", "t_first", "err")} for s, c in cold.items()},
        )
        if any(c["rc"] for c in cold.values()):
            continue
        fxs = [fx for m, fx in modes if m == mode]
        for i in range(
            args.settle
        ):  # not timed, but kept: what the first start after a fill still does
            if not b.fits(f"warm {mode}: settle {i + 1}", cold_seen):
                break
            settle = {
                s: one(script, mode, roots[s], s == "guarded", fxs[0], watch=args.watch)
                for s in SIDES
            }
            b.put(f"warm/{mode}/settle-{i + 1}", settle, show=False)
        for k, fx in enumerate(fxs):
            if args.profile and n == 0 and k == min(1, len(fxs) - 1) and b.fits("warm profile", 80):
                warm_profile(b, script, mode, roots, work)
            runs: dict[str, list] = {s: [] for s in SIDES}
            extra: dict[str, list] = {v: [] for v in variants}
            key = f"warm/{mode}/fx-{fx}"
            for i in range(args.pairs):
                seen = [r["wall_s"] for rs in runs.values() for r in rs]
                need = (2 + len(variants)) * 1.1 * max(seen) if seen else cold_seen
                if not b.fits(f"{key} pair {i + 1} of {args.pairs}", need):
                    break
                for s in SIDES if i % 2 == 0 else SIDES[::-1]:
                    runs[s].append(
                        one(script, mode, roots[s], s == "guarded", fx, watch=args.watch)
                    )
                for v, venv in variants.items():  # a guarded start with settings of its own
                    extra[v].append(
                        one(
                            script,
                            mode,
                            roots["guarded"],
                            True,
                            fx,
                            extra_env=venv,
                            watch=args.watch,
                        )
                    )
                row = {"mode": mode, "fx": fx, **row_of(runs)}
                if variants:
                    row["variants"] = {v: variant_row(rs) for v, rs in extra.items()}
                if args.watch:
                    row["triton_changed"] = {
                        s: [r.get("triton_changed") for r in rs]
                        for s, rs in {**runs, **extra}.items()
                    }
                b.put(key, row)


def warm_profile(b: Budget, script: str, mode: str, roots: dict, work: str) -> None:
    """One cProfile'd warm start per side (FX cache on): jitwarden's own functions, and what the guarded one
    does more of than the stock one."""
    prof = {}
    for s in SIDES:
        path = os.path.join(work, f"prof-{s}.pstats")
        prof[s] = one(script, mode, roots[s], s == "guarded", "on", path)
    gp = os.path.join(work, "prof-guarded.pstats")
    top = top_jitwarden(gp) if os.path.exists(gp) else []
    diff: list[str] = []
    if all(os.path.exists(os.path.join(work, f"prof-{s}.pstats")) for s in SIDES):
        from bench_small_model import profile_diff

        diff = profile_diff(*(os.path.join(work, f"prof-{s}.pstats") for s in SIDES), n=40)
    b.put(
        "warm/profile",
        {
            "mode": mode,
            "runs": {s: {k: v for k, v in prof[s].items() if k != "err"} for s in SIDES},
            "jitwarden": top,
            "guarded_minus_stock": diff,
        },
    )


def part_cold(b: Budget, args, work: str) -> None:
    """Interleaved cold compiles, each in a fresh root: the Phi3, then gpu_proof's transformer block."""
    import gpu_proof

    scripts = {"phi3": MODEL, "block": gpu_proof.WORKLOAD}
    for name in args.cold_models.split(","):
        script = os.path.join(work, f"cold-{name}.py")
        with open(script, "w") as f:
            f.write(scripts[name])
        runs: dict[str, list] = {s: [] for s in SIDES}
        key = f"cold/{name}/{args.cold_mode}"
        for i in range(args.cold_pairs):
            seen = [r["wall_s"] for rs in runs.values() for r in rs]
            if not b.fits(
                f"{key} pair {i + 1} of {args.cold_pairs}",
                2.2 * max(seen) if seen else 2 * COLD_NEED,
            ):
                break
            for s in SIDES if i % 2 == 0 else SIDES[::-1]:
                root = os.path.join(work, f"cold-{name}-{s}-{i}")
                runs[s].append(one(script, args.cold_mode, root, s == "guarded", "on"))
                shutil.rmtree(
                    root, ignore_errors=True
                )  # a fresh root each time; the disk stays small
            b.put(key, {"model": name, "mode": args.cold_mode, **row_of(runs)})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "fixed-costs-out")
    ap.add_argument(
        "--only", default=",".join(PARTS), help=f"parts to run, in this order: {', '.join(PARTS)}"
    )
    ap.add_argument(
        "--work", default=None, help="scratch dir for models and caches (default: <out>/work)"
    )
    ap.add_argument(
        "--pairs", type=int, default=6, help="warm pairs per mode and FX setting (>= 6)"
    )
    ap.add_argument(
        "--layers", type=int, default=2, help="Phi3 layers (issue 43: 4 did not fit the call)"
    )
    ap.add_argument("--hidden", type=int, default=1024, help="Phi3 hidden size")
    ap.add_argument("--fixed-pairs", type=int, default=15, help="rounds of the fixed costs")
    ap.add_argument(
        "--cold-pairs", type=int, default=3, help="interleaved cold compile pairs per model"
    )
    ap.add_argument(
        "--cold-models", default="phi3,block", help="phi3, block (gpu_proof's transformer block)"
    )
    ap.add_argument(
        "--cold-mode", default="default", help="torch.compile mode of the cold compiles"
    )
    ap.add_argument("--ref", help="also time this git revision in the fixed costs")
    ap.add_argument("--profile", action="store_true", help="a cProfile'd warm start per side")
    ap.add_argument(
        "--warm-modes",
        default=",".join(f"{m}:{fx}" for m, fx in MODES),
        help="MODE:FX pairs of the warm part, in order (default: every one, the headline first)",
    )
    ap.add_argument(
        "--variants",
        default="",
        help="NAME:K=V+K=V;...: extra guarded starts per warm round, each with these settings",
    )
    ap.add_argument(
        "--settle",
        type=int,
        default=1,
        help="untimed starts per side after the cold fill (kept in the results): on the H100 the first one "
        "still compiled 3 kernels on both sides and resealed the fill's 17 racy seals on the guarded one",
    )
    ap.add_argument(
        "--watch", action="store_true", help="diff each warm start's Triton tree: what it changed"
    )
    ap.add_argument(
        "--pycache",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="PYTHONPYCACHEPREFIX under the work dir for every start (off: on the H100 it made the imports "
        "slower, 23-26 s a start against 11-16 s without)",
    )
    ap.add_argument(
        "--skip-model", action="store_true", help="the fixed costs only (= --only fixed)"
    )
    add_arguments(ap, "fixed_costs.json")
    args = ap.parse_args(argv)
    parts = ["fixed"] if args.skip_model else [p for p in PARTS if p in args.only.split(",")]
    unknown = set(args.only.split(",")) - set(PARTS)
    if unknown:
        ap.error(f"--only: unknown part {', '.join(sorted(unknown))} (one of {', '.join(PARTS)})")
    os.makedirs(args.out, exist_ok=True)
    work = os.path.abspath(args.work or os.path.join(args.out, "work"))
    os.makedirs(work, exist_ok=True)
    b = Budget.from_args("h200_fixed_costs", args, args.out)
    b.note("model", {"arch": "phi3", "layers": args.layers, "hidden": args.hidden})
    model_env(args)
    for part in parts:
        try:
            if part == "fixed":
                part_fixed(b, args)
            elif part == "warm":
                part_warm(b, args, work)
            else:
                part_cold(b, args, work)
        except Exception as exc:  # one part failing must not lose the others
            b.put(f"{part}/error", f"{type(exc).__name__}: {exc}")
    b.finish()
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
