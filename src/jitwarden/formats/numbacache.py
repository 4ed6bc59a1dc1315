"""numba-cuda's on-disk cache (``@cuda.jit(cache=True)``): pickles walked opcode by opcode, never loaded.

numba (``numba/core/caching.py``, used by numba-cuda 0.30) writes per function ``<module>.<qualname>-<line>.py<XY>.nbi``
(the index: a pickle of numba's version, then a pickle of ``(source stamp, {key: data file name})``,
the key holding the signature, the target's ``ComputeCapability(major, minor)`` and numba-cuda's version)
and one ``<same stem>.<n>.nbc`` per overload (a pickle of the kernel's state, a dict: ``cooperative``, ``name``, the kernel's mangled name
``_ZN<len><module><len><function>B2v<n>…``, its signature, and the code library with its PTX and cubin).

:func:`pickletools.genops` reads opcodes without executing anything: a pickle that does not parse to its
STOP is damage (numba cannot load it); any other shape is not understood. See ARCHITECTURE.md.
"""

from __future__ import annotations

import io
import pickletools
import re
from dataclasses import dataclass

from jitwarden.formats import elf
from jitwarden.formats.reading import Reading

_MANGLED_PART = re.compile(r"(\d{1,9})")  # a longer length runs past any name


@dataclass(frozen=True, slots=True)
class NumbaFile(Reading):
    """What one ``.nbi`` or ``.nbc`` says (:class:`~jitwarden.formats.reading.Reading`)."""

    numba_version: str | None = None
    data_files: tuple[str, ...] = ()
    compute_capabilities: tuple[int, ...] = ()
    mangled: str | None = None
    function: tuple[str, ...] = ()
    cubin_sm: int | None = None


def _ops(data: bytes) -> list[tuple[str, object]]:
    """(opcode name, argument) of one whole pickle; ValueError when it does not run to its STOP."""
    return [(op.name, arg) for op, arg, _pos in pickletools.genops(io.BytesIO(data))]


def _pickle_end(data: bytes, start: int) -> int:
    """The offset just past the pickle that starts at ``start``."""
    f = io.BytesIO(data)
    f.seek(start)
    last: int | None = 0
    for _op, _arg, pos in pickletools.genops(f):
        last = pos
    assert last is not None  # genops gives every opcode's position on a seekable stream
    return last + 1


def demangle(name: str) -> tuple[str, ...]:
    """The nested-name parts of an Itanium ``_ZN<len><part>…`` name (``_ZN6jwkern3addB2v1…`` -> (jwkern, add));
    () when it is not one."""
    if not name.startswith("_ZN"):
        return ()
    out, i = [], 3
    while i < len(name) and name[i].isdigit():
        m = _MANGLED_PART.match(name, i)
        assert m is not None  # name[i] is a digit, so the part's length matches
        n = int(m.group(1))
        i = m.end()
        if i + n > len(name):
            return ()
        out.append(name[i : i + n])
        i += n
    return tuple(out)


def parse_index(data: bytes) -> NumbaFile:
    """An ``.nbi``: numba's version, the data files it lists and the compute capabilities of its keys."""
    try:
        end = _pickle_end(data, 0)
        head = _ops(data[:end])
        body = _ops(data[end:])
    except ValueError as exc:
        return NumbaFile(problem=f"index pickle does not parse ({exc}): numba cannot read it")
    version = next((a for _n, a in head if isinstance(a, str)), None)
    strs = [
        a
        for n, a in body
        if n in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE") and isinstance(a, str)
    ]
    files = tuple(s for s in strs if s.endswith(".nbc"))
    if not files:
        return NumbaFile(unknown="an index listing no .nbc data file", numba_version=version)
    return NumbaFile(
        numba_version=version, data_files=files, compute_capabilities=_capabilities(body)
    )


def _capabilities(body: list[tuple[str, object]]) -> tuple[int, ...]:
    """The compute capabilities (90 for 9.0) the index's keys name, each ``ComputeCapability`` followed by its
    two ints; sorted, each once."""
    ccs = []
    for k, (_n, a) in enumerate(body):
        if a == "ComputeCapability" and k + 6 < len(body):
            ints = [
                x for nn, x in body[k + 1 : k + 8] if nn.startswith("BININT") and isinstance(x, int)
            ][:2]
            if len(ints) == 2:
                ccs.append(ints[0] * 10 + ints[1])
    return tuple(sorted(set(ccs)))


def parse_data(data: bytes) -> NumbaFile:
    """An ``.nbc``: the kernel's mangled name (the ``name`` key's value) and its cubin's SM."""
    try:
        ops = _ops(data)
    except ValueError as exc:
        return NumbaFile(problem=f"data pickle does not parse ({exc}): numba cannot load it")
    first = next((a for _n, a in ops if isinstance(a, str)), None)
    if (
        first != "cooperative"
    ):  # numba-cuda 0.30's kernel state starts so; CPU numba's data is another shape
        return NumbaFile(
            unknown="not a numba-cuda kernel's data as numba-cuda 0.30 writes it (a CPU numba cache?): "
            "not judged"
        )
    mangled = None
    for k, (_n, a) in enumerate(ops):
        if a == "name":  # the top-level dict's first "name" key: the kernel's mangled name follows
            mangled = next((x for _nn, x in ops[k + 1 : k + 4] if isinstance(x, str)), None)
            break
    sm = None
    for _n, a in ops:
        if isinstance(a, bytes) and a[:4] == elf.MAGIC:
            head = elf.parse_head(a[: elf.HEADER_SIZE], len(a))
            if head.sm is not None:
                sm = head.sm
                break
    if mangled is None:
        return NumbaFile(unknown="no kernel name in the data pickle", cubin_sm=sm)
    return NumbaFile(mangled=mangled, function=demangle(mangled), cubin_sm=sm)
