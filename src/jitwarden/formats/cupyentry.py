"""CuPy kernel-cache files: a SHA-1 header over the payload, then the payload.

CuPy 14 (``cupy/cuda/_compiler_cache.py``, ``DiskKernelCacheBackend``) stores ``<sha1 of the key>.cubin``
(``.ltoir`` for LTO IR, ``.hsaco`` on ROCm) as the 40 ASCII hex digits of the payload's SHA-1, then the
payload; a header that does not match makes CuPy treat the file as a miss. The payload
(``cupy/cuda/compiler.py``) is a cubin, or PTX text when NVRTC cannot target the GPU's SM
(``-arch=compute_XX``), or for modules built with ``name_expressions`` ``\\x93CUPYNE\\x00``, a
little-endian name count, each mangled name as a length and UTF-8 bytes, then the cubin.

What is judged: the header against the payload (CuPy's own check: a mismatch is damage); the cubin's
ELF header and SM; a name-expression payload's structure and that its names are kernels of its cubin.
A payload of another shape is *not understood*, never damage. See ARCHITECTURE.md.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from jitwarden.formats import elf
from jitwarden.formats.ptx import parse_header
from jitwarden.formats.reading import Reading
from jitwarden.model import bounds

HASH_LEN = bounds.CUPY_HASH_LEN
NE_MAGIC = b"\x93CUPYNE\x00"
_HEX = frozenset(b"0123456789abcdef")


@dataclass(frozen=True, slots=True, kw_only=True)
class CupyPayload(Reading):
    """One cache file read (:class:`~jitwarden.formats.reading.Reading`); ``payload`` is ``cubin``, ``ptx``,
    ``name-expressions`` (a cubin behind mangled names), ``ltoir`` or None."""

    payload: str | None = None
    cubin_sm: int | None = None
    ptx_target: str | None = None
    kernels: tuple[str, ...] = ()
    mangled_names: tuple[str, ...] = ()
    contradiction: bool = False
    """``problem`` is two facts of the file that contradict each other (a ``mismatch``), not damage (``corrupt``)."""


def _names_payload(body: bytes) -> tuple[tuple[str, ...], bytes] | str:
    """(mangled names, cubin) of a name-expression payload, or why it is not one whole."""
    pos = len(NE_MAGIC)
    if len(body) < pos + 4:
        return "name-expression payload cut short before its count"
    (count,) = struct.unpack_from("<I", body, pos)
    pos += 4
    names: list[str] = []
    for _ in range(count):
        if len(body) < pos + 4:
            return f"name-expression payload cut short in name {len(names) + 1} of {count}"
        (n,) = struct.unpack_from("<I", body, pos)
        pos += 4
        if len(body) < pos + n:
            return f"name-expression payload cut short in name {len(names) + 1} of {count}"
        try:
            names.append(body[pos : pos + n].decode("utf-8"))
        except UnicodeDecodeError:
            return f"name {len(names) + 1} of the name-expression payload is not UTF-8"
        pos += n
    return tuple(names), body[pos:]


def _cubin(data: bytes) -> tuple[int | None, tuple[str, ...], str | None, str | None]:
    """(SM, kernel names, damage, not understood) of a cubin payload.

    CuPy's ``nvrtc.getCUBIN`` drops the cubin's last byte ("Strip the trailing NULL",
    ``cupy_backends/cuda/libs/nvrtc.pyx``), a zero of the ELF's last table: a cubin whole once that
    one NUL is put back is what CuPy writes (nvcc-built payloads keep every byte).
    """
    try:
        e = elf.parse(data)
    except elf.ElfError as exc:
        try:
            e = elf.parse(data + b"\0")
        except elf.ElfError:
            return None, (), f"payload is not a sound cubin: {exc}", None
    if e.machine != elf.EM_CUDA:
        return (
            None,
            (),
            None,
            f"payload is an ELF for {elf.machine_name(e.machine)}, not a CUDA cubin",
        )
    try:
        kernels = e.function_symbols()
    except elf.ElfError as exc:
        return None, (), f"cubin's symbol table is damaged: {exc}", None
    return elf.cubin_sm(e), tuple(sorted(set(kernels))), None, None


def parse(data: bytes, suffix: str) -> CupyPayload:
    """Judge one cache file's bytes; ``suffix`` is its name's (``.cubin``, ``.ltoir``, ``.hsaco``)."""
    head, body = data[:HASH_LEN], data[HASH_LEN:]
    bad = _header_problem(data, head, body)
    if bad is not None:
        return bad
    if suffix == ".ltoir":
        return CupyPayload(payload="ltoir")
    if suffix == ".hsaco":
        return CupyPayload(
            payload="hsaco", unknown="a ROCm code object: jitwarden judges its header only"
        )
    names: tuple[str, ...] = ()
    if body.startswith(NE_MAGIC):
        got = _names_payload(body)
        if isinstance(
            got, str
        ):  # the header vouches for the bytes: CuPy wrote a payload we cannot split
            return CupyPayload(payload="name-expressions", unknown=got)
        names, body = got
    if body.startswith(elf.MAGIC):
        return _cubin_payload(body, names)
    return _text_payload(body, names)


def _header_problem(data: bytes, head: bytes, body: bytes) -> CupyPayload | None:
    """What a file whose SHA-1 header is not one, or does not match its payload, says; None when it matches."""
    if len(data) < HASH_LEN or not set(head) <= _HEX:
        return CupyPayload(
            unknown=f"does not start with the 40 hex digits of a SHA-1 header ({len(data)} bytes)"
        )
    if hashlib.sha1(body).hexdigest().encode() != head:
        return CupyPayload(
            problem=f"header SHA-1 {head.decode()} does not match the {len(body)}-byte payload "
            "(CuPy treats it as a miss)"
        )
    return None


def _cubin_payload(body: bytes, names: tuple[str, ...]) -> CupyPayload:
    """A cubin payload (after its name expressions, ``names``, when it has them): its SM and kernels, each
    recorded mangled name among them."""
    sm, kernels, problem, unknown = _cubin(body)
    kind = "name-expressions" if names else "cubin"
    if problem or unknown:
        return CupyPayload(problem=problem, unknown=unknown, payload=kind)
    missing = [n for n in names if n not in kernels]
    return CupyPayload(
        problem=f"mangled name {missing[0]} is recorded for this module but its cubin has no such kernel"
        if missing
        else None,
        payload=kind,
        cubin_sm=sm,
        kernels=kernels,
        mangled_names=names,
        contradiction=bool(missing),
    )


def _text_payload(body: bytes, names: tuple[str, ...]) -> CupyPayload:
    """A payload that is no cubin: PTX (its target and entries) when it reads as such, else not understood."""
    if not names and (b".version" in body[:4096] or b".target" in body[:4096]):
        hdr = parse_header(body[:16384])
        if hdr.target is None:
            return CupyPayload(unknown="text payload without a PTX .target", payload="ptx")
        return CupyPayload(payload="ptx", ptx_target=hdr.target, kernels=hdr.entries)
    return CupyPayload(
        unknown="payload is neither a cubin nor PTX", payload=None, mangled_names=names
    )
