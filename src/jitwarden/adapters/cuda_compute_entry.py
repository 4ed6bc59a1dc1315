"""One file of the driver's compute cache, parsed (stdlib only): the 28-byte header, the key (the producer's
build stamp, its target, the input, its options), the output's first bytes and both FNV-1a checksums, into a
:class:`ComputeEntry` (the format: :mod:`jitwarden.adapters.cuda_compute`'s docstring). Nothing judged here:
what a problem or an unknown means is the adapter's.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from jitwarden.formats.elf import HEADER_SIZE, ElfHead, parse_head

HEX = re.compile(r"^[0-9a-fA-F]+$")
_ENTRY_MAGIC = 0x41
_HEADER = struct.Struct("<IIIIIQ")


def norm_date(raw: bytes) -> str:
    return " ".join(raw.decode("ascii", "replace").split())


FNV_OFFSET = 0xCBF29CE484222325


FNV_PRIME = 0x100000001B3


CHECKSUM_MAX = 4 << 20
"""Entries up to this size are read whole and both their checksums computed (pure Python: ~0.1-0.3 s/MiB)."""


_PREFIX = re.compile(
    rb"((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-3]\d \d{4})(\d\d:\d\d:\d\d)"
    rb"HOST(32|64)(sm_\d+[af]?)"
)


_BITCODE = b"BC\xc0\xde"


READ_MAX = 64 << 20
"""Larger entry files are read only in part: their first bytes, for the header and key."""


def fnv1a64(data: bytes) -> int:
    """64-bit FNV-1a: the hash the driver names entries by (of the key) and seals their output with."""
    h, p, m = FNV_OFFSET, FNV_PRIME, _M64
    for c in data:
        h = ((h ^ c) * p) & m
    return h


@dataclass(frozen=True, slots=True)
class BuildStamp:
    """The producer's ``__DATE__`` and ``__TIME__`` that open an entry's key (``Apr 29 2026``, ``17:12:06``)."""

    date: str
    time: str


@dataclass(frozen=True, slots=True)
class EntryKey:
    """What an entry's key records: the producer's build stamp, the target (``sm_90a``) after ``HOST64``,
    the input's kind (``ptx``, ``nvvm-ir``; None when neither) and the option string (None when not read)."""

    stamp: BuildStamp
    target: str
    input: str | None = None
    options: str | None = None


@dataclass(frozen=True, slots=True)
class EntryOutput:
    """What follows an entry's key: a ``cubin`` (its ELF header) or ``ptx`` (its ``.target``)."""

    kind: str
    elf: ElfHead | None = None
    ptx_target: str | None = None


@dataclass(frozen=True, slots=True)
class Checksums:
    """An entry's FNV-1a hashes: the output's as the header records it (hex), whether the output hashes to
    it (``output_ok``) and the key to the file's name (``key_ok``); None when not computed."""

    header: str
    output_ok: bool | None = None
    key_ok: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ComputeEntry:
    """One ComputeCache entry file as read (see the module docstring for the layout).

    ``format`` is None when the header is not the driver's (then nothing else is judged);
    ``problem`` names a broken invariant of the container (sizes); ``unknown`` what of a
    known container was not understood (input, output, options). ``key`` is None when the key
    does not open with a build stamp, ``HOST32/64`` and a target; ``output`` when the output is
    neither a cubin nor PTX. ``producer``: ``driver-jit`` (PTX in, cubin out, no options: the
    driver's own PTX JIT) or ``nvjitlink`` (NVVM IR in, nvJitLink's ``-arch=`` options; cuDNN
    runtime fusion, CuPy).
    """

    format: int | None
    size: int
    problem: str | None = None
    unknown: tuple[str, ...] = ()
    key: EntryKey | None = None
    output: EntryOutput | None = None
    producer: str | None = None
    checksums: Checksums | None = None


def _input_kind(body: bytes) -> tuple[str | None, bytes]:
    """(kind, the input's bytes) of the key text after the prefix: PTX up to its NUL, or NVVM IR (LLVM bitcode)."""
    if body.startswith(_BITCODE):
        return "nvvm-ir", body
    nul = body.find(b"\x00")
    ptx = body if nul < 0 else body[:nul]
    if b".version" in ptx[:4096] and b".target" in ptx[:4096]:
        return "ptx", ptx
    return None, body


def _producer(inp: str | None, options: str | None, output: str | None) -> str | None:
    if inp == "ptx" and options == "" and output == "cubin":
        return "driver-jit"
    if inp == "nvvm-ir" and options and options.startswith("-arch=") and output in ("cubin", "ptx"):
        return "nvjitlink"
    return None


