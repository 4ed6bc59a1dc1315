"""How fast is ``verify --quick``? Entries per second, against baselines measured in the same run.

Builds a Triton cache of N entries (default 10,000) from real compiled kernels:
each copy gets its own key (directory name, metadata hash, group paths) so that
the tree looks like a real, clean cache. Then, with a warm page cache, in
interleaved rounds (each command a fresh process): ``du -s`` (it stats every
file), a bare single-process Python walk that stats every file and reads the
bytes verify reads (the floor for any Python scan), and ``jitwarden verify
--quick`` as a user runs it (JSON output). The baseline code runs in the same rounds: by default
the code at ``main`` (``git archive`` of its ``src/``, no worktree made), or ``--base REV``, or
``--against OTHER/src``; the benchmark checks that both print the same JSON and prints the ratio
of wall time, CPU time and peak memory (each process's own, from ``wait4``).

    python benchmarks/bench_scan.py [N] [--keep DIR] [--repeat R] [--base REV | --against SRC | --no-base]
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
from dataclasses import dataclass

sys.path.insert(
    0, os.path.join(os.path.dirname(__file__), os.pardir)
)  # the repo root: tests.helpers

from tests.helpers import kernels


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


def timed(cmd: list[str], env=None) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak resident MB) of one fresh process; CPU and memory from its own
    ``wait4`` (CPU includes the workers it reaped; memory is the largest of it and them)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _pid, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def base_src(rev: str, dst: str) -> str:
    """``src/`` of the git revision ``rev`` of this repository, unpacked under ``dst`` (``git archive``: the
    repository's worktrees are left alone); returns the ``src`` dir."""
    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
    os.makedirs(dst, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", repo, "archive", rev, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", dst], input=archive, check=True)
    return os.path.join(dst, "src")


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

    pkg = (
        os.path.join(src, "jitwarden")
        if src
        else os.path.dirname(importlib.util.find_spec("jitwarden").origin)
    )
    compileall.compile_dir(pkg, quiet=1)


@dataclass(frozen=True)
class Figures:
    """Medians of one benchmark run: (wall s, CPU s) per command, all measured in the same interleaved rounds."""

    du: tuple[float, float, float]  # wall s, CPU s, peak MB
    jw: tuple[float, float, float]
    doc: dict
    walk: tuple[float, float, float] | None = None
    base: tuple[float, float, float] | None = None  # the same CLI run by the code in ``against``
    same_json: bool | None = None  # whether ``against`` printed the same JSON (elapsed_s aside)
    cold: tuple[float, float, float] | None = (
        None  # this code with the scan's memo off: a first scan
    )


def measure(
    roots: list[str], repeat: int, *, against: str | None = None, with_walk: bool = False
) -> Figures:
    """Time ``du -s``, the bare walk (``with_walk``: one Triton root), ``verify --quick`` and, with ``against``
    (another checkout's ``src``), the same verify run by that code: one warm-up each, then ``repeat`` rounds
    in which every command runs once, so machine noise hits them alike. Medians of each."""
    jw = [
        sys.executable,
        "-m",
        "jitwarden",
        "verify",
        "--quick",
        "--format",
        "json",
        "--target",
        "90",
        *roots,
    ]
    cmds: dict[str, tuple[list[str], dict | None]] = {"du": (["du", "-s", *roots], None)}
    if with_walk:
        cmds["walk"] = ([sys.executable, os.path.abspath(__file__), "--walk", roots[0]], None)
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "src")
    home = tempfile.mkdtemp(
        prefix="jw-bench-scan-home-"
    )  # verify's stats and memos, never the real HOME's
    private = dict(os.environ, HOME=home, XDG_CACHE_HOME=os.path.join(home, ".cache"))
    cmds["jw"] = (jw, dict(private, PYTHONPATH=here))
    # The same code with the scan's memo off (ops/scanmemo.py): every file read, as a first scan reads them.
    cmds["cold"] = (jw, dict(private, PYTHONPATH=here, JITWARDEN_SCAN_MEMO="0"))
    byte_compile(here)
    if against:
        cmds["base"] = (jw, dict(private, PYTHONPATH=os.path.abspath(against)))
        byte_compile(against)
    runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in cmds}
    for k, (cmd, env) in cmds.items():
        timed(cmd, env)  # warm the page cache and the fingerprint memo
    order = list(cmds)
    for r in range(repeat):
        # The two codes swap places every round (as the warm-start pairs do): a fixed order favoured the code run
        # second by 6-12 % in an A/A run (the same code in both places), more than the differences measured.
        if "base" in cmds and r % 2:
            order = [k for k in order if k not in ("jw", "base")] + (
                ["base", "jw"] if order[-1] == "base" else ["jw", "base"]
            )
        elif "base" in cmds:
            order = [k for k in order if k not in ("jw", "base")] + ["jw", "base"]
        for k in order:
            cmd, env = cmds[k]
            runs[k].append(timed(cmd, env))
    med = {k: tuple(statistics.median(r[i] for r in v) for i in range(3)) for k, v in runs.items()}
    text = subprocess.run(jw, capture_output=True, text=True, env=cmds["jw"][1]).stdout
    same = None
    if against:
        old = subprocess.run(jw, capture_output=True, text=True, env=cmds["base"][1]).stdout
        same = _without_times(text) == _without_times(old)
        print(
            f"JSON of this code and of {against}: {'identical byte for byte' if same else 'DIFFERENT'} "
            "(elapsed_s aside)"
        )
    cold = subprocess.run(jw, capture_output=True, text=True, env=cmds["cold"][1]).stdout
    if _without_times(cold) != _without_times(text):
        print("JSON with the memo off: DIFFERENT from the memo's")
    return Figures(
        med["du"], med["jw"], json.loads(text), med.get("walk"), med.get("base"), same, med["cold"]
    )


