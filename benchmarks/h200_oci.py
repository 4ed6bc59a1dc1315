"""On a real GPU (issue 37): push from a guarded cold compile, pull into a fresh HOME, warm-start from it.

Every measured step is a fresh process running gpu_proof's transformer block under ``torch.compile``
through ``jitwarden run`` (partitions + guard), with a real CNCF distribution registry on loopback:

1. the builder (its own HOME): a cold start, then ``--reps`` local warm starts (the baseline);
2. ``jitwarden push REF`` (signed with a fresh key; ``--rebuild`` proves every kernel first): wall time,
   entries, layer bytes;
3. a node with a fresh HOME and empty caches (same machine, same fingerprint): ``jitwarden pull REF``
   (wall time, its whole JSON: every entry installed or refused with why), then ``--reps`` warm starts:
   the first must compile 0 Triton kernels, its time to first result within 1.05x the median of the
   builder's local warm starts, numbers the builder's (max abs error vs eager), Triton compiles and hits;
4. a byte of the layer flipped in the registry's own storage: a pull into another fresh HOME is refused
   (exit 1), nothing installed; restored afterwards;
5. with ``--control``, a cold start in a fresh HOME without pull.

The registry binary is carried there: Debian's ``docker-registry`` (or upstream's ``registry``) from
PATH, ``--registry PATH`` or ``$JW_REGISTRY_BIN`` (copy ``/usr/bin/docker-registry`` into the working
tree and carry it). Writes ``oci_h200.json`` into ``--out`` (default ``$OUT``; ``--json``), rewritten after every
step; ``--budget SECONDS`` stops taking warm starts, the tampered pull and the control when they would not fit::

    PYTHONPATH=src:. python benchmarks/h200_oci.py --out $OUT [--registry ./docker-registry] [--reps 5] [--mode default]

Not run in the session that wrote it (no GPU then): its numbers are for a later session to report.
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
sys.path.insert(0, os.path.dirname(HERE))  # the repo root: tests.helpers

import gpu_proof as gp
from _budget import Budget, add_arguments
from tests.helpers import registry as reghelp


def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 3) if xs else None


def _pull(env: dict, ref: str) -> dict:
    t = time.perf_counter()
    r = gp.sh([*gp.jw(), "pull", ref, "--insecure", "--format", "json"], env, timeout=1800)
    out = {
        "rc": r["rc"],
        "wall_s": round(time.perf_counter() - t, 3),
        "stderr_tail": r["stderr"][-800:],
    }
    if r["stdout"].strip():
        out["doc"] = json.loads(
            r["stdout"]
        )  # the whole JSON: every outcome, each refusal with its why
        out["counts"] = out["doc"].get("counts")
        out["refused_entries"] = [
            o for o in out["doc"].get("entries") or () if o.get("action") == "refused"
        ]
    return out


def _capture(env: dict, dest: str) -> None:
    """The builder's caches as a tarball (a real capture, kept under tests/data as a test)."""
    import tarfile

    with tarfile.open(dest, "w:gz") as t:
        for d in gp.cache_dirs(env):
            if os.path.isdir(d):
                t.add(d, arcname=os.path.basename(d.rstrip("/")))


