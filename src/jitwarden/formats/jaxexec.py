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

import itertools
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from jitwarden.formats import elf
from jitwarden.formats.reading import Reading

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
TIME_BYTES = 4
MAX_EXECUTABLE = 64 << 20
"""Decompressed bytes held at most: past it an executable is judged by its head (the IFRT header names its
module) and the rest is said not checked (ARCHITECTURE.md, "Reads bounded by kind")."""


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


def varint(buf: bytes | memoryview, i: int) -> tuple[int, int]:
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


class _Decompressor(Protocol):
    """What :func:`inflate` feeds: ``zlib.decompressobj()``, 3.14's ``compression.zstd`` decompressor, or
    :class:`_ZstandardReader`."""

    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...


class _ZstandardReader:
    """The ``zstandard`` package's stream reader behind the ``decompress(data, max_length)`` of 3.14's
    ``compression.zstd`` decompressor: its one-shot and ``decompressobj`` calls have no bound on their output, and
    a bound is what a bomb needs. The whole frame is given at the start (:func:`inflate` joins it)."""

    def __init__(self, frame: bytes) -> None:
        import zstandard

        self._r = zstandard.ZstdDecompressor().stream_reader(frame, read_across_frames=False)
        self.eof = False
        self.unused_data = b""

    def decompress(self, _data: bytes, max_length: int) -> bytes:
        out: bytes = self._r.read(max_length)
        self.eof = not out
        return out


def _zstd_decoder() -> Callable[[bytes], _Decompressor] | None:
    """A bounded zstd decompressor factory (given the whole frame) when this Python has one: 3.14's
    ``compression.zstd``, or the ``zstandard`` package, as JAX uses them; else None."""
    try:
        from compression import zstd

        return lambda _frame: zstd.ZstdDecompressor()
    except ImportError:
        pass
    import importlib.util

    return _ZstandardReader if importlib.util.find_spec("zstandard") else None


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


@dataclass(frozen=True, slots=True)
class Inflated:
    """What :func:`inflate` made of a ``-cache`` file: ``data``, the decompressed bytes (the first ``cap`` of them
    when ``cut``); ``problem``, damage to the stream; ``unknown``, what was not understood."""

    compression: str | None
    data: bytes | None
    problem: str | None = None
    unknown: str | None = None
    cut: bool = False


def _zlib_header(head: bytes) -> bool:
    return len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0


def _pieces(d: _Decompressor, chunks: Iterator[bytes], first: bytes, limit: int) -> Iterator[bytes]:
    """Feed ``first`` then ``chunks`` to the decompressor ``d`` (``decompress(data, max_length)``), yielding its
    output in pieces, ``limit`` bytes in all at most; stops at the stream's end."""
    left = limit
    for chunk in itertools.chain((first,), chunks):
        buf = chunk
        while buf and not d.eof and left:
            piece = d.decompress(buf, left)
            left -= len(piece)
            yield piece
            buf = getattr(d, "unconsumed_tail", b"")
            if not piece and not buf:
                break
        if d.eof or not left:
            return
    while not d.eof and left:  # output still held inside the decompressor after the last input
        piece = d.decompress(b"", left)
        if not piece:
            return
        left -= len(piece)
        yield piece


def inflate(chunks: Iterable[bytes], cap: int = MAX_EXECUTABLE, whole: bool = True) -> Inflated:
    """Decompress a ``-cache`` file given as ``chunks`` (one ``bytes`` or the 1 MiB reads of
    ``store/reads.read_chunks``), holding at most ``cap`` bytes of output: a stream that decompresses past it is
    cut there (``cut``, the rest not checked: a bomb costs its cap, never what it claims). ``whole=False``: the
    chunks are the file's head only, so a stream that ends early is no damage."""
    it = iter(chunks)
    first = next(it, b"")
    if first[:4] == ZSTD_MAGIC:
        if whole:  # the frame is walked whole (the file is within its read bound)
            first, it = first + b"".join(it), iter(())
            if why := zstd_frame_problem(first):
                return Inflated("zstd", None, why)
        make = _zstd_decoder()
        if make is None:
            return Inflated(
                "zstd",
                None,
                unknown="zstd-compressed and this Python has no zstd decoder: content not checked",
            )
        comp, d, damaged = "zstd", make(first), Exception
    elif _zlib_header(first):
        comp, d, damaged = "zlib", zlib.decompressobj(), zlib.error
    else:
        return Inflated(
            None,
            None,
            unknown="neither a zlib stream nor a zstd frame: not a compression JAX writes",
        )
    pieces: list[bytes] = []
    held = 0
    try:
        for piece in _pieces(d, it, first, cap + 1):
            pieces.append(piece)
            held += len(piece)
            # one byte past the cap: cut there, joined once (the cap held twice at most)
            if held > cap:
                pieces[-1] = piece[: len(piece) - (held - cap)]
                return Inflated(
                    comp,
                    b"".join(pieces),
                    cut=True,
                    unknown=f"decompresses past {cap >> 20} MiB: the rest not checked",
                )
    except damaged as exc:
        return Inflated(comp, None, f"{comp} stream is damaged ({exc})")
    if not d.eof:
        return (
            Inflated(comp, None, f"{comp} stream cut short")
            if whole
            else Inflated(comp, b"".join(pieces), cut=True)
        )
    if rest := len(d.unused_data) + sum(len(c) for c in it):
        said = f"{rest} bytes" if whole else "the file goes on"
        return Inflated(comp, None, f"{said} after the end of the {comp} stream")
    return Inflated(comp, b"".join(pieces))


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