def parse_entry(data: bytes, size: int, name: str | None = None) -> ComputeEntry:
    """Facts of one entry file from its bytes (``data``: all of it, or its first bytes when it is large).

    ``name`` is the entry's hash as its path spells it (``a2daf144f9da5951``); checksums are
    computed only when ``data`` is the whole file and at most :data:`CHECKSUM_MAX` bytes.
    """
    if len(data) < _HEADER.size:
        return _unknown(
            size,
            f"{size} bytes is shorter than the driver's 28-byte entry header"
            if size < _HEADER.size
            else "header unreadable",
        )
    magic, text_len, z1, out_len, z2, out_hash = _HEADER.unpack_from(data, 0)
    if magic != _ENTRY_MAGIC or z1 or z2:
        return _unknown(size, f"header magic 0x{magic:x} is not the driver's entry format 0x41")
    out_off = _HEADER.size + text_len
    problem = None
    if out_off + out_len != size:
        problem = (
            f"header says {out_off + out_len} bytes, the file has {size}: truncated or overwritten"
        )
    whole = len(data) == size
    text = data[_HEADER.size : min(out_off, len(data))]
    unknown: list[str] = []
    key = _parse_key(text, whole and out_off <= len(data), unknown)
    out = data[out_off : out_off + out_len] if out_off < len(data) else b""
    output = _parse_output(out, min(out_len, max(size - out_off, 0)), unknown)
    sum_ok, key_ok = _sums_ok(
        (text, out), out_hash, name, whole and problem is None and size <= CHECKSUM_MAX
    )
    if not whole:
        unknown.append(
            f"{size} bytes, larger than jitwarden reads ({READ_MAX >> 20} MiB): only its header was read"
        )
    producer = _known_producer(key, output, unknown)
    return ComputeEntry(
        format=magic,
        size=size,
        problem=problem,
        unknown=tuple(unknown),
        key=key,
        output=output,
        producer=producer,
        checksums=Checksums(f"{out_hash:016x}", sum_ok, key_ok),
    )


def _unknown(size: int, why: str) -> ComputeEntry:
    """A file whose header is not the driver's entry format: ``why``, nothing else read."""
    return ComputeEntry(format=None, size=size, unknown=(why,))


def _sums_ok(
    parts: tuple[bytes, bytes], out_hash: int, name: str | None, checked: bool
) -> tuple[bool | None, bool | None]:
    """(whether the output hashes to the header's FNV-1a, whether the key hashes to the file's name), each None
    when not ``checked`` (only part of the file read, or larger than :data:`CHECKSUM_MAX`) or, for the key, when
    ``name`` is no 16-hex-digit hash."""
    if not checked:
        return None, None
    text, out = parts
    key_ok = None
    if name and len(name) == 16 and HEX.match(name):
        key_ok = fnv1a64(text) == int(name, 16)
    return fnv1a64(out) == out_hash, key_ok


def _known_producer(
    key: EntryKey | None, output: EntryOutput | None, unknown: list[str]
) -> str | None:
    """Who wrote the entry, by its input, options and output, when all of it was understood; a producer
    jitwarden does not know goes to ``unknown``."""
    if unknown:
        return None
    inp, options = (key.input, key.options) if key else (None, None)
    kind = output.kind if output else None
    producer = _producer(inp, options, kind)
    if producer is None:
        unknown.append(
            f"{inp} in, {kind} out with options {options!r}: a producer jitwarden does not know"
        )
    return producer


def _parse_key(text: bytes, complete: bool, unknown: list[str]) -> EntryKey | None:
    """The entry's key text: build stamp, target, input (PTX or NVVM IR) and, when the whole key was
    read (``complete``), the option string after the input. What is not understood goes to ``unknown``."""
    m = _PREFIX.match(text)
    if m is None:
        unknown.append("its key does not start with a build stamp, HOST32/64 and an sm_ target")
        return None
    body = text[m.end() :]
    inp, _input = _input_kind(body)
    if inp is None:
        unknown.append("its input is neither PTX nor NVVM IR")
    options = None
    if complete:
        nul = body.rfind(b"\x00")
        tail = body[nul + 1 :] if nul >= 0 else b""
        if nul < 0 or not tail.startswith(b" ") or not tail.isascii():
            unknown.append("no option string after its input")
        else:
            options = tail.decode("ascii").strip()
    return EntryKey(
        BuildStamp(norm_date(m.group(1)), m.group(2).decode()), m.group(4).decode(), inp, options
    )


def _parse_output(out: bytes, out_size: int, unknown: list[str]) -> EntryOutput | None:
    """The compiled output (its first bytes; ``out_size`` in the file): a cubin's ELF header or PTX's target."""
    if out.startswith(b"\x7fELF"):
        return EntryOutput("cubin", elf=parse_head(out[:HEADER_SIZE], out_size))
    if out.startswith(b"//") or out.lstrip().startswith(b".version"):
        t = re.search(rb"^\.target\s+(sm_\d+[af]?)", out[:8192], re.MULTILINE)
        return EntryOutput("ptx", ptx_target=t.group(1).decode() if t else None)
    if out:
        unknown.append("its output is neither a cubin (ELF) nor PTX")
    return None


_M64 = (1 << 64) - 1
