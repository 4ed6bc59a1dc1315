"""JAX persistent-compilation-cache entries: the compression stream, then the serialized executable.

JAX (``jax/_src/compilation_cache.py``, 0.10-0.11) writes ``<module>-<sha256 key>-cache`` as
``compress(compile_time (4 bytes, big-endian) + executable.serialize())``, compressed with zstd when
Python has ``compression.zstd`` (3.14) or the ``zstandard`` package, else zlib. The serialized executable
of PJRT's IFRT wrapper starts with a varint length and a header message (protobuf wire format) whose
field 2 is the format name (``pjrt_ifrt``), field 7 the executable's (HLO module's) name and field 9 its
ABI version; the backend's own executable follows, with the GPU's cubins inside it (compressed by XLA
0.11 on the H200; each cubin's ptxas command line still reads as text).

What is judged (design.md §3): a zlib stream is fully known (its Adler-32 covers every byte), so a
broken, truncated or trailing-garbage stream is damage; a zstd frame is walked block by block (a frame
cut short is damage) and decoded only where this Python can. Anything inside the decompressed bytes
that does not parse as above is *not understood*, never damage: the stream's checksum already says
the bytes are what JAX wrote. See ARCHITECTURE.md ("How to add … A cache kind").
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from jitwarden.formats import elf
from jitwarden.formats.reading import Reading

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
TIME_BYTES = 4
MAX_EXECUTABLE = 4 << 30
"""Decompressed bytes read at most; a larger executable is reported as not checked."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JaxPayload(Reading):
    """What one ``-cache`` file says, in the order the file holds it.

    ``problem``: damage to the compression stream (a fully known format); ``unknown``: what was not
    understood (the entry is then not judged further); ``module``: the executable's own name, from
    the IFRT header; ``cubin_sms``: the SM of each CUDA ELF image embedded in it.
    """

    compression: str | None = None
    compile_time: int | None = None
    serialization: str | None = None
    module: str | None = None
    abi: tuple[str, ...] = ()
    """The IFRT header's executable ABI version (field 9), as its strings in order: on the H200
    ``("xla::GpuXlaExecutableAbiVersion", "CUDA", "13.0.0", "9.19.0", "3.2.0")``, where 9.19.0 is the
    installed cuDNN's version; shown as read, not judged."""
    cubin_sms: tuple[int, ...] = ()
    executable_bytes: int | None = None


# ---------------------------------------------------------------- protobuf wire format (read only)


def varint(buf: bytes, i: int) -> tuple[int, int]:
    """(value, next offset) of the varint at ``buf[i]``; ValueError when it runs past the end or 10 bytes."""
    out = shift = 0
    for _n in range(10):
        if i >= len(buf):
            raise ValueError("varint past the end")
        c = buf[i]
        i += 1
        out |= (c & 0x7F) << shift
        if c < 0x80:
            return out, i
        shift += 7
    raise ValueError("varint longer than 10 bytes")


