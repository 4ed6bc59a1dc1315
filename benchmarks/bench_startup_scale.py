"""Start-up cost against the size of the cache: ``activate()`` and ``jitwarden run`` over N sealed Triton entries.

Issue 25's goal: at most 0.5 us per sealed entry over an empty cache (25 ms at 50,000). The torch
hooks check each kernel as Inductor loads it (``runtime/guards/inductor.py``, ``sweep.check_loaded``),
so activation walks nothing; the baseline measured in the same run is the whole-tree sweep every
start made before (``JITWARDEN_TORCH_HOOKS=0`` runs exactly that code, ``runtime/fullsweep.py``).

The partition is filled with copies of real kernels compiled and sealed through the guard, each
under its own key, and sealed once by a first sweep. Every figure is the median of fresh
interpreters, interleaved (the slow baseline fewer times), against ``python -c pass`` and against
the same start-up over an empty partition.

    PYTHONPATH=src python benchmarks/bench_startup_scale.py [--entries 50000] [--runs 15] [--baseline-runs 3]
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

RUN = "jitwarden run"


def _env(tmp: str, name: str) -> dict:
    src = os.path.join(HERE, os.pardir, "src")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "JITWARDEN_", "VLLM_", "TORCHINDUCTOR_", "XDG_"))
    }
    home = os.path.join(tmp, name)
    env.update(
        HOME=home,
        XDG_CACHE_HOME=os.path.join(home, ".cache"),
        JITWARDEN_HOME=os.path.join(home, "memo"),
        PYTHONPATH=src + os.pathsep + env.get("PYTHONPATH", ""),
    )
    os.makedirs(home)
    return env


def _fill(tree: str, seed: str, n: int) -> None:
    seeds = [n_ for n_ in os.listdir(seed) if len(n_) == 52]
    for i in range(n):
        name = base64.b32encode(hashlib.sha256(str(i).encode()).digest()).decode().rstrip("=")
        shutil.copytree(os.path.join(seed, seeds[i % len(seeds)]), os.path.join(tree, name))


def _time(what: str, env: dict) -> float:
    if what == RUN:
        import subprocess
        import time

        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "jitwarden", "run", "-q", "--", sys.executable, "-c", "pass"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        return time.perf_counter() - t
    return once(what, env)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=50000)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument(
        "--baseline-runs", type=int, default=3, help="runs of the whole-tree sweep (slow at 50,000)"
    )
    args = ap.parse_args(argv)
    from tests.helpers.guarded import compile_jobs  # real kernels, sealed by the guard

    from jitwarden.runtime import activation

    tmp = tempfile.mkdtemp(prefix="jw-bench-scale-")
    try:
        full, empty = _env(tmp, "full"), _env(tmp, "empty")
        rec = activation.activate(env=dict(full), quiet=True)
        if "TORCHINDUCTOR_CACHE_DIR" not in rec.partitions:
            print(
                "torch is not installed: activation makes no Inductor partition and sweeps nothing"
            )
            return 1
        activation.activate(env=dict(empty), quiet=True)
        seed = os.path.join(tmp, "seed")
        compile_jobs(seed, guarded=True)
        _fill(rec.partitions["TRITON_CACHE_DIR"], seed, args.entries)
        sweep_env = dict(full, JITWARDEN_TORCH_HOOKS="0")
        _time(
            ACTIVATE, sweep_env
        )  # the copies have new ctimes: this first sweep rehashes and reseals them all
        rows = {
            ("pass", "-"): [],
            (ACTIVATE, "empty"): [],
            (ACTIVATE, "full"): [],
            (RUN, "empty"): [],
            (RUN, "full"): [],
            (ACTIVATE, "sweep"): [],
        }
        envs = {"-": empty, "empty": empty, "full": full, "sweep": sweep_env}
        for i in range(args.runs):
            for (what, where), xs in rows.items():
                if where == "sweep" and i >= args.baseline_runs:
                    continue
                xs.append(_time(what, envs[where]))
        med = {k: statistics.median(v) * 1000 for k, v in rows.items()}
        n = args.entries
        base = med[("pass", "-")]
        print(
            f"{n} sealed Triton entries in the partition; medians of fresh interpreters, interleaved "
            f"({args.runs} runs; the whole-tree sweep {args.baseline_runs})"
        )
        print(f"python -c pass                               {base:8.1f} ms")
        for what in (ACTIVATE, RUN):
            e, f = med[(what, "empty")], med[(what, "full")]
            label = "activate()" if what == ACTIVATE else "jitwarden run -- python -c pass"
            print(f"{label:32s} empty cache  {e:8.1f} ms")
            print(
                f"{label:32s} {n} entries {f:8.1f} ms  over empty {f - e:+7.1f} ms = "
                f"{(f - e) * 1000 / n:+.2f} us/entry (goal <= 0.5)"
            )
        s, e = med[(ACTIVATE, "sweep")], med[(ACTIVATE, "empty")]
        f = med[(ACTIVATE, "full")]
        print(
            f"activate(), whole-tree sweep (baseline)     {s:8.1f} ms  over empty {s - e:+7.1f} ms = "
            f"{(s - e) * 1000 / n:.1f} us/entry"
        )
        print(
            f"ratio of the cost over an empty cache, now / baseline: {(f - e) / (s - e):+.4f}  "
            f"(within the noise of the empty-cache start when near 0)"
        )
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
