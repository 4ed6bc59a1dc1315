"""The corpus of real caches captured on the H200 (``tests/data/real``), unpacked for tests and counts.

Each ``<name>.tar.xz`` holds ``<name>/{inductor,triton,ComputeCache,torch_extensions}`` as the stock
stack wrote them under ``/root/out/work/<name>/`` (``benchmarks/h200_capture_corpus.py``);
``facts.json`` records the machine: driver 580.159.04, torch 2.11.0+cu130, Triton 3.6.0, H200 sm_90,
Python 3.12, the driver JIT compiler's build stamp (Apr 29 2026) and nvJitLink's (Aug 20 2025).

Triton group files hold absolute paths into the capture's original tree, so an unpacked copy is
truthfully ``foreign-path``; :func:`relocate` rewrites that prefix to the unpacked place, as if the
capture had been made there.
"""

from __future__ import annotations

import json
import os
import tarfile
import time

from jitwarden.adapters import triton as tri
from jitwarden.model.entries import Judge
from jitwarden.ops import scan
from jitwarden.ops.roots import roots_from_paths
from tests.helpers.paths import DATA as _DATA

DATA = os.path.join(_DATA, "real")
ORIGIN = "/root/out/work"
ROOTS = ("inductor", "triton", "ComputeCache", "torch_extensions")


def facts() -> dict:
    with open(os.path.join(DATA, "facts.json")) as f:
        return json.load(f)


def names() -> list[str]:
    return sorted(n[: -len(".tar.xz")] for n in os.listdir(DATA) if n.endswith(".tar.xz"))


def unpack(name: str, dest: str, relocated: bool = True) -> str:
    """Unpack capture ``name`` into ``dest``; returns ``dest/<name>``, relocated unless told otherwise."""
    with tarfile.open(os.path.join(DATA, f"{name}.tar.xz")) as t:
        t.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    here = os.path.join(dest, name)
    if relocated:
        relocate(here, f"{ORIGIN}/{name}")
    return here


def relocate(tree: str, origin: str) -> int:
    """Rewrite ``origin`` to ``tree`` in every Triton ``__grp__*.json`` under ``tree``; returns files changed."""
    n = 0
    for d, _dirs, files in os.walk(tree):
        for f in files:
            if f.startswith("__grp__") and f.endswith(".json"):
                p = os.path.join(d, f)
                with open(p) as fh:
                    text = fh.read()
                new = text.replace(origin + "/", tree + "/")
                if new != text:
                    with open(p, "w") as fh:
                        fh.write(new)
                    n += 1
    return n


def roots(tree: str) -> list[str]:
    """The cache roots a capture holds, in a fixed order."""
    return [os.path.join(tree, r) for r in ROOTS if os.path.isdir(os.path.join(tree, r))]


def facts_judge(target_arch: int | None = 90) -> Judge:
    """A judge standing where the capture was made: its torch, Triton, CUDA, Python and driver."""
    f = facts()["facts"]
    return Judge(
        target_arch=target_arch,
        triton_version=f["triton"],
        host_machine=tri.host_machine(),
        orphan_age=3600.0,
        now=time.time(),
        versions=(("torch", f["torch"]), ("triton", f["triton"])),
        gpu_names=(f["device"],),
        driver_version="580.159.04",
        torch_cuda=f["cuda"],
        python_tag="312",
        uid=os.getuid(),
    )


def scan_tree(tree: str, judge: Judge) -> scan.ScanReport:
    target = scan.Target(judge.target_arch, "cli")
    return scan.scan(roots_from_paths(roots(tree)), judge, target, jobs=1)


def driver_stand_in(dest: str, stamp: bytes = b"Apr 29 2026") -> str:
    """A directory standing in for the capture machine's driver libraries: a libcuda (mtime 1, as the
    Nix store gives) beside a ``libnvidia-ptxjitcompiler.so.1`` carrying the JIT compiler's one build
    stamp. Returns the libcuda path, for ``JITWARDEN_LIBCUDA``."""
    os.makedirs(dest, exist_ok=True)
    lib = os.path.join(dest, "libcuda.so.1")
    with open(lib, "wb") as f:
        f.write(b"\x7fELF")
    os.utime(lib, (1, 1))
    with open(os.path.join(dest, "libnvidia-ptxjitcompiler.so.1"), "wb") as f:
        f.write(b"\x7fELF\0" + b"\0" * 64 + stamp + b"\0" + b"\0" * 64)
    return lib


def counts(report) -> dict:
    """Entries and findings by severity, per cache kind and in all."""
    out: dict = {"entries": 0, "error": 0, "warn": 0, "info": 0, "by_code": {}}
    for e in report.entries:
        out["entries"] += 1
        for f in e.findings:
            out[str(f.severity)] += 1
            out["by_code"][f.code] = out["by_code"].get(f.code, 0) + 1
    return out
