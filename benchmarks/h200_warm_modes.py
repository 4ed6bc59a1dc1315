"""Guarded vs stock warm starts on the GPU, per torch.compile mode and FX-graph-cache setting (issue 25).

A Qwen2-style model (``JW_ARCH=phi3``: Phi3; transformers, random weights, no download) is compiled cold once per mode and side
(stock, guarded by ``jitwarden run``), each side in its own isolated cache root; then warm starts run in
interleaved pairs (the order alternates every pair) with the FX graph cache on or off. It prints one table:
median process wall (start to first result) and compile-to-first-result for each side, and their ratio,
guarded / stock, both measured in this run. ``--profile`` adds one cProfile'd warm start per side and
prints the functions of jitwarden (and the torch/Triton callers around them) that the guarded one spends
its extra time in.

    PYTHONPATH=src python3 benchmarks/h200_warm_modes.py --out $OUT \\
        --modes default,max-autotune-no-cudagraphs --fx on,off --pairs 3 --pairs-hot 6 --profile
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pstats
import statistics
import subprocess
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _budget import Budget, add_arguments

SRC = os.path.join(os.path.dirname(HERE), "src")

MODEL = textwrap.dedent(
    """
    import json, os, sys, time
    t0, e0 = time.perf_counter(), time.time()
    import atexit
    atexit.register(lambda: print(f"EXITED {time.time():.6f}", flush=True))  # runs last: after torch's own
    import torch
    if os.environ.get("JW_ARCH") == "phi3":  # the held-out small model of issue 35
        from transformers import Phi3Config as Config, Phi3ForCausalLM as Model
        ids_ = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    else:
        from transformers import Qwen2Config as Config, Qwen2ForCausalLM as Model
        ids_ = {}
    t_import = time.perf_counter() - t0
    mode = sys.argv[1]
    cfg = Config(vocab_size=8192, hidden_size=int(os.environ.get("JW_HIDDEN", "1024")),
                 intermediate_size=2816, num_hidden_layers=int(os.environ.get("JW_LAYERS", "4")),
                 num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=512, **ids_)
    torch.manual_seed(0)
    m = Model(cfg).cuda().to(torch.bfloat16).eval()
    ids = torch.randint(0, cfg.vocab_size, (4, 128), device="cuda")
    t_build = time.perf_counter() - t0 - t_import
    with torch.no_grad():
        ref = m(ids).logits.float()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        f = torch.compile(m, mode=None if mode == "default" else mode, dynamic=False)
        y = f(ids).logits.float()
        torch.cuda.synchronize()
        t_first = time.perf_counter() - t1
    err = (y - ref).abs().max().item()
    print("RESULT " + json.dumps({"t_import": round(t_import, 3), "t_build": round(t_build, 3),
                                  "t_first": round(t_first, 3), "t_total": round(time.perf_counter() - t0, 3),
                                  "e_start": e0, "e_end": time.time(),
                                  "max_abs_err": err if err == err else "nan"}), flush=True)
    """
)


def env_for(root: str, fx: str) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "JITWARDEN_"))
    }
    env.update(
        HOME=os.path.join(root, "home"),
        XDG_CACHE_HOME=os.path.join(root, "home", ".cache"),
        TRITON_CACHE_DIR=os.path.join(root, "triton"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(root, "inductor"),
        TORCHINDUCTOR_FX_GRAPH_CACHE="1" if fx == "on" else "0",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=SRC
        + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
    )
    os.makedirs(env["HOME"], exist_ok=True)
    return env


def tree_stamps(root: str) -> dict[str, tuple[int, int]]:
    """(ctime ns, size) of every file under ``root``: what a warm start changed in a cache tree, by diff."""
    out = {}
    for d, _s, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with contextlib.suppress(OSError):
                st = os.lstat(p)
                out[p] = (st.st_ctime_ns, st.st_size)
    return out


def tree_changes(before: dict, after: dict, root: str) -> dict:
    """The entries (dirs) whose files a run changed, made or removed, and the first few file names."""
    moved = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    dirs = sorted({os.path.dirname(p) for p in moved})
    return {
        "files": len(moved),
        "entries": len(dirs),
        "names": [os.path.relpath(p, root) for p in moved[:12]],
    }


def one(
    script: str,
    mode: str,
    root: str,
    guarded: bool,
    fx: str,
    profile: str | None = None,
    extra_env: dict | None = None,
    watch: bool = False,
) -> dict:
    """One warm (or cold) start; ``extra_env`` on top of the side's; ``watch``: diff the Triton tree around it."""
    py = [sys.executable] + (["-m", "cProfile", "-o", profile] if profile else [])
    cmd = (
        ([sys.executable, "-m", "jitwarden", "run", "--"] if guarded else []) + py + [script, mode]
    )
    env = {**env_for(root, fx), **(extra_env or {})}
    tri = os.path.join(root, "triton")
    before = tree_stamps(tri) if watch else {}
    t, e = time.perf_counter(), time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=580)
    wall, e_done = time.perf_counter() - t, time.time()
    res = next((json.loads(x[7:]) for x in p.stdout.splitlines() if x.startswith("RESULT ")), {})
    exited = next((float(x[7:]) for x in p.stdout.splitlines() if x.startswith("EXITED ")), None)
    # Where the wall goes outside the script's body: before its first line (interpreters, jitwarden run, the
    # activation), in the exit handlers (torch's worker pool, jitwarden's flushes), and after them.
    if "e_start" in res:
        res["t_before"] = round(res.pop("e_start") - e, 3)
        end = res.pop("e_end")
        res["t_exit"] = round((exited or e_done) - end, 3)
        res["t_after"] = round(e_done - exited, 3) if exited else None
    if watch:
        res["triton_changed"] = tree_changes(before, tree_stamps(tri), tri)
    return {
        "rc": p.returncode,
        "wall_s": round(wall, 3),
        **res,
        "jw": [x[:300] for x in p.stderr.splitlines() if x.startswith("jitwarden:")][:12],
        "err": p.stderr[-800:] if p.returncode else "",
    }


