"""PTX header facts: ``.version``, ``.target`` and the ``.entry`` names."""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION = re.compile(rb"^\s*\.version\s+(\d+\.\d+)", re.MULTILINE)
_TARGET = re.compile(rb"^\s*\.target\s+([A-Za-z0-9_]+)", re.MULTILINE)
_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$][A-Za-z0-9_$]*)")
_SM = re.compile(r"sm_(\d{1,9})(?!\d)")  # more digits: no SM (int() refuses 4,300+)


@dataclass(frozen=True, slots=True)
class PtxHeader:
    version: str | None
    target: str | None
    entries: tuple[str, ...]

    @property
    def target_arch(self) -> int | None:
        if self.target:
            m = _SM.match(self.target)
            if m:
                return int(m.group(1))
        return None


def parse_header(data: bytes) -> PtxHeader:
    """Read the header facts from the head of a PTX file (the first few KiB suffice)."""
    v = _VERSION.search(data)
    t = _TARGET.search(data)
    return PtxHeader(
        v.group(1).decode() if v else None,
        t.group(1).decode() if t else None,
        _entry_names(data),
    )


def _entry_names(data: bytes) -> tuple[str, ...]:
    """``_ENTRY.findall(data)``, decoded; each candidate found by ``bytes.find`` (a PTX head has a dot
    every few bytes, each of which the regex search would stop at: 5x the time for thousands of heads)."""
    out = []
    i = data.find(b".entry")
    while i >= 0:
        m = _ENTRY.match(data, i)
        if m is not None:
            out.append(m.group(1).decode())
            i = m.end()
        else:
            i += 1
        i = data.find(b".entry", i)
    return tuple(out)
