"""The bytes of Inductor's and vLLM's cache files (stdlib only): what judging needs of a file read
(:func:`read_blob`: whole up to :data:`WHOLE_MAX`, a larger one streamed once in chunks, memory flat:
:func:`stream_blob`), and what the bytes alone say: a pickle's framing (never unpickled), generated
source cut mid-statement (parsed, never run), the ``DeviceProperties`` they name.
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass

from jitwarden.formats import elf
from jitwarden.model.findings import Finding
from jitwarden.store.reads import read_bytes, read_chunks, read_head

DEVPROPS = re.compile(  # bounded: a forged 5,000-digit number is no match, not an int() that raises
    rb"DeviceProperties\(type='(\w{1,32})', index=(?:\d{1,9}|None), multi_processor_count=(\d{1,9}), "
    rb"cc=(\d{1,9}(?!\d)|'[^']{0,64}')(?:, major=(\d{1,9}|None))?"
)


FX_KEY_AFTER_INFO = re.compile(rb"fx_graph_cache_info.{0,64}?\x8c\x34(f[a-z0-9]{51})", re.DOTALL)


def pickle_problem(data: bytes | Streamed) -> str | None:
    """Why ``data`` (a whole file, or a large one as :func:`stream_blob` saw it) is not a whole pickle, judged by
    its framing only (nothing is unpickled): PROTO at the start, STOP at the end, the first frame within the
    file; None when it looks whole."""
    if isinstance(data, Streamed):
        head, last, size = data.head, data.tail[-1:], data.size
    else:
        head, last, size = data, data[-1:], len(data)
    if not size:
        return "empty"
    if size < 3 or head[0] != 0x80 or head[1] > 5:
        return "not a pickle (no PROTO opcode at the start)"
    if last != b".":
        return "truncated: the pickle does not end with STOP"
    if (
        head[1] >= 4 and head[2] == 0x95 and size >= 11
    ):  # protocol 4+ opens with a FRAME and its length
        flen = int.from_bytes(head[3:11], "little")
        if 11 + flen > size:
            return f"truncated: its first frame needs {11 + flen} bytes, the file has {size}"
    return None


def source_problem(data: bytes, rel: str) -> Finding | None:
    """Why generated Python source is not whole, judged by parsing it (never running it); None when it parses.

    Evidence: Inductor writes whole, valid modules. A syntax error at the very end (an unclosed
    bracket, string or block) is a cut-off file: ``corrupt``. One elsewhere may be newer syntax
    than this Python reads: ``unrecognised``. A missing final newline is no evidence at all:
    Inductor writes ``triton_mm`` templates without one.
    """
    if data.endswith(b"\n"):
        return None  # cut exactly after a line: nothing says so (a known limit); parsing would cost ~1 s/MiB
    if _ends_whole(data):
        return None  # its last statement parses on its own: not cut mid-statement (parsing all costs ~1 s/MiB)
    exc = _parses(data, rel)
    if exc is None:
        return None
    if isinstance(exc, SyntaxError):
        last = data.rstrip().count(b"\n") + 1
        if (
            exc.lineno is None
            or exc.lineno >= last
            or "EOF" in str(exc.msg)
            or "never closed" in str(exc.msg)
        ):
            return Finding(
                "corrupt",
                f"{rel}: truncated: the source stops mid-statement (line {exc.lineno}: {exc.msg})",
            )
        return Finding(
            "unrecognised",
            f"{rel}: does not parse as this Python's syntax (line {exc.lineno}: "
            f"{exc.msg}); not judged",
        )
    return Finding(
        "unrecognised", f"{rel}: cannot be parsed here ({type(exc).__name__}); not judged"
    )


TAIL_LINES = 40


def _ends_whole(data: bytes) -> bool:
    """Whether the last lines of ``data`` (up to :data:`TAIL_LINES`, dedented) parse on their own.

    A cheap first look: a file cut inside a bracket, string or statement fails it, and only then is
    the whole file parsed to decide (so a tail that fails to parse alone is never the verdict).
    """
    lines = data.rsplit(b"\n", TAIL_LINES)
    for start in range(len(lines) - 1, 0, -1):
        before = lines[start - 1].strip()
        if before.startswith(b"@") or before.endswith((b",", b"(", b"[", b"{", b"\\", b":")):
            continue  # the chunk would continue a decorator, a bracket or a block header: take that line too
        chunk = lines[start:]
        body = [ln for ln in chunk if ln.strip()]
        if not body:
            continue
        indent = min(len(ln) - len(ln.lstrip(b" ")) for ln in body)
        if _parses(b"\n".join(ln[indent:] for ln in chunk)) is None:
            return True
    return False


def _parses(data: bytes, rel: str = "<tail>") -> Exception | None:
    """None when ``data`` parses as Python (an AST only: nothing runs), else the error."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(data, rel, "exec", dont_inherit=True, flags=0x400)  # ast.PyCF_ONLY_AST
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        return exc
    return None


