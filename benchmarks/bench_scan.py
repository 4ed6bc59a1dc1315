"""How fast is ``verify --quick``? Entries per second, next to ``du -s`` on the same tree.

Builds a Triton cache of N entries (default 10,000) from real compiled kernels:
each copy gets its own key (directory name, metadata hash, group paths) so that
the tree looks like a real, clean cache. Then, in one run and with a warm page
cache for both: ``du -s`` (the baseline: it only stats every file) and
``jitwarden verify --quick`` as a user runs it (a fresh process, JSON output).

    python benchmarks/bench_scan.py [N] [--keep DIR]
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
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))  # the repo root: tests.helpers

from tests.helpers import kernels  # noqa: E402


def make_tree(dst: str, n: int, templates: list[str]) -> None:
    blobs = []
    for t in templates:
        files = {}
        for name in os.listdir(t):
            with open(os.path.join(t, name), "rb") as f:
                files[name] = f.read()
        blobs.append(files)
    os.makedirs(dst, exist_ok=True)
    for i in range(n):
        files = blobs[i % len(blobs)]
        h = hashlib.sha256(f"bench-{i}".encode()).hexdigest()
        eid = base64.b32encode(bytes.fromhex(h)).decode().rstrip("=")
        entry = os.path.join(dst, eid)
        os.mkdir(entry)
        for name, data in files.items():
            if name.startswith("__grp__"):
                doc = json.loads(data)
                doc["child_paths"] = {c: os.path.join(entry, c) for c in doc["child_paths"]}
                data = json.dumps(doc).encode()
            elif name.endswith(".json"):
                md = json.loads(data)
                md["hash"] = h
                data = json.dumps(md).encode()
            with open(os.path.join(entry, name), "wb") as f:
                f.write(data)


def timed(cmd: list[str], env=None) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t


def measure(roots: list[str], repeat: int) -> tuple[float, float, dict]:
    """(du -s seconds, verify --quick seconds, its JSON) over ``roots``: medians of ``repeat`` runs after one warm-up."""
    jw = [sys.executable, "-m", "jitwarden", "verify", "--quick", "--format", "json", "--target", "90", *roots]
    du = ["du", "-s", *roots]
    timed(du)
    timed(jw)  # warm both page caches and the fingerprint memo
    du_t = statistics.median(timed(du) for _ in range(repeat))
    jw_t = statistics.median(timed(jw) for _ in range(repeat))
    return du_t, jw_t, json.loads(subprocess.run(jw, capture_output=True, text=True).stdout)


def report(n: int, du_t: float, jw_t: float, repeat: int, summary: dict) -> None:
    """The figures every scan benchmark prints, against ``du -s`` of the same tree in the same run."""
    print(f"du -s                    {du_t * 1000:8.1f} ms   {n / du_t:10.0f} entries/s")
    print(f"jitwarden verify --quick {jw_t * 1000:8.1f} ms   {n / jw_t:10.0f} entries/s  (whole CLI run, median of {repeat})")
    print(f"ratio jitwarden / du:    {jw_t / du_t:.2f}x")
    print(f"findings on the clean tree: errors={summary['errors']} warnings={summary['warnings']} {summary['by_code']}")
    print(f"goal >= 10000 entries/s: {'met' if n / jw_t >= 10_000 else 'NOT met'}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", metavar="DIR", help="build the tree here and keep it")
    args = ap.parse_args()

    work = args.keep or tempfile.mkdtemp(prefix="jw-bench-scan-")
    try:
        src = os.path.join(work, "templates")
        if not os.path.isdir(src):
            kernels.build_cache(src, kernels.jobs_for(archs=(90,)))
        templates = [os.path.join(src, d) for d in sorted(os.listdir(src))]
        tree = os.path.join(work, "cache")
        if not os.path.isdir(tree):
            t = time.perf_counter()
            make_tree(tree, args.n, templates)
            print(f"built {args.n} entries in {time.perf_counter() - t:.1f}s", file=sys.stderr)
        n = len(os.listdir(tree))
        files = sum(len(os.listdir(os.path.join(tree, d))) for d in os.listdir(tree))

        du_t, jw_t, doc = measure([tree], args.repeat)
        print(f"tree: {n} entries, {files} files; {os.cpu_count()} cores")
        report(n, du_t, jw_t, args.repeat, doc["summary"])
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
