"""On a real GPU (issue 14): export a real model's partitions, wipe them, import the bundle, warm start.

Every measured step is a fresh process running gpu_proof's transformer block under
``torch.compile`` through ``jitwarden run`` (partitions + guard):

1. cold start, then ``--reps`` warm starts (the original warm start);
2. ``jitwarden export -o bundle.tar`` (signed with a fresh ``jitwarden keygen`` key;
   ``--rebuild`` proves every kernel first);
3. the Triton and Inductor cache roots are wiped;
4. ``jitwarden import bundle.tar`` (trusted key configured) must exit 0;
5. ``--reps`` warm starts again: the same numbers as before (max abs error vs eager), the Triton
   kernels all cache hits, and time to first result compared with the original warm start
   (goal: ratio of medians <= 1.05). With ``--control``, one cold start after a wipe without
   import, to show what the import saved.

Writes ``fleet_bundle.json`` into ``--out`` (default ``$OUT``)::

    PYTHONPATH=src python benchmarks/h200_fleet_bundle.py --out $OUT [--mode max-autotune-no-cudagraphs] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gpu_proof as gp


def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 3) if xs else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--mode", default="default", help="torch.compile mode (default: default)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--rebuild",
        action="store_true",
        help="export --rebuild: prove every kernel by re-assembly first",
    )
    ap.add_argument(
        "--control", action="store_true", help="also one cold start after a wipe without import"
    )
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="jw-fleet-h200-")
    res: dict = {"schema": 1, "mode": args.mode, "reps": args.reps}

    def save():
        with open(os.path.join(args.out, "fleet_bundle.json"), "w") as f:
            json.dump(res, f, indent=1, default=str)

    try:
        script = os.path.join(work, "workload.py")
        with open(script, "w") as f:
            f.write(gp.WORKLOAD)
        keys = os.path.join(work, "keys")
        env = gp.isolated_env(
            os.path.join(work, "env"),
            JITWARDEN_SIGNING_KEY=os.path.join(keys, "builder"),
            JITWARDEN_TRUSTED_KEYS=os.path.join(keys, "builder.pub"),
        )
        r = gp.sh([*gp.jw(), "keygen"], env)
        assert r["rc"] == 0, r["stderr"]
        r = gp.sh([*gp.jw(), "fingerprint"], env)
        res["headline"] = r["stdout"].strip().splitlines()[:1]

        gp.log("cold start")
        res["cold"] = gp.run_workload(env, True, args.mode, script)
        save()
        gp.log("original warm starts")
        res["warm_original"] = [
            gp.run_workload(env, True, args.mode, script) for _ in range(args.reps)
        ]
        save()

        bundle = os.path.join(work, "bundle.tar")
        cmd = [*gp.jw(), "export", "-o", bundle, "--format", "json"] + (
            ["--rebuild"] if args.rebuild else []
        )
        t = time.perf_counter()
        r = gp.sh(cmd, env, timeout=1800)
        res["export"] = {
            "rc": r["rc"],
            "wall_s": round(time.perf_counter() - t, 3),
            "stderr_tail": r["stderr"][-800:],
        }
        if r["rc"] == 0:
            doc = json.loads(r["stdout"])
            res["export"].update(
                entries=doc["entries"],
                bytes=doc["bytes"],
                file_bytes=doc["file_bytes"],
                skipped=len(doc["skipped"]),
                skipped_why=sorted({s["why"] for s in doc["skipped"]}),
            )
        save()
        gp.log("export", res["export"])

        def wipe():
            for d in (
                env["TRITON_CACHE_DIR"],
                env["TORCHINDUCTOR_CACHE_DIR"],
                os.path.join(env["HOME"], ".triton"),
            ):
                shutil.rmtree(d, ignore_errors=True)

        if args.control:
            wipe()
            gp.log("control: cold start after a wipe, no import")
            res["cold_after_wipe"] = gp.run_workload(env, True, args.mode, script)
        wipe()
        t = time.perf_counter()
        r = gp.sh([*gp.jw(), "import", bundle, "--format", "json"], env)
        res["import"] = {
            "rc": r["rc"],
            "wall_s": round(time.perf_counter() - t, 3),
            "stderr_tail": r["stderr"][-800:],
        }
        if r["stdout"].strip():
            doc = json.loads(r["stdout"])
            res["import"].update(
                counts=doc["counts"],
                signed_by=doc["signed_by"],
                match=doc["match"],
                refused=doc["refused"],
            )
        save()
        gp.log("import", res["import"])

        gp.log("warm starts from the imported bundle")
        res["warm_imported"] = [
            gp.run_workload(env, True, args.mode, script) for _ in range(args.reps)
        ]
        o = med([x.get("t_first") for x in res["warm_original"]])
        i = med([x.get("t_first") for x in res["warm_imported"]])
        res["summary"] = {
            "cold_t_first": res["cold"].get("t_first"),
            "warm_original_t_first_median": o,
            "warm_imported_t_first_median": i,
            "ratio_imported_vs_original": round(i / o, 3) if o and i else None,
            "max_abs_err_original": sorted(
                {x.get("max_abs_err") for x in res["warm_original"]}, key=str
            ),
            "max_abs_err_imported": sorted(
                {x.get("max_abs_err") for x in res["warm_imported"]}, key=str
            ),
            "triton_compiles_imported": [x.get("triton_compiles") for x in res["warm_imported"]],
            "triton_cache_hits_imported": [
                x.get("triton_cache_hits") for x in res["warm_imported"]
            ],
            "cold_after_wipe_t_first": res.get("cold_after_wipe", {}).get("t_first"),
        }
        save()
        gp.log("summary", json.dumps(res["summary"]))
        return (
            0
            if res["import"]["rc"] == 0
            and res["summary"]["max_abs_err_original"] == res["summary"]["max_abs_err_imported"]
            else 1
        )
    finally:
        save()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