def _without_times(text: str) -> str:
    """A JSON document as printed, its ``elapsed_s`` value blanked (the one field that differs run to run)."""
    import re

    return re.sub(r'"elapsed_s":[0-9.eE+-]+', '"elapsed_s":_', text)


def report(n: int, fig: Figures, repeat: int, goal: float = 20_000) -> None:
    """The figures every scan benchmark prints, each against baselines measured in the same run."""

    def line(what: str, t: tuple[float, float, float]) -> None:
        print(
            f"{what:34s} {t[0] * 1000:8.1f} ms  {n / t[0]:9.0f} entries/s   cpu {t[1] * 1000:7.1f} ms "
            f"({n / t[1]:7.0f} entries per CPU s)   peak {t[2]:6.1f} MB"
        )

    print(
        f"medians of {repeat} interleaved rounds; every command a fresh process; cpu = user + sys of it and its children"
    )
    line("du -s", fig.du)
    if fig.walk:
        line("bare Python walk (1 process)", fig.walk)
    if fig.base:
        line("verify --quick, the code compared", fig.base)
    if fig.cold:
        line("verify --quick, memo off (1st scan)", fig.cold)
    line("jitwarden verify --quick", fig.jw)
    print(f"ratio verify / du:   {fig.jw[0] / fig.du[0]:.2f}x wall")
    if fig.cold:
        print(
            f"ratio verify / memo off: {fig.jw[0] / fig.cold[0]:.2f}x wall; memo off / du: "
            f"{fig.cold[0] / fig.du[0]:.2f}x wall, {n / fig.cold[0]:.0f} entries/s"
        )
    if fig.walk:
        print(
            f"ratio verify / walk: {fig.jw[0] / fig.walk[0]:.2f}x wall, {fig.jw[1] / fig.walk[1]:.2f}x cpu"
        )
    if fig.base:
        print(
            f"ratio verify / the code compared: {fig.jw[0] / fig.base[0]:.2f}x wall, {fig.jw[1] / fig.base[1]:.2f}x cpu, "
            f"{fig.jw[2] / fig.base[2]:.2f}x peak memory"
        )
    s = fig.doc["summary"]
    print(
        f"findings on the clean tree: errors={s['errors']} warnings={s['warnings']} {s['by_code']}"
    )
    print(
        f"goal >= {goal:.0f} entries/s: {'met' if n / fig.jw[0] >= goal else 'NOT met'} by wall, "
        f"{'met' if n / fig.jw[1] * min(os.cpu_count() or 1, 2) >= goal else 'NOT met'} by CPU time on "
        f"{min(os.cpu_count() or 1, 2)} cores; "
        f"goal <= 3x du: {'met' if fig.jw[0] <= 3 * fig.du[0] else 'NOT met'}"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", metavar="DIR", help="build the tree here and keep it")
    base = ap.add_mutually_exclusive_group()
    base.add_argument(
        "--against",
        metavar="SRC",
        help="time this checkout's code (its src/ dir) in the same rounds",
    )
    base.add_argument(
        "--base",
        metavar="REV",
        default="main",
        help="time the code of this git revision in the same rounds (default: main)",
    )
    base.add_argument(
        "--no-base", action="store_true", help="no baseline code (du and the walk only)"
    )
    ap.add_argument(
        "--walk", metavar="TREE", help=argparse.SUPPRESS
    )  # the bare walk, run as its own process
    args = ap.parse_args()
    if args.walk:
        walk(args.walk)
        return 0

    # Absolute: the group files name their children by absolute path, as Triton writes them (a relative
    # --keep would make every entry's children lie "outside" it: 50,000 foreign-path findings).
    work = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="jw-bench-scan-")
    scratch = tempfile.mkdtemp(
        prefix="jw-bench-base-"
    )  # the baseline's code: never written into a kept tree
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

        against = args.against
        if against is None and not args.no_base:
            against = base_src(
                args.base, os.path.join(scratch, f"base-{args.base.replace('/', '_')}")
            )
        fig = measure([tree], args.repeat, against=against, with_walk=True)
        print(
            f"tree: {n} entries, {files} files, {walk(tree) / 1e6:.1f} MB read by the walk; {os.cpu_count()} cores"
        )
        report(n, fig, args.repeat)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
