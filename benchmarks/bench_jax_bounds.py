"""Peak memory of judging a hostile JAX ``-cache`` file (issue 32), before and after the bounds, in one run.

Three files made from the real ``jit_f_add`` entry (``tests/data/real/jax_cupy``): the clean entry (the
baseline), a zlib bomb of 2.5 MB that inflates to 2.5 GiB (its header still naming ``jit_f_add``), and a
sparse file of 1.9 GB starting with the real stream. Each is judged in a child process, as ``verify`` does
(``adapters.jax.inspect_entry``) and as a guarded start does (``runtime.flatseal.check_root``); the child
prints its own ``ru_maxrss``. ``--before SRC``: the ``src`` dir of another checkout (``git archive <commit>
src | tar -x -C DIR``), measured in the same run.

    .venv/bin/python benchmarks/bench_jax_bounds.py [--before /tmp/before/src]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.helpers import jaxfiles
from tests.unit.adapters.test_jax import ADD, unpack

CHILD = r"""
import json, resource, sys, time
from jitwarden.adapters import jax as jx
from jitwarden.model.entries import Judge
from jitwarden.runtime import flatseal
root, how, name = sys.argv[1:4]
t = time.monotonic()
if how == "verify":
    out = [f.code for f in jx.inspect_entry(root, name, Judge(target_arch=90)).findings]
else:
    out = flatseal.check_root("jax", root, None)
print(json.dumps({"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "s": time.monotonic() - t, "out": out}))
"""


def child(src: str, root: str, how: str) -> dict:
    env = dict(os.environ, PYTHONPATH=src)
    p = subprocess.run(
        [sys.executable, "-c", CHILD, root, how, ADD], capture_output=True, text=True, env=env
    )
    if p.returncode:
        return {"rss_mb": float("nan"), "s": float("nan"), "out": p.stderr.strip()[-200:]}
    return json.loads(p.stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", help="the src dir of the code to compare against")
    args = ap.parse_args()
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    srcs = [("after", here)] + ([("before", args.before)] if args.before else [])
    tmp = tempfile.mkdtemp()
    try:
        root = unpack("jax_cache", tmp)
        for n in os.listdir(root):
            if n != ADD and os.path.isfile(os.path.join(root, n)):
                os.remove(os.path.join(root, n))
        shutil.rmtree(os.path.join(root, "xla_gpu_per_fusion_autotune_cache_dir"))
        path = os.path.join(root, ADD)
        with open(path, "rb") as f:
            real = f.read()
        cases = {
            "clean": lambda: None,
            "bomb 2.5 GiB": lambda: open(path, "wb").write(
                jaxfiles.bomb(zlib.decompress(real), 2560 << 20)
            ),
            "sparse 1.9 GB": lambda: jaxfiles.sparse(path, 1900 << 20, real),
        }
        for case, make in cases.items():
            for how in ("verify", "start-up"):
                for label, src in srcs:
                    for n in os.listdir(
                        root
                    ):  # each run from the file alone: a start-up seals, quarantines
                        if n.startswith(".jitwarden") or n == ADD:
                            os.remove(os.path.join(root, n))
                    with open(path, "wb") as f:
                        f.write(real)
                    make()
                    r = child(src, root, how)
                    print(
                        f"{case:14} {how:9} {label:6} peak {r['rss_mb']:8.1f} MB  "
                        f"{r['s']:6.2f} s  {json.dumps(r['out'])[:90]}"
                    )
                    time.sleep(0.1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