def kernels(root: str) -> int:
    n = 0
    for _d, _s, files in os.walk(root):
        n += any(f.endswith(".cubin") for f in files)
    return n


def tamper(script: str, mode: str, root: str, n: int, fx_off: bool = False) -> dict:
    """Flip one byte in the cubins of ``n`` sealed entries of the guarded Triton partition, then one warm start
    (FX graph cache on: only the kernels of the cached graph load). Then, per flipped entry: whether that start
    quarantined it, and what ``verify --quick`` says of those still in place (a kernel the graph never loads,
    an autotuning candidate, is checked only when something loads it). ``fx_off``: one more guarded start with
    the FX graph cache off, whose autotuning loads every candidate: then every flipped entry must be refused."""
    hit = []
    for d, _s, files in sorted(os.walk(os.path.join(root, "triton"))):
        cub = [f for f in files if f.endswith(".cubin")]
        if cub and ".jitwarden-seal.json" in files and len(hit) < n:
            path = os.path.join(d, cub[0])
            with open(path, "r+b") as f:
                f.seek(os.path.getsize(path) // 2)
                b = f.read(1)
                f.seek(-1, 1)
                f.write(bytes([b[0] ^ 0xFF]))
            hit.append(os.path.basename(d))
    runs = {"fx-on": one(script, mode, root, True, "on")}
    if fx_off:
        runs["fx-off"] = one(script, mode, root, True, "off")
    jw = [sys.executable, "-m", "jitwarden"]
    q = subprocess.run(
        jw + ["quarantine", "ls", "--format", "json", "--root", os.path.join(root, "triton")],
        env=env_for(root, "on"),
        capture_output=True,
        text=True,
    )
    v = subprocess.run(
        jw + ["verify", "--quick", "--format", "json", os.path.join(root, "triton")],
        env=env_for(root, "on"),
        capture_output=True,
        text=True,
    )
    try:
        held = {e["entry_id"]: e.get("by") for e in json.loads(q.stdout)["quarantined"]}
    except (ValueError, KeyError, TypeError):
        held = {}
    try:
        found = {
            e["id"]: (e["name"], sorted({f["code"] for f in e["findings"]}))
            for e in json.loads(v.stdout)["entries"]
        }
    except (ValueError, KeyError, TypeError):
        found = {}
    per = {
        h: {"quarantined_by": held.get(h), "verify": found.get(h)} for h in hit
    }  # verify: (kernel, codes)
    return {
        "flipped": hit,
        "runs": runs,
        "per_entry": per,
        "verify_rc": v.returncode,
        "lines": {k: r.get("jw", []) for k, r in runs.items()},
        "quarantine": q.stdout[-4000:],
    }


def med(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


def top_jitwarden(path: str, n: int = 25) -> list[str]:
    st = pstats.Stats(path)
    rows = []
    for (fn, line, name), (cc, nc, tt, ct, _callers) in st.stats.items():
        if "jitwarden" in fn:
            rows.append(
                (
                    ct,
                    tt,
                    nc,
                    f"{os.path.relpath(fn, SRC) if fn.startswith(SRC) else fn}:{line}:{name}",
                )
            )
    rows.sort(reverse=True)
    return [
        f"{ct:8.3f}s cum {tt:8.3f}s own {nc:7d} calls  {where}" for ct, tt, nc, where in rows[:n]
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT") or "warm-modes-out")
    p.add_argument("--modes", default="default,max-autotune-no-cudagraphs")
    p.add_argument("--fx", default="on,off")
    p.add_argument(
        "--pairs", type=int, default=3, help="interleaved warm pairs per mode/FX setting"
    )
    p.add_argument(
        "--pairs-hot", type=int, default=6, help="pairs for max-autotune with the FX cache on"
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="one cProfile'd warm start per side, for the last mode",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=0,
        help="seconds: start no warm pair that may not end by then (the same as --budget)",
    )
    p.add_argument(
        "--tamper",
        type=int,
        default=0,
        help="then flip a byte in N sealed cubins of the guarded Triton partition and run one guarded warm "
        "start: each it loads must be refused as Inductor loads it, the result still right; the "
        "rest are reported by verify",
    )
    p.add_argument(
        "--tamper-fx-off",
        action="store_true",
        help="after --tamper, one more guarded start with the FX graph cache off, which loads every "
        "autotuning candidate: every flipped kernel must then be refused",
    )
    add_arguments(p, "warm_modes.json")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    a.budget = a.budget or a.deadline
    b = Budget.from_args("h200_warm_modes", a, a.out)
    tamper_need = (90 + (70 if a.tamper_fx_off else 0)) if a.tamper else 0
    work = os.environ.get("JW_WORK") or os.path.join(a.out, "work")
    os.makedirs(work, exist_ok=True)
    script = os.path.join(work, "model.py")
    with open(script, "w") as f:
        f.write(MODEL)
    rows, raw = [], {}
    for mode in a.modes.split(","):
        roots = {s: os.path.join(work, f"{mode}-{s}") for s in ("stock", "guarded")}
        from concurrent.futures import ThreadPoolExecutor

        marker = os.path.join(work, f"{mode}-cold.json")
        if os.path.exists(marker):  # an earlier call on this (still warm) machine compiled them
            with open(marker) as f:
                cold = json.load(f)
            cold["reused"] = True
        else:
            with ThreadPoolExecutor(
                2
            ) as ex:  # both colds at once: they compile; the warm pairs are timed alone
                futs = {
                    s: ex.submit(one, script, mode, roots[s], s == "guarded", "on")
                    for s in ("stock", "guarded")
                }
                cold = {s: f.result() for s, f in futs.items()}
            if all(c["rc"] == 0 for c in cold.values()):
                with open(marker, "w") as f:
                    json.dump(cold, f)
        raw[f"{mode}/cold"] = cold
        b.put(f"{mode}/cold", cold)
        print(
            mode,
            "cold",
            json.dumps(cold),
            "kernels",
            {s: kernels(r) for s, r in roots.items()},
            flush=True,
        )
        for fx in a.fx.split(","):
            n = a.pairs_hot if (mode.startswith("max-autotune") and fx == "on") else a.pairs
            runs = {"stock": [], "guarded": []}
            for i in range(n):
                pair = (
                    max([r["wall_s"] for rs in runs.values() for r in rs] or [0]) * 2
                )  # the first pair always runs
                if i and not b.fits(f"{mode} fx-{fx} pair {i + 1} of {n}", pair + tamper_need):
                    break
                order = ("stock", "guarded") if i % 2 == 0 else ("guarded", "stock")
                for s in order:
                    runs[s].append(one(script, mode, roots[s], s == "guarded", fx))
                    print(
                        "RUN",
                        mode,
                        fx,
                        i,
                        s,
                        runs[s][-1]["wall_s"],
                        runs[s][-1].get("t_first"),
                        flush=True,
                    )
                b.put(f"{mode}/fx-{fx}/runs", runs, show=False)
            raw[f"{mode}/fx-{fx}"] = runs
            ok = all(
                r["rc"] == 0 and isinstance(r.get("max_abs_err"), float)
                for rs in runs.values()
                for r in rs
            )
            row = {
                "mode": mode,
                "fx": fx,
                "pairs": len(runs["stock"]),
                "kernels": kernels(roots["guarded"]),
                "all_ok": ok,
                "guarded_lines": sorted({x for r in runs["guarded"] for x in r["jw"]}),
            }
            for key in ("wall_s", "t_first"):
                s, g = (
                    med(r.get(key) for r in runs["stock"]),
                    med(r.get(key) for r in runs["guarded"]),
                )
                row[key] = {
                    "stock": s,
                    "guarded": g,
                    "ratio": round(g / s, 3) if s and g else None,
                    "stock_all": [r.get(key) for r in runs["stock"]],
                    "guarded_all": [r.get(key) for r in runs["guarded"]],
                }
            rows.append(row)
            b.put(f"{mode}/fx-{fx}", row)
            with open(
                os.path.join(work, "rows.jsonl"), "a"
            ) as f:  # the table of every call on this machine
                f.write(json.dumps(row) + "\n")
        if a.profile:
            prof = {}
            for s in ("stock", "guarded"):
                path = os.path.join(a.out, f"prof-{mode}-{s}.pstats")
                prof[s] = one(script, mode, roots[s], s == "guarded", "on", profile=path)
            raw[f"{mode}/profile"] = prof
            b.put(f"{mode}/profile", prof, show=False)
            print(
                f"PROFILE {mode}: stock {prof['stock']['wall_s']} s, guarded {prof['guarded']['wall_s']} s"
            )
            gp = os.path.join(a.out, f"prof-{mode}-guarded.pstats")
            if os.path.exists(gp):
                print("\n".join(top_jitwarden(gp)))
    if a.tamper:
        raw["tamper"] = tamper(
            script,
            a.modes.split(",")[-1],
            os.path.join(work, f"{a.modes.split(',')[-1]}-guarded"),
            a.tamper,
            a.tamper_fx_off,
        )
        b.put("tamper", raw["tamper"])
    if os.path.exists(os.path.join(work, "rows.jsonl")):
        with open(os.path.join(work, "rows.jsonl")) as f:
            rows = [json.loads(x) for x in f if x.strip()]
    print()
    print(
        "| mode | FX cache | pairs | kernels | stock wall (s) | guarded wall (s) | ratio | stock compile (s) | "
        "guarded compile (s) | ratio | all right |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        w, t = r["wall_s"], r["t_first"]
        print(
            f"| {r['mode']} | {r['fx']} | {r['pairs']} | {r['kernels']} | {w['stock']} | {w['guarded']} | "
            f"**{w['ratio']}** | {t['stock']} | {t['guarded']} | {t['ratio']} | {r['all_ok']} |"
        )
    b.finish(rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
