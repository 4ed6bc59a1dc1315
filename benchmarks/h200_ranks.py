"""N ranks starting at once on one cache root, and device order (issue 26; docs/gpu_proof.md).

The lent machine has one GPU, so the N ranks of ``torchrun --nproc-per-node N`` all run on it: stand-ins for
one rank per GPU. Every rank runs under ``jitwarden run`` with ``JITWARDEN_PARTITION=0`` on one shared stock
(unsealed) Triton cache that holds a substituted cubin (``combine``'s subtracting twin under the adding
kernel's key). Each rank then runs that kernel and compiles a transformer block whose width is shared by
all ranks or its own. It reports per rank: the result against eager, wall time, jitwarden's lines; and over
all ranks: proof lines (kernels proven, no proof twice), quarantines (the substitute refuted once), and the
longest wait. Then the same host under several ``CUDA_VISIBLE_DEVICES`` values: the fingerprint digest and
the GPUs ``doctor`` lists for each.

    PYTHONPATH=src python3 benchmarks/h200_ranks.py --out $OUT --ranks 4
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
sys.path.insert(0, HERE)
from gpu_proof import COMBINE

RANK = textwrap.dedent(
    """
    import json, os, sys, time
    t0 = time.perf_counter()
    import torch, triton, triton.language as tl
    import torch.nn as nn, torch.nn.functional as F
    rank = int(os.environ.get("RANK", "0"))

    @triton.jit
    def combine(x, y, out, n, BLOCK: tl.constexpr):
        o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = o < n
        tl.store(out + o, tl.load(x + o, mask=m) + tl.load(y + o, mask=m), mask=m)

    x = torch.full((4096,), 3.0, device="cuda"); y = torch.full((4096,), 1.0, device="cuda")
    out = torch.empty_like(x)
    combine[(32,)](x, y, out, 4096, BLOCK=128)
    torch.cuda.synchronize()
    combined = float(out.max())

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ln = nn.LayerNorm(d); self.fc1 = nn.Linear(d, 4 * d); self.fc2 = nn.Linear(4 * d, d)
        def forward(self, x):
            return x + self.fc2(F.gelu(self.fc1(self.ln(x))))

    errs = {}
    torch.manual_seed(0)
    for d in (512, 256 + 128 * rank):  # 512: every rank's kernels; the other width: this rank's own
        m = Block(d).cuda().half(); xin = torch.randn(8, 128, d, device="cuda", dtype=torch.half)
        with torch.no_grad():
            ref = m(xin); got = torch.compile(m, dynamic=False)(xin)
        errs[d] = float((got.float() - ref.float()).abs().max())
    json.dump({"rank": rank, "combine": combined, "errs": errs, "t": round(time.perf_counter() - t0, 3)},
              open(os.path.join(os.environ["JW_RESULTS"], f"rank-{rank}.json"), "w"))
    """
)

WARM = textwrap.dedent(
    """
    import torch, torch.nn as nn, torch.nn.functional as F
    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ln = nn.LayerNorm(d); self.fc1 = nn.Linear(d, 4 * d); self.fc2 = nn.Linear(4 * d, d)
        def forward(self, x):
            return x + self.fc2(F.gelu(self.fc1(self.ln(x))))
    torch.manual_seed(0)
    m = Block(512).cuda().half()
    with torch.no_grad():
        torch.compile(m, dynamic=False)(torch.randn(8, 128, 512, device="cuda", dtype=torch.half))
    torch.cuda.synchronize()
    """
)


def env_for(root: str, **extra) -> dict:
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
        PYTHONUNBUFFERED="1",
        PYTHONPATH=SRC
        + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
    )
    env.update(extra)
    os.makedirs(env["HOME"], exist_ok=True)
    return env


def sh(cmd: list, env: dict, timeout: int = 400) -> dict:
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return {
        "rc": p.returncode,
        "wall_s": round(time.perf_counter() - t, 3),
        "stdout": p.stdout,
        "stderr": p.stderr,
    }


def combine_entries(tree: str) -> list[str]:
    return sorted(os.path.dirname(p) for p in glob.glob(os.path.join(tree, "*", "combine.cubin")))


def build_shared_cache(work: str) -> dict:
    """A stock cache: the Block at width 512 and ``combine`` (add), whose cubin is then the sub twin's."""
    root = os.path.join(work, "shared")
    env = env_for(root)
    script = os.path.join(work, "combine.py")
    with open(script, "w") as f:
        f.write(COMBINE)
    warm = os.path.join(work, "warm.py")
    with open(warm, "w") as f:
        f.write(WARM)
    r_add = sh([sys.executable, script, "add"], env)
    sh([sys.executable, warm], env)
    twin = env_for(os.path.join(work, "twin"))
    sh([sys.executable, script, "sub"], twin)
    add_e, sub_e = (
        combine_entries(env["TRITON_CACHE_DIR"]),
        combine_entries(twin["TRITON_CACHE_DIR"]),
    )
    out = {"add_run": r_add["stdout"].strip(), "entries": len(os.listdir(env["TRITON_CACHE_DIR"]))}
    if len(add_e) == 1 and len(sub_e) == 1:
        shutil.copyfile(
            os.path.join(sub_e[0], "combine.cubin"), os.path.join(add_e[0], "combine.cubin")
        )
        out["substituted"] = os.path.basename(add_e[0])
        out["stock_after_substitution"] = sh([sys.executable, script, "add"], env)["stdout"].strip()
    return out