def parse(data: bytes | Inflated) -> JaxPayload:
    """Judge one ``-cache`` file, its bytes or what :func:`inflate` made of them (see the module docstring). An
    executable cut at the cap is judged by its head: its header still names its module."""
    inf = inflate((data,)) if isinstance(data, bytes) else data
    comp, raw = inf.compression, inf.data
    if raw is None:
        return JaxPayload(problem=inf.problem, unknown=inf.unknown, compression=comp)
    if len(raw) < TIME_BYTES:
        return JaxPayload(
            problem=None,
            unknown=inf.unknown
            or f"{len(raw)} bytes decompressed: shorter than JAX's compile-time prefix",
            compression=comp,
        )
    return _executable(inf, raw)


def _header(exe: memoryview) -> dict[int, int | bytes]:
    """The length-delimited fields of the IFRT header that opens a serialized executable, by number; ValueError
    when there is none."""
    n, i = varint(exe, 0)
    if i + n > len(exe):
        raise ValueError("header past the end")
    return {num: v for num, wt, v in fields(bytes(exe[i : i + n])) if wt == 2}


def _executable(inf: Inflated, raw: bytes) -> JaxPayload:
    """What the decompressed ``raw`` (JAX's compile time, then the serialized executable) says."""
    comp = inf.compression
    ctime = int.from_bytes(raw[:TIME_BYTES], "big")
    exe = memoryview(raw)[TIME_BYTES:]  # no copy: an executable can be the cap's size
    sms = embedded_cubin_sms(raw)
    try:
        head = _header(exe)
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
        unknown=inf.unknown if module else "the executable's header names no module",
        compression=comp,
        compile_time=ctime,
        serialization=fmt_s,
        module=module,
        abi=tuple(strings(abi)[:8]) if isinstance(abi, bytes) else (),
        cubin_sms=sms,
        executable_bytes=None if inf.cut else len(exe),
    )


# ---------------------------------------------------------------- what an executable computes

_Leaf = tuple[tuple[int, ...], int, int | bytes]
"""(path of field numbers, wire type, value) of one leaf of a protobuf message."""


def _leaves(buf: bytes, path: tuple[int, ...], out: list[_Leaf], depth: int = 0) -> bool:
    """Every leaf of the protobuf message ``buf`` as (path of field numbers, value), a length-delimited field that
    parses as a message walked into; False when ``buf`` is no message."""
    try:
        found = fields(buf)
    except ValueError:
        return False
    for num, wt, v in found:
        here = path + (num,)
        if isinstance(v, bytes) and len(v) >= 2 and depth < 40 and _leaves(v, here, out, depth + 1):
            continue
        out.append((here, wt, v))
    return True


def _module_prefix(leaves: list[_Leaf]) -> tuple[int, ...] | None:
    """The path of the optimized HLO module (``HloModuleProto``): where computations (3) hold instructions (2)."""
    for p, _wt, _v in leaves:
        for i in range(len(p) - 1):
            if p[i : i + 2] == (3, 2):
                return p[:i]
    return None


def computes(exe: bytes | memoryview) -> tuple[_Leaf, ...] | None:
    """What a serialized executable (after JAX's compile time) computes, without its debug info: the sorted leaves
    of the backend executable after the IFRT header, less what ``xla/service/hlo.proto`` says is not code: each
    instruction's ``metadata`` (computations (3) -> instructions (2) -> metadata (7): op names, source lines), the
    module's ``stack_frame_index`` (17: file and function names) and its ``id`` (5, a per-process counter), which
    the CPU's thunks repeat beside the module's name (``module_id``). JAX keys entries by the module with its
    debug info stripped, so two honest compiles of one key differ there (the caller's file and line, the order
    modules were compiled in) and nowhere else on the CPU; None when not parsed."""
    try:
        n, i = varint(exe, 0)
    except ValueError:
        return None
    leaves: list[_Leaf] = []
    if not _leaves(bytes(exe[i + n :]), (), leaves):
        return None
    m = _module_prefix(leaves)
    if m is None:
        return tuple(sorted(leaves))
    return _without_debug(leaves, m)


def _without_debug(leaves: list[_Leaf], m: tuple[int, ...]) -> tuple[_Leaf, ...]:
    """The sorted ``leaves`` but the debug info of the module at path ``m`` (:func:`computes` says which)."""
    k = len(m)
    ids = {v for p, wt, v in leaves if p == m + (5,) and wt == 0}
    names = {v for p, wt, v in leaves if p == m + (1,) and wt == 2}
    named = {p[:-1] for p, wt, v in leaves if p[-1:] == (2,) and wt == 2 and v in names}

    def debug(p: tuple[int, ...], wt: int, v: int | bytes) -> bool:
        if p[:k] == m:  # the module: its id, stack frames, each instruction's metadata
            return p[k : k + 1] in ((17,), (5,)) or p[k : k + 3] == (3, 2, 7)
        # the module id again, beside the module's name (XLA's thunk info: op_name 1, module_name 2, module_id 3)
        return wt == 0 and p[-1] == 3 and v in ids and p[:-1] in named

    return tuple(sorted((p, wt, v) for p, wt, v in leaves if not debug(p, wt, v)))
