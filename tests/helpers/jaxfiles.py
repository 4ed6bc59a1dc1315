"""Hostile JAX ``-cache`` files made from a real one: a zlib bomb and a sparse file (issue 32's bounds)."""

from __future__ import annotations

import zlib

_MIB = 1 << 20


def bomb(raw: bytes, claim: int) -> bytes:
    """A whole zlib stream of ``raw`` (a real entry's decompressed bytes: its header names its module) followed by
    ``claim`` zero bytes, about ``claim / 1000`` bytes long: each MiB of zeros is one deflate block of ~1 KiB,
    made once and repeated (a full flush makes blocks independent), the Adler-32 computed over the whole."""
    c = zlib.compressobj(9)
    out = [c.compress(raw) + c.flush(zlib.Z_FULL_FLUSH)]
    zeros = b"\0" * _MIB
    z = zlib.compressobj(9)
    z.compress(zeros)
    z.flush(zlib.Z_FULL_FLUSH)
    block = z.compress(zeros) + z.flush(zlib.Z_FULL_FLUSH)  # no zlib header: a raw deflate block
    adler = zlib.adler32(raw)
    for _ in range(claim // _MIB):
        adler = zlib.adler32(zeros, adler)
    out.append(block * (claim // _MIB))
    out.append(
        b"\x03\x00" + adler.to_bytes(4, "big")
    )  # the empty final block, the stream's checksum
    return b"".join(out)


def sparse(path: str, size: int, head: bytes = b"") -> None:
    """``path`` made a sparse file of ``size`` bytes starting with ``head``: no disk, no memory to make."""
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
