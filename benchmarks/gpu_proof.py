"""Proof on a real GPU (issue 7): the silent corruption, jitwarden stopping it, `canary`, and the cost.

Every measured step runs in a fresh Python process, as a restarted server would:

1. ``tamper``: two kernels named ``combine`` (x+y and x-y); the x-y cubin is copied under the
   x+y key. Stock Triton: wrong numbers, no error. The same program under ``jitwarden run``
   (entries sealed in its partition, the same substitution made there): right numbers, the
   entry quarantined, one warning line. Also recorded: the guard without partitioning over the
   tampered *unsealed* stock entry (proven by a rebuild before its first use) and ``verify --rebuild`` on it.
2. ``canary``: ``jitwarden canary`` (scratch, guarded) as a table and as JSON.
3. ``workload``: a transformer block under ``torch.compile(mode=...)`` (default
   ``max-autotune-no-cudagraphs``): cold start, then warm starts stock and guarded, interleaved,
   ``--reps`` each; the Triton kernels it made are counted; the guard's warm-start overhead is
   the ratio of medians.
4. ``verify``: ``jitwarden verify --rebuild`` over the workload's real caches (stock and guarded):
   every error-level finding on these untampered caches is a false positive.
5. ``alternate``: two environments differing in one code-generation variable
   (``TRITON_DEFAULT_FP_FUSION`` 1 vs 0, part of jitwarden's fingerprint) alternate ``--rounds``
   times; with partitions (``jitwarden run``) vs wiping the caches whenever the environment
   changes. Both timelines are reported.

6. ``firstuse`` (issue 13; ``--steps firstuse`` runs it alone, ~4 min on an H200): (a) a stock
   cache of plain Triton kernels whose ``combine`` (x+y) entry holds the same-named x−y cubin, used
   under ``jitwarden run`` with ``JITWARDEN_PARTITION=0``; (b) a TorchInductor warm start whose
   FX-graph bundle holds a same-named substituted kernel (its PTX with float adds made subs,
   assembled by the producer's ptxas), stock and guarded; (c) the first-use cost of a real
   model's stock cache (``--fu-widths`` blocks under ``--fu-mode``, hundreds of Inductor kernels):
   the guarded first warm start minus the stock warm start, as a ratio to the cold compile (goal
   ≤ 0.15), and the guarded/stock warm-start ratio after it (goal ≤ 1.05).

Writes ``gpu_proof.json`` (after every step, so a timeout still leaves data) and
``gpu_proof.md`` into ``--out`` (default ``$OUT``)::

    PYTHONPATH=src python benchmarks/gpu_proof.py --out $OUT            # full, ~6 min on an H200
    PYTHONPATH=src python benchmarks/gpu_proof.py --out $OUT --quick    # trial: default mode, 1 rep
    python benchmarks/gpu_proof.py --render docs/gpu_proof.json         # re-write the Markdown only
    PYTHONPATH=src python benchmarks/gpu_proof.py --out $OUT --steps firstuse   # issue 13 alone, ~4 min
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, os.pardir))
SRC = os.path.join(REPO, "src")
T0 = time.time()

COMBINE = textwrap.dedent(
    """
    import sys, torch, triton, triton.language as tl

    if sys.argv[1] == "add":
        @triton.jit
        def combine(x, y, out, n, BLOCK: tl.constexpr):
            o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = o < n
            tl.store(out + o, tl.load(x + o, mask=m) + tl.load(y + o, mask=m), mask=m)
    else:
        @triton.jit
        def combine(x, y, out, n, BLOCK: tl.constexpr):
            o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = o < n
            tl.store(out + o, tl.load(x + o, mask=m) - tl.load(y + o, mask=m), mask=m)

    x = torch.full((4096,), 3.0, device="cuda")
    y = torch.full((4096,), 1.0, device="cuda")
    out = torch.empty_like(x)
    combine[(32,)](x, y, out, 4096, BLOCK=128)
    torch.cuda.synchronize()
    print("RESULT", float(out[0]), float(out.min()), float(out.max()))
    """
)

WORKLOAD = textwrap.dedent(
    """
    import json, sys, time
    t_start = time.perf_counter()
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    t_import = time.perf_counter() - t_start
    events = []
    try:
        from triton import knobs
        def _listener(*, src, metadata, metadata_group, times, cache_hit, **kw):
            events.append(bool(cache_hit))
        knobs.compilation.listener = _listener
    except Exception:
        events = None

    class Block(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.h = h
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q = q.view(b, s, self.h, d // self.h).transpose(1, 2)
            k = k.view(b, s, self.h, d // self.h).transpose(1, 2)
            v = v.view(b, s, self.h, d // self.h).transpose(1, 2)
            att = torch.softmax((q @ k.transpose(-1, -2)) * (d // self.h) ** -0.5, dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, s, d)
            x = x + self.proj(y)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    mode = sys.argv[1]
    widths = [int(w) for w in (sys.argv[2] if len(sys.argv) > 2 else "1024").split(",")]
    torch.manual_seed(0)
    t_first, err, nonfinite = 0.0, 0.0, 0
    for d in widths:  # one block per width: more widths, more distinct kernels
        m = Block(d, 8).cuda().half()
        x = torch.randn(4, 256, d, device="cuda", dtype=torch.half)
        with torch.no_grad():
            ref = m(x)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            f = torch.compile(m, mode=None if mode == "default" else mode, dynamic=False)
            y = f(x)
            torch.cuda.synchronize()
            t_first += time.perf_counter() - t0
        e = (y.float() - ref.float()).abs().max().item()
        nonfinite += int((~torch.isfinite(y)).sum().item())
        err = e if (e != e or e > err) and err == err else err  # NaN sticks: max() would drop it
    try:
        from torch._dynamo.utils import counters
        inductor = {k: v for k, v in counters["inductor"].items() if "fxgraph" in k or "triton_bundler" in k}
    except Exception:
        inductor = None
    print("RESULT " + json.dumps({"t_import": round(t_import, 3), "t_first": round(t_first, 3),
          "max_abs_err": err if err == err and err != float("inf") else str(err), "nonfinite": nonfinite,
          "triton_compiles": None if events is None else len(events),
          "triton_cache_hits": None if events is None else sum(events), "inductor_counters": inductor}))
    """
)

summary: dict = {"schema": 1}
OTHER_RUNS = "<!-- runs of other scripts: kept by --render -->"
OUT_DIR = "."
ENVS: dict = {}  # the workload's environments, for the verify step (not saved: they hold the whole environment)


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def save():
    summary["elapsed_s"] = round(time.time() - T0, 1)
    p = os.path.join(OUT_DIR, "gpu_proof.json")
    with open(p + ".tmp", "w") as f:
        json.dump(summary, f, indent=1, default=str)
    os.replace(p + ".tmp", p)
    with open(os.path.join(OUT_DIR, "gpu_proof.md"), "w") as f:
        f.write(render_md(summary))


def sh(cmd, env=None, timeout=600) -> dict:
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except OSError as exc:
        return {
            "rc": 127,
            "wall_s": round(time.perf_counter() - t, 3),
            "stdout": "",
            "stderr": str(exc),
        }
    except subprocess.TimeoutExpired as exc:
        rc, out, err = 124, exc.stdout or "", (exc.stderr or "") + "\n(timed out)"
        out = out.decode() if isinstance(out, bytes) else out
        err = err.decode() if isinstance(err, bytes) else err
    return {"rc": rc, "wall_s": round(time.perf_counter() - t, 3), "stdout": out, "stderr": err}


def result_of(r: dict):
    for line in r["stdout"].splitlines():
        if line.startswith("RESULT "):
            rest = line[len("RESULT ") :]
            try:
                return json.loads(rest)
            except ValueError:
                return [float(v) for v in rest.split()]
    return None


def jw_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("jitwarden:")]


def base_env() -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "JITWARDEN_"))
    }
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def isolated_env(root: str, **extra) -> dict:
    """An environment whose every cache (HOME, Triton, Inductor, jitwarden's memo) lives under ``root``."""
    os.makedirs(os.path.join(root, "home"), exist_ok=True)
    env = dict(
        base_env(),
        HOME=os.path.join(root, "home"),
        XDG_CACHE_HOME=os.path.join(root, "home", ".cache"),
        TRITON_CACHE_DIR=os.path.join(root, "triton"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(root, "inductor"),
    )
    env.update(extra)
    return env


def cache_dirs(env: dict) -> list[str]:
    return [
        env["TRITON_CACHE_DIR"],
        env["TORCHINDUCTOR_CACHE_DIR"],
        os.path.join(env["HOME"], ".triton"),
        env["XDG_CACHE_HOME"],
    ]


def census(root: str) -> dict:
    """Triton entries under ``root`` (any depth), sealed ones, quarantined ones, partitions."""
    entries = sealed = quarantined = 0
    partitions = set()
    fp_fusion_off = 0
    for d, subs, files in os.walk(root):
        base = os.path.basename(d)
        if base == "jitwarden-quarantine":
            quarantined += len(subs)
            subs[:] = []
            continue
        if os.path.basename(os.path.dirname(d)) == "jitwarden-v1":
            partitions.add(base)  # one fingerprint digest, whichever cache kind it partitions
        if any(f.startswith("__grp__") for f in files) and any(f.endswith(".cubin") for f in files):
            entries += 1
            sealed += ".jitwarden-seal.json" in files
            for f in files:
                if f.endswith(".json") and not f.startswith(("__grp__", ".")):
                    try:
                        with open(os.path.join(d, f)) as fh:
                            fp_fusion_off += json.load(fh).get("enable_fp_fusion") is False
                    except (OSError, ValueError):
                        pass
                    break
    return {
        "entries": entries,
        "sealed": sealed,
        "quarantined": quarantined,
        "partitions": len(partitions),
        "fp_fusion_off": fp_fusion_off,
    }


def jw() -> list[str]:
    return [sys.executable, "-m", "jitwarden"]


# ---------------------------------------------------------------- machine


def step_machine(args):
    m: dict = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "argv": sys.argv,
        "command": "PYTHONPATH=src python benchmarks/gpu_proof.py " + " ".join(sys.argv[1:]),
    }
    r = sh(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,memory.total,compute_cap",
            "--format=csv,noheader",
        ]
    )
    m["nvidia_smi"] = r["stdout"].strip() or r["stderr"].strip()[-300:]
    r = sh(
        [
            sys.executable,
            "-c",
            "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__,"
            " torch.cuda.get_device_name(), torch.cuda.get_device_capability())",
        ],
        env=base_env(),
    )
    m["torch_triton"] = (
        r["stdout"].strip() or (r["stderr"].strip().splitlines() or ["?"])[-1][-300:]
    )
    r = sh(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    m["git_commit"] = r["stdout"].strip() if r["rc"] == 0 else None
    stamp = os.path.join(
        REPO, "SOURCE_COMMIT"
    )  # a copy of the tree sent without its .git says where it came from
    if os.path.exists(stamp):
        with open(stamp) as f:
            m["git_commit"] = f.read().strip()
    r = sh(jw() + ["--version"], env=base_env())
    m["jitwarden"] = r["stdout"].strip()
    r = sh(jw() + ["fingerprint", "--format", "json"], env=base_env())
    try:
        fp = json.loads(r["stdout"])
        m["fingerprint_digest"] = fp.get("digest")
    except ValueError:
        m["fingerprint_digest"] = None
    summary["machine"] = m
    log("machine:", json.dumps(m)[:600])


# ---------------------------------------------------------------- 1. tampered entry


def _combine_entries(root: str) -> dict:
    out = {}
    for d, subs, files in os.walk(root):
        if "jitwarden-quarantine" in d.split(os.sep):
            continue
        if "combine.json" in files and "combine.ptx" in files:
            with open(os.path.join(d, "combine.ptx")) as f:
                ptx = f.read()
            out["add" if "add.f32" in ptx else "sub"] = d
    return out


def step_tamper(args, work):
    res: dict = {"expected": 4.0}
    script = os.path.join(work, "combine.py")
    with open(script, "w") as f:
        f.write(COMBINE)
    py = [sys.executable, script]

    stock = isolated_env(os.path.join(work, "tamper-stock"))
    for op in ("add", "sub"):
        r = sh(py + [op], stock)
        res[f"stock_fresh_{op}"] = {"rc": r["rc"], "result": result_of(r)}
    ents = _combine_entries(stock["TRITON_CACHE_DIR"])
    if set(ents) != {"add", "sub"}:
        raise RuntimeError(f"stock runs made no add/sub entries: {res}")
    shutil.copyfile(
        os.path.join(ents["sub"], "combine.cubin"), os.path.join(ents["add"], "combine.cubin")
    )
    r = sh(py + ["add"], stock)
    res["stock_tampered"] = {
        "rc": r["rc"],
        "result": result_of(r),
        "stderr_lines": len(r["stderr"].strip().splitlines()),
        "cmd": "python combine.py add",
    }
    log("tamper: stock over the substituted cubin:", res["stock_tampered"])

    guarded = isolated_env(os.path.join(work, "tamper-guarded"))
    for op in ("add", "sub"):
        r = sh(jw() + ["run", "--"] + py + [op], guarded)
        res[f"guarded_fresh_{op}"] = {
            "rc": r["rc"],
            "result": result_of(r),
            "jitwarden_lines": jw_lines(r["stderr"]),
        }
    ents = _combine_entries(guarded["TRITON_CACHE_DIR"])
    if set(ents) != {"add", "sub"}:
        raise RuntimeError(f"guarded runs made no add/sub entries: {res}")
    res["guarded_entries_sealed"] = {
        k: os.path.exists(os.path.join(v, ".jitwarden-seal.json")) for k, v in ents.items()
    }
    res["guarded_partitioned"] = all("jitwarden-v1" in v for v in ents.values())
    shutil.copyfile(
        os.path.join(ents["sub"], "combine.cubin"), os.path.join(ents["add"], "combine.cubin")
    )
    r = sh(jw() + ["run", "--"] + py + ["add"], guarded)
    c = census(guarded["TRITON_CACHE_DIR"])
    res["guarded_tampered"] = {
        "rc": r["rc"],
        "result": result_of(r),
        "quarantined": c["quarantined"],
        "jitwarden_lines": jw_lines(r["stderr"]),
        "stderr_lines": len(r["stderr"].strip().splitlines()),
        "cmd": "jitwarden run -- python combine.py add",
    }
    log("tamper: guarded over the substituted sealed cubin:", res["guarded_tampered"])
    r = sh(jw() + ["run", "--"] + py + ["add"], guarded)
    res["guarded_after_quarantine"] = {
        "rc": r["rc"],
        "result": result_of(r),
        "jitwarden_lines": jw_lines(r["stderr"]),
    }

    # The same program under jitwarden run over the tampered stock tree: its own partition, never that entry.
    r = sh(jw() + ["run", "--"] + py + ["add"], stock)
    res["guarded_over_stock_tree"] = {
        "rc": r["rc"],
        "result": result_of(r),
        "jitwarden_lines": jw_lines(r["stderr"]),
    }
    # What catches an unsealed substituted entry: verify --rebuild (verify --quick cannot: same symbol, same arch).
    for label, extra in (("verify_quick_stock", []), ("verify_rebuild_stock", ["--rebuild"])):
        r = sh(jw() + ["verify", *extra, "--format", "json", stock["TRITON_CACHE_DIR"]], base_env())
        try:
            doc = json.loads(r["stdout"])
            res[label] = {
                "rc": r["rc"],
                "errors": doc["summary"]["errors"],
                "by_code": doc["summary"]["by_code"],
            }
        except ValueError:
            res[label] = {"rc": r["rc"], "stderr": r["stderr"][-400:]}
    # The guard alone (no partition) over a pre-existing *unsealed* entry: proven by a rebuild before its first use.
    r = sh(jw() + ["run", "--"] + py + ["add"], dict(stock, JITWARDEN_PARTITION="0"))
    res["guard_unpartitioned_over_unsealed_tampered"] = {
        "rc": r["rc"],
        "result": result_of(r),
        "jitwarden_lines": jw_lines(r["stderr"]),
    }
    summary["tamper"] = res


# ---------------------------------------------------------------- 2. canary


def step_canary(args, work):
    res = {}
    env = isolated_env(os.path.join(work, "canary"))
    r = sh(jw() + ["canary"], env, timeout=400)
    res["table"] = {
        "rc": r["rc"],
        "stdout": r["stdout"],
        "stderr": r["stderr"][-1500:],
        "wall_s": r["wall_s"],
        "cmd": "jitwarden canary",
    }
    log("canary:\n" + r["stdout"] + r["stderr"][-800:])
    r = sh(jw() + ["canary", "--format", "json"], env, timeout=400)
    try:
        res["json"] = json.loads(r["stdout"])
    except ValueError:
        res["json"] = None
    res["json_rc"] = r["rc"]
    summary["canary"] = res


# ---------------------------------------------------------------- 3. workload cold/warm


def run_workload(env, guarded: bool, mode: str, script: str, widths: str | None = None) -> dict:
    cmd = (
        ([*jw(), "run", "--"] if guarded else [])
        + [sys.executable, script, mode]
        + ([widths] if widths else [])
    )
    r = sh(cmd, env, timeout=600)
    res = result_of(r) or {}
    return {
        "rc": r["rc"],
        "wall_s": r["wall_s"],
        **(res if isinstance(res, dict) else {}),
        "jitwarden_lines": jw_lines(r["stderr"])[:5],
        "stderr_tail": "" if r["rc"] == 0 else r["stderr"][-600:],
    }


def tamper_warm(root: str, env: dict, mode: str, script: str) -> dict:
    """Flip one byte in the code of the largest sealed Inductor kernel, then one more guarded warm start.

    Inductor's warm start loads cubins through its static launcher, not Triton's cache manager;
    jitwarden's start-up sweep must catch the change before that load.
    """
    sys.path.insert(0, SRC)
    from jitwarden.formats import elf

    cubins = [
        os.path.join(d, n)
        for d, subs, fs in os.walk(root)
        if "jitwarden-quarantine" not in d
        for n in fs
        if n.endswith(".cubin") and ".jitwarden-seal.json" in fs
    ]
    if not cubins:
        return {"skipped": "no sealed cubin"}
    target = max(cubins, key=os.path.getsize)
    data = bytearray(open(target, "rb").read())
    text = next(sec for sec in elf.parse(bytes(data)).sections if sec.name.startswith(".text."))
    pos = text.offset + text.size // 2
    data[pos] ^= 0xFF
    with open(target, "r+b") as f:
        f.seek(pos)
        f.write(bytes([data[pos]]))
    before = census(root)["quarantined"]
    r = run_workload(env, True, mode, script)
    return {
        "cubin": os.path.relpath(target, root),
        "section": text.name,
        "offset": pos,
        "run": r,
        "quarantined": census(root)["quarantined"] - before,
        "tampered_file_still_in_place": os.path.exists(target),
    }


def right(r: dict, tol: float = 0.1) -> bool:
    """Exit 0 and every output within ``tol`` of eager (a NaN or inf output is a string there, never right)."""
    e = r.get("max_abs_err")
    return r.get("rc") == 0 and isinstance(e, (int, float)) and e < tol and not r.get("nonfinite")


def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 3) if xs else None


def step_workload(args, work):
    script = os.path.join(work, "workload.py")
    with open(script, "w") as f:
        f.write(WORKLOAD)
    res: dict = {
        "mode": args.mode,
        "reps": args.reps,
        "model": "transformer block d=1024 h=8, x 4x256x1024 fp16",
    }
    stock = isolated_env(os.path.join(work, "wl-stock"))
    guarded = isolated_env(os.path.join(work, "wl-guarded"))
    ENVS.update(stock=stock, guarded=guarded)
    sides = args.sides.split(",")
    res["sides"] = sides
    summary["workload"] = res
    empty = {"rc": None, "wall_s": None}
    res["stock_cold"] = run_workload(stock, False, args.mode, script) if "stock" in sides else empty
    log("workload stock cold:", res["stock_cold"])
    save()
    res["guarded_cold"] = (
        run_workload(guarded, True, args.mode, script) if "guarded" in sides else empty
    )
    log("workload guarded cold:", res["guarded_cold"])
    save()
    res["stock_census"] = census(os.path.join(work, "wl-stock"))
    res["guarded_census_after_cold"] = census(os.path.join(work, "wl-guarded"))
    res["stock_warm"], res["guarded_warm"] = [], []
    for i in range(args.reps):
        if "stock" in sides:
            res["stock_warm"].append(run_workload(stock, False, args.mode, script))
        if "guarded" in sides:
            res["guarded_warm"].append(run_workload(guarded, True, args.mode, script))
        log(
            f"workload warm {i + 1}: stock {[r['wall_s'] for r in res['stock_warm']]} s, "
            f"guarded {[r['wall_s'] for r in res['guarded_warm']]} s"
        )
        save()
    res["guarded_census_after_warm"] = census(os.path.join(work, "wl-guarded"))
    if "guarded" in sides and args.tamper_warm:
        res["tampered_warm"] = tamper_warm(
            os.path.join(work, "wl-guarded"), guarded, args.mode, script
        )
        log("workload guarded warm after tampering a sealed Inductor kernel:", res["tampered_warm"])
        save()
    agg = {}
    for key in ("wall_s", "t_first"):
        s = med(r.get(key) for r in res["stock_warm"])
        g = med(r.get(key) for r in res["guarded_warm"])
        agg[key] = {
            "stock_warm_median": s,
            "guarded_warm_median": g,
            "ratio": round(g / s, 3) if s and g else None,
            "stock_cold": res["stock_cold"].get(key),
            "guarded_cold": res["guarded_cold"].get(key),
        }
    res["aggregate"] = agg
    res["kernels"] = max(
        res["stock_census"]["entries"], res["guarded_census_after_cold"]["entries"]
    )
    res["warm_quarantines"] = (
        res["guarded_census_after_warm"]["quarantined"]
        - res["guarded_census_after_cold"]["quarantined"]
    )
    res["warm_triton_compile_calls"] = {
        "stock": [r.get("triton_compiles") for r in res["stock_warm"]],
        "guarded": [r.get("triton_compiles") for r in res["guarded_warm"]],
    }
    res["all_correct"] = all(
        right(r)
        for r in [res["stock_cold"], res["guarded_cold"], *res["stock_warm"], *res["guarded_warm"]]
        if r.get("rc") is not None
    )
    summary["workload"] = res
    log("workload aggregate:", json.dumps(agg))


# ---------------------------------------------------------------- 4. verify --rebuild over the real caches


def step_verify(args, work):
    res = {}
    envs = ENVS
    for label in ("stock", "guarded"):
        env = envs.get(label)
        if not env or census(os.path.dirname(env["TRITON_CACHE_DIR"]))["entries"] == 0:
            continue
        roots = [
            d
            for d in (
                env["TRITON_CACHE_DIR"],
                os.path.join(env["TORCHINDUCTOR_CACHE_DIR"], "triton"),
                os.path.join(env["HOME"], ".triton", "cache"),
            )
            if os.path.isdir(d)
        ]
        if label == "guarded":
            # The guarded environment's own partitions, as `jitwarden run` would use them.
            roots = [
                os.path.join(r, "jitwarden-v1", p)
                for r in roots
                if os.path.isdir(os.path.join(r, "jitwarden-v1"))
                for p in sorted(os.listdir(os.path.join(r, "jitwarden-v1")))
            ]
        cmd = jw() + ["verify", "--rebuild", "--format", "json", *roots]
        r = sh(cmd, env, timeout=500)
        try:
            doc = json.loads(r["stdout"])
            s = doc["summary"]
            kernels = [e for e in doc["entries"] if e.get("type") == "kernel"]
            res[label] = {
                "rc": r["rc"],
                "wall_s": r["wall_s"],
                "entries": s["entries"],
                "kernels": len(kernels),
                "errors": s["errors"],
                "warnings": s["warnings"],
                "by_code": s["by_code"],
                "false_positives": s["errors"],
                "roots": len(roots),
                "error_entries": [
                    {
                        "name": e.get("name"),
                        "findings": [
                            f.get("code") + ": " + f.get("message", "")[:300]
                            for f in e.get("findings", [])
                        ],
                    }
                    for e in doc["entries"]
                    if any(f.get("severity") == "error" for f in e.get("findings", []))
                ][:5],
            }
        except (ValueError, KeyError) as exc:
            res[label] = {
                "rc": r["rc"],
                "error": f"{type(exc).__name__}: {exc}",
                "stderr": r["stderr"][-800:],
            }
        log(f"verify --rebuild {label}:", json.dumps(res[label])[:500])
    summary["verify"] = res


# ---------------------------------------------------------------- 5. alternating environments


def step_alternate(args, work):
    script = os.path.join(work, "workload.py")
    if not os.path.exists(script):
        with open(script, "w") as f:
            f.write(WORKLOAD)
    var = args.switch_var
    values = args.switch_values.split(",")
    res: dict = {"var": var, "values": values, "rounds": args.rounds, "mode": args.mode}
    seq = [values[i % 2] for i in range(2 * args.rounds)]
    # With partitions: `jitwarden run`, one cache tree, each environment in its own partition.
    root = os.path.join(work, "alt-part")
    timeline = []
    for v in seq:
        env = isolated_env(root, **{var: v})
        r = run_workload(env, True, args.mode, script)
        timeline.append(
            {
                "env": f"{var}={v}",
                "wall_s": r["wall_s"],
                "t_first": r.get("t_first"),
                "rc": r["rc"],
                "max_abs_err": r.get("max_abs_err"),
            }
        )
        log("alternate partitioned:", timeline[-1])
        res["partitioned"] = timeline
        summary["alternate"] = res
        save()
    res["partitioned"] = timeline
    res["partitioned_census"] = census(root)
    # Wipe on change: stock caches, removed whenever the environment differs from the last run's.
    root = os.path.join(work, "alt-wipe")
    timeline, last = [], None
    for v in seq:
        env = isolated_env(root, **{var: v})
        wiped = last is not None and v != last
        if wiped:
            for d in cache_dirs(env):
                shutil.rmtree(d, ignore_errors=True)
        r = run_workload(env, False, args.mode, script)
        timeline.append(
            {
                "env": f"{var}={v}",
                "wiped_before": wiped,
                "wall_s": r["wall_s"],
                "t_first": r.get("t_first"),
                "rc": r["rc"],
                "max_abs_err": r.get("max_abs_err"),
            }
        )
        last = v
        log("alternate wipe-on-change:", timeline[-1])
        res["wipe_on_change"] = timeline
        save()
    res["wipe_on_change"] = timeline
    for k in ("partitioned", "wipe_on_change"):
        res[f"{k}_total_wall_s"] = round(sum(t["wall_s"] for t in res[k]), 1)
        res[f"{k}_after_first_round_wall_s"] = round(sum(t["wall_s"] for t in res[k][2:]), 1)
    summary["alternate"] = res


# ---------------------------------------------------------------- report


# ---------------------------------------------------------------- 6. first use of unsealed kernels (issue 13)

_FLOAT_ADD = re.compile(r"(\s)add((?:\.[a-z0-9]+)*\.(?:f32|f16x2|f16|bf16x2|bf16|f64))(?=[\s;])")


def mutate_ptx(ptx: str) -> tuple[str, int]:
    """The same kernel (name, parameters, shape) computing something else: every float add becomes a sub."""
    return _FLOAT_ADD.subn(r"\1sub\2", ptx)


def same_named_substitute(entry: str) -> dict | None:
    """Another cubin for ``entry``'s kernel name and signature, assembled from its PTX with float adds made subs
    by the very ptxas that reproduces the entry (so nothing but a rebuild tells it from the producer's work).

    None when the entry cannot be reproduced here or its PTX has no float add.
    """
    import collections

    sys.path.insert(0, SRC)
    from jitwarden.ops import rebuild

    names = os.listdir(entry)
    cubin = next((n for n in names if n.endswith(".cubin")), None)
    if cubin is None:
        return None
    stem = cubin[: -len(".cubin")]
    try:
        with open(os.path.join(entry, f"{stem}.json")) as f:
            md = json.load(f)
        with open(os.path.join(entry, f"{stem}.ptx")) as f:
            ptx = f.read()
        with open(os.path.join(entry, cubin), "rb") as f:
            original = f.read()
    except (OSError, ValueError):
        return None
    mutated, n = mutate_ptx(ptx)
    if not n:
        return None
    E = collections.namedtuple("E", "path id name type")
    r = rebuild.verify_entries(
        [E(entry, os.path.basename(entry), stem, "kernel")], rebuild.RebuildOptions(jobs=1)
    )[entry]
    if r.verdict not in ("verified", "stale") or not r.ptxas:
        return None
    _arch, flags = rebuild.ptxas_flags(md)
    with tempfile.TemporaryDirectory(prefix="jw-subst-") as t:
        src, out = os.path.join(t, "k.ptx"), os.path.join(t, "k.cubin")
        with open(src, "w") as f:
            f.write(mutated)
        p = subprocess.run([r.ptxas, *flags, src, "-o", out], capture_output=True, text=True)
        if p.returncode != 0:
            return None
        with open(out, "rb") as f:
            new = f.read()
    if new == original:
        return None
    return {
        "name": stem,
        "entry": entry,
        "original": original,
        "cubin": new,
        "adds_made_subs": n,
        "ptxas": r.ptxas,
        "same_length": len(new) == len(original),
    }


def files_holding(root: str, data: bytes) -> list[str]:
    """Files under ``root`` whose bytes contain ``data`` (a cubin inside an FX-graph pickle)."""
    out = []
    for d, _subs, files in os.walk(root):
        for n in files:
            try:
                with open(os.path.join(d, n), "rb") as f:
                    if data in f.read():
                        out.append(os.path.join(d, n))
            except OSError:
                pass
    return out


def substitute_in_files(root: str, old: bytes, new: bytes) -> list[str]:
    """Replace ``old`` by ``new`` (same length) in every file under ``root`` that holds it, e.g. FX-graph pickles."""
    if len(old) != len(new):
        raise ValueError("a pickled payload can only be swapped for one of the same length")
    changed = []
    for d, _subs, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            try:
                with open(p, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if old in data:
                with open(p, "wb") as f:
                    f.write(data.replace(old, new))
                changed.append(p)
    return changed


def clear_triton_dirs(tree: str) -> int:
    """Remove every kernel directory of a Triton cache dir: what a machine that only got the FX cache has."""
    n = 0
    for name in os.listdir(tree) if os.path.isdir(tree) else ():
        p = os.path.join(tree, name)
        if os.path.isdir(p) and not os.path.islink(p) and name != "jitwarden-quarantine":
            shutil.rmtree(p)
            n += 1
    return n


def _kernel_entries(tree: str) -> list[str]:
    out = []
    for name in sorted(os.listdir(tree)) if os.path.isdir(tree) else ():
        p = os.path.join(tree, name)
        if os.path.isdir(p) and any(f.endswith(".cubin") for f in os.listdir(p)):
            out.append(p)
    return out


def _lines(r: dict, needle: str) -> int:
    return sum(needle in line for line in r.get("jitwarden_lines") or [])


def _proof_line(r: dict):
    line = next(
        (x for x in r.get("jitwarden_lines") or [] if "unsealed Triton kernels by rebuilding" in x),
        None,
    )
    m = re.search(r"proved (\d+) of (\d+) .* in ([0-9.]+) s on (\d+) cores", line or "")
    return (
        {
            "line": line,
            "proven": int(m[1]),
            "of": int(m[2]),
            "seconds": float(m[3]),
            "cores": int(m[4]),
        }
        if m
        else {"line": line}
    )


def step_firstuse(args, work):
    parts = args.fu_parts.split(",")
    earlier = (
        summary.get("firstuse_earlier") or {}
    )  # with --append, the parts not run now are kept from it
    res: dict = {
        k: earlier[k]
        for p, k in (("a", "triton"), ("b", "inductor_bundle"), ("c", "cost"))
        if p not in parts and k in earlier
    }
    summary["firstuse"] = res
    if "a" in parts:
        step_plain_triton(res, work)
    if (
        "b" in parts
    ):  # TorchInductor warm start whose FX-graph bundle holds a same-named substituted kernel
        step_bundle(res, work)
    if "c" in parts:  # first-use cost over a real model's stock cache, against its cold compile
        step_cost(args, res, work)


def step_plain_triton(res: dict, work: str) -> None:
    # (a) plain Triton: a stock cache, the x+y entry holding the same-named x-y cubin, under jitwarden run, no partitions.
    a = res["triton"] = {"expected": 4.0}
    script = os.path.join(work, "combine.py")
    with open(script, "w") as f:
        f.write(COMBINE)
    py = [sys.executable, script]
    env = isolated_env(os.path.join(work, "fu-triton"))
    for op in ("add", "sub"):
        r = sh(py + [op], env)
        a[f"stock_fresh_{op}"] = {"rc": r["rc"], "result": result_of(r)}
    ents = _combine_entries(env["TRITON_CACHE_DIR"])
    if set(ents) != {"add", "sub"}:
        raise RuntimeError(f"stock runs made no add/sub entries: {a}")
    shutil.copyfile(
        os.path.join(ents["sub"], "combine.cubin"), os.path.join(ents["add"], "combine.cubin")
    )
    r = sh(py + ["add"], env)
    a["stock_tampered"] = {"rc": r["rc"], "result": result_of(r), "cmd": "python combine.py add"}
    genv = dict(env, JITWARDEN_PARTITION="0")
    for key in ("guarded", "guarded_again"):
        r = sh(jw() + ["run", "--"] + py + ["add"], genv)
        a[key] = {
            "rc": r["rc"],
            "result": result_of(r),
            "jitwarden_lines": jw_lines(r["stderr"]),
            "quarantine_lines": sum(
                "quarantined Triton cache entry" in x for x in jw_lines(r["stderr"])
            ),
            "census": census(env["TRITON_CACHE_DIR"]),
            "cmd": "JITWARDEN_PARTITION=0 jitwarden run -- python combine.py add",
        }
    log(
        "firstuse (a) plain Triton:",
        json.dumps({k: a[k] for k in ("stock_tampered", "guarded")}, default=str)[:900],
    )
    save()


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _kernel_name_of(entry: str) -> str | None:
    return next((n[: -len(".cubin")] for n in os.listdir(entry) if n.endswith(".cubin")), None)


def launched_keys(idir: str) -> set[str]:
    """Kernel dirs that the FX-graph pickles' statically launched autotuners load by path: each names its
    kernel by Triton's hex hash, whose base32 form is the dir (``reload_cubin_path``)."""
    import base64

    out = set()
    for d, _subs, files in (
        x for sub in ("fxgraph", "aotautograd") for x in os.walk(os.path.join(idir, sub))
    ):
        for n in files:
            try:
                with open(os.path.join(d, n), "rb") as f:
                    data = f.read()
            except OSError:
                continue
            for m in re.finditer(rb"[0-9a-f]{64}", data):
                out.add(base64.b32encode(bytes.fromhex(m.group().decode())).decode().rstrip("="))
    return out


def _pick_order(entry: str) -> tuple:
    """Pointwise kernels first: a float add made a sub there gives finite wrong numbers (a reduction's sum
    made a difference can give NaN, which says less); then the largest."""
    name = os.path.basename(next((n for n in os.listdir(entry) if n.endswith(".cubin")), ""))
    size = sum(os.path.getsize(os.path.join(entry, n)) for n in os.listdir(entry))
    return (0 if "_poi_" in name and "add" in name else 1 if "_poi_" in name else 2, -size)


def step_bundle(res: dict, work: str) -> None:
    b = res["inductor_bundle"] = {"mode": "default"}
    wscript = os.path.join(work, "workload.py")
    with open(wscript, "w") as f:
        f.write(WORKLOAD)
    env = isolated_env(os.path.join(work, "fu-bundle"))
    b["stock_cold"] = run_workload(env, False, "default", wscript)
    tdir, idir = env["TRITON_CACHE_DIR"], env["TORCHINDUCTOR_CACHE_DIR"]
    b["kernels"] = len(_kernel_entries(tdir))
    # The kernel that is really launched: one a statically launched autotuner loads by its dir (an autotuning
    # loser is bundled too, and substituting it changes nothing). Every dir of that kernel's name (each autotuning
    # config) gets its own substitute, so whichever config runs is the substitute.
    launched = launched_keys(idir)
    entries = _kernel_entries(tdir)
    b["launched_by_static_autotuners"] = len(launched & {os.path.basename(e) for e in entries})
    chosen = None
    for entry in sorted(
        (e for e in entries if os.path.basename(e) in launched), key=_pick_order
    ) + sorted((e for e in entries if os.path.basename(e) not in launched), key=_pick_order):
        sub = same_named_substitute(entry)
        if sub and sub["same_length"] and files_holding(idir, sub["original"]):
            chosen = sub
            break
    if chosen is None:
        b["skipped"] = "no bundled kernel with a float add whose substitute has the cubin's length"
        save()
        return
    key = os.path.basename(chosen["entry"])
    subs = [chosen] + [
        x
        for x in (
            same_named_substitute(e)
            for e in entries
            if e != chosen["entry"] and _kernel_name_of(e) == chosen["name"]
        )
        if x and x["same_length"] and files_holding(idir, x["original"])
    ]
    b["kernel"] = {k: chosen[k] for k in ("name", "adds_made_subs", "ptxas")}
    b["kernel"].update(
        key=key,
        launched_by_a_static_autotuner=key in launched,
        dirs_substituted=len(subs),
        original_sha256=_sha(chosen["original"]),
        substitute_sha256=_sha(chosen["cubin"]),
    )
    b["pickles_changed"] = len(
        {p for x in subs for p in substitute_in_files(idir, x["original"], x["cubin"])}
    )
    b["kernel_dirs_removed"] = clear_triton_dirs(tdir)

    def restored() -> dict:
        """What is at the substituted kernel's path now: which cubin, and whether jitwarden sealed it."""
        d = os.path.join(tdir, key)
        cub = os.path.join(d, chosen["name"] + ".cubin")
        if not os.path.exists(cub):
            return {"present": False}
        with open(cub, "rb") as f:
            h = _sha(f.read())
        return {
            "present": True,
            "is_substitute": h == b["kernel"]["substitute_sha256"],
            "is_original": h == b["kernel"]["original_sha256"],
            "sealed": os.path.exists(os.path.join(d, ".jitwarden-seal.json")),
        }

    b["stock_warm"] = run_workload(env, False, "default", wscript)
    b["stock_warm"]["at_path_after"] = restored()
    clear_triton_dirs(tdir)
    genv = dict(env, JITWARDEN_PARTITION="0")
    for key_ in ("guarded_warm", "guarded_warm_again"):
        r = run_workload(genv, True, "default", wscript)
        r["refused_lines"] = _lines(r, "refused Triton kernel")
        r["at_path_after"] = restored()
        r["census"] = census(tdir)
        b[key_] = r
    b["demonstrated"] = (
        not right(b["stock_warm"], 0.05)
        and b["stock_warm"]["at_path_after"].get("is_substitute") is True
        and right(b["guarded_warm"], 0.05)
        and b["guarded_warm"].get("refused_lines", 0) >= 1
    )
    log(
        "firstuse (b) Inductor bundle:",
        json.dumps(
            {k: b.get(k) for k in ("kernel", "stock_warm", "guarded_warm", "demonstrated")},
            default=str,
        )[:2000],
    )
    save()


BREAKDOWN = textwrap.dedent(
    """
    # Where a first use's time goes, on a copy of a stock cache (run before the first use itself).
    import json, os, re, sys, time
    tdir, idir = sys.argv[1], sys.argv[2]
    t0 = time.perf_counter()
    from jitwarden.runtime import proof, sweep
    from jitwarden.runtime.guards import inductor
    t_import = time.perf_counter() - t0
    names = set(os.listdir(tdir))
    # Which kernel dirs do the FX-graph / AOTAutograd pickles name (base32 dir name, or the hex hash)?
    import base64
    refs, pickles, pbytes = set(), 0, 0
    for sub in ("fxgraph", "aotautograd"):
        for d, _s, fs in os.walk(os.path.join(idir, sub)):
            for f in fs:
                if f.startswith("."):
                    continue
                data = open(os.path.join(d, f), "rb").read()
                pickles += 1
                pbytes += len(data)
                for m in re.finditer(rb"[A-Z2-7]{52,}", data):
                    run = m.group().decode()
                    refs.update(run[k:k + 52] for k in range(len(run) - 51))
                for m in re.finditer(rb"[0-9a-f]{64}", data):
                    refs.add(base64.b32encode(bytes.fromhex(m.group().decode())).decode().rstrip("="))
    referenced = sorted(names & refs)
    t_scan = time.perf_counter() - t0 - t_import
    # Proving only those (nothing sealed: the sweep below still finds every entry unsealed).
    t1 = time.perf_counter()
    only = proof.prove_many([os.path.join(tdir, n) for n in referenced]) if referenced else {}
    t_referenced = time.perf_counter() - t1
    t1 = time.perf_counter()
    warnings, counts = sweep.sweep([tdir])
    t_sweep = time.perf_counter() - t1
    # First read of every pickle under the hooks: hashed and sealed (what the guarded first use does mid-run).
    t2 = time.perf_counter()
    n = 0
    for sub in ("fxgraph", "aotautograd"):
        for d, subs, fs in os.walk(os.path.join(idir, sub)):
            if any(not f.startswith(".") for f in fs):
                inductor.check_pickles(d)
                n += 1
    t_pickles = time.perf_counter() - t2
    try:
        import torch._inductor.triton_bundler as tb
        winners = "put_winner" in open(tb.__file__).read()
    except Exception as exc:
        winners = repr(exc)
    print("RESULT " + json.dumps({"entries": len(names), "referenced_by_pickles": len(referenced), "pickles": pickles,
          "pickle_bytes": pbytes, "sweep_s": round(t_sweep, 3), "import_s": round(t_import, 3), "proofs": counts.get("proofs"),
          "sealed": counts.get("sealed"), "quarantined": counts.get("quarantined"), "pickle_dirs": n,
          "pickle_seal_s": round(t_pickles, 3), "bundler_keeps_winners_only": winners, "scan_s": round(t_scan, 3),
          "referenced_proof_s": round(t_referenced, 3), "referenced_proven": sum(p.proven for p in only.values()),
          "referenced": referenced}))
    """
)


def _copy_tree(src: str, dst: str) -> None:
    """Copy a cache tree and point Triton's group files at the copy, as if it had been built there."""
    shutil.copytree(src, dst, symlinks=True)
    for d, _subs, files in os.walk(dst):
        for n in files:
            if n.startswith("__grp__") and n.endswith(".json"):
                p = os.path.join(d, n)
                try:
                    with open(p) as f:
                        doc = json.load(f)
                    doc["child_paths"] = {
                        c: os.path.join(d, os.path.basename(q))
                        for c, q in doc["child_paths"].items()
                    }
                    with open(p, "w") as f:
                        json.dump(doc, f)
                except (OSError, ValueError, KeyError, AttributeError):
                    pass


def step_cost(args, res: dict, work: str) -> None:
    c = res["cost"] = {"mode": args.fu_mode, "widths": args.fu_widths}
    wscript = os.path.join(work, "workload.py")
    if not os.path.exists(
        wscript
    ):  # written by part (b) when it runs first; part (c) alone writes it itself
        with open(wscript, "w") as f:
            f.write(WORKLOAD)
    env = isolated_env(os.path.join(work, "fu-cost"))
    genv = dict(env, JITWARDEN_PARTITION="0")
    w = args.fu_widths
    c["stock_cold"] = run_workload(env, False, args.fu_mode, wscript, w)
    c["census_cold"] = census(os.path.join(work, "fu-cost"))
    log("firstuse (c) cold:", c["stock_cold"].get("wall_s"), "s,", c["census_cold"])
    save()
    # Where the time goes, on a copy (its own HOME, so jitwarden's memo there stays cold for the real first use).
    scratch = os.path.join(work, "fu-breakdown")
    _copy_tree(env["TRITON_CACHE_DIR"], os.path.join(scratch, "triton"))
    _copy_tree(env["TORCHINDUCTOR_CACHE_DIR"], os.path.join(scratch, "inductor"))
    benv = isolated_env(scratch)
    bscript = os.path.join(work, "breakdown.py")
    with open(bscript, "w") as f:
        f.write(BREAKDOWN)
    r = sh(
        [sys.executable, bscript, benv["TRITON_CACHE_DIR"], benv["TORCHINDUCTOR_CACHE_DIR"]], benv
    )
    c["breakdown"] = result_of(r) or {"rc": r["rc"], "stderr": r["stderr"][-1500:]}
    log(
        "firstuse (c) breakdown:",
        json.dumps({k: v for k, v in c["breakdown"].items() if k != "referenced"})[:1500],
    )
    save()
    base = None
    if args.fu_baseline_src or args.fu_baseline_wait:
        # The code before a change (or this code proving before the workload starts, JITWARDEN_PROVE_WAIT=1),
        # on its own copy of the same stock cache (sealed by nobody).
        extra = (
            {"PYTHONPATH": os.path.abspath(args.fu_baseline_src)}
            if args.fu_baseline_src
            else {"JITWARDEN_PROVE_WAIT": "1"}
        )
        base = isolated_env(os.path.join(work, "fu-base"), JITWARDEN_PARTITION="0", **extra)
        _copy_tree(env["TRITON_CACHE_DIR"], base["TRITON_CACHE_DIR"])
        _copy_tree(env["TORCHINDUCTOR_CACHE_DIR"], base["TORCHINDUCTOR_CACHE_DIR"])
    c["stock_warm"] = [run_workload(env, False, args.fu_mode, wscript, w)]
    # jitwarden's first activation in a new environment computes the fingerprint (NVML, ptxas, packages) and
    # memoises it: paid once per environment, cache or no cache. Measured apart, on empty cache dirs.
    empty = dict(
        genv,
        TRITON_CACHE_DIR=os.path.join(work, "fu-empty", "triton"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(work, "fu-empty", "inductor"),
    )
    c["first_activation"] = [
        sh(jw() + ["run", "--", sys.executable, "-c", "pass"], empty)["wall_s"] for _ in range(2)
    ]
    c["guarded_first"] = run_workload(genv, True, args.fu_mode, wscript, w)
    c["proof"] = _proof_line(c["guarded_first"])
    c["census_after_first"] = census(os.path.join(work, "fu-cost"))
    log(
        "firstuse (c) first use:",
        c["guarded_first"].get("wall_s"),
        "s,",
        c["proof"],
        "activation",
        c["first_activation"],
    )
    save()
    if base is not None:
        bempty = dict(
            base,
            TRITON_CACHE_DIR=os.path.join(work, "fu-base-empty", "triton"),
            TORCHINDUCTOR_CACHE_DIR=os.path.join(work, "fu-base-empty", "inductor"),
        )
        sh(
            jw() + ["run", "--", sys.executable, "-c", "pass"], bempty
        )  # its fingerprint memoised, as for the new code
        c["baseline_first"] = run_workload(base, True, args.fu_mode, wscript, w)
        c["baseline_proof"] = _proof_line(c["baseline_first"])
        c["baseline_src"] = args.fu_baseline_src or "this code, JITWARDEN_PROVE_WAIT=1"
        log(
            "firstuse (c) baseline first use:",
            c["baseline_first"].get("wall_s"),
            "s,",
            c["baseline_proof"],
        )
        save()
    c["guarded_warm"] = []
    for _ in range(max(1, args.fu_reps)):
        c["guarded_warm"].append(run_workload(genv, True, args.fu_mode, wscript, w))
        c["stock_warm"].append(run_workload(env, False, args.fu_mode, wscript, w))
    sw = med(r.get("wall_s") for r in c["stock_warm"])
    gw = med(r.get("wall_s") for r in c["guarded_warm"])
    cold = c["stock_cold"].get("wall_s")
    first = c["guarded_first"].get("wall_s")
    fa = c["first_activation"]
    c["aggregate"] = {
        "cold_wall_s": cold,
        "stock_warm_wall_s": sw,
        "guarded_first_wall_s": first,
        "guarded_warm_wall_s": gw,
        "first_use_extra_s": round(first - sw, 3) if first and sw else None,
        "first_use_ratio_to_cold": round((first - sw) / cold, 3) if first and sw and cold else None,
        "proof_s_ratio_to_cold": round(c["proof"]["seconds"] / cold, 3)
        if c["proof"].get("seconds") and cold
        else None,
        "fingerprint_cold_s": round(fa[0] - fa[1], 3) if all(fa) else None,
        "baseline_first_wall_s": (c.get("baseline_first") or {}).get("wall_s"),
        "baseline_first_use_ratio_to_cold": round(
            ((c.get("baseline_first") or {}).get("wall_s") - sw) / cold, 3
        )
        if (c.get("baseline_first") or {}).get("wall_s") and sw and cold
        else None,
        "warm_ratio": round(gw / sw, 3) if gw and sw else None,
        "kernels": c["census_cold"]["entries"],
    }
    c["all_correct"] = all(
        right(r)
        for r in [c["stock_cold"], c["guarded_first"], *c["stock_warm"], *c["guarded_warm"]]
    )
    log("firstuse (c) aggregate:", json.dumps(c["aggregate"]))
    save()


def render_firstuse(s: dict) -> list[str]:
    f = s.get("firstuse")
    if not f:
        return []
    L = ["## 6. First use of unsealed kernels (issue 13)", ""]
    a = f.get("triton") or {}
    if a.get("guarded"):
        st, g, g2 = a.get("stock_tampered", {}), a["guarded"], a.get("guarded_again", {})
        L += [
            "(a) A stock Triton cache (never sealed); the `combine` x+y entry holds the same-named x−y cubin. "
            "x=3, y=1: the right answer is 4.",
            "",
            "| run | exit | result | quarantine lines | jitwarden lines |",
            "|---|---|---|---|---|",
            f"| stock: `{st.get('cmd')}` | {st.get('rc')} | {_res(st)} | - | - |",
            f"| `{g.get('cmd')}` | {g.get('rc')} | {_res(g)} | {g.get('quarantine_lines')} | {len(g.get('jitwarden_lines', []))} |",
            f"| the same again | {g2.get('rc')} | {_res(g2)} | {g2.get('quarantine_lines')} | {len(g2.get('jitwarden_lines', []))} |",
            "",
            "```",
            *(g.get("jitwarden_lines") or ["(nothing)"]),
            "```",
            "",
        ]
    b = f.get("inductor_bundle") or {}
    if b.get("guarded_warm"):
        k = b.get("kernel", {})
        L += [
            f"(b) TorchInductor warm start (`default` mode, {b.get('kernels')} kernels) whose FX-graph bundle holds a "
            f"same-named substitute of `{k.get('name')}` ({k.get('adds_made_subs')} float adds made subs, assembled by "
            f"`{k.get('ptxas')}`; {k.get('dirs_substituted', 1)} dir(s) of that name, one per autotuning config; "
            f"loaded by a statically launched autotuner: {k.get('launched_by_a_static_autotuner')}) in "
            f"{b.get('pickles_changed')} pickle(s); the kernel directories removed, as on a "
            'machine that got only the FX cache. "At the kernel\'s path after": the cubin the run left where '
            "Inductor's launcher loads it.",
            "",
            "| run | exit | max abs error vs eager | non-finite outputs | kernels refused | at the kernel's path after | "
            "FX-graph cache hits | jitwarden lines |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for key, label in (
            ("stock_warm", "stock warm start"),
            ("guarded_warm", "`jitwarden run` (JITWARDEN_PARTITION=0)"),
            ("guarded_warm_again", "the same again"),
        ):
            r = b.get(key) or {}
            at = r.get("at_path_after") or {}
            where = (
                "-"
                if not at
                else "nothing"
                if not at.get("present")
                else "the substitute"
                if at.get("is_substitute")
                else "the real kernel" + (", sealed" if at.get("sealed") else "")
                if at.get("is_original")
                else "another cubin"
            )
            hits = (r.get("inductor_counters") or {}).get("fxgraph_cache_hit", "-")
            L.append(
                f"| {label} | {r.get('rc')} | {r.get('max_abs_err')} | {r.get('nonfinite', '-')} | "
                f"{r.get('refused_lines', '-')} | {where} | {hits} | {len(r.get('jitwarden_lines') or [])} |"
            )
        if "demonstrated" in b:
            L += [
                "",
                f"Attack demonstrated (stock wrong with the substitute at the kernel's path, guarded right with the "
                f"substitute refused): **{b['demonstrated']}**. The poisoned pickle still offers the substitute at every "
                "later start: it is refused again each time and Inductor compiles the kernel through the guard.",
            ]
        L += [
            "",
            "```",
            *((b.get("guarded_warm") or {}).get("jitwarden_lines") or ["(nothing)"]),
            "```",
            "",
        ]
    elif b.get("skipped"):
        L += [f"(b) not run: {b['skipped']}", ""]
    c = f.get("cost") or {}
    ag = c.get("aggregate")
    if ag:
        fa = c.get("first_activation") or []
        L += [
            f"(c) First-use cost of a real model's stock cache: blocks of widths {c.get('widths')} under "
            f"`{c.get('mode')}`, **{ag.get('kernels')}** Triton kernels. All results match eager: {c.get('all_correct')}.",
            "",
            "| seconds (process wall) | cold compile | stock warm (median) | guarded first use (proofs) | guarded warm (median) |",
            "|---|---|---|---|---|",
            f"| | {_f(ag.get('cold_wall_s'))} | {_f(ag.get('stock_warm_wall_s'))} | {_f(ag.get('guarded_first_wall_s'))} | "
            f"{_f(ag.get('guarded_warm_wall_s'))} |",
            "",
            f"First-use cost, as the first use's wall time minus the stock warm starts' median: "
            f"{_f(ag.get('first_use_extra_s'))} s = **{_f(ag.get('first_use_ratio_to_cold'), 3)}** of the cold compile "
            f"(goal ≤ 0.15). The proofs themselves (the time in the line below; in the background, beside the "
            f"workload's own start, unless JITWARDEN_PROVE_WAIT=1) took "
            f"**{_f(ag.get('proof_s_ratio_to_cold'), 3)}** of the cold compile. Guarded/stock warm start after it: "
            f"**{_f(ag.get('warm_ratio'), 3)}** (goal ≤ 1.05). Each warm start (s): stock "
            f"{[r.get('wall_s') for r in c.get('stock_warm') or []]}, guarded {[r.get('wall_s') for r in c.get('guarded_warm') or []]}: "
            "one process's wall time varies by seconds from run to run here, as much as the cost measured, so "
            "the wall-time differences are single noisy samples and the sweep's own time is the steadier "
            "measure. The start-up line:",
            "",
            "```",
            str((c.get("proof") or {}).get("line")),
            "```",
            "",
        ]
        if ag.get("baseline_first_wall_s"):
            bp = c.get("baseline_proof") or {}
            L += [
                f"Baseline in the same run (`{c.get('baseline_src')}`), on its own copy of the same stock cache "
                f"right after: first use {_f(ag.get('baseline_first_wall_s'))} s of wall time "
                f"({_f(ag.get('baseline_first_use_ratio_to_cold'), 3)} of the cold compile by the same subtraction); its "
                f"line: `{bp.get('line')}`.",
                "",
            ]
        if len(fa) == 2:
            L += [
                f"Before it, jitwarden's first activation in this new environment (empty cache dirs, `jitwarden run -- "
                f"python -c pass`): {_f(fa[0])} s, then {_f(fa[1])} s once its fingerprint is memoised: "
                f"{_f(ag.get('fingerprint_cold_s'))} s paid once per environment, with or without a cache, and not "
                "part of the first-use cost above.",
                "",
            ]
        bd = c.get("breakdown") or {}
        if bd.get("sweep_s") is not None:
            pr = bd.get("proofs") or {}
            L += [
                f"Breakdown on a copy of the same stock cache (in one process): the start-up sweep {_f(bd.get('sweep_s'))} s "
                f"for {bd.get('entries')} entries, of which the proofs {_f(pr.get('seconds'))} s ({pr.get('ptxas_runs')} "
                f"ptxas runs, {_f(pr.get('ptxas_seconds'))} s of ptxas on {pr.get('jobs')} cores); sealing "
                f"{bd.get('pickle_dirs')} FX-graph/AOTAutograd pickle dirs at their first read "
                f"{_f(bd.get('pickle_seal_s'))} s. The pickles ({bd.get('pickles')}, {bd.get('pickle_bytes')} bytes) name "
                f"{bd.get('referenced_by_pickles')} of the {bd.get('entries')} kernel dirs (found in {_f(bd.get('scan_s'))} s); "
                f"proving only those took {_f(bd.get('referenced_proof_s'))} s. This torch's bundler keeps only "
                f"autotuning winners: {bd.get('bundler_keeps_winners_only')}.",
                "",
            ]
    return L


def headlines_firstuse(s: dict) -> list[str]:
    f = s.get("firstuse") or {}
    H = []
    a = f.get("triton") or {}
    if a.get("guarded"):
        H.append(
            f"Unsealed stock Triton entry holding a same-named substitute: stock {_res(a.get('stock_tampered', {}))}, "
            f"`jitwarden run` with JITWARDEN_PARTITION=0 {_res(a['guarded'])} (4 expected), "
            f"{a['guarded'].get('quarantine_lines')} quarantine line(s)."
        )
    b = f.get("inductor_bundle") or {}
    if b.get("guarded_warm"):
        H.append(
            f"Inductor warm start from an FX bundle with a substituted kernel: stock max abs error "
            f"{(b.get('stock_warm') or {}).get('max_abs_err')} ({(b.get('stock_warm') or {}).get('nonfinite')} non-finite "
            f"outputs), guarded {b['guarded_warm'].get('max_abs_err')} ({b['guarded_warm'].get('refused_lines')} kernel "
            f"refused); demonstrated: {b.get('demonstrated')}."
        )
    ag = (f.get("cost") or {}).get("aggregate")
    if ag:
        H.append(
            f"First use of a {ag.get('kernels')}-kernel stock cache: {ag.get('first_use_ratio_to_cold')} of its cold "
            f"compile (goal ≤ 0.15); guarded/stock warm start after it {ag.get('warm_ratio')} (goal ≤ 1.05)."
        )
    return H


def _f(x, nd=2):
    return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def render_md(s: dict) -> str:
    L = [
        "# GPU proof (issue 7): silent corruption, jitwarden stopping it, `canary`, and the cost",
        "",
    ]
    m = s.get("machine", {})
    L += [
        "Produced by a real run of `benchmarks/gpu_proof.py`; every measured step ran in a fresh Python process.",
        "",
        "| | |",
        "|---|---|",
        f"| command | `{m.get('command', '-')}` |",
        f"| GPU (nvidia-smi: name, driver, memory, compute cap) | {m.get('nvidia_smi', '-')} |",
        f"| torch, CUDA, Triton, device, capability | {m.get('torch_triton', '-')} |",
        f"| Python, platform, CPUs | {m.get('python')} · {m.get('platform')} · {m.get('cpus')} |",
        f"| jitwarden, commit, fingerprint | {m.get('jitwarden')} · {m.get('git_commit') or '-'} · {m.get('fingerprint_digest') or '-'} |",
        f"| options | mode `{s.get('options', {}).get('mode')}`, {s.get('options', {}).get('reps')} warm reps, "
        f"{s.get('options', {}).get('rounds')} alternation rounds{' (quick trial)' if s.get('options', {}).get('quick') else ''} |",
        f"| total run time | {s.get('elapsed_s')} s |",
    ]
    for e in s.get("earlier_runs") or []:
        L.append(
            f"| earlier run merged in (sections not re-run come from it) | `{(e.get('machine') or {}).get('command')}` "
            f"on {(e.get('machine') or {}).get('nvidia_smi')}, {(e.get('machine') or {}).get('torch_triton')} |"
        )
    L.append("")
    L += ["## Headlines", ""] + [f"- {h}" for h in headlines(s)] + [""]
    t = s.get("tamper")
    if t:
        st, gt = t.get("stock_tampered", {}), t.get("guarded_tampered", {})
        L += [
            "## 1. A tampered cache entry (another kernel's cubin under the key)",
            "",
            "Two kernels named `combine` (x+y, x−y) were compiled; the x−y cubin was copied under the x+y key. "
            "x=3, y=1: the right answer is 4.",
            "",
            "| run | exit | result | quarantined | jitwarden lines on stderr |",
            "|---|---|---|---|---|",
            f"| stock Triton: `{st.get('cmd')}` | {st.get('rc')} | {_res(st)} | - | - |",
            f"| `{gt.get('cmd')}` (same substitution inside its sealed partition) | {gt.get('rc')} | {_res(gt)} | "
            f"{gt.get('quarantined')} | {len(gt.get('jitwarden_lines', []))} |",
            f"| the next guarded run (recompiled entry, sealed again) | {t.get('guarded_after_quarantine', {}).get('rc')} | "
            f"{_res(t.get('guarded_after_quarantine', {}))} | - | {len(t.get('guarded_after_quarantine', {}).get('jitwarden_lines', []))} |",
            f"| `jitwarden run` over the tampered stock tree (own partition) | {t.get('guarded_over_stock_tree', {}).get('rc')} | "
            f"{_res(t.get('guarded_over_stock_tree', {}))} | - | {len(t.get('guarded_over_stock_tree', {}).get('jitwarden_lines', []))} |",
            f"| guard without partition (`JITWARDEN_PARTITION=0`) over the *unsealed* tampered entry (proven before first use) | "
            f"{t.get('guard_unpartitioned_over_unsealed_tampered', {}).get('rc')} | "
            f"{_res(t.get('guard_unpartitioned_over_unsealed_tampered', {}))} | - | "
            f"{len(t.get('guard_unpartitioned_over_unsealed_tampered', {}).get('jitwarden_lines', []))} |",
            "",
        ]
        if gt.get("jitwarden_lines"):
            L += ["The guarded run's warning:", "", "```", *gt["jitwarden_lines"], "```", ""]
        vq, vr = t.get("verify_quick_stock", {}), t.get("verify_rebuild_stock", {})
        L += [
            f"Over the tampered stock cache, `verify --quick`: exit {vq.get('rc')}, {vq.get('by_code')}; "
            f"`verify --rebuild`: exit {vr.get('rc')}, {vr.get('by_code')}.",
            "",
        ]
    c = s.get("canary")
    if c:
        L += [
            "## 2. `jitwarden canary`",
            "",
            f"`{c['table'].get('cmd')}` → exit {c['table'].get('rc')} "
            f"({c['table'].get('wall_s')} s):",
            "",
            "```",
            (c["table"].get("stdout", "") + c["table"].get("stderr", "")).rstrip(),
            "```",
            "",
        ]
    for wkey, wtitle in (("workload", ""), ("workload_earlier", " (earlier run)")):
        w = s.get(wkey)
        if not w:
            continue
        a = w.get("aggregate", {})
        L += [
            f'## 3. torch.compile workload, `mode="{w.get("mode")}"`: cold and warm starts{wtitle}',
            "",
            f"{w.get('model')}. Triton kernels it made (cache entries): **{w.get('kernels')}**; sides run: {w.get('sides', ['stock', 'guarded'])}; "
            f"guarded partition: {w.get('guarded_census_after_cold', {}).get('entries')} entries, "
            f"{w.get('guarded_census_after_cold', {}).get('sealed')} sealed. All results match eager within 0.1: "
            f"{w.get('all_correct')}.",
            "",
            "| seconds | stock cold | guarded cold | stock warm (median) | guarded warm (median) | guarded/stock warm |",
            "|---|---|---|---|---|---|",
        ]
        for key, label in (
            ("wall_s", "process wall time"),
            ("t_first", "compile call to first result"),
        ):
            g = a.get(key, {})
            L.append(
                f"| {label} | {_f(g.get('stock_cold'))} | {_f(g.get('guarded_cold'))} | {_f(g.get('stock_warm_median'))} | "
                f"{_f(g.get('guarded_warm_median'))} | **{_f(g.get('ratio'), 3)}** |"
            )
        L += [
            "",
            f"Warm runs, each: stock {[r.get('wall_s') for r in w.get('stock_warm', [])]} s, "
            f"guarded {[r.get('wall_s') for r in w.get('guarded_warm', [])]} s. Goal: ratio ≤ 1.05.",
            "",
            f"Quarantines during guarded warm starts: {w.get('warm_quarantines')}. Kernels that went through "
            f"Triton's compile/cache-manager path in each warm start (stock / guarded): "
            f"{w.get('warm_triton_compile_calls', {}).get('stock')} / {w.get('warm_triton_compile_calls', {}).get('guarded')}. "
            "Where this is 0, Inductor's warm start (FX-graph cache + static CUDA launcher) loaded its cubins "
            "without asking Triton's cache manager; jitwarden's start-up sweep checks them against their seals "
            "before that load instead.",
            "",
        ]
        tw = w.get("tampered_warm") or {}
        if tw.get("run"):
            r = tw["run"]
            L += [
                f"**One byte flipped** in the code (`{tw.get('section')}`, offset {tw.get('offset')}) of the largest "
                f"sealed Inductor kernel (`{tw.get('cubin')}`), then one more guarded warm start: exit {r.get('rc')}, "
                f"max abs error vs eager {r.get('max_abs_err')}, {tw.get('quarantined')} entr(y/ies) quarantined, "
                f"tampered file still in place: {tw.get('tampered_file_still_in_place')}. jitwarden said:",
                "",
                "```",
                *(r.get("jitwarden_lines") or ["(nothing)"]),
                "```",
                "",
            ]
    for vkey, vtitle in (("verify", ""), ("verify_earlier", " (earlier run)")):
        v = s.get(vkey)
        if not v:
            continue
        L += [
            f"## 4. `jitwarden verify --rebuild` over the workload's real caches{vtitle}",
            "",
            "| cache | exit | entries | kernels | errors (false positives) | warnings | findings | seconds |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for label, r in v.items():
            L.append(
                f"| {label} | {r.get('rc')} | {r.get('entries')} | {r.get('kernels')} | **{r.get('false_positives')}** | "
                f"{r.get('warnings')} | {r.get('by_code') or r.get('error')} | {r.get('wall_s')} |"
            )
        L.append("")
        for label, r in v.items():
            for e in r.get("error_entries") or []:
                L.append(f"- {label} `{e['name']}`: {'; '.join(e['findings'])}")
        L.append("")
    al = s.get("alternate")
    if al:
        L += [
            f"## 5. Two environments alternating on one machine (`{al['var']}` = {' / '.join(al['values'])}, "
            f"mode `{al.get('mode')}`)",
            "",
            "Seconds per run: process wall time, and in brackets the compile call to first result.",
            "",
            "| # | environment | partitions (`jitwarden run`) | wipe on change | wiped before |",
            "|---|---|---|---|---|",
        ]
        for i, (p, q) in enumerate(zip(al.get("partitioned", []), al.get("wipe_on_change", [])), 1):
            L.append(
                f"| {i} | {p['env']} | {_f(p['wall_s'])} ({_f(p.get('t_first'))}) | {_f(q['wall_s'])} "
                f"({_f(q.get('t_first'))}) | {q.get('wiped_before')} |"
            )
        tf = {
            k: round(sum(t.get("t_first") or 0 for t in al.get(k, [])[2:]), 1)
            for k in ("partitioned", "wipe_on_change")
        }
        L += [
            "",
            f"Total wall: partitions {al.get('partitioned_total_wall_s')} s, wipe-on-change "
            f"{al.get('wipe_on_change_total_wall_s')} s; after the first round: {al.get('partitioned_after_first_round_wall_s')} s "
            f"vs {al.get('wipe_on_change_after_first_round_wall_s')} s wall, {tf['partitioned']} s vs {tf['wipe_on_change']} s "
            f"compile-to-first-result. Partition census: {al.get('partitioned_census')} "
            "(`fp_fusion_off`: entries whose metadata says `enable_fp_fusion: false`).",
            "",
        ]
    L += render_firstuse(s)
    if s.get("skipped"):
        L += ["## Not run", ""] + [f"- {k}: {why}" for k, why in s["skipped"].items()] + [""]
    if s.get("errors"):
        L += ["## Errors", ""] + [f"- {e}" for e in s["errors"]] + [""]
    return "\n".join(L)


def headlines(s: dict) -> list[str]:
    """One line per step, from the data alone."""
    H = []
    t = s.get("tamper") or {}
    if t.get("stock_tampered"):
        st, gt = t["stock_tampered"], t.get("guarded_tampered", {})
        H.append(
            f"Tampered entry: stock Triton returned {_res(st)} (4 expected) with exit {st.get('rc')} and no error; "
            f"under `jitwarden run` {_res(gt)}, {gt.get('quarantined')} entry quarantined, "
            f"{len(gt.get('jitwarden_lines', []))} warning line(s)."
        )
    c = (s.get("canary") or {}).get("json") or {}
    if c.get("counts"):
        H.append(
            f"`jitwarden canary`: {c['counts']['pass']} passed, {c['counts']['FAIL']} failed, "
            f"{c['counts']['skipped']} skipped, each kernel compiled then loaded from the cache."
        )
    for key in ("workload", "workload_earlier"):
        w = s.get(key)
        if not w:
            continue
        a = w.get("aggregate", {})
        r1, r2 = a.get("wall_s", {}).get("ratio"), a.get("t_first", {}).get("ratio")
        warm = (
            f"guarded/stock warm start {r1} (process wall), {r2} (compile to first result), "
            f"median of {w.get('reps')}"
            if r1
            else "warm-start ratio not measured in this run"
        )
        calls = (w.get("warm_triton_compile_calls") or {}).get("guarded") or []
        H.append(
            f"`{w.get('mode')}` workload: {w.get('kernels')} Triton kernels, cold {a.get('t_first', {}).get('guarded_cold')} s "
            f"compile-to-first-result (guarded); {warm}"
            + (
                f"; guarded warm starts sent {calls} kernels through Triton's cache manager"
                if calls
                else ""
            )
            + "."
        )
        tw = w.get("tampered_warm") or {}
        if tw.get("run"):
            r = tw["run"]
            H.append(
                f"A byte flipped in a sealed Inductor kernel, then a guarded warm start: exit {r.get('rc')}, max abs "
                f"error {r.get('max_abs_err')}, {tw.get('quarantined')} quarantined by the start-up sweep."
            )
    for key in ("verify", "verify_earlier"):
        for label, r in (s.get(key) or {}).items():
            if "kernels" in r:
                H.append(
                    f"`verify --rebuild` over the {label} workload cache: {r['kernels']} kernels, "
                    f"{r['false_positives']} false positives, {r['wall_s']} s."
                )
    H += headlines_firstuse(s)
    al = s.get("alternate") or {}
    if len(al.get("partitioned") or []) > 2 and len(al.get("wipe_on_change") or []) > 2:
        tf = {
            k: round(sum(x.get("t_first") or 0 for x in al[k][2:]), 1)
            for k in ("partitioned", "wipe_on_change")
        }
        H.append(
            f"Alternating `{al['var']}` after the first round: partitions {tf['partitioned']} s vs wipe-on-change "
            f"{tf['wipe_on_change']} s compile-to-first-result; process wall {al.get('partitioned_after_first_round_wall_s')} s "
            f"vs {al.get('wipe_on_change_after_first_round_wall_s')} s."
        )
    return H


def _res(d: dict) -> str:
    r = d.get("result")
    if isinstance(r, list) and r:
        return _f(r[0], 1) + ("" if len(set(r)) == 1 else f" (min {r[1]}, max {r[2]})")
    return "-" if r is None else str(r)


def main() -> int:
    global OUT_DIR
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT") or None)
    p.add_argument(
        "--quick", action="store_true", help="trial: default torch.compile mode, 1 warm rep"
    )
    p.add_argument(
        "--mode",
        default=None,
        help="torch.compile mode (default max-autotune-no-cudagraphs; quick: default)",
    )
    p.add_argument(
        "--reps", type=int, default=None, help="warm starts per side (default 3; quick 1)"
    )
    p.add_argument(
        "--rounds", type=int, default=2, help="alternation rounds (each runs both environments)"
    )
    p.add_argument("--switch-var", default="TRITON_DEFAULT_FP_FUSION")
    p.add_argument("--switch-values", default="1,0")
    p.add_argument("--steps", default="tamper,canary,workload,verify,alternate")
    p.add_argument(
        "--budget",
        type=float,
        default=540,
        help="seconds; a step is skipped when too little is left",
    )
    p.add_argument("--render", metavar="JSON", help="only re-write the Markdown next to this JSON")
    p.add_argument(
        "--append",
        metavar="JSON",
        help="start from this earlier gpu_proof.json: steps run now replace "
        "its sections (the old one is kept as <step>_earlier), the rest is kept",
    )
    p.add_argument(
        "--no-tamper-warm",
        dest="tamper_warm",
        action="store_false",
        help="skip the guarded warm start after flipping a byte in a sealed Inductor kernel",
    )
    p.add_argument(
        "--sides", default="stock,guarded", help="workload sides to run (stock, guarded or both)"
    )
    p.add_argument(
        "--fu-mode", default="max-autotune-no-cudagraphs", help="firstuse (c): torch.compile mode"
    )
    p.add_argument(
        "--fu-widths", default="768,1024,1536", help="firstuse (c): one transformer block per width"
    )
    p.add_argument(
        "--fu-reps",
        type=int,
        default=2,
        help="firstuse (c): guarded and stock warm starts after the first use",
    )
    p.add_argument(
        "--fu-parts", default="a,b,c", help="firstuse: which of its parts to run (a, b, c)"
    )
    p.add_argument(
        "--fu-baseline-wait",
        action="store_true",
        help="firstuse (c): also a guarded first use that "
        "proves before the workload starts (JITWARDEN_PROVE_WAIT=1), on its own copy of the stock cache",
    )
    p.add_argument(
        "--fu-baseline-src",
        default=None,
        help="firstuse (c): also a guarded first use with jitwarden's "
        "src from this dir (the code before a change), on a copy of the same stock cache",
    )
    args = p.parse_args()
    if args.render:
        with open(args.render) as f:
            doc = json.load(f)
        md = os.path.splitext(args.render)[0] + ".md"
        kept = ""
        if os.path.exists(
            md
        ):  # sections from other scripts' runs (JAX/CuPy, ranks, warm modes) stay
            with open(md) as f:
                text = f.read()
            kept = text[text.index(OTHER_RUNS) :] if OTHER_RUNS in text else ""
        with open(md, "w") as f:
            f.write(render_md(doc) + ("\n" + kept if kept else ""))
        return 0
    args.mode = args.mode or ("default" if args.quick else "max-autotune-no-cudagraphs")
    args.reps = args.reps if args.reps is not None else (1 if args.quick else 3)
    OUT_DIR = args.out or tempfile.mkdtemp(prefix="jw-proof-out-")
    os.makedirs(OUT_DIR, exist_ok=True)
    work = tempfile.mkdtemp(prefix="jw-proof-")
    if args.append:
        with open(args.append) as f:
            summary.update(json.load(f))
        summary.setdefault("earlier_runs", []).append(
            {"options": summary.get("options"), "machine": summary.get("machine")}
        )
        for name in args.steps.split(","):
            if name in summary:
                summary[f"{name}_earlier"] = summary.pop(name)
        summary.pop("skipped", None)
        summary.pop("errors", None)
    summary["options"] = {
        "mode": args.mode,
        "reps": args.reps,
        "rounds": args.rounds,
        "quick": args.quick,
        "switch": f"{args.switch_var}={args.switch_values}",
        "steps": args.steps,
    }
    step_machine(args)
    save()
    # Rough costs (s) on an H200 in max-autotune mode, to skip rather than be killed mid-step.
    need = {
        "tamper": 45,
        "canary": 30,
        "workload": 100 + 50 * args.reps,
        "verify": 20,
        "alternate": 200 * args.rounds,
        "firstuse": 240,
    }
    for name in args.steps.split(","):
        left = args.budget - (time.time() - T0)
        if args.mode != "default" and need.get(name, 0) > left:
            summary.setdefault("skipped", {})[name] = (
                f"{left:.0f} s left of the {args.budget:.0f} s budget, step needs ~{need[name]} s"
            )
            log("skipping", name, summary["skipped"][name])
            save()
            continue
        log("step", name)
        try:
            globals()[f"step_{name}"](args, work)
        except Exception as exc:
            import traceback

            summary.setdefault("errors", []).append(f"{name}: {type(exc).__name__}: {exc}")
            log(traceback.format_exc())
        save()
    save()
    print(render_md(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
