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

Then the JAX case (issue 43): a team's JAX cache dir named in code (``jax.config.update``), owned by the user.
Root runs a guarded JAX program on it once (root's files land in the user's dir), then the user runs the same
program guarded, twice: the user must not silently miss forever (every start recompiling because root's
entries can be neither believed nor replaced with no word said). Recorded per run: JAX's own cache hit and miss
events, jitwarden's lines, the dir's files with their owners; ``silent_forever_miss`` is true when the user's
second run still misses and jitwarden said nothing about it.

The work dir is outside ``$OUT`` (root's, 0700, which uid 1000 cannot enter: the last run died on
``can't open file .../trust/work/add.py``), under /tmp, 0755, with jitwarden's ``src`` copied in so the user can
import it; only ``trust_h200.json`` goes to ``--out`` (``--json``), rewritten after every run. ``--budget SECONDS``
skips what would not fit, said.

    PYTHONPATH=src python3 benchmarks/h200_trust.py --out $OUT [--uid 1000] [--budget 120] [--only triton,jax]

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

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
sys.path.insert(0, HERE)
from _budget import Budget, add_arguments, shared_workdir

JAX_TEAM = textwrap.dedent(
    """
    import json, os, sys, time
    if os.environ.get("JW_ACTIVATE") == "1":
        import jitwarden
        jitwarden.activate()
    import jax, jax.numpy as jnp
    events = {}
    def note(name, *a, **k):
        if "compilation_cache" in name:
            events[name] = events.get(name, 0) + 1
    jax.monitoring.register_event_listener(note)
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])  # the team's dir, named in code
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    t = time.perf_counter()
    x = jnp.arange(1 << 16, dtype=jnp.float32)
    y = jax.jit(lambda v: jnp.tanh(v) * 2.0 + v.sum())(x).block_until_ready()
    print("RESULT", json.dumps({"t_first": round(time.perf_counter() - t, 3), "events": events,
                                "value": float(y[3]), "backend": jax.default_backend()}), flush=True)
    """
)

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


def listing(d: str) -> list:
    """(name, owner uid, mode) of every file below ``d``: whose entries the dir holds after each run."""
    out = []
    for r, _dirs, files in os.walk(d):
        for f in sorted(files):
            st = os.lstat(os.path.join(r, f))
            out.append(
                (os.path.relpath(os.path.join(r, f), d), st.st_uid, oct(st.st_mode & 0o7777))
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "trust-out")
    ap.add_argument("--uid", type=int, default=1000)
    ap.add_argument("--only", default="triton,jax", help="cases: triton, jax")
    add_arguments(ap, "trust_h200.json")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    b = Budget.from_args("h200_trust", a, a.out)
    work = shared_workdir("jw-trust-")  # every uid can enter it; $OUT is root's 0700
    src = os.path.join(work, "src")
    shutil.copytree(SRC, src, ignore=shutil.ignore_patterns("__pycache__"))
    for r, dirs, files in os.walk(work):
        for n in dirs + files:
            os.chmod(os.path.join(r, n), 0o755 if n in dirs else 0o644)
    b.note("work", work)
    who = (a.uid, a.uid)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "JITWARDEN_"))}
    base["PYTHONPATH"] = src
    ok = True
    try:
        if "triton" in a.only.split(",") and b.fits("triton case", 90):
            ok &= triton_case(b, a, work, base, who)
        if "jax" in a.only.split(",") and b.fits("jax case", 60):
            ok &= jax_case(b, work, base, who)
    finally:
        b.finish(ok=ok)
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


def user_env(base: dict, home: str) -> dict:
    user = dict(base, HOME=home, XDG_CACHE_HOME=os.path.join(home, ".cache"))
    user.pop("XDG_CONFIG_HOME", None)
    return user


def triton_case(b: Budget, a, work: str, base: dict, who) -> bool:
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
        os.chmod(path, 0o644)
    user = user_env(base, user_home)
    b.put(
        "triton/user_cold",
        run([sys.executable, good], dict(user, JW_ACTIVATE="1", TRITON_CACHE_DIR=cache), who),
    )
    sub_run = run([sys.executable, evil], dict(user, TRITON_CACHE_DIR=scratch), who)
    b.put("triton/substitute", sub_run)
    subs = glob.glob(os.path.join(scratch, "*", "add_kernel.cubin"))
    entries = [
        os.path.dirname(p)
        for p in glob.glob(os.path.join(cache, "jitwarden-v1", "*", "*", "add_kernel.cubin"))
    ]
    if len(subs) != 1 or len(entries) != 1:
        b.put(
            "triton/error",
            f"expected one substitute and one entry, found {len(subs)} and {len(entries)}",
        )
        return False
    sub, entry = subs[0], entries[0]
    f = run([sys.executable, "-c", FORGE, entry, sub], user, who)
    b.put(
        "triton/forged",
        {
            "rc": f["rc"],
            "entry": entry,
            "substitute_sha256": hashlib.sha256(open(sub, "rb").read()).hexdigest(),
        },
    )
    partition = os.path.dirname(entry)
    b.put(
        "triton/root_stock",
        run([sys.executable, good], dict(base, HOME=root_home, TRITON_CACHE_DIR=partition)),
    )
    sudo_e = dict(user, JW_ACTIVATE="1", TRITON_CACHE_DIR=cache)  # sudo -E: the user's HOME
    g = run([sys.executable, good], sudo_e)
    b.put("triton/root_guarded", g)
    gt = run([sys.executable, good], dict(sudo_e, JITWARDEN_TRUSTED_ROOTS=cache))
    b.put("triton/root_guarded_trusted", gt)
    ok = g.get("right") is True and gt.get("right") is True
    stock = b.doc["results"]["triton/root_stock"].get("right")
    print(
        f"root on a user-owned cache with a forged cubin and seal: guarded runs right: {ok}; stock right: {stock}"
    )
    b.put("triton/ok", ok)
    return ok


def jax_case(b: Budget, work: str, base: dict, who) -> bool:
    """Root runs once on the user's team JAX dir (named in code), then the user twice: no silent miss forever."""
    uid = who[0]
    home, root_home, team = (
        os.path.join(work, n) for n in ("jax-user-home", "jax-root-home", "team-jax")
    )
    for d in (home, team):
        os.makedirs(d)
        os.chown(d, uid, uid)
    os.makedirs(root_home)
    script = os.path.join(work, "jax_team.py")
    with open(script, "w") as f:
        f.write(JAX_TEAM)
    os.chmod(script, 0o644)
    user = dict(user_env(base, home), JW_ACTIVATE="1")
    runs = {}
    for name, env, as_user in (
        ("root_once", dict(base, HOME=root_home, JW_ACTIVATE="1"), None),
        ("user_first", user, who),
        ("user_second", user, who),
    ):
        r = run([sys.executable, script, team], env, as_user)
        r["files"] = listing(team)
        runs[name] = r
        b.put(f"jax/{name}", r)
    second = runs["user_second"]
    hits = sum(v for k, v in second.get("events", {}).items() if "hit" in k)
    said = any(
        team in ln or "jax" in ln.lower()
        for ln in second.get("jw", []) + runs["user_first"].get("jw", [])
    )
    silent = second.get("rc") == 0 and hits == 0 and not said
    b.put(
        "jax/verdict",
        {"user_second_hits": hits, "jitwarden_said": said, "silent_forever_miss": silent},
    )
    return second.get("rc") == 0 and not silent


if __name__ == "__main__":
    sys.exit(main())