def _layer_file(reg, push_doc: dict) -> str:
    """The registry's storage file of the pushed bundle's layer."""
    import http.client

    c = http.client.HTTPConnection("127.0.0.1", reg.port, timeout=30)
    c.request(
        "GET",
        f"/v2/h200/kernels/manifests/{push_doc['manifest']}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    )
    m = json.loads(c.getresponse().read())
    c.close()
    digest = m["layers"][0]["digest"].split(":")[1]
    (path,) = [p for p in reg.blobs() if os.path.basename(os.path.dirname(p)) == digest]
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--mode", default="default", help="torch.compile mode (default: default)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--registry", default=os.environ.get("JW_REGISTRY_BIN") or reghelp.binary())
    ap.add_argument("--rebuild", action="store_true", help="push --rebuild")
    ap.add_argument(
        "--control", action="store_true", help="also a cold start in a fresh HOME, no pull"
    )
    ap.add_argument("--capture", action="store_true", help="tar the builder's caches into --out")
    add_arguments(ap, "oci_h200.json")
    args = ap.parse_args(argv)
    if args.reps < 5:
        raise SystemExit("--reps: at least 5 (the medians issue 47 asks for)")
    if not args.registry or not os.path.exists(args.registry):
        raise SystemExit("no registry binary: --registry PATH (carry /usr/bin/docker-registry)")
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="jw-oci-h200-")
    res: dict = {"schema": 1, "mode": args.mode, "reps": args.reps}
    b = Budget.from_args("h200_oci", args, args.out)
    b.doc["results"] = res  # every step's figures, rewritten after each (a killed run keeps them)

    def save():
        b.write()

    def warm_starts(what: str, env: dict) -> list:
        """Up to ``--reps`` warm starts, each only while one more fits the budget (the first always runs)."""
        runs: list = []
        for i in range(args.reps):
            per = max((r.get("wall_s") or 0 for r in runs), default=0) * 1.2
            if i and not b.fits(f"{what} warm start {i + 1} of {args.reps}", per + 30):
                break
            runs.append(gp.run_workload(env, True, args.mode, script))
            save()
        return runs

    reg = reghelp.Registry(args.registry, os.path.join(work, "registry"))
    ref = f"{reg.host}/h200/kernels:v1"
    try:
        script = os.path.join(work, "workload.py")
        with open(script, "w") as f:
            f.write(gp.WORKLOAD)
        keys = os.path.join(work, "keys")
        trusted = os.path.join(keys, "builder.pub")
        builder = gp.isolated_env(
            os.path.join(work, "builder"),
            JITWARDEN_SIGNING_KEY=os.path.join(keys, "builder"),
            JITWARDEN_TRUSTED_KEYS=trusted,
        )
        r = gp.sh([*gp.jw(), "keygen"], builder)
        assert r["rc"] == 0, r["stderr"]
        res["headline"] = (
            gp.sh([*gp.jw(), "fingerprint"], builder)["stdout"].strip().splitlines()[:1]
        )

        gp.log("builder: guarded cold start")
        res["cold"] = gp.run_workload(builder, True, args.mode, script)
        gp.log("builder: local warm starts")
        res["warm_local"] = warm_starts("builder", builder)
        save()
        if args.capture:
            _capture(builder, os.path.join(args.out, "oci_builder_cache.tgz"))
        res["builder_verify"] = gp.sh([*gp.jw(), "verify", "--format", "json"], builder)

        cmd = [*gp.jw(), "push", ref, "--insecure", "--format", "json"] + (
            ["--rebuild"] if args.rebuild else []
        )
        t = time.perf_counter()
        r = gp.sh(cmd, builder, timeout=1800)
        res["push"] = {
            "rc": r["rc"],
            "wall_s": round(time.perf_counter() - t, 3),
            "stderr_tail": r["stderr"][-800:],
        }
        push_doc = json.loads(r["stdout"]) if r["rc"] == 0 else {}
        res["push"].update(
            {
                k: push_doc.get(k)
                for k in (
                    "entries",
                    "bytes",
                    "layer_bytes",
                    "index",
                    "annotations",
                    "signature_referrer",
                    "skipped",
                )
            }
        )
        save()
        gp.log("push", res["push"])

        node = gp.isolated_env(os.path.join(work, "node"), JITWARDEN_TRUSTED_KEYS=trusted)
        gp.log("fresh node: pull")
        res["pull"] = _pull(node, ref)
        gp.log("pull", res["pull"])
        res["warm_pulled"] = warm_starts(
            "node", node
        )  # the first is the node's first start after the pull
        save()

        if push_doc and b.fits("tampered layer", 30):
            gp.log("tampered layer in the registry's storage")
            path = _layer_file(reg, push_doc)
            data = open(path, "rb").read()
            flipped = bytearray(data)
            flipped[len(data) // 2] ^= 0xFF
            with open(path, "wb") as f:
                f.write(bytes(flipped))
            victim = gp.isolated_env(os.path.join(work, "victim"), JITWARDEN_TRUSTED_KEYS=trusted)
            try:
                res["tampered_pull"] = _pull(victim, ref)
                res["tampered_installed_files"] = sum(
                    len(fs)
                    for d in gp.cache_dirs(victim)
                    if os.path.isdir(d)
                    for _r, _s, fs in os.walk(d)
                    if "jitwarden" not in _r
                )
            finally:
                with open(path, "wb") as f:
                    f.write(data)
        if args.control and b.fits("control cold start", (res["cold"].get("wall_s") or 60) * 1.2):
            fresh = gp.isolated_env(os.path.join(work, "control"))
            res["cold_fresh_no_pull"] = gp.run_workload(fresh, True, args.mode, script)

        cold = res["cold"].get("t_first")
        local = med([x.get("t_first") for x in res["warm_local"]])
        pulled = med([x.get("t_first") for x in res["warm_pulled"]])
        first = res["warm_pulled"][0] if res["warm_pulled"] else {}
        counts = (res["pull"].get("doc") or {}).get("counts") or {}
        res["summary"] = {
            "pull_counts": counts,
            "pull_installed_every_pushed_entry": counts.get("installed")
            == res["push"].get("entries")
            and not counts.get("refused"),
            "first_pulled_t_first": first.get("t_first"),
            "first_pulled_triton_compiles": first.get("triton_compiles"),
            "ratio_first_pulled_vs_local_warm_median": round(first["t_first"] / local, 3)
            if first.get("t_first") and local
            else None,
            "numbers_equal_builder": sorted(
                {x.get("max_abs_err") for x in res["warm_pulled"]}, key=str
            )
            == sorted({x.get("max_abs_err") for x in res["warm_local"]}, key=str),
            "cold_t_first": cold,
            "warm_local_t_first_median": local,
            "warm_pulled_t_first_median": pulled,
            "ratio_pulled_vs_cold": round(pulled / cold, 3) if pulled and cold else None,
            "ratio_pulled_vs_local_warm": round(pulled / local, 3) if pulled and local else None,
            "pull_wall_s": res["pull"]["wall_s"],
            "pull_plus_first_warm_vs_cold": round((res["pull"]["wall_s"] + pulled) / cold, 3)
            if pulled and cold
            else None,
            "push_wall_s": res["push"]["wall_s"],
            "layer_bytes": res["push"].get("layer_bytes"),
            "max_abs_err_local": sorted({x.get("max_abs_err") for x in res["warm_local"]}, key=str),
            "max_abs_err_pulled": sorted(
                {x.get("max_abs_err") for x in res["warm_pulled"]}, key=str
            ),
            "all_pulled_right": all(gp.right(x) for x in res["warm_pulled"]),
            "triton_compiles_pulled": [x.get("triton_compiles") for x in res["warm_pulled"]],
            "triton_cache_hits_pulled": [x.get("triton_cache_hits") for x in res["warm_pulled"]],
            "tampered_pull_rc": res.get("tampered_pull", {}).get("rc"),
            "tampered_installed_files": res.get("tampered_installed_files"),
        }
        b.put("summary", res["summary"])
        sm = res["summary"]
        ok = (
            res["pull"]["rc"] == 0
            and sm["pull_installed_every_pushed_entry"]
            and sm["first_pulled_triton_compiles"] == 0
            and sm["numbers_equal_builder"]
            and (sm["ratio_first_pulled_vs_local_warm_median"] or 99) <= 1.05
            and res["summary"]["all_pulled_right"]
            and res["summary"]["tampered_pull_rc"] == 1
            and not res["summary"]["tampered_installed_files"]
        )
        return 0 if ok else 1
    finally:
        b.finish()
        reg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
