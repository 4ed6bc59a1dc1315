"""Root runs a guarded workload on a user's cache in which that user forged a kernel and its seal (issue 32).

On the GPU, run as root (the test machine's default). uid ``--uid`` (1000) owns the Triton cache: it runs a
guarded ``add_kernel`` once (sealed with its own key), compiles a subtracting kernel of the same name
elsewhere, puts that cubin under the add kernel's key and rewrites the seal to match it (its sha256 and size,
``fs_time_ns = 2**62``, authenticated with the user's own key: the strongest forgery that user can make).
Then root runs the same workload on that cache:

- stock Triton (no jitwarden), pointed at the user's partition: the contrast (x - y expected);
- guarded, as ``sudo -E`` leaves it (the user's HOME): the root is refused, a private root used;
- guarded with ``JITWARDEN_TRUSTED_ROOTS`` naming the cache: the forged seal is not root's, the entry is
  proven at use, the forgery refused and compiled again.

Each run prints its result: ``max_abs_err`` against x + y (0.0 is right; ~2*|y| is the substitute).

    PYTHONPATH=src python3 benchmarks/h200_trust.py --out $OUT [--uid 1000]

Not run yet: written without a GPU (the session that wrote it had none).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

WORKLOAD = textwrap.dedent(
    """
    import json, os, sys
    if os.environ.get("JW_ACTIVATE") == "1":
        import jitwarden
        jitwarden.activate()
    import torch, triton, triton.language as tl

    @triton.jit
    def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=m) OP tl.load(y + offs, mask=m), mask=m)

    n = 1 << 20
    x = torch.rand(n, device="cuda")
    y = torch.rand(n, device="cuda") + 1.0
    out = torch.empty_like(x)
    add_kernel[(n // 1024,)](x, y, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    err = (out - (x + y)).abs().max().item()
    print("RESULT", json.dumps({"max_abs_err": err, "right": err == 0.0,
                                "triton_cache_dir": os.environ.get("TRITON_CACHE_DIR")}), flush=True)
    """
)

FORGE = textwrap.dedent(
    """
    import hashlib, json, os, sys
    from jitwarden.store import seal
    entry, data_path = sys.argv[1], sys.argv[2]
    data = open(data_path, "rb").read()
    with open(os.path.join(entry, "add_kernel.cubin"), "r+b") as f:
        f.truncate(0)
        f.write(data)
    raw = open(os.path.join(entry, ".jitwarden-seal.json"), "rb").read()
    doc = json.loads(raw.rsplit(b', "mac"', 1)[0] + b"}")
    doc["files"]["add_kernel.cubin"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    doc["fs_time_ns"] = 2**62
    tmp = os.path.join(entry, ".forged")
    with open(tmp, "wb") as f:
        f.write(seal.signed(os.path.basename(entry), json.dumps(doc, sort_keys=True).encode()))
    os.replace(tmp, os.path.join(entry, ".jitwarden-seal.json"))
    print("forged", entry)
    """
)


def run(argv, env, who=None) -> dict:
    pre = ["setpriv", f"--reuid={who[0]}", f"--regid={who[1]}", "--clear-groups"] if who else []
    p = subprocess.run([*pre, *argv], env=env, capture_output=True, text=True, timeout=600)
    res = {"rc": p.returncode, "jw": [ln for ln in p.stderr.splitlines() if "jitwarden" in ln]}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res.update(json.loads(line[7:]))
    if p.returncode:
        res["stderr"] = p.stderr[-2000:]
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "trust-out")
    ap.add_argument("--uid", type=int, default=1000)
    a = ap.parse_args()
    work = os.path.abspath(os.path.join(a.out, "work"))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    os.chmod(a.out, 0o755)
    os.chmod(work, 0o755)
    user_home, root_home = os.path.join(work, "user-home"), os.path.join(work, "root-home")
    cache, scratch = os.path.join(work, "cache"), os.path.join(work, "scratch")
    for d in (user_home, cache, scratch):
        os.makedirs(d)
        os.chown(d, a.uid, a.uid)
    os.makedirs(root_home)
    good, evil = os.path.join(work, "add.py"), os.path.join(work, "sub.py")
    for path, op in ((good, "+"), (evil, "-")):
        with open(path, "w") as f:
            f.write(WORKLOAD.replace("OP", op))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "JITWARDEN_"))}
    base["PYTHONPATH"] = SRC
    user = dict(base, HOME=user_home, XDG_CACHE_HOME=os.path.join(user_home, ".cache"))
    user.pop("XDG_CONFIG_HOME", None)
    who = (a.uid, a.uid)
    out = {}

    out["user_cold"] = run(
        [sys.executable, good], dict(user, JW_ACTIVATE="1", TRITON_CACHE_DIR=cache), who
    )
    print("USER COLD (guarded)", json.dumps(out["user_cold"]), flush=True)
    out["substitute"] = run([sys.executable, evil], dict(user, TRITON_CACHE_DIR=scratch), who)
    (sub,) = glob.glob(os.path.join(scratch, "*", "add_kernel.cubin"))
    (entry,) = [
        os.path.dirname(p)
        for p in glob.glob(os.path.join(cache, "jitwarden-v1", "*", "*", "add_kernel.cubin"))
    ]
    f = run([sys.executable, "-c", FORGE, entry, sub], user, who)
    out["forged"] = {
        "rc": f["rc"],
        "entry": entry,
        "substitute_sha256": hashlib.sha256(open(sub, "rb").read()).hexdigest(),
    }
    print("FORGED", json.dumps(out["forged"]), flush=True)

    partition = os.path.dirname(entry)
    out["root_stock"] = run(
        [sys.executable, good], dict(base, HOME=root_home, TRITON_CACHE_DIR=partition)
    )
    print("ROOT STOCK (no jitwarden; expect wrong)", json.dumps(out["root_stock"]), flush=True)
    sudo_e = dict(user, JW_ACTIVATE="1", TRITON_CACHE_DIR=cache)  # sudo -E: the user's HOME
    out["root_guarded"] = run([sys.executable, good], sudo_e)
    print("ROOT GUARDED (sudo -E)", json.dumps(out["root_guarded"]), flush=True)
    out["root_guarded_trusted"] = run(
        [sys.executable, good], dict(sudo_e, JITWARDEN_TRUSTED_ROOTS=cache)
    )
    print("ROOT GUARDED, root trusted", json.dumps(out["root_guarded_trusted"]), flush=True)
    ok = all(out[k].get("right") is True for k in ("root_guarded", "root_guarded_trusted"))
    print(
        f"root on a user-owned cache with a forged cubin and seal: guarded runs right: {ok}; "
        f"stock right: {out['root_stock'].get('right')}"
    )
    with open(os.path.join(a.out, "trust_h200.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
