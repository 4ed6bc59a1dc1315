"""End-to-end on a real GPU: the seed's failure, with and without jitwarden.

Two kernels share a name (``combine``): one adds, one subtracts. After both are
cached, the subtracting cubin is copied over the adding kernel's cubin, as a
stale or foreign cache would. Then, each in a fresh process:

1. stock Triton loads the substituted cubin and silently returns x - y;
2. ``verify --quick`` cannot see it (same symbol, same arch), ``verify --rebuild`` does;
3. under ``jitwarden run`` the environment gets its own partition (x + y);
4. inside that partition entries are sealed on write: the same substitution is
   then a checksum mismatch, the entry is quarantined and x + y comes back.

Needs a CUDA GPU with torch and Triton. Writes a JSON summary to ``$OUT`` when set.

    PYTHONPATH=src python benchmarks/h200_guard_e2e.py
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, os.pardir, "src")

KERNEL = textwrap.dedent(
    """
    import sys, torch, triton, triton.language as tl

    OP = sys.argv[1]

    if OP == "add":
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
    print("RESULT", float(out[0]))
    """
)


def run(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    result = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT"):
            result = float(line.split()[1])
    return p.returncode, result, p.stdout[-2000:], p.stderr[-3000:]


def main() -> int:
    work = tempfile.mkdtemp(prefix="jw-e2e-")
    script = os.path.join(work, "k.py")
    with open(script, "w") as f:
        f.write(KERNEL)
    cache = os.path.join(work, "triton-cache")
    env = dict(os.environ, TRITON_CACHE_DIR=cache, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TRITON_CACHE_MANAGER", None)
    summary = {}

    rc, r_add, *_ = run([sys.executable, script, "add"], env)
    rc2, r_sub, *_ = run([sys.executable, script, "sub"], env)
    summary["fresh"] = {"add": r_add, "sub": r_sub}
    entries = {}
    for md in glob.glob(os.path.join(cache, "*", "combine.json")):
        with open(md) as f:
            ptx = open(md[:-5] + ".ptx").read()
        entries["add" if "add.f32" in ptx else "sub"] = os.path.dirname(md)
    print("entries:", entries)
    shutil.copyfile(os.path.join(entries["sub"], "combine.cubin"), os.path.join(entries["add"], "combine.cubin"))

    rc, r, out, err = run([sys.executable, script, "add"], env)
    summary["stock_after_substitution"] = {"rc": rc, "result": r, "expected": 4.0}
    print(f"stock Triton, substituted cubin: rc={rc} result={r} (x+y expected 4.0)")

    jw = [sys.executable, "-m", "jitwarden"]
    q = subprocess.run(jw + ["verify", "--quick", "--format", "json", cache], env=env, capture_output=True, text=True)
    rb = subprocess.run(jw + ["verify", "--rebuild", "--format", "json", cache], env=env, capture_output=True, text=True)
    for label, p in (("verify_quick", q), ("verify_rebuild", rb)):
        try:
            doc = json.loads(p.stdout)
            summary[label] = {"rc": p.returncode, "by_code": doc["summary"]["by_code"]}
        except ValueError:
            summary[label] = {"rc": p.returncode, "stderr": p.stderr[-500:]}
        print(label, summary[label])

    # The guard. Default activation partitions the cache dir, so this environment never reads the stock tree.
    rc, r, out, err = run(jw + ["run", "--", sys.executable, script, "add"], env)
    summary["guarded_fresh_partition"] = {"rc": rc, "result": r}
    print(f"guarded, default partition over the tampered cache: rc={rc} result={r}")
    # Inside the partition: both kernels are now compiled and sealed on write; tamper with the sealed entry.
    rc, r2, *_ = run(jw + ["run", "--", sys.executable, script, "sub"], env)
    parts = glob.glob(os.path.join(cache, "jitwarden-v1", "*"))
    pentries = {}
    for md in glob.glob(os.path.join(cache, "jitwarden-v1", "*", "*", "combine.json")):
        ptx = open(md[:-5] + ".ptx").read()
        pentries["add" if "add.f32" in ptx else "sub"] = os.path.dirname(md)
    sealed = [os.path.exists(os.path.join(d, ".jitwarden-seal.json")) for d in pentries.values()]
    shutil.copyfile(os.path.join(pentries["sub"], "combine.cubin"), os.path.join(pentries["add"], "combine.cubin"))
    rc, r, out, err = run(jw + ["run", "--", sys.executable, script, "add"], env)
    quarantined = glob.glob(os.path.join(cache, "jitwarden-v1", "*", "jitwarden-quarantine", "*")) + glob.glob(
        os.path.join(cache, "jitwarden-quarantine", "*"))
    summary["guarded_tampered_sealed_entry"] = {
        "partitions": len(parts), "sealed": sealed, "rc": rc, "result": r, "quarantined": len(quarantined),
        "stderr": err[-800:],
    }
    print(f"guarded, sealed entry tampered: rc={rc} result={r} quarantined={len(quarantined)} sealed={sealed}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "guard_e2e.json"), "w") as f:
            json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
