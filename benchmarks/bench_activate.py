"""Start-up cost of ``jitwarden.activate()``: warm memo and cold (memo removed), against ``python -c pass``.

Goals (issue 4): warm < 30 ms extra, cold < 1 s extra. Runs are interleaved and
each figure is the median of ``--runs`` fresh interpreters, all in one go.

    PYTHONPATH=src python benchmarks/bench_activate.py [--runs 21] [--against OTHER/src]

``--against``: also time another checkout's ``src`` (e.g. main's), interleaved in the same run,
and print the ratio of activation's extra cost (this tree / that one), warm and cold.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ACTIVATE = "import jitwarden; jitwarden.activate()"


def once(code: str, env: dict) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--against", help="another checkout's src dir to time in the same run")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="jw-bench-activate-")
    try:
        src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "JITWARDEN_", "VLLM_"))}
        env.update(HOME=os.path.join(tmp, "home"), XDG_CACHE_HOME=os.path.join(tmp, "home", ".cache"),
                   JITWARDEN_HOME=os.path.join(tmp, "memo"), TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                   PYTHONPATH=src + os.pathsep + env.get("PYTHONPATH", ""))
        os.makedirs(env["HOME"])
        other = None
        if args.against:
            other = dict(env, PYTHONPATH=os.path.abspath(args.against) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                         JITWARDEN_HOME=os.path.join(tmp, "memo-other"))
            once(ACTIVATE, other)
        once(ACTIVATE, env)  # fill the memo and the page cache
        base, warm, cold, owarm, ocold = [], [], [], [], []
        for _ in range(args.runs):
            base.append(once("pass", env))
            warm.append(once(ACTIVATE, env))
            shutil.rmtree(env["JITWARDEN_HOME"], ignore_errors=True)
            cold.append(once(ACTIVATE, env))
            if other is not None:
                owarm.append(once(ACTIVATE, other))
                shutil.rmtree(other["JITWARDEN_HOME"], ignore_errors=True)
                ocold.append(once(ACTIVATE, other))
        b, w, c = (statistics.median(x) * 1000 for x in (base, warm, cold))
        if other is not None:
            ow, oc = (statistics.median(x) * 1000 for x in (owarm, ocold))
            print(f"against {args.against}: warm median {ow:7.1f} ms (extra {ow - b:6.1f} ms), "
                  f"cold {oc:7.1f} ms (extra {oc - b:6.1f} ms)")
            print(f"ratio this/against, extra cost: warm {(w - b) / max(ow - b, 1e-9):.2f}, "
                  f"cold {(c - b) / max(oc - b, 1e-9):.2f}; whole start: warm {w / ow:.2f}, cold {c / oc:.2f}")
        print(f"python -c pass           median {b:7.1f} ms  ({args.runs} runs)")
        print(f"activate, warm memo      median {w:7.1f} ms  extra {w - b:6.1f} ms  (goal < 30 ms)")
        print(f"activate, cold (no memo) median {c:7.1f} ms  extra {c - b:6.1f} ms  (goal < 1000 ms)")
        ok = (w - b) < 30 and (c - b) < 1000
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
