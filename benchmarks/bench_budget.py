"""``jitwarden budget`` over a real Triton + Inductor + JAX cache of N entries (issue 45), and the use log's cost.

Builds the live partitions of one environment and fills them past the budget with real-shaped entries:

- Triton: K kernels compiled for real through the guard (``triton.compile``, explicit ``GPUTarget``, sealed);
  replicas of them under distinct keys (each group's ``child_paths`` pointed at its own copy, the other
  files hard links: real sizes, little disk);
- Inductor: the two FX graphs of the H200 capture (``tests/data/h200_inductor_cache.tgz``) replicated under
  distinct keys, each naming its own copies of the H200 Triton kernels it names (the 52-character
  ``kernel_hash`` strings rewritten in the pickle, same length, so the bundle stays what torch reads);
- JAX: the H200 capture's executables (``tests/data/real/jax_cupy``) under distinct keys; some with the
  ``-atime`` JAX writes on every read when ``jax_compilation_cache_max_size`` is set.

Then a history, as the runtime records it: workload A (a guarded process: real Triton cache hits through
the guard, ``guards/inductor.check_pickles`` as torch's FX-graph lookup calls it) serves half the kernels and a
tenth of the FX graphs and ends; workload B serves the other half and stays alive while the budget runs.
Reported: the budget held; 0 entries B holds evicted; every evicted unit as or less recently served than
every unit kept; the time per 1,000 entries evicted; a warm start after (a fresh guarded process) hits
every kernel B used, and every FX graph B used is still there with its kernels. Last, the warm-hit cost of
the use log: guarded ``triton.compile`` hits with the log on and off, alternating rounds in one process.

    python benchmarks/bench_budget.py [--entries 20000] [--kernels 12] [--rounds 9]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)  # tests.helpers
sys.path.insert(0, os.path.join(REPO, "src"))

from tests.helpers import kernels

MANAGER = "jitwarden.guard:GuardedCacheManager"
DATA = os.path.join(REPO, "tests", "data")

DRIVER = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, os.environ["JW_KERNEL_DIR"])
    import triton
    from triton.compiler import ASTSource
    from triton.backends.compiler import GPUTarget
    import jw_test_kernels as K
    from jitwarden.runtime.guards import inductor
    from jitwarden.runtime.guards import triton as guard
    from jitwarden.store import uselog
    hits = [0]
    get_group = guard.GuardedCacheManager.get_group
    def counted(self, filename):
        got = get_group(self, filename)
        hits[0] += got is not None
        return got
    guard.GuardedCacheManager.get_group = counted
    specs = json.loads(os.environ["JW_SPECS"])
    def compile_all():
        for s in specs:
            src = ASTSource(fn=getattr(K, s["kernel"]), signature=s["signature"], constexprs=s["constexprs"])
            triton.compile(src, target=GPUTarget("cuda", s["arch"], 32), options=s["options"])
    compile_all()
    for d in json.loads(os.environ.get("JW_FX", "[]")):
        inductor.check_pickles(d)  # what torch's FX-graph lookup runs before it reads the graph
    mode = os.environ["JW_MODE"]
    if mode == "cost":
        class Off:
            used = staticmethod(lambda root, entry_id: None)
        on, off = [], []
        for _ in range(int(os.environ["JW_ROUNDS"])):
            for log, out in ((uselog, on), (Off, off)):
                guard._uses = log
                t = time.perf_counter()
                compile_all()
                out.append(time.perf_counter() - t)
        t = time.perf_counter()
        for i in range(20000):
            uselog.used(os.environ["TRITON_CACHE_DIR"], f"COST{i}")
        first = (time.perf_counter() - t) / 20000
        t = time.perf_counter()
        for i in range(20000):
            uselog.used(os.environ["TRITON_CACHE_DIR"], f"COST{i}")
        again = (time.perf_counter() - t) / 20000
        print(json.dumps({"on": on, "off": off, "first": first, "again": again, "n": len(specs)}))
    else:
        print(json.dumps({"hits": hits[0]}), flush=True)
        if mode == "hold":
            sys.stdin.read()
    """
)


def b32key(seed: str) -> str:
    return base64.b32encode(hashlib.sha256(seed.encode()).digest()).decode().rstrip("=")


