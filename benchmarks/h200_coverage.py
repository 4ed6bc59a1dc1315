"""Issue 44 on a GPU: gpu_proof's transformer block recorded under the guard, then ``coverage`` of it.

Steps, each in fresh processes (benchmarks/gpu_proof.py's workload and helpers), each skipped once
``--budget`` seconds are spent:

1. ``record``: a cold ``jitwarden run --record block`` of the block (``--mode``), then a warm one;
   the record's lines counted (compiles, hits, kinds, compile seconds);
2. ``own``: ``coverage block`` against its own cache (expected: 100%, exit 0);
3. ``empty``: ``coverage block --cache EMPTY`` (expected: 0%, exit 5, the compile time near the cold start's);
4. ``bundle``: ``export`` (unsigned), then ``coverage block BUNDLE`` on a fresh node before ``import``
   (expected: 100% held, exit 6: unsealed until installed), and after ``import`` there (exit 0);
   with ``--registry HOST:PORT``, also ``push`` and ``coverage block REF`` before any pull;
5. ``removed``: 3 Triton entries removed from the node's partition, ``coverage block`` (expected: the 3 named);
6. ``nonce``: always-miss on the GPU, the cause planted in an FX graph's key (pytorch PR #194451): three
   recorded starts of a small compiled function whose custom post-grad pass has a ``uuid()`` new in every
   process, then ``doctor``: the graph named with ``post_grad_custom_post_pass``; two starts of the same
   function without the pass: no always-miss line.

``--registry`` is HOST:PORT of a running registry, or the path of a registry binary (Debian's
``docker-registry``, carried), which is then started on a free loopback port for the bundle step.

Writes ``h200_coverage.json`` into ``--out`` after every step::

    PYTHONPATH=src python benchmarks/h200_coverage.py --out $OUT --budget 420
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

T0 = time.time()
NAME = "block"


def _gp():
    import gpu_proof  # the workload and its helpers (sh, isolated_env, result_of)

    return gpu_proof


def coverage(env, *args) -> dict:
    gp = _gp()
    r = gp.sh([*gp.jw(), "coverage", NAME, *args, "--format", "json"], env, timeout=300)
    try:
        doc = json.loads(r["stdout"])
    except ValueError:
        doc = {}
    keep = (
        "percent",
        "kernels",
        "proven",
        "unproven",
        "missing",
        "compile_seconds",
        "line",
        "source",
    )
    return {
        "rc": r["rc"],
        "wall_s": r["wall_s"],
        **{k: doc.get(k) for k in keep},
        "missing_keys": [k["key"] for k in doc.get("missing_kernels", [])],
        "stderr_tail": r["stderr"][-600:] if r["rc"] not in (0, 5, 6) else "",
    }


def record_lines(env) -> list[dict]:
    top = os.path.join(env["XDG_CACHE_HOME"], "jitwarden", "records")
    out = []
    for d, _subs, files in os.walk(top):
        for f in files:
            with open(os.path.join(d, f)) as fh:
                out += [json.loads(line) for line in fh if line.strip()]
    return out


def step_record(args, work, res) -> dict:
    gp = _gp()
    script = os.path.join(work, "workload.py")
    with open(script, "w") as f:
        f.write(gp.WORKLOAD)
    env = gp.isolated_env(os.path.join(work, "node1"))
    env.pop("TRITON_CACHE_DIR")  # partitioned by activation under HOME, as on a node
    runs = []
    for label in ("cold", "warm"):
        r = gp.sh([*gp.jw(), "run", "--record", NAME, "--", sys.executable, script, args.mode], env)
        runs.append(
            {"label": label, "rc": r["rc"], "wall_s": r["wall_s"], "result": gp.result_of(r)}
        )
    lines = record_lines(env)
    kinds: dict = {}
    for ln in lines:
        kinds.setdefault(ln["kind"], {"hit": 0, "compile": 0})[ln["event"]] += 1
    res["record"] = {
        "runs": runs,
        "lines": len(lines),
        "kinds": kinds,
        "compile_seconds": round(sum(ln["seconds"] for ln in lines if ln["event"] == "compile"), 3),
    }
    return env


def step_bundle(args, work, env, res) -> None:
    gp = _gp()
    bundle = os.path.join(work, "block.tar")
    r = gp.sh([*gp.jw(), "export", "-o", bundle, "--unsigned"], env)
    node2 = gp.isolated_env(os.path.join(work, "node2"))
    node2.pop("TRITON_CACHE_DIR")
    out = {"export_rc": r["rc"], "before_import": coverage(node2, bundle)}
    imp = gp.sh([*gp.jw(), "import", bundle, "--allow-unsigned"], node2)
    out["import_rc"] = imp["rc"]
    out["after_import"] = coverage(node2)
    if args.registry:
        ref = f"{args.registry}/jitwarden/block:latest"
        keys = os.path.join(
            work, "keys"
        )  # a registry's bundle is judged by its signed config: push signed
        signed = dict(env, JITWARDEN_SIGNING_KEY=os.path.join(keys, "builder"))
        out["keygen_rc"] = gp.sh([*gp.jw(), "keygen"], signed)["rc"]
        p = gp.sh([*gp.jw(), "push", ref, "--insecure"], signed)
        node3 = gp.isolated_env(
            os.path.join(work, "node3"), JITWARDEN_TRUSTED_KEYS=os.path.join(keys, "builder.pub")
        )
        out["push_rc"] = p["rc"]
        out["registry_before_pull"] = coverage(node3, ref, "--insecure")
    res["bundle"] = out


def step_removed(env, res) -> None:
    lines = record_lines(env)
    (digest,) = os.listdir(os.path.join(env["XDG_CACHE_HOME"], "jitwarden", "records"))
    part = os.path.join(env["HOME"], ".triton", "cache", "jitwarden-v1", digest)
    keys = sorted({ln["key"] for ln in lines if ln["kind"] == "triton"} & set(os.listdir(part)))[:3]
    for k in keys:
        shutil.rmtree(os.path.join(part, k))
    got = coverage(env)
    res["removed"] = {
        "removed": keys,
        "coverage": got,
        "named_right": sorted(got["missing_keys"]) == keys,
    }


def step_nonce(work, res, save) -> None:
    """Always-miss of an FX graph whose key holds a random value, and none for the same stable workload."""
    gp = _gp()
    sys.path.insert(0, os.path.dirname(HERE))
    from tests.helpers.nonce import WORKLOAD

    script = os.path.join(work, "nonce.py")
    with open(script, "w") as f:
        f.write(WORKLOAD)
    out: dict = {}
    res["nonce"] = out  # written after every start: a part killed at its limit keeps what it ran
    for name, extra, starts in (("nonce", {"JW_NONCE": "1"}, 3), ("stable", {}, 2)):
        env = dict(gp.isolated_env(os.path.join(work, f"node-{name}")), JW_DEVICE="cuda", **extra)
        env.pop("TRITON_CACHE_DIR")
        env["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "1"
        runs = []
        for _ in range(starts):
            r = gp.sh([*gp.jw(), "run", "--record", name, "--", sys.executable, script], env)
            runs.append({"rc": r["rc"], "wall_s": r["wall_s"], "ok": "RESULT ok" in r["stdout"]})
            out[name] = {"runs": runs}
            save()
        d = gp.sh([*gp.jw(), "doctor", "--format", "json"], env)
        try:
            problems = json.loads(d["stdout"])["problems"]
        except (ValueError, KeyError):
            problems = []
        lines = [p for p in problems if p.get("code") == "always-miss"]
        out[name] = {"runs": runs, "always_miss": lines, "doctor_rc": d["rc"]}
    got = out["nonce"]["always_miss"]
    out["named_right"] = bool(
        got
        and any(
            "inductor: graph 1 compiled 3 times in 3 starts" in p["message"]
            and "only post_grad_custom_post_pass differs" in p["message"]
            for p in got
        )
        and not out["stable"]["always_miss"]
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="where h200_coverage.json is written")
    ap.add_argument(
        "--budget", type=float, default=420.0, help="seconds; steps past it are skipped"
    )
    ap.add_argument(
        "--mode", default="max-autotune-no-cudagraphs", help="torch.compile mode of the block"
    )
    ap.add_argument(
        "--registry", help="HOST:PORT of a registry (plain HTTP) to push to and judge before a pull"
    )
    ap.add_argument("--json", help="the results file (default OUT/h200_coverage.json)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    work = os.path.join(args.out, "work")
    os.makedirs(work, exist_ok=True)
    res: dict = {"mode": args.mode, "budget_s": args.budget, "skipped": []}

    def save():
        res["elapsed_s"] = round(time.time() - T0, 1)
        with open(args.json or os.path.join(args.out, "h200_coverage.json"), "w") as f:
            json.dump(res, f, indent=1, default=str)

    def spent() -> bool:
        return time.time() - T0 > args.budget

    reg = None
    if args.registry and os.path.exists(args.registry):  # a binary: started here, on loopback
        sys.path.insert(0, os.path.dirname(HERE))
        from tests.helpers import registry as reghelp

        reg = reghelp.Registry(args.registry, os.path.join(work, "registry"))
        args.registry = reg.host
    try:
        return _steps(args, work, res, save, spent)
    finally:
        if reg is not None:
            reg.stop()


def _steps(args, work, res, save, spent) -> int:
    env = step_record(args, work, res)
    save()
    steps = [
        ("own", lambda: res.__setitem__("own", coverage(env))),
        ("empty", lambda: res.__setitem__("empty", coverage(env, "--cache", _empty(work)))),
        ("bundle", lambda: step_bundle(args, work, env, res)),
        ("removed", lambda: step_removed(env, res)),
        ("nonce", lambda: step_nonce(work, res, save)),
    ]
    for name, step in steps:
        if spent():
            res["skipped"].append(name)
            continue
        step()
        save()
    print(
        json.dumps({k: res.get(k) for k in ("own", "empty", "removed", "nonce")}, default=str)[
            :4000
        ]
    )
    return 0


def _empty(work: str) -> str:
    d = os.path.join(work, "empty-cache")
    os.makedirs(d, exist_ok=True)
    return d


if __name__ == "__main__":
    sys.exit(main())
