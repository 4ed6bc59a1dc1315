"""What large Inductor files cost ``verify --quick``: wall time and peak memory, against the code of another
revision measured in the same run (default ``HEAD``: the last commit, before the change under test).

The tree is the real H200 Inductor cache kept in ``tests/data/h200_inductor_cache.tgz`` (sm_90), with one FX
graph pickle of each of three kinds put beside its own:

- ``sparse``: a forged sparse file of 1.5 GB (PROTO at the start, an sm_80 ``DeviceProperties`` in the middle,
  STOP at the end): no disk, 1.5 GB to a reader that reads it;
- ``real``: a real pickle of 300 MB (``pickle.dumps`` of the bytes a frozen model's constants would hold, and an
  sm_80 ``DeviceProperties``), every byte on disk;
- the cache's own pickles (tens of KiB), judged whole by both codes.

Both codes must report the same findings (the sm_80 graphs ``foreign-arch`` against ``--target 90``); each
command runs in a fresh process, the two codes swapping places every round; peak memory and CPU from ``wait4``.

    python benchmarks/bench_large_files.py [--base REV] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_scan import base_src, byte_compile, timed

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, os.pardir, "tests", "data", "h200_inductor_cache.tgz")
PROPS80 = b"DeviceProperties(type='cuda', index=0, multi_processor_count=108, cc=80, major=8)"


def make_tree(dst: str) -> str:
    with tarfile.open(DATA) as t:
        t.extractall(dst, filter="data")
    root = os.path.join(dst, "ind")
    fx = os.path.join(root, "fxgraph")
    key = min(os.listdir(fx))
    for label, size in (("sparse", 1_500_000_000), ("real", 300 << 20)):
        d = os.path.join(fx, key, "f" + label + "0" * (52 - len(label)))
        os.makedirs(d)
        path = os.path.join(d, "graph")
        if label == "sparse":
            with open(path, "wb") as f:
                f.write(b"\x80\x04K\x01")
                f.seek(size // 2)
                f.write(PROPS80)
                f.seek(size - 1)
                f.write(b".")
        else:
            blob = os.urandom(1 << 20) * (size >> 20)
            with open(path, "wb") as f:
                f.write(pickle.dumps({"constants": blob, "meta": PROPS80.decode()}, protocol=4))
            del blob
    return root


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="HEAD")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--make-tree", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.make_tree:
        print(make_tree(a.make_tree))
        return 0
    work = tempfile.mkdtemp(prefix="jw-bench-large-")
    try:
        # Built by another process: a child's peak memory (wait4) counts what the parent held when it forked.
        root = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--make-tree", os.path.join(work, "tree")],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        here = os.path.abspath(os.path.join(HERE, os.pardir, "src"))
        base = base_src(a.base, os.path.join(work, "base"))
        byte_compile(here)
        byte_compile(base)
        cmd = [
            sys.executable,
            "-m",
            "jitwarden",
            "verify",
            "--quick",
            "--format",
            "json",
            "--target",
            "90",
            root,
        ]
        env = {
            "this code": dict(os.environ, PYTHONPATH=here),
            f"code at {a.base}": dict(os.environ, PYTHONPATH=base),
        }
        docs = {}
        for k, e in env.items():
            out = subprocess.run(cmd, env=e, capture_output=True, text=True).stdout
            docs[k] = sorted(
                (x["name"] if x.get("name") else x["id"], f["code"], f["message"])
                for x in json.loads(out)["entries"]
                for f in x["findings"]
            )
        runs = {k: [] for k in env}
        order = list(env)
        for r in range(a.repeat):
            for k in order if r % 2 == 0 else order[::-1]:
                runs[k].append(timed(cmd, env[k]))
        print(
            f"tree: the real H200 Inductor cache, plus a 1.5 GB sparse FX pickle and a 300 MB real one; "
            f"medians of {a.repeat} rounds, fresh processes, the two codes alternating"
        )
        med = {
            k: tuple(statistics.median(x[i] for x in v) for i in range(3)) for k, v in runs.items()
        }
        for k, (w, c, m) in med.items():
            print(f"{k:22s} wall {w:7.2f} s   cpu {c:7.2f} s   peak {m:8.1f} MB")
        (kt, t), (kb, b) = list(med.items())
        print(
            f"ratio {kt} / {kb}: {t[0] / b[0]:.2f}x wall, {t[1] / b[1]:.2f}x cpu, {t[2] / b[2]:.3f}x peak memory"
        )
        for k, d in docs.items():
            print(f"findings, {k}:")
            for name, code, msg in d:
                print(f"  {code:13s} {msg[:150]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
