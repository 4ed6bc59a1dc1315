"""GPU architecture names: ``sm_90a`` / ``90`` / ``(9, 0)`` to one integer form."""

from __future__ import annotations

import re

_ARCH_RE = re.compile(r"^(?:sm_?|compute_?)?(\d{2,3})([af]?)$", re.IGNORECASE)


def parse_arch(text: str | int) -> int:
    """``"sm_90a"``, ``"90"``, ``"9.0"`` or ``90`` to ``90``; ValueError otherwise."""
    if isinstance(text, int):
        return text
    s = str(text).strip()
    if re.fullmatch(r"\d+\.\d+", s):
        major, minor = s.split(".")
        return int(major) * 10 + int(minor)
    m = _ARCH_RE.match(s)
    if not m:
        raise ValueError(f"not a GPU architecture: {text!r} (expected e.g. sm_90, 90 or 9.0)")
    return int(m.group(1))


def from_capability(major: int, minor: int) -> int:
    return major * 10 + minor


def sm_name(arch: int, accelerated: bool = False) -> str:
    return f"sm_{arch}{'a' if accelerated else ''}"


def triton_gpu_name(arch: int) -> str:
    """The ``--gpu-name`` Triton 3.x passes to ptxas: ``a`` suffix from arch 90 on."""
    return f"sm_{arch}{'a' if arch >= 90 else ''}"
