"""Every load hook against the real sources of every release it supports, and the newest this index offers
(issue 42): each release's wheel is downloaded (``pip download --no-deps``), the modules the hooks wrap are read
out of it without installing or importing anything, and ``runtime/hookshapes.protection`` says what a workload
would get there: the load hook, or the fallback and why. Exit 1 when a supported release would not be hooked.

    python benchmarks/hook_matrix.py [--jax 0.8.1,0.9.2,0.10.2,latest] [--numba-cuda 0.20.1,...,latest]

CI runs it beside the suite. JAX and numba-cuda wheels are a few MB each; CuPy's and torch's are hundreds, so
those are judged as installed in the test venv (CuPy 14.2, torch 2.13) and in CI's torch 2.11 leg.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from jitwarden.runtime import hookshapes

# tool -> (distribution, the package dir its hooked modules live in inside the wheel, supported releases)
TOOLS = {
    "jax": ("jax", "jax", "0.8.1,0.9.2,0.10.2,latest"),
    "numba": ("numba-cuda", "numba_cuda", "0.20.1,0.24.0,0.28.2,0.30.4,latest"),
}


def _wheel(dist: str, version: str, into: str) -> str:
    spec = dist if version == "latest" else f"{dist}=={version}"
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    subprocess.run([*cmd, "-d", into, spec], check=True, capture_output=True, text=True)
    (whl,) = [f for f in os.listdir(into) if f.endswith(".whl")]
    return os.path.join(into, whl)


def judge(tool: str, version: str, work: str) -> hookshapes.Protection:
    """What a workload gets from ``tool`` at ``version``: its wheel's sources, read as doctor reads them."""
    dist, _top, _ = TOOLS[tool]
    d = tempfile.mkdtemp(dir=work)
    whl = _wheel(dist, version, d)
    got = os.path.basename(whl).split("-")[1]
    site = os.path.join(d, "site")
    files = tuple(
        "/".join(t.module.split(".")) + ".py" for t in hookshapes.TARGETS if t.tool == tool
    )
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if name.endswith(files):  # jax/_src/compiler.py; numba_cuda/numba/cuda/core/caching.py
                z.extract(name, site)

    def find(name: str) -> str | None:
        p = os.path.join(site, name)
        return p if os.path.isdir(p) else None

    (p,) = [
        x
        for x in hookshapes.protection({}, package_dir=find, version=lambda _d: got)
        if x.tool == tool
    ]
    return p


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for tool, (dist, _top, versions) in TOOLS.items():
        ap.add_argument(
            f"--{dist}", default=versions, help=f"releases of {dist} (default {versions})"
        )
    args = ap.parse_args(argv)
    bad = 0
    with tempfile.TemporaryDirectory(prefix="jw-hook-matrix-") as work:
        for tool, (dist, _top, _v) in TOOLS.items():
            for v in getattr(args, dist.replace("-", "_")).split(","):
                try:
                    p = judge(tool, v, work)
                except subprocess.CalledProcessError as exc:
                    print(
                        f"{dist} {v}: not downloaded ({(exc.stderr or '').strip().splitlines()[-1:]})"
                    )
                    bad += 1
                    continue
                ok = p.state == "load hook" and p.why is None
                bad += not ok
                print(f"{dist} {v}: {p.line()}" + ("" if ok else "  <- NOT HOOKED"))
        for p in hookshapes.protection({}):  # as installed here (the test venv: CuPy 14.2, torch)
            ok = p.state == "load hook" and p.why is None
            bad += not ok
            print(f"installed: {p.line()}" + ("" if ok else "  <- NOT HOOKED"))
    print(f"hook matrix: {bad} release(s) not hooked")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