def run_ranks(work: str, n: int) -> dict:
    root = os.path.join(work, "shared")
    results = os.path.join(work, "results")
    logs = os.path.join(work, "logs")
    os.makedirs(results, exist_ok=True)
    script = os.path.join(work, "rank.py")
    with open(script, "w") as f:
        f.write(RANK)
    env = env_for(root, JITWARDEN_PARTITION="0", JW_RESULTS=results)
    torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
    cmd = [
        torchrun,
        "--standalone",
        f"--nproc-per-node={n}",
        "--log-dir",
        logs,
        "--redirects",
        "3",
        "--no-python",
        sys.executable,
        "-m",
        "jitwarden",
        "run",
        "-v",
        "--",
        sys.executable,
        script,
    ]
    r = sh(cmd, env, timeout=500)
    ranks = []
    for i in range(n):
        try:
            with open(os.path.join(results, f"rank-{i}.json")) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            rec = {"rank": i, "missing": True}
        errs = []
        for p in glob.glob(os.path.join(logs, "**", str(i), "stderr.log"), recursive=True):
            with open(p, errors="replace") as f:
                errs += [x for x in f.read().splitlines() if "jitwarden:" in x]
        rec["jitwarden_lines"] = errs
        ranks.append(rec)
    lines = [x for rec in ranks for x in rec["jitwarden_lines"]]
    quarantined = sum("quarantin" in x for x in lines)
    proofs = [x for x in lines if "unsealed Triton kernels by rebuilding" in x]
    return {
        "rc": r["rc"],
        "wall_s": r["wall_s"],
        "ranks": ranks,
        "quarantine_lines": quarantined,
        "proof_lines": proofs,
        "stderr_tail": r["stderr"][-1500:] if r["rc"] else "",
        "all_right": all(
            rec.get("combine") == 4.0
            and all(e < 0.1 for e in rec.get("errs", {}).values())
            and rec.get("errs")
            for rec in ranks
        ),
        "longest_rank_s": max((rec.get("t") or 0) for rec in ranks),
        "quarantine_dir": sorted(os.listdir(os.path.join(root, "triton", "jitwarden-quarantine")))
        if os.path.isdir(os.path.join(root, "triton", "jitwarden-quarantine"))
        else [],
    }


def device_order(work: str) -> dict:
    env0 = env_for(os.path.join(work, "order"))
    try:
        uuid = subprocess.run(
            ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        ).stdout.split()
    except OSError:
        uuid = []
    out = {}
    for label, cvd in (
        ("unset", None),
        ("0", "0"),
        ("uuid", uuid[0] if uuid else None),
        ("none", ""),
        ("bad", "7"),
    ):
        env = dict(env0)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if cvd is not None:
            env["CUDA_VISIBLE_DEVICES"] = cvd
        fp = sh([sys.executable, "-m", "jitwarden", "fingerprint", "--format", "json"], env)
        doc = sh([sys.executable, "-m", "jitwarden", "doctor", "--format", "json"], env)
        rec = {"cvd": cvd, "fp_rc": fp["rc"], "doctor_rc": doc["rc"]}
        try:
            j = json.loads(fp["stdout"])
            rec["digest"] = j.get("digest") or j.get("fingerprint", {}).get("digest")
            rec["gpu"] = j.get("gpu") or j.get("fingerprint", {}).get("gpu")
        except ValueError:
            rec["fp_out"] = fp["stdout"][-300:] + fp["stderr"][-300:]
        try:
            d = json.loads(doc["stdout"])
            rec["doctor_gpus"] = d.get("gpus")
            rec["doctor_headline"] = d.get("headline")
            rec["doctor_problems"] = [x.get("code") for x in d.get("problems") or []]
        except ValueError:
            rec["doctor_out"] = doc["stdout"][-300:] + doc["stderr"][-300:]
        out[label] = rec
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT") or "ranks-out")
    p.add_argument("--ranks", type=int, default=4)
    a = p.parse_args()
    work = os.path.join(a.out, "work")
    os.makedirs(work, exist_ok=True)
    res = {"shared": build_shared_cache(work)}
    print("shared cache:", json.dumps(res["shared"]), flush=True)
    res["ranks"] = run_ranks(work, a.ranks)
    print("ranks:", json.dumps({k: v for k, v in res["ranks"].items() if k != "ranks"}), flush=True)
    for rec in res["ranks"]["ranks"]:
        print("  rank", json.dumps(rec)[:700], flush=True)
    res["device_order"] = device_order(work)
    print("device order:", json.dumps(res["device_order"], indent=1), flush=True)
    with open(os.path.join(a.out, "ranks.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
