"""The modules of ``jitwarden.runtime`` one ``activate()`` enters, in order (ARCHITECTURE.md, "The runtime").

A cold start over a Triton tree of three unsealed kernels, proofs in the background (the
default; ``--hooks off`` for the whole-tree sweep), traced with ``sys.setprofile``: every function call whose module is in
``jitwarden.runtime``, module bodies (imports) left out, consecutive repeats folded. ``--src``
points at another checkout's ``src`` to trace the code before a change the same way.

    PYTHONPATH=. python benchmarks/trace_activation.py [--src src]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--src",
        default=os.path.join(HERE, os.pardir, "src"),
        help="the src dir whose jitwarden to trace",
    )
    ap.add_argument(
        "--hooks",
        choices=("on", "off"),
        default="on",
        help="on: the torch hooks check kernels as they load (the default); off: the whole-tree sweep",
    )
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.join(HERE, os.pardir))  # the repo root: tests.helpers
    sys.path.insert(0, os.path.abspath(args.src))
    from tests.helpers import kernels
    from tests.helpers.guarded import compile_jobs

    work = tempfile.mkdtemp(prefix="jw-trace-")
    stock, tree = os.path.join(work, "stock"), os.path.join(work, "triton")
    compile_jobs(stock, guarded=False)
    kernels.copy_cache(stock, tree)
    env = dict(
        os.environ,
        JITWARDEN_PARTITION="0",
        TRITON_CACHE_DIR=tree,
        JITWARDEN_HOME=os.path.join(work, "home"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(work, "inductor"),
    )
    if args.hooks == "off":
        env["JITWARDEN_TORCH_HOOKS"] = "0"
    from jitwarden.runtime import activation

    seq: list[str] = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_name != "<module>":
            m = frame.f_globals.get("__name__", "")
            if m.startswith("jitwarden.runtime") and (not seq or seq[-1] != m):
                seq.append(m)

    sys.setprofile(prof)
    try:
        activation.activate(env=env, quiet=True)
    finally:
        sys.setprofile(None)
    print(json.dumps([m.rpartition(".")[2] for m in seq]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