def copy_triton(src: str, dst: str) -> None:
    """A Triton entry copied to ``dst``: its groups pointed at the copy, every other file a hard link."""
    os.mkdir(dst)
    for name in os.listdir(src):
        s, d = os.path.join(src, name), os.path.join(dst, name)
        if name.startswith((".jitwarden-lock", ".jitwarden-writers")):
            continue
        if name.startswith("__grp__"):
            with open(s) as f:
                doc = json.load(f)
            doc["child_paths"] = {
                c: os.path.join(dst, os.path.basename(p)) for c, p in doc["child_paths"].items()
            }
            with open(d, "w") as f:
                json.dump(doc, f)
        else:
            os.link(s, d)


class World:
    """The environment's partitions and what was put in them."""

    def __init__(self, tmp: str):
        from jitwarden.env import fingerprint
        from jitwarden.store import partition

        self.tmp = tmp
        self.env = dict(os.environ)
        for k in list(self.env):
            if k.startswith(("TRITON_", "TORCHINDUCTOR_", "JITWARDEN_", "JAX_", "XDG_")):
                del self.env[k]
        home = os.path.join(tmp, "home")
        os.makedirs(home)
        self.env.update(
            HOME=home,
            XDG_CACHE_HOME=os.path.join(home, ".cache"),
            TRITON_CACHE_DIR=os.path.join(tmp, "triton"),
            TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
            JAX_COMPILATION_CACHE_DIR=os.path.join(tmp, "jax"),
            PYTHONPATH=os.path.join(REPO, "src"),
        )
        os.environ.clear()
        os.environ.update(self.env)
        self.digest = fingerprint.of_host().digest
        self.tri, self.ind, self.jax = (
            partition.path_for(self.env[v], self.digest)
            for v in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR")
        )
        for p in (self.tri, self.ind, self.jax):
            os.makedirs(p)
        self.kdir = os.path.join(tmp, "kernels")
        os.makedirs(self.kdir)
        with open(os.path.join(self.kdir, "jw_test_kernels.py"), "w") as f:
            f.write(kernels.KERNEL_SOURCE)
        self.fx: list[tuple[str, list[str]]] = []  # (FX graph dir, the Triton keys it names)
        self.jax_entries: list[str] = []

    def run(self, mode: str, specs, fx=(), rounds: int = 0, hold: bool = False):
        env = dict(
            self.env,
            TRITON_CACHE_DIR=self.tri,
            TRITON_CACHE_MANAGER=MANAGER,
            JW_KERNEL_DIR=self.kdir,
            JW_SPECS=json.dumps(specs),
            JW_FX=json.dumps(list(fx)),
            JW_MODE=mode,
            JW_ROUNDS=str(rounds),
        )
        p = subprocess.Popen(
            [sys.executable, "-c", DRIVER],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert p.stdout is not None
        line = p.stdout.readline()
        if not line:
            raise SystemExit(f"workload {mode} failed ({p.wait()})")
        if hold:
            return p, json.loads(line)
        p.wait()
        return None, json.loads(line)


def fill(w: World, n: int, real_ids: list[str], tmp: str) -> dict:
    """Replicas of real entries until the partitions hold ``n`` entries: {kind: entries}."""
    cap = os.path.join(tmp, "capture")
    with tarfile.open(os.path.join(DATA, "h200_inductor_cache.tgz")) as t:
        t.extractall(cap, filter="data")
    with tarfile.open(os.path.join(DATA, "real", "jax_cupy", "jax_cache.tar.xz")) as t:
        t.extractall(cap, filter="data")
    from jitwarden.formats.fxkernels import kernel_keys

    h200 = os.path.join(cap, "ind", "triton", "0")
    graphs = []
    for shard in sorted(os.listdir(os.path.join(cap, "ind", "fxgraph"))):
        for key in os.listdir(os.path.join(cap, "ind", "fxgraph", shard)):
            d = os.path.join(cap, "ind", "fxgraph", shard, key)
            files = {f: open(os.path.join(d, f), "rb").read() for f in os.listdir(d)}
            named = sorted(
                set().union(*(kernel_keys(b) for b in files.values())) & set(os.listdir(h200))
            )
            graphs.append((files, named))
    n_fx, n_jax = n // 10, n // 5
    made = {"triton": len(real_ids), "inductor": 0, "jax": 0}
    for i in range(n_fx):
        files, named = graphs[i % len(graphs)]
        new = {k: b32key(f"fx{i}-{k}") for k in named}
        for k, nk in new.items():
            copy_triton(os.path.join(h200, k), os.path.join(w.tri, nk))
        key = "f" + b32key(f"fxgraph{i}").lower()[:51]
        d = os.path.join(w.ind, "fxgraph", key[1:3], key)
        os.makedirs(d)
        for name, raw in files.items():
            for k, nk in new.items():
                raw = raw.replace(k.encode(), nk.encode())
            with open(os.path.join(d, name), "wb") as f:
                f.write(raw)
        w.fx.append((d, list(new.values())))
        made["triton"] += len(new)
        made["inductor"] += 1
    jsrc = os.path.join(cap, "jax_cache")
    execs = sorted(f for f in os.listdir(jsrc) if f.endswith("-cache"))
    for i in range(n_jax):
        src = execs[i % len(execs)]
        module = src.rsplit("-", 2)[0]
        name = f"{module}-{hashlib.sha256(f'jax{i}'.encode()).hexdigest()}-cache"
        os.link(os.path.join(jsrc, src), os.path.join(w.jax, name))
        w.jax_entries.append(name)
        made["jax"] += 1
    i = 0
    while sum(made.values()) < n:
        copy_triton(
            os.path.join(w.tri, real_ids[i % len(real_ids)]), os.path.join(w.tri, b32key(f"t{i}"))
        )
        made["triton"] += 1
        i += 1
    return made


def jax_read(w: World, names, when_ns: int) -> None:
    """``<key>-atime`` as JAX writes it on a read (8 bytes, little-endian nanoseconds)."""
    for name in names:
        with open(os.path.join(w.jax, name[: -len("cache")] + "atime"), "wb") as f:
            f.write(when_ns.to_bytes(8, "little"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=20000)
    ap.add_argument(
        "--kernels", type=int, default=12, help="real kernels compiled (half A, half B)"
    )
    ap.add_argument("--rounds", type=int, default=15, help="rounds of the use log's warm-hit cost")
    ap.add_argument("--keep", action="store_true", help="keep the world and print where it is")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="jw-bench-budget-")
    saved = dict(os.environ)
    try:
        return _bench(args, tmp)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if args.keep:
            print(f"world kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _bench(args, tmp: str) -> int:
    from jitwarden.ops import budget as jb

    w = World(tmp)
    variants = kernels.VARIANTS
    archs = (80, 90, 100, 120, 121)
    specs = kernels.jobs_for(archs=archs, variants=variants)[: args.kernels]
    t = time.perf_counter()
    w.run("build", specs)  # cold: compiled and sealed through the guard
    real_ids = sorted(os.listdir(w.tri))
    real_ids = [r for r in real_ids if not r.startswith(".")]
    print(
        f"compiled {len(real_ids)} real kernels through the guard in {time.perf_counter() - t:.1f} s"
    )
    t = time.perf_counter()
    made = fill(w, args.entries, real_ids, tmp)
    print(f"filled {sum(made.values()):,} entries {made} in {time.perf_counter() - t:.1f} s")
    half = len(specs) // 2
    a_specs, b_specs = specs[:half], specs[half:]
    n10 = max(len(w.fx) // 10, 1)
    fx_a, fx_b = w.fx[:n10], w.fx[n10 : 2 * n10]
    j10 = max(len(w.jax_entries) // 10, 1)
    jax_read(w, w.jax_entries[:j10], time.time_ns())
    _, got = w.run("a", a_specs, [d for d, _ in fx_a])  # workload A: served, ended
    time.sleep(1.1)  # a later clock tick: B's uses are more recent than A's (what is measured)
    t_b = time.time()
    holder, got_b = w.run("hold", b_specs, [d for d, _ in fx_b], hold=True)
    jax_read(w, w.jax_entries[j10 : 2 * j10], time.time_ns())
    try:
        result = _budget(jb, w, t_b, b_specs, fx_b)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()
    _, warm = w.run("warm", b_specs, [d for d, _ in fx_b])
    fx_b_there = sum(
        os.path.isdir(d) and all(os.path.isdir(os.path.join(w.tri, k)) for k in ks)
        for d, ks in fx_b
    )
    print(
        f"warm start after: {warm['hits']} of {len(b_specs)} kernels B used were cache hits, "
        f"{fx_b_there} of {len(fx_b)} FX graphs B used still there with every kernel they name"
    )
    ok = result and warm["hits"] == len(b_specs) and fx_b_there == len(fx_b)
    ok = _cost(w, specs, args.rounds) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def _budget(jb, w: World, t_b: float, b_specs, fx_b) -> bool:
    t = time.perf_counter()
    cen = jb.census(jb.live_roots(os.environ, w.digest))
    census_s = time.perf_counter() - t
    entries = sum(1 for u in cen.units for i in u.items if i.used_by != "companion")
    served = sum(u.bytes for u in cen.units if u.last_used is not None)
    older = sum(u.bytes for u in cen.units if u.last_used is not None and u.last_used < t_b)
    limit = jb.Budget(
        max_bytes=served - older // 2
    )  # every never-served unit goes, and half of A's
    plan = jb.plan_budget(cen, limit)
    print(
        f"census: {entries:,} entries, {len(cen.units):,} units, {cen.bytes / 2**20:,.1f} MiB, "
        f"{cen.inodes:,} inodes in {census_s:.2f} s ({census_s * 1e6 / entries:.0f} us an entry); "
        f"{cen.live_logs} use logs held by a live workload"
    )
    for kind, v in plan.by_kind().items():
        print(f"  plan {kind:9s} evict {v.entries:6,} entries {v.bytes / 2**20:9,.1f} MiB")
    b_ids = set(os.listdir(w.tri)) & {u.head.id for u in cen.units if u.live}
    t = time.perf_counter()
    outcomes = plan.execute(replan=lambda: (jb.plan_budget(c := jb.census(cen.roots), limit), c))
    exec_s = time.perf_counter() - t
    evicted = [o for o in outcomes if o.status != "skipped"]
    n_evicted = sum(
        jb.evicted_by_kind(plan, outcomes)[k][0] for k in jb.evicted_by_kind(plan, outcomes)
    )
    after = jb.census(cen.roots)
    held = after.bytes <= (limit.max_bytes or 0)
    in_use_gone = sum(not os.path.isdir(os.path.join(w.tri, k)) for k in b_ids)
    in_use_gone += sum(not os.path.isdir(d) for d, _ in fx_b)
    kept = [u for u in cen.units if u not in plan.evict and not u.live and not u.unreadable]
    worst_evicted = max((u.order() for u in plan.evict), default=None)
    best_kept = min((u.order() for u in kept), default=None)
    lru = worst_evicted is None or best_kept is None or worst_evicted <= best_kept
    print(
        f"budget {limit.describe()}: after {after.bytes / 2**20:,.1f} MiB: "
        f"{'held' if held else 'NOT held'}"
    )
    print(
        f"evicted {n_evicted:,} entries ({len(evicted):,} moves) in {exec_s:.2f} s: "
        f"{exec_s * 1000 / max(n_evicted, 1) * 1000:.0f} ms per 1,000 entries evicted"
    )
    print(f"entries the live workload holds evicted: {in_use_gone} (of {len(b_ids) + len(fx_b)})")
    print(
        f"least recently served first: {'yes' if lru else 'NO'} (newest evicted "
        f"{_when(worst_evicted)}, oldest kept {_when(best_kept)})"
    )
    return held and in_use_gone == 0 and lru and not [o for o in outcomes if o.status == "skipped"]


def _when(order) -> str:
    if order is None:
        return "-"
    return "never served" if order[0] < 0 else f"{time.time() - order[0]:.1f} s ago"


def _cost(w: World, specs, rounds: int) -> bool:
    _, c = w.run("cost", specs, rounds=rounds)
    on, off = statistics.median(c["on"]), statistics.median(c["off"])
    n = c["n"]
    print(
        f"warm guarded hits: use log on {on * 1e6 / n:.1f} us, off {off * 1e6 / n:.1f} us a hit "
        f"(median of {rounds} alternating rounds of {n}); ratio on/off {on / off:.3f}, "
        f"best rounds {min(c['on']) / min(c['off']):.3f} (goal <= 1.05)"
    )
    print(
        f"uselog.used: {c['first'] * 1e6:.2f} us logging a new entry (one append), "
        f"{c['again'] * 1e6:.2f} us for one logged already (rate-limited)"
    )
    return min(on / off, min(c["on"]) / min(c["off"])) <= 1.05


if __name__ == "__main__":
    sys.exit(main())
