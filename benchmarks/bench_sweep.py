"""Start-up sweep cost: ``activate()`` with a 500-kernel TorchInductor partition, sweep on vs off.

The sweep checks the partition's Inductor kernels before Inductor's static launcher loads them
(jitwarden.runtime.sweep). With nothing changed it costs one ``scandir`` and two ``lstat``s per entry.
Each figure is the median of ``--runs`` fresh interpreters, interleaved, against
``python -c pass`` and against the same activation with ``JITWARDEN_SWEEP=0``.

    PYTHONPATH=src python benchmarks/bench_sweep.py [--entries 500] [--runs 21]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir))  # the repo root: tests.helpers
sys.path.insert(0, os.path.join(HERE, os.pardir, "src"))

from bench_activate import ACTIVATE, once


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=500)
    ap.add_argument("--runs", type=int, default=21)
    args = ap.parse_args(argv)
    from tests.helpers.guarded import compile_jobs  # real kernels, sealed by the guard

    from jitwarden.runtime import activation

    tmp = tempfile.mkdtemp(prefix="jw-bench-sweep-")
    try:
        src = os.path.join(HERE, os.pardir, "src")
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TRITON_", "JITWARDEN_", "VLLM_", "TORCHINDUCTOR_"))
        }
        env.update(
            HOME=os.path.join(tmp, "home"),
            XDG_CACHE_HOME=os.path.join(tmp, "home", ".cache"),
            JITWARDEN_HOME=os.path.join(tmp, "memo"),
            TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
            PYTHONPATH=src + os.pathsep + env.get("PYTHONPATH", ""),
        )
        os.makedirs(env["HOME"])
        part = activation.activate(env=dict(env), quiet=True).partitions.get(
            "TORCHINDUCTOR_CACHE_DIR"
        )
        if part is None:
            print(
                "torch is not installed: activation makes no Inductor partition, nothing to sweep"
            )
            return 1
        seed = os.path.join(tmp, "seed")
        compile_jobs(seed, guarded=True)
        tree = os.path.join(part, "triton", "0")
        os.makedirs(tree)
        seeds = [n for n in os.listdir(seed) if len(n) == 52]
        for i in range(args.entries):
            name = base64.b32encode(hashlib.sha256(str(i).encode()).digest()).decode().rstrip("=")
            shutil.copytree(os.path.join(seed, seeds[i % len(seeds)]), os.path.join(tree, name))
        once(ACTIVATE, env)  # first pass: copies have new ctimes, so this one rehashes and reseals
        off = dict(env, JITWARDEN_SWEEP="0")
        base, on_, off_ = [], [], []
        for _ in range(args.runs):
            base.append(once("pass", env))
            on_.append(once(ACTIVATE, env))
            off_.append(once(ACTIVATE, off))
        b, w, o = (statistics.median(x) * 1000 for x in (base, on_, off_))
        print(f"python -c pass                      median {b:7.1f} ms  ({args.runs} runs)")
        print(f"activate, sweep off                 median {o:7.1f} ms  extra {o - b:6.1f} ms")
        print(
            f"activate, sweep on ({args.entries} kernels)   median {w:7.1f} ms  extra {w - b:6.1f} ms  "
            f"sweep {w - o:5.1f} ms = {(w - o) * 1000 / args.entries:.1f} us/kernel"
        )
        print(f"ratio sweep on / off: {w / o:.2f}")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
