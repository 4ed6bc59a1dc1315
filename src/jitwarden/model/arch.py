"""GPU architecture names: ``sm_90a`` / ``90`` / ``(9, 0)`` to one integer form."""

from __future__ import annotations

import re
from collections.abc import Collection

_ARCH_RE = re.compile(r"^(?:sm_?|compute_?)?(\d{2,3})([af]?)$", re.IGNORECASE)

# Every compute capability a CUDA release (9.x to 13.x) has a ptxas target for. A number not
# here is refused: judging a cache against a GPU that does not exist would call every
# entry foreign-arch and suggest cleaning them all.
KNOWN = (
    35,
    37,
    50,
    52,
    53,
    60,
    61,
    62,
    70,
    72,
    75,
    80,
    86,
    87,
    88,
    89,
    90,
    100,
    101,
    103,
    110,
    120,
    121,
)


def known_list() -> str:
    return ", ".join(f"sm_{a}" for a in KNOWN)


def parse_arch(text: str | int) -> int:
    """``"sm_90a"``, ``"90"``, ``"9.0"`` or ``90`` to ``90``; ValueError otherwise."""
    if isinstance(text, int):
        return text
    s = str(text).strip()
    if re.fullmatch(r"\d+\.\d+", s):
        major, minor = s.split(".")
        return _known(int(major) * 10 + int(minor), text)
    m = _ARCH_RE.match(s)
    if not m:
        raise ValueError(f"not a GPU architecture: {text!r} (expected e.g. sm_90, 90 or 9.0)")
    return _known(int(m.group(1)), text)


def _known(arch: int, text: str) -> int:
    if arch not in KNOWN:
        raise ValueError(f"unknown GPU architecture {text!r} (known: {known_list()})")
    return arch


def torch_compiled_for(arch_list: Collection[str], arch: int) -> bool:
    """Whether torch's compiled arch list holds ``sm_<arch>`` (or its ``a``/``f`` variant): real cubins for it.

    The one rule behind every "does torch run on sm_X" answer (the fingerprint's warnings and diff,
    activation's start-up check, doctor). A neighbour does not count: the seed report's sm_121 GPU
    under a list ending in sm_120 ran torch's kernels through driver PTX JIT (ARCHITECTURE.md, model/).
    """
    return any(
        a.partition("_")[0] == "sm" and a.partition("_")[2].rstrip("af") == str(arch)
        for a in arch_list
    )


def torch_arch_warning(version: str, arch_list: Collection[str], arch: int) -> str | None:
    """The start-up warning when torch ``version`` with ``arch_list`` has no cubins for ``sm_<arch>``, else None."""
    if torch_compiled_for(arch_list, arch):
        return None
    shown = " ".join(arch_list) or "empty"
    return (
        f"sm_{arch} is not in torch {version}'s compiled arch list ({shown}): torch's own "
        f"kernels run through driver PTX JIT or fail; install a torch build for sm_{arch} "
        f"(or build it with TORCH_CUDA_ARCH_LIST including {arch // 10}.{arch % 10})"
    )
