"""A fleet against one Redis server: compile time with the guarded remote cache vs without, and
remote-hit latency of the guarded backend vs Triton's stock ``RedisRemoteCacheBackend``.

Part 1: 8 fresh processes (``--procs``), each with an empty local cache, compile the same
kernels (``--kernels``, real ``triton.compile`` on the CPU with an explicit GPUTarget):
once with the guard alone (every process compiles everything) and once with the guarded
remote cache (a builder process, writer role, fills the server first; the 8 serving
processes, reader role, start empty). Reported: the summed time inside ``triton.compile``
of the 8 processes, and their ratio. Processes run one after another (this machine's 2
cores are shared); ``--parallel`` starts them at once.

Part 2: one kernel entry stored by both backends on the same server; a remote hit timed
``--reps`` times, alternating: as Triton's ``RemoteCacheManager.get_group`` asks it of a backend
(``get([group])`` then ``get(children)``), stock and guarded, and as jitwarden's manager asks it
(the whole entry as one signed value); each with a new backend per lookup (as Triton makes one
per kernel key) and with one backend reused. Goal (issue 14): ratio <= 1.2.

    PYTHONPATH=src:tests python benchmarks/bench_fleet.py [--procs 8] [--kernels 6] [--reps 2000]

Needs redis-server (or valkey-server) on PATH, and the ``redis`` and ``cryptography`` packages.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repo root: tests.helpers
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from tests.helpers import kernels

GUARD = "jitwarden.guard:GuardedCacheManager"
REMOTE = "jitwarden.runtime.remote_manager:RemoteGuardedCacheManager"

DRIVER = r"""
import json, os, sys, time
sys.path.insert(0, os.environ["JW_KERNEL_DIR"])
import triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
import jw_test_kernels as K
from triton.runtime.cache import triton_key
from triton.compiler.compiler import make_backend
t = time.perf_counter()
triton_key()  # the fixed cost of a process's first compile (hashes Triton's sources and libtriton), hit or not
make_backend(GPUTarget("cuda", 90, 32)).hash()  # ptxas --version
startup = time.perf_counter() - t
total = 0.0
for job in json.loads(os.environ["JW_JOBS"]):
    src = ASTSource(fn=getattr(K, job["kernel"]), signature=job["signature"], constexprs=job["constexprs"])
    t = time.perf_counter()
    triton.compile(src, target=GPUTarget("cuda", job["arch"], 32), options=job["options"])
    total += time.perf_counter() - t
