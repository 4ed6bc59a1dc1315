"""push/pull through a real registry against export/import of the same bundle, in the same run (CPU).

A builder with a guarded Triton partition of real kernels (``triton.compile`` on the CPU with explicit
GPUTargets: ``--archs`` x 6 variants) makes its bundle twice per round: ``export -o FILE`` and
``push REF`` (a local docker-registry, plain HTTP on loopback); a fresh node (its own HOME, same
fingerprint) installs it twice: ``import FILE`` and ``pull REF``. Every step is a ``jitwarden``
process, as a user or an init container runs it, so each includes the same start-up. Reported per
step: the median wall time over ``--rounds`` (fresh destinations each round), the bytes (bundle file,
OCI layer, what the registry stored, requests), and the ratios push/export and pull/import.

    PYTHONPATH=src:. python benchmarks/bench_oci.py [--archs 80,90,100] [--rounds 5]

Needs docker-registry on PATH (``apt-get install docker-registry``) and the ``cryptography`` package.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repo root: tests.helpers
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from tests.helpers import kernels
from tests.helpers import registry as reghelp
from tests.helpers.fleet import GUARD, node_env, triton_partition

SRC = os.path.join(os.path.dirname(HERE), "src")


def jw(env: dict, *args) -> tuple[float, dict | None, str]:
    """(wall seconds, the JSON document or None, stderr) of one ``jitwarden ARGS --format json``."""
    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "jitwarden", *args, "--format", "json"],
        env={**env, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    took = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"jitwarden {' '.join(args)} -> {p.returncode}\n{p.stderr[-2000:]}")
    return took, (json.loads(p.stdout) if p.stdout.strip() else None), p.stderr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archs", default="80,90,100")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    exe = reghelp.binary()
    if exe is None:
        raise SystemExit("no docker-registry on PATH (apt-get install docker-registry)")
    work = tempfile.mkdtemp(prefix="jw-bench-oci-")
    reg = reghelp.Registry(exe, os.path.join(work, "registry"))
    try:
        keys = os.path.join(work, "keys")
        os.makedirs(keys)
        builder = node_env(
            os.path.join(work, "builder"),
            JITWARDEN_SIGNING_KEY=os.path.join(keys, "k"),
            JITWARDEN_TRUSTED_KEYS=os.path.join(keys, "k.pub"),
        )
        subprocess.run(
            [sys.executable, "-m", "jitwarden", "keygen"],
            env={**builder, "PYTHONPATH": SRC},
            check=True,
            capture_output=True,
        )
        jobs = kernels.jobs_for(archs=tuple(int(a) for a in args.archs.split(",")))
        part = triton_partition(builder)
        t = time.perf_counter()
        kernels.build_cache(
            part, [dict(j) for j in jobs], env={**builder, "TRITON_CACHE_MANAGER": GUARD}
        )
        print(
            f"built {len(jobs)} guarded kernels in {time.perf_counter() - t:.1f} s", file=sys.stderr
        )
        ref = f"{reg.host}/bench/kernels:v1"
        times: dict[str, list[float]] = {"export": [], "import": [], "push": [], "pull": []}
        sizes: dict = {}
        for r in range(args.rounds):
            bundle = os.path.join(work, f"bundle-{r}.tar")
            s, doc, _ = jw(builder, "export", "-o", bundle)
            times["export"].append(s)
            sizes["bundle_file_bytes"], sizes["entries"], sizes["entry_bytes"] = (
                doc["file_bytes"],
                doc["entries"],
                doc["bytes"],
            )
            s, doc, _ = jw(builder, "push", ref, "--insecure")
            times["push"].append(s)
            sizes["layer_bytes"] = doc["layer_bytes"]
            node_i = node_env(
                os.path.join(work, f"import-{r}"),
                JITWARDEN_TRUSTED_KEYS=builder["JITWARDEN_TRUSTED_KEYS"],
            )
            s, doc, _ = jw(node_i, "import", bundle)
            assert doc["counts"]["installed"] == sizes["entries"], doc["counts"]
            times["import"].append(s)
            node_p = node_env(
                os.path.join(work, f"pull-{r}"),
                JITWARDEN_TRUSTED_KEYS=builder["JITWARDEN_TRUSTED_KEYS"],
            )
            s, doc, _ = jw(node_p, "pull", ref, "--insecure")
            assert doc["counts"]["installed"] == sizes["entries"], doc["counts"]
            times["pull"].append(s)
            shutil.rmtree(node_i["HOME"])
            shutil.rmtree(node_p["HOME"])
            os.unlink(bundle)
        sizes["registry_bytes"] = sum(os.path.getsize(p) for p in reg.blobs())
        med = {k: statistics.median(v) for k, v in times.items()}
        out = {
            "kernels": len(jobs),
            "rounds": args.rounds,
            "median_s": {k: round(v, 3) for k, v in med.items()},
            "ratio_push_vs_export": round(med["push"] / med["export"], 3),
            "ratio_pull_vs_import": round(med["pull"] / med["import"], 3),
            **sizes,
        }
        print(json.dumps(out, indent=1))
        return 0
    finally:
        reg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
