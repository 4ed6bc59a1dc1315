"""Start-up warnings that would have caught the seed report's case: one line each, saying what to do.

Pure functions over the fingerprint (and a small sample of a cache root), so
activation can call them in every process for the price of a few stats.
Standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from jitwarden.adapters.triton import metadata_arch
from jitwarden.env import ptxas as _ptxas
from jitwarden.model.arch import torch_arch_warning
from jitwarden.model.settings import PARTITION
from jitwarden.store.reads import read_json

SAMPLE = 8
"""Entries read from an unpartitioned root to tell whether another fingerprint shares it."""


def archs_of(fp, target: int | None = None) -> tuple[int, ...]:
    """The GPU archs the checks judge for: ``--target`` when given, else the visible GPUs."""
    if target is not None:
        return (target,)
    return fp.device_archs() if fp is not None else ()


def torch_arch(fp, archs: tuple[int, ...] | None = None) -> list[str]:
    """The device's compute capability (or ``archs``: a ``--target``) is missing from torch's compiled arch list.

    Evidence: ``CUDA_ARCH_FLAGS`` read from ``libtorch_python.so`` (what ``torch.cuda.get_arch_list()``
    returns). Nothing is said when that list is unknown: see :func:`torch_arch_not_run`.
    """
    torch = fp.package("torch")
    if torch is None or torch.arch_list is None or not torch.cuda:
        return []
    archs = fp.device_archs() if archs is None else archs
    found = (torch_arch_warning(torch.version, torch.arch_list, a) for a in archs)
    return [w for w in found if w]


def torch_arch_not_run(fp, archs: tuple[int, ...]) -> str | None:
    """Why :func:`torch_arch` could not judge ``archs``; None when it did."""
    if not archs:
        return "no GPU visible and no --target: torch's arch list was not checked against any GPU"
    torch = fp.package("torch")
    if torch is None:
        return None  # no torch, no torch kernels: nothing to check
    if not torch.cuda:
        return (
            f"torch {torch.version} is a CPU build: it has no compiled GPU arch list, so whether it runs on "
            f"sm_{', sm_'.join(map(str, archs))} was not checked"
        )
    if torch.arch_list is None:
        return (
            f"torch {torch.version}'s compiled arch list (CUDA_ARCH_FLAGS in libtorch_python.so) could not be "
            "read: whether it has kernels for this GPU was not checked"
        )
    return None


def _recipe(fp):
    """The ptxas choice of the installed Triton release (3.6 takes ptxas-blackwell from sm_100, 3.9 from sm_90)."""
    triton = fp.package("triton")
    return _ptxas.recipe_for(triton.version if triton else None)


@dataclass(frozen=True, slots=True)
class PtxasProblem:
    """The ptxas Triton resolves for ``arch`` cannot assemble for it; ``variable`` is the one that picks it."""

    arch: int
    path: str
    release: str | None
    variable: (
        str  # TRITON_PTXAS_PATH or TRITON_PTXAS_BLACKWELL_PATH, as the installed Triton reads them
    )

    def sentence(self) -> str:
        return (
            f"ptxas {self.path} (release {self.release}) cannot target sm_{self.arch}: Triton compiles will "
            f"fail; point {self.variable} at a ptxas from a CUDA release that supports sm_{self.arch}"
        )


def ptxas_problems(fp, archs: tuple[int, ...] | None = None) -> list[PtxasProblem]:
    """The ptxas Triton resolves for the device's arch (or ``archs``) cannot assemble for it, as records.

    Evidence: the ptxas release (``ptxas --version``) against the first and last CUDA release
    that support the arch; unknown either way says nothing (see :func:`ptxas_not_run`).
    """
    out = []
    recipe = _recipe(fp)
    for arch in fp.device_archs() if archs is None else archs:
        info = fp.ptxas_for(recipe.role(arch))
        if info is not None and _ptxas.can_target(info, arch) is False:
            out.append(PtxasProblem(arch, info.path, info.release, recipe.binary(arch)[1]))
    return out


def ptxas_target(fp, archs: tuple[int, ...] | None = None) -> list[str]:
    """:func:`ptxas_problems` in words: one start-up warning each."""
    return [p.sentence() for p in ptxas_problems(fp, archs)]


def ptxas_not_run(fp, archs: tuple[int, ...]) -> str | None:
    """Why :func:`ptxas_target` could not judge ``archs``; None when it judged every one."""
    if not archs:
        return "no GPU visible and no --target: Triton's ptxas was not checked against any GPU"
    why = []
    recipe = _recipe(fp)
    for arch in archs:
        info = fp.ptxas_for(recipe.role(arch))
        if info is None:
            why.append(f"no ptxas found for sm_{arch} (Triton's {recipe.role(arch)} role)")
        elif _ptxas.can_target(info, arch) is None:
            why.append(
                f"whether ptxas release {info.release or '?'} supports sm_{arch} is not known"
            )
    return "; ".join(why) + ": not checked" if why else None


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """One start-up check as run for some GPU archs: its warnings, or why it could not run."""

    check: str  # torch-arch, ptxas
    archs: tuple[int, ...]
    warnings: tuple[str, ...] = ()
    not_run: str | None = None


def run_checks(fp, archs: tuple[int, ...]) -> list[CheckOutcome]:
    """The torch arch list and ptxas checks for ``archs`` (see :func:`archs_of`), each saying if it could not run."""
    return [
        CheckOutcome(
            "torch-arch", archs, tuple(torch_arch(fp, archs)), torch_arch_not_run(fp, archs)
        ),
        CheckOutcome("ptxas", archs, tuple(ptxas_target(fp, archs)), ptxas_not_run(fp, archs)),
    ]


def foreign_entries(metas, archs, triton_version) -> list[str]:
    """Why sampled entry metadata was built for another fingerprint (pure): other arch or Triton."""
    why = set()
    for md in metas:
        arch = metadata_arch(md)  # every Triton metadata layout, as the scanner reads it
        if archs and arch is not None and arch not in archs:
            why.add(f"sm_{arch}")
        tv = md.get("triton_version")
        if triton_version and isinstance(tv, str) and tv != triton_version:
            why.add(f"Triton {tv}")
    return sorted(why)


def sample_metadata(root: str, n: int = SAMPLE) -> list[dict]:
    """Metadata of up to ``n`` top-level Triton entries of ``root`` (cheap: stops after ``n``)."""
    out: list[dict] = []
    try:
        it = os.scandir(root)
    except OSError:
        return out
    with it:
        for e in it:
            if len(out) >= n:
                break
            if len(e.name) != 52 or not e.is_dir(follow_symlinks=False):
                continue
            try:
                names = os.listdir(e.path)
            except OSError:
                continue
            grp = next((x for x in names if x.startswith("__grp__") and x.endswith(".json")), None)
            if grp is None or grp[len("__grp__") :] not in names:
                continue
            try:
                md = read_json(os.path.join(e.path, grp[len("__grp__") :]), max_bytes=1 << 16)
            except (OSError, ValueError):
                continue
            if isinstance(md, dict):
                out.append(md)
    return out


def shared_root(
    root: str, archs: tuple[int, ...], triton_version: str | None, advice: str | None = None
) -> list[str]:
    """An unpartitioned root read by this process holds entries of another fingerprint: built for other
    GPU ``archs`` or by another Triton than ``triton_version``. Plain values, whichever record they came from.
    ``advice``: what to do, where partitions were not switched off (``doctor``)."""
    why = foreign_entries(sample_metadata(root), archs, triton_version)
    if not why:
        return []
    return [
        f"{root} is shared, unpartitioned, with entries built for {', '.join(why)}: a cache hit there "
        "can load another toolchain's kernel; "
        + (
            advice
            or f"unset {PARTITION.name}=0 (partitions keep them "
            "apart) or run `jitwarden verify` on it"
        )
    ]


def unsafe_root(root: str, why: str, instead: str | None, unsafe: bool = True) -> str:
    """The one warning for a refused cache root. ``unsafe``: others could write or own it (the fix is its
    owner and mode); else it cannot be created or written here (the fix is another place)."""
    where = f"using the private partition {instead} instead" if instead else "not partitioning it"
    fix = (
        "fix its owner/mode (chmod o-w) to share it safely"
        if unsafe
        else "point the cache at a directory you can write, or make this one writable"
    )
    return f"refusing cache root {root} ({why}); {where}; {fix}"
