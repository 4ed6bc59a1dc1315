"""Start-up warnings that would have caught the seed report's case: one line each, saying what to do.

Pure functions over the fingerprint (and a small sample of a cache root), so
activation can call them in every process for the price of a few stats.
Standard library only.
"""

from __future__ import annotations

import os

from . import ptxas as _ptxas
from .adapters.triton import metadata_arch
from .fsutil import read_json

SAMPLE = 8
"""Entries read from an unpartitioned root to tell whether another fingerprint shares it."""


def _compiled_for(arch_list, arch: int) -> bool:
    """``sm_<arch>`` (or its ``a``/``f`` variant) is in torch's list: torch ships real cubins for it."""
    return any(a.partition("_")[0] == "sm" and a.partition("_")[2].rstrip("af") == str(arch) for a in arch_list)


def torch_arch(fp) -> list[str]:
    """The device's compute capability is missing from torch's compiled arch list."""
    torch = fp.package("torch")
    if torch is None or torch.arch_list is None or not torch.cuda:
        return []
    out = []
    for arch in fp.device_archs():
        if not _compiled_for(torch.arch_list, arch):
            shown = " ".join(torch.arch_list) or "empty"
            out.append(f"sm_{arch} is not in torch {torch.version}'s compiled arch list ({shown}): torch's own "
                       f"kernels run through driver PTX JIT or fail; install a torch build for sm_{arch} "
                       f"(or build it with TORCH_CUDA_ARCH_LIST including {arch // 10}.{arch % 10})")
    return out


def ptxas_target(fp) -> list[str]:
    """The ptxas Triton resolves for the device's arch cannot assemble for it."""
    out = []
    for arch in fp.device_archs():
        role = "triton-blackwell" if arch >= 100 else "triton"
        info = fp.ptxas_for(role)
        if info is not None and _ptxas.can_target(info, arch) is False:
            var = "TRITON_PTXAS_BLACKWELL_PATH" if arch >= 100 else "TRITON_PTXAS_PATH"
            out.append(f"ptxas {info.path} (release {info.release}) cannot target sm_{arch}: Triton compiles will "
                       f"fail; point {var} at a ptxas from a CUDA release that supports sm_{arch}")
    return out


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
    out = []
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
            if grp is None or grp[len("__grp__"):] not in names:
                continue
            try:
                md = read_json(os.path.join(e.path, grp[len("__grp__"):]), max_bytes=1 << 16)
            except (OSError, ValueError):
                continue
            if isinstance(md, dict):
                out.append(md)
    return out


def shared_root(fp, root: str) -> list[str]:
    """An unpartitioned root read by this process holds entries of another fingerprint."""
    tp = fp.package("triton")
    why = foreign_entries(sample_metadata(root), fp.device_archs(), tp.version if tp else None)
    if not why:
        return []
    return [f"{root} is shared, unpartitioned, with entries built for {', '.join(why)}: a cache hit there "
            "can load another toolchain's kernel; unset JITWARDEN_PARTITION=0 (partitions keep them apart) "
            "or run `jitwarden verify` on it"]


def unsafe_root(root: str, why: str, instead: str | None) -> str:
    where = f"using the private partition {instead} instead" if instead else "not partitioning it"
    return f"refusing cache root {root} ({why}); {where}; fix its owner/mode (chmod o-w) to share it safely"