def device_props(data: bytes | Streamed) -> list[tuple[str, object, int | None]]:
    """Every ``DeviceProperties(type=..., cc=...)`` Inductor wrote into ``data`` (source or pickle): (type, cc, SMs)."""
    if isinstance(data, Streamed):
        return list(data.props)
    out = []
    for m in DEVPROPS.finditer(data):
        cc_raw = m.group(3).decode("utf-8", "replace")
        cc: object = int(cc_raw) if cc_raw.isdigit() else cc_raw.strip("'")
        out.append((m.group(1).decode(), cc, int(m.group(2))))
    return list(dict.fromkeys(out))


_ELF_HEAD_ONLY = (".so", ".o")


_SKIP_CONTENT = (".lock", ".cpp", ".h", ".cu", ".c", ".txt", ".log")


WHOLE_MAX = 64 << 20
"""The most of one Inductor or vLLM cache file read whole (FX pickles of small models run to tens of MiB);
a larger one is judged by :func:`stream_blob`, one pass in 1 MiB chunks, so memory does not grow with it
(ARCHITECTURE.md, "reads bounded by kind")."""


_HEAD = 64 << 10


_CHUNK = 1 << 20


_OVERLAP = (
    4096  # a DeviceProperties(...) or an FX key split by a chunk's end is found in the next one
)


@dataclass(frozen=True, kw_only=True)
class Streamed:
    """A cache file larger than :data:`WHOLE_MAX`, as one pass over its chunks saw it: what the judges of pickles,
    standalone-compile artifacts and seals need of it, without holding it. ``passed`` is False for a file of
    which only the head was read (a cubin: its ELF header says what it is); the other fields are then empty."""

    size: int
    head: bytes  # its first _HEAD bytes
    tail: bytes = b""  # its last 16 bytes
    crc_after_4: int | None = (
        None  # CRC32 of all but its first 4 bytes: torch's BytesWriter checksum
    )
    sha256: str | None = None  # when asked for (a sealed pickle)
    props: tuple = ()  # device_props() of the whole file
    fx_keys: tuple[str, ...] = ()  # FX_KEY_AFTER_INFO's keys, in order
    passed: bool = True


def stream_blob(path: str, size: int, *, sha256: bool = False) -> Streamed:
    """:class:`Streamed` of the file ``path``: every byte read once, 1 MiB at a time (``store/reads.read_chunks``),
    searched with an overlap of 4 KiB between chunks; OSError past ``reads.MAX_READ``."""
    import hashlib
    import zlib

    head, tail, carry, pos, crc = b"", b"", b"", 0, 0
    props: dict = {}
    keys: dict = {}
    h = hashlib.sha256() if sha256 else None
    for chunk in read_chunks(path, size_hint=size, chunk=_CHUNK):
        if len(head) < _HEAD:
            head += chunk[: _HEAD - len(head)]
        if pos + len(chunk) > 4:
            crc = zlib.crc32(chunk[max(0, 4 - pos) :] if pos < 4 else chunk, crc)
        if h is not None:
            h.update(chunk)
        buf = carry + chunk
        props.update(dict.fromkeys(device_props(buf)))
        keys.update(dict.fromkeys(m.group(1).decode() for m in FX_KEY_AFTER_INFO.finditer(buf)))
        carry = buf[-_OVERLAP:]
        tail = (tail + chunk[-16:])[-16:]
        pos += len(chunk)
    return Streamed(
        size=pos,
        head=head,
        tail=tail,
        crc_after_4=crc,
        sha256=h.hexdigest() if h is not None else None,
        props=tuple(props),
        fx_keys=tuple(keys),
    )


def read_blob(path: str, rel: str, size: int, *, sha256: bool = False) -> bytes | Streamed:
    """The bytes judging needs: the ELF header of libraries, nothing of sources and locks, else the whole file up
    to :data:`WHOLE_MAX`; a larger file as :func:`stream_blob` saw it (a cubin: its head alone). ``sha256``:
    the stream hashes it too (a sealed pickle)."""
    if rel.endswith(_SKIP_CONTENT):
        return b""
    if rel.endswith(_ELF_HEAD_ONLY):
        return read_head(path, elf.HEADER_SIZE)
    if size <= WHOLE_MAX:
        try:
            return read_bytes(path, max_bytes=WHOLE_MAX, size_hint=size)
        except OSError as exc:
            if exc.errno != errno.EFBIG:
                raise  # else: it grew past the bound since it was listed
    if rel.endswith(".cubin"):
        return Streamed(size=size, head=read_head(path, elf.HEADER_SIZE), passed=False)
    return stream_blob(path, size, sha256=sha256)
