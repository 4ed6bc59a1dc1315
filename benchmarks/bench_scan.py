"""How fast is ``verify --quick``? Entries per second, against baselines measured in the same run.

Builds a Triton cache of N entries (default 10,000) from real compiled kernels:
each copy gets its own key (directory name, metadata hash, group paths) so that
the tree looks like a real, clean cache. Then, with a warm page cache, in
interleaved rounds (each command a fresh process): ``du -s`` (it stats every
file), a bare single-process Python walk that stats every file and reads the
bytes verify reads (the floor for any Python scan), and ``jitwarden verify
--quick`` as a user runs it (JSON output). ``--against OTHER/src`` times another
checkout's code in the same rounds and checks that both print the same JSON.

    python benchmarks/bench_scan.py [N] [--keep DIR] [--repeat R] [--against SRC]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

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


def timed(cmd: list[str], env=None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and every child it reaped) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def walk(root: str) -> int:
    """The floor for a Python scan of a Triton tree: one process, no judging. Stats every entry and file
    (as ``du`` does) and reads the bytes ``verify --quick`` reads: group and metadata JSON, cubins and
    launchers whole, the first 16 KiB of each PTX. Returns the bytes read."""
    got = 0
    for name in sorted(os.listdir(root)):
        entry = os.path.join(root, name)
        os.lstat(entry)
        with os.scandir(entry) as it:
            files = [(e.name, e.stat(follow_symlinks=False).st_size) for e in it]
        for fname, size in files:
            if fname.endswith(".ptx"):
                limit = 16384
            elif fname.endswith((".json", ".cubin", ".so")):
                limit = size + 1
            else:
                continue
            fd = os.open(os.path.join(entry, fname), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                got += len(os.read(fd, limit))
            finally:
                os.close(fd)
    return got


def byte_compile(src: str | None) -> None:
    """Byte-compile jitwarden's modules (as ``pip install`` does): with PYTHONDONTWRITEBYTECODE set, an
    editable checkout would otherwise compile ~40 modules from source on every run (~0.3 s here)."""
    import compileall
    import importlib.util

    pkg = os.path.join(src, "jitwarden") if src else os.path.dirname(importlib.util.find_spec("jitwarden").origin)
    compileall.compile_dir(pkg, quiet=1)


@dataclass(frozen=True)
class Figures:
    """Medians of one benchmark run: (wall s, CPU s) per command, all measured in the same interleaved rounds."""

    du: tuple[float, float]
    jw: tuple[float, float]
    doc: dict
    walk: tuple[float, float] | None = None
    base: tuple[float, float] | None = None  # the same CLI run by the code in ``against``


def measure(roots: list[str], repeat: int, *, against: str | None = None, with_walk: bool = False) -> Figures:
    """Time ``du -s``, the bare walk (``with_walk``: one Triton root), ``verify --quick`` and, with ``against``
    (another checkout's ``src``), the same verify run by that code: one warm-up each, then ``repeat`` rounds
    in which every command runs once, so machine noise hits them alike. Medians of each."""
    jw = [sys.executable, "-m", "jitwarden", "verify", "--quick", "--format", "json", "--target", "90", *roots]
    cmds: dict[str, tuple[list[str], dict | None]] = {"du": (["du", "-s", *roots], None)}
    if with_walk:
        cmds["walk"] = ([sys.executable, os.path.abspath(__file__), "--walk", roots[0]], None)
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "src")
    cmds["jw"] = (jw, dict(os.environ, PYTHONPATH=here))
    byte_compile(here)
    if against:
        cmds["base"] = (jw, dict(os.environ, PYTHONPATH=os.path.abspath(against)))
        byte_compile(against)
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    for k, (cmd, env) in cmds.items():
        timed(cmd, env)  # warm the page cache and the fingerprint memo
    for _ in range(repeat):
        for k, (cmd, env) in cmds.items():
            runs[k].append(timed(cmd, env))
    med = {k: (statistics.median(w for w, _c in v), statistics.median(c for _w, c in v)) for k, v in runs.items()}
    doc = json.loads(subprocess.run(jw, capture_output=True, text=True, env=cmds["jw"][1]).stdout)
    if against:
        old = json.loads(subprocess.run(jw, capture_output=True, text=True, env=cmds["base"][1]).stdout)
        same = [_without_times(d) for d in (doc, old)]
        print(f"JSON of this code and of {against}: {'identical' if same[0] == same[1] else 'DIFFERENT'} "
              "(elapsed_s and the fingerprint aside)")
    return Figures(med["du"], med["jw"], doc, med.get("walk"), med.get("base"))


def _without_times(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("elapsed_s",)}


def report(n: int, fig: Figures, repeat: int, goal: float = 20_000) -> None:
    """The figures every scan benchmark prints, each against baselines measured in the same run."""
    def line(what: str, t: tuple[float, float]) -> None:
        print(f"{what:34s} {t[0] * 1000:8.1f} ms  {n / t[0]:9.0f} entries/s   cpu {t[1] * 1000:7.1f} ms")

    print(f"medians of {repeat} interleaved rounds; every command a fresh process; cpu = user + sys of it and its children")
    line("du -s", fig.du)
    if fig.walk:
        line("bare Python walk (1 process)", fig.walk)
    if fig.base:
        line("verify --quick, the code compared", fig.base)
    line("jitwarden verify --quick", fig.jw)
    print(f"ratio verify / du:   {fig.jw[0] / fig.du[0]:.2f}x wall")
    if fig.walk:
        print(f"ratio verify / walk: {fig.jw[0] / fig.walk[0]:.2f}x wall, {fig.jw[1] / fig.walk[1]:.2f}x cpu")
    if fig.base:
        print(f"ratio verify / the code compared: {fig.jw[0] / fig.base[0]:.2f}x wall, {fig.jw[1] / fig.base[1]:.2f}x cpu")
    s = fig.doc["summary"]
    print(f"findings on the clean tree: errors={s['errors']} warnings={s['warnings']} {s['by_code']}")
    print(f"goal >= {goal:.0f} entries/s: {'met' if n / fig.jw[0] >= goal else 'NOT met'}; "
          f"goal <= 3x du: {'met' if fig.jw[0] <= 3 * fig.du[0] else 'NOT met'}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", metavar="DIR", help="build the tree here and keep it")
    ap.add_argument("--against", metavar="SRC", help="also time this checkout's code (its src/ dir) in the same rounds")
    ap.add_argument("--walk", metavar="TREE", help=argparse.SUPPRESS)  # the bare walk, run as its own process
    args = ap.parse_args()
    if args.walk:
        walk(args.walk)
        return 0

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

        fig = measure([tree], args.repeat, against=args.against, with_walk=True)
        print(f"tree: {n} entries, {files} files, {walk(tree) / 1e6:.1f} MB read by the walk; {os.cpu_count()} cores")
        report(n, fig, args.repeat)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