print(json.dumps({"compile_s": total, "startup_s": startup}))
"""


def jobs(n: int) -> list[dict]:
    combos = itertools.product(
        ("add_kernel", "sub_kernel", "fma_kernel"), (64, 128, 256, 512), (90,), (4, 8)
    )
    out = []
    for kernel, block, arch, warps in itertools.islice(combos, n):
        out.append(
            {
                "kernel": kernel,
                "signature": kernels.SIGNATURES[kernel],
                "constexprs": {"BLOCK": block},
                "options": {"num_warps": warps},
                "arch": arch,
            }
        )
    return out


def start_server(workdir: str):
    binary = shutil.which("valkey-server") or shutil.which("redis-server")
    if binary is None:
        sys.exit("bench_fleet: no redis-server or valkey-server on PATH")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc, port
        except OSError:
            time.sleep(0.02)
    proc.kill()
    sys.exit(f"bench_fleet: {binary} did not start")


def node_env(home: str, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "JITWARDEN_"))}
    env.update(
        HOME=home,
        XDG_CACHE_HOME=os.path.join(home, ".cache"),
        JITWARDEN_HOME=os.path.join(home, ".jw"),
        PYTHONPATH=os.pathsep.join(
            [os.path.join(os.path.dirname(HERE), "src"), env.get("PYTHONPATH", "")]
        ),
    )
    env.update(extra)
    return env


def partition_dir(home: str, digest: str) -> str:
    from jitwarden.store import partition

    return partition.path_for(os.path.join(home, ".triton", "cache"), digest)


def run_nodes(
    tmp: str, label: str, n: int, extra: dict, digest: str, kdir: str, todo, parallel: bool
) -> list[float]:
    procs = []
    for i in range(n):
        home = os.path.join(tmp, f"{label}-{i}")
        env = node_env(
            home,
            TRITON_CACHE_DIR=partition_dir(home, digest),
            JW_KERNEL_DIR=kdir,
            JW_JOBS=json.dumps(todo),
            **extra,
        )
        os.makedirs(env["TRITON_CACHE_DIR"])
        p = subprocess.Popen(
            [sys.executable, "-c", DRIVER],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if not parallel:
            p.wait()
        procs.append(p)
    out = []
    for p in procs:
        so, se = p.communicate()
        if p.returncode != 0:
            sys.exit(f"bench_fleet: a node failed:\n{se[-3000:]}")
        out.append(json.loads(so.strip().splitlines()[-1]))
    return out


def counters_of(tmp: str, label: str) -> dict:
    from jitwarden.ops import metrics

    total: dict = {}
    for d in os.listdir(tmp):
        if d.startswith(label + "-"):
            for k, v in metrics.remote_counters(
                {"JITWARDEN_HOME": os.path.join(tmp, d, ".jw")}
            ).items():
                total[k] = total.get(k, 0) + v
    return total


def part1(args, tmp, url, keys_env, digest, kdir) -> dict:
    todo = jobs(args.kernels)
    local = run_nodes(
        tmp, "local", args.procs, {"TRITON_CACHE_MANAGER": GUARD}, digest, kdir, todo, args.parallel
    )
    builder = run_nodes(
        tmp,
        "builder",
        1,
        {
            "TRITON_CACHE_MANAGER": REMOTE,
            "JITWARDEN_REMOTE": url,
            "JITWARDEN_REMOTE_ROLE": "writer",
            **keys_env,
        },
        digest,
        kdir,
        todo,
        False,
    )
    served = run_nodes(
        tmp,
        "served",
        args.procs,
        {"TRITON_CACHE_MANAGER": REMOTE, "JITWARDEN_REMOTE": url, **keys_env},
        digest,
        kdir,
        todo,
        args.parallel,
    )
    return {
        "kernels": len(todo),
        "procs": args.procs,
        "local": local,
        "builder": builder[0],
        "remote": served,
        "remote_counters": counters_of(tmp, "served"),
    }


def part2(args, tmp, port, keys_env, digest, kdir) -> dict:
    """Both backends in this process, on the same server, alternating."""
    os.environ.update(
        TRITON_REDIS_HOST="127.0.0.1",
        TRITON_REDIS_PORT=str(port),
        JITWARDEN_REMOTE=f"redis://127.0.0.1:{port}/0",
        JITWARDEN_REMOTE_ROLE="writer",
        JITWARDEN_HOME=os.path.join(tmp, "part2-home"),
        **keys_env,
    )
    from triton import knobs
    from triton.runtime.cache import RedisRemoteCacheBackend

    if not hasattr(
        knobs.cache, "redis"
    ):  # Triton 3.6's stock backend reads knobs.cache.redis, which is knobs.redis
        vars(knobs.cache)["redis"] = knobs.redis
    from jitwarden.runtime import remote

    src_home = os.path.join(tmp, "builder-0")
    part = partition_dir(src_home, digest)
    entry = min(
        d
        for d in os.listdir(part)
        if not d.startswith((".", "jitwarden"))
        and any(n.startswith("__grp__") for n in os.listdir(os.path.join(part, d)))
    )
    edir = os.path.join(part, entry)
    grp = next(n for n in os.listdir(edir) if n.startswith("__grp__"))
    children = sorted(json.load(open(os.path.join(edir, grp)))["child_paths"])
    files = {n: open(os.path.join(edir, n), "rb").read() for n in children}
    key = "BENCHKEY" + entry[:20]
    grp_value = json.dumps({"child_paths": children}).encode()
    stock = RedisRemoteCacheBackend(key)
    ours = remote.GuardedRemoteBackend(key, digest)
    for b in (stock, ours):
        for n, data in files.items():
            b.put(n, data)
        b.put(grp, grp_value)
    entry_name = grp[len("__grp__") :]
    ours.put_entry(entry_name, {**files, grp: grp_value})
    remote.state().role = "reader"

    def hit(b):  # what Triton's RemoteCacheManager.get_group asks of a backend
        g = b.get([grp])
        names = json.loads(g[grp])["child_paths"]
        got = b.get(names)
        assert len(got) == len(names)
        return got

    def hit_entry(b):  # what RemoteGuardedCacheManager asks: the whole entry, one value
        got = b.get_entry(entry_name)
        assert got is not None and len(got) == len(children) + 1
        return got

    ref = hit(stock)
    assert hit(remote.GuardedRemoteBackend(key, digest)) == ref  # same bytes back
    assert {k: v for k, v in hit_entry(ours).items() if k != grp} == ref
    ours_reused = remote.GuardedRemoteBackend(key, digest)
    ways = {
        "stock new": lambda: hit(RedisRemoteCacheBackend(key)),
        "guarded-files new": lambda: hit(remote.GuardedRemoteBackend(key, digest)),
        "guarded-entry new": lambda: hit_entry(remote.GuardedRemoteBackend(key, digest)),
        "stock reused": lambda: hit(stock),
        "guarded-files reused": lambda: hit(ours_reused),
        "guarded-entry reused": lambda: hit_entry(ours_reused),
    }
    times = {k: [] for k in ways}
    for _ in range(50):
        for f in ways.values():
            f()
    for _ in range(args.reps):
        for k, f in ways.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {
        "files": len(children) + 1,
        "bytes": sum(map(len, files.values())),
        "median_us": {k: statistics.median(v) * 1e6 for k, v in times.items()},
        "counters": dict(remote.state().counters),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--kernels", type=int, default=6)
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--parallel", action="store_true")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="jw-bench-fleet-")
    server = None
    try:
        from jitwarden.env import fingerprint
        from jitwarden.ops import keys

        secret, public, _kid = keys.generate()
        with open(os.path.join(tmp, "k"), "w") as f:
            f.write(secret)
        with open(os.path.join(tmp, "k.pub"), "w") as f:
            f.write(public)
        keys_env = {
            "JITWARDEN_SIGNING_KEY": os.path.join(tmp, "k"),
            "JITWARDEN_TRUSTED_KEYS": os.path.join(tmp, "k.pub"),
        }
        digest = fingerprint.of_host().digest
        kdir = os.path.join(tmp, "kernels")
        os.makedirs(kdir)
        with open(os.path.join(kdir, "jw_test_kernels.py"), "w") as f:
            f.write(kernels.KERNEL_SOURCE)
        server, port = start_server(tmp)
        url = f"redis://127.0.0.1:{port}/0"
        r1 = part1(args, tmp, url, keys_env, digest, kdir)
        r2 = part2(args, tmp, port, keys_env, digest, kdir)
        local = [x["compile_s"] for x in r1["local"]]
        rem = [x["compile_s"] for x in r1["remote"]]
        start = [x["startup_s"] for x in r1["local"] + r1["remote"]]
        print(
            f"part 1: {r1['procs']} fresh processes x {r1['kernels']} kernels, empty local caches, one server"
        )
        print(
            f"  without remote cache: {sum(local):8.2f} s in triton.compile in total "
            f"(per process {min(local):.3f}-{max(local):.3f} s)"
        )
        print(
            f"  with remote cache:    {sum(rem):8.2f} s in total (per process {min(rem):.3f}-{max(rem):.3f} s); "
            f"the builder that filled it: {r1['builder']['compile_s']:.2f} s"
        )
        print(
            f"  ratio with/without: {sum(rem) / sum(local):.3f}  (speed-up {sum(local) / sum(rem):.1f}x); "
            f"remote counters of the {r1['procs']}: {r1['remote_counters']}"
        )
        print(
            f"  not counted above, paid by every process either way: Triton's first-compile start-up "
            f"(triton_key, ptxas --version) {statistics.median(start):.2f} s median"
        )
        m = r2["median_us"]
        print(
            f"part 2: remote hit of one kernel entry ({r2['files']} values, {r2['bytes']} bytes), "
            f"median of {args.reps}"
        )
        for way, what in (
            ("new", "a new backend per lookup, as Triton makes one per kernel key"),
            ("reused", "one backend reused: the backend's own cost"),
        ):
            st, gf, ge = m[f"stock {way}"], m[f"guarded-files {way}"], m[f"guarded-entry {way}"]
            print(f"  {what}:")
            print(f"    stock RedisRemoteCacheBackend (group, then children) {st:8.1f} us")
            print(
                f"    guarded backend, same two gets (Triton's RemoteCacheManager) {gf:8.1f} us, ratio {gf / st:.2f}"
            )
            print(
                f"    guarded entry, one signed value (RemoteGuardedCacheManager) {ge:8.1f} us, ratio {ge / st:.2f}"
            )
        rej = {k: v for k, v in r2["counters"].items() if k.startswith("reject")}
        print(f"  guarded counters: hits {r2['counters'].get('hit', 0)}, rejects {rej or 0}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"part1": r1, "part2": r2}, f, indent=1)
        return 0
    finally:
        if server is not None:
            server.send_signal(signal.SIGKILL)
            server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