def fields(buf: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of every top-level field of one protobuf message; ValueError
    when ``buf`` is not a well-formed message (groups, which protobuf 3 never writes, included)."""
    out: list[tuple[int, int, int | bytes]] = []
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise ValueError("field number 0")
        if wt == 0:
            v, i = varint(buf, i)
            out.append((num, wt, v))
        elif wt == 2:
            n, i = varint(buf, i)
            if i + n > len(buf):
                raise ValueError("length-delimited field past the end")
            out.append((num, wt, buf[i : i + n]))
            i += n
        elif wt in (1, 5):
            n = 8 if wt == 1 else 4
            if i + n > len(buf):
                raise ValueError("fixed field past the end")
            out.append((num, wt, int.from_bytes(buf[i : i + n], "little")))
            i += n
        else:
            raise ValueError(f"wire type {wt}")
    return out


# ---------------------------------------------------------------- compression


def _zstd_decoder() -> Callable[[bytes], bytes] | None:
    """A one-shot zstd decompress function when this Python has one (3.14's ``compression.zstd``, or the
    ``zstandard`` package), else None."""
    try:
        from compression import zstd

        return cast("Callable[[bytes], bytes]", zstd.decompress)
    except ImportError:
        pass
    try:
        import zstandard

        return lambda data: zstandard.ZstdDecompressor().decompress(
            data, max_output_size=MAX_EXECUTABLE
        )
    except ImportError:
        return None


def zstd_frame_problem(data: bytes) -> str | None:
    """Why ``data`` is not one whole zstd frame (RFC 8878 §3.1.1: header, blocks, optional checksum), or None.

    Only the frame's structure is walked: block contents are not decoded here.
    """
    if len(data) < 6 or data[:4] != ZSTD_MAGIC:
        return "no zstd frame header"
    fhd = data[4]
    if fhd & 0x08:
        return "reserved bit set in the zstd frame header"
    single = (fhd >> 5) & 1
    i = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + ((1 if single else 0), 2, 4, 8)[fhd >> 6]
    while True:
        if i + 3 > len(data):
            return f"zstd frame cut short after {len(data)} bytes (a block header is missing)"
        h = int.from_bytes(data[i : i + 3], "little")
        last, btype, size = h & 1, (h >> 1) & 3, h >> 3
        if btype == 3:
            return "reserved zstd block type"
        i += 3 + (1 if btype == 1 else size)
        if i > len(data):
            return f"zstd frame cut short: a block ends at byte {i}, the file has {len(data)}"
        if last:
            break
    i += 4 if fhd & 0x04 else 0
    if i > len(data):
        return "zstd frame cut short: its checksum is missing"
    if i < len(data):
        return f"{len(data) - i} bytes after the end of the zstd frame"
    return None


def decompress(data: bytes) -> tuple[str | None, bytes | None, str | None, str | None]:
    """(compression, decompressed bytes or None, damage, what was not understood) of one ``-cache`` file."""
    if data[:4] == ZSTD_MAGIC:
        why = zstd_frame_problem(data)
        if why:
            return "zstd", None, why, None
        decode = _zstd_decoder()
        if decode is None:
            return (
                "zstd",
                None,
                None,
                "zstd-compressed and this Python has no zstd decoder: content not checked",
            )
        try:
            return "zstd", decode(data), None, None
        except Exception as exc:
            return "zstd", None, f"zstd stream does not decode: {exc}", None
    if len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0:
        d = zlib.decompressobj()
        try:
            out = d.decompress(data, MAX_EXECUTABLE)
        except zlib.error as exc:
            return "zlib", None, f"zlib stream is damaged ({exc})", None
        if d.unconsumed_tail:
            return "zlib", None, None, f"decompresses past {MAX_EXECUTABLE >> 20} MiB: not checked"
        if not d.eof:
            return "zlib", None, f"zlib stream cut short after {len(data)} bytes", None
        if d.unused_data:
            return (
                "zlib",
                None,
                f"{len(d.unused_data)} bytes after the end of the zlib stream",
                None,
            )
        return "zlib", out, None, None
    return None, None, None, "neither a zlib stream nor a zstd frame: not a compression JAX writes"


# ---------------------------------------------------------------- the executable


_PTXAS_ARCH = re.compile(rb"-arch sm_(\d{2,3})[af]? ")


def embedded_cubin_sms(exe: bytes, limit: int = 256) -> tuple[int, ...]:
    """The SM of every CUDA ELF image in ``exe`` (sound headers only; anything else that starts with the
    ELF magic is ignored: a byte string inside the executable is no evidence), and of every cubin whose
    ptxas command line (CUDA 13's ``.note.nv.tkinfo``: ``... -arch sm_90a ...``) reads in it: XLA keeps its
    cubins compressed inside the executable, where that text survives as it is."""
    out = [int(m) for m in _PTXAS_ARCH.findall(exe)]
    i = exe.find(elf.MAGIC)
    while i >= 0 and len(out) < limit:
        head = elf.parse_head(exe[i : i + elf.HEADER_SIZE], len(exe) - i)
        if head.sm is not None:
            out.append(head.sm)
        i = exe.find(elf.MAGIC, i + 4)
    return tuple(sorted(set(out)))


def strings(buf: bytes, depth: int = 6) -> list[str]:
    """The printable strings of a protobuf message and the messages nested in it, in order (empty when
    ``buf`` is no message)."""
    out: list[str] = []
    try:
        found = fields(buf)
    except ValueError:
        return out
    for _num, wt, v in found:
        if wt != 2 or not isinstance(v, bytes) or not v:  # wire type 2 is always bytes
            continue
        if all(32 <= c < 127 for c in v):
            out.append(v.decode("ascii"))
        elif depth > 0:
            out += strings(v, depth - 1)
    return out


def parse(data: bytes) -> JaxPayload:
    """Judge one ``-cache`` file's bytes (see the module docstring)."""
    comp, raw, problem, unknown = decompress(data)
    if raw is None:
        return JaxPayload(problem=problem, unknown=unknown, compression=comp)
    if len(raw) < TIME_BYTES:
        return JaxPayload(
            problem=None,
            unknown=f"{len(raw)} bytes decompressed: shorter than JAX's compile-time prefix",
            compression=comp,
        )
    ctime = int.from_bytes(raw[:TIME_BYTES], "big")
    exe = raw[TIME_BYTES:]
    sms = embedded_cubin_sms(exe)
    try:
        n, i = varint(exe, 0)
        if i + n > len(exe):
            raise ValueError("header past the end")
        head = {num: v for num, wt, v in fields(exe[i : i + n]) if wt == 2}
    except ValueError as exc:
        return JaxPayload(
            problem=None,
            unknown=f"serialized executable has no header jitwarden knows ({exc})",
            compression=comp,
            compile_time=ctime,
            cubin_sms=sms,
            executable_bytes=len(exe),
        )
    fmt = head.get(2)
    fmt_s = fmt.decode("utf-8", "replace") if isinstance(fmt, bytes) else None
    if fmt_s != "pjrt_ifrt":
        return JaxPayload(
            problem=None,
            unknown=f"serialization {fmt_s or '(none)'!r} is not one jitwarden knows (pjrt_ifrt)",
            compression=comp,
            compile_time=ctime,
            serialization=fmt_s,
            cubin_sms=sms,
            executable_bytes=len(exe),
        )
    name = head.get(7)
    module = name.decode("utf-8", "replace") if isinstance(name, bytes) and name else None
    abi = head.get(9)
    return JaxPayload(
        problem=None,
        unknown=None if module else "the executable's header names no module",
        compression=comp,
        compile_time=ctime,
        serialization=fmt_s,
        module=module,
        abi=tuple(strings(abi)[:8]) if isinstance(abi, bytes) else (),
        cubin_sms=sms,
        executable_bytes=len(exe),
    )
