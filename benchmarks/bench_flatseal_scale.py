"""Start-up check of a JAX cache against its size: ``runtime/flatseal.check_root`` over N sealed files.

JAX and CuPy offer no load hook, so every guarded start checks their dirs against one seal per dir
(``runtime/flatseal.py``): an ``lstat`` per file and one read of the seal. This prints the cost per
file at each size, against the same check over an empty dir, and against the code of ``--base REV``
(``git archive`` of its ``src/``) in the same run when given. Each figure is the median of
``--runs`` fresh processes, each timing one check after a first one (the first seals what is new).

    python benchmarks/bench_flatseal_scale.py [--sizes 0,5000,50000] [--runs 5] [--base REV]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, os.pardir, "src")
sys.path.insert(0, HERE)

from bench_scan import base_src

ONE = """
import sys, time
from jitwarden.runtime import flatseal
root = sys.argv[1]
flatseal.check_root("jax", root, "d1")  # seals anything new: the start after is what every start costs
t = time.perf_counter()
lines = flatseal.check_root("jax", root, "d1")
print(time.perf_counter() - t, len(lines))
"""


def make_dir(root: str, n: int) -> None:
    """``n`` files named as JAX names its entries (``<module>-<sha256>-cache``), sealed once by the check itself."""
    os.makedirs(root)
    for i in range(n):
        with open(
            os.path.join(root, f"jit_f-{hashlib.sha256(str(i).encode()).hexdigest()}-cache"), "wb"
        ) as f:
            f.write(b"bench " + i.to_bytes(8, "little") * 256)


def once(src: str, root: str, home: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JITWARDEN_", "XDG_"))}
    env.update(PYTHONPATH=src, HOME=home, TMPDIR=home)
    out = subprocess.run(
        [sys.executable, "-c", ONE, root], env=env, capture_output=True, text=True, check=True
    )
    seconds, lines = out.stdout.split()
    if lines != "0":
        raise SystemExit(f"the check quarantined {lines} files of a clean dir")
    return float(seconds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="0,5000,50000")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--base", help="also time the code of this git revision, in the same rounds")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="jw-flatseal-")
    try:
        home = os.path.join(tmp, "home")
        os.makedirs(home)
        codes = {"this tree": SRC}
        if a.base:
            codes[f"base {a.base}"] = base_src(a.base, os.path.join(tmp, "base"))
        sizes = [int(x) for x in a.sizes.split(",")]
        times: dict = {(c, n): [] for c in codes for n in sizes}
        for n in sizes:
            for (
                c,
                src,
            ) in codes.items():  # a dir per code: the first check of each seals it its own way
                make_dir(os.path.join(tmp, f"{c.split()[0]}-{n}"), n)
        for _ in range(a.runs):
            for n in sizes:
                for c, src in codes.items():
                    times[(c, n)].append(once(src, os.path.join(tmp, f"{c.split()[0]}-{n}"), home))
        print(
            f"flatseal.check_root over N sealed JAX files; median of {a.runs} fresh processes each"
        )
        for c in codes:
            empty = statistics.median(times[(c, 0)]) if 0 in sizes else 0.0
            for n in sizes:
                m = statistics.median(times[(c, n)])
                per = f"{(m - empty) / n * 1e6:8.2f} us per file over an empty dir" if n else ""
                print(f"{c:>22}  {n:>7} files  {m * 1000:10.2f} ms  {per}")
        if a.base:
            for n in sizes:
                if n:
                    mine, theirs = (statistics.median(times[(c, n)]) for c in codes)
                    print(f"ratio this tree / base at {n} files: {mine / theirs:.4f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
