"""The bytes of vLLM's compile cache, read (stdlib only, no disk access): standalone-compile artifacts
(torch's CRC-checked ``BytesWriter`` files) and ``vllm_compile_cache.py`` (a Python literal, read with
``ast.literal_eval``, never executed). What they mean for an entry is the vLLM adapter's
(``adapters/vllm.py``; ARCHITECTURE.md, layers: ``formats/`` reads bytes, adapters judge).
"""

from __future__ import annotations

import ast
import re
import zlib
from dataclasses import dataclass

ARTIFACT_HEADERS = (b"CacheCompiledArtifact", b"AOTCompiledArtifact")
TORCH29_ARTIFACT = "CompiledArtifact (torch 2.9, no header)"
_TORCH29_KEY = re.compile(
    rb"^Y[A-Za-z0-9+/]{69}==$"
)  # base64 of "a" + 51 base32 chars: AOTAutograd's key


@dataclass(frozen=True)
class ArtifactLayout:
    """What the bytes of a binary standalone-compile artifact are: ``layout`` when known, else ``code`` and ``why``."""

    layout: str | None
    code: str | None = (
        None  # "corrupt" (damage) or "unrecognised" (a layout jitwarden has not read)
    )
    why: str | None = None


def artifact_layout(
    data: bytes, *, size: int | None = None, crc_after_4: int | None = None
) -> ArtifactLayout:
    """Read a binary standalone-compile artifact (torch ``BytesWriter``: CRC32, then length-prefixed fields).

    ``data`` is the whole file, or, for a file too large to hold, its head: then ``size`` is the file's size
    and ``crc_after_4`` the CRC32 of all but its first 4 bytes, taken in one pass over it; the fields are
    walked by their lengths as far as the head holds them (the last, the compiled bytes, runs to the end).

    The layouts torch writes (``torch/_inductor/standalone_compile.py``, ``CompiledArtifact.save``):

    - torch 2.10-2.15: ``CacheCompiledArtifact`` header, ``torch_key``, the key, the bytes (4 fields);
      ``AOTCompiledArtifact`` header, ``torch_key``, the bytes (3 fields);
    - torch 2.9 (vLLM 0.16): no header: ``torch_key`` (a 32-byte SHA-256), the key (base64 of
      ``a<51 base32>``), the bytes (3 fields).

    Evidence: a CRC or a length field that does not hold is damage (``corrupt``). A whole file
    whose fields are none of these layouts is from a torch jitwarden has not read (``unrecognised``).
    """
    total = len(data) if size is None else size
    if total < 12:
        return ArtifactLayout(
            None, "corrupt", "truncated: shorter than its checksum and first field"
        )
    crc = zlib.crc32(data[4:]) if crc_after_4 is None else crc_after_4
    if crc.to_bytes(4, "big") != data[:4]:
        return ArtifactLayout(
            None, "corrupt", "checksum (CRC32) does not match: damaged or truncated"
        )
    fields = _fields(data, total)
    if isinstance(fields, ArtifactLayout):
        return fields
    return _named_layout(data, fields)


def _fields(data: bytes, total: int) -> list[tuple[int, int]] | ArtifactLayout:
    """(offset, length) of each length-prefixed field after the CRC32, walked as far as ``data`` (of a file of
    ``total`` bytes) holds them; the verdict instead when a length does not hold or lies past what is held."""
    i, fields = 4, []
    while i < total:
        if i + 8 > total:
            return ArtifactLayout(None, "corrupt", "truncated inside a length field")
        if i + 8 > len(data):
            return ArtifactLayout(
                None,
                "unrecognised",
                f"whole (its CRC32 holds), {total} bytes: a length field lies "
                f"past the first {len(data)} bytes jitwarden holds of it; not judged",
            )
        n = int.from_bytes(data[i : i + 8], "big")
        i += 8
        if i + n > total:
            return ArtifactLayout(
                None, "corrupt", f"a field of {n} bytes runs past the end of the file"
            )
        fields.append((i, n))
        i += n
    return fields


def _named_layout(data: bytes, fields: list[tuple[int, int]]) -> ArtifactLayout:
    """Which of torch's layouts the ``fields`` of a whole artifact are (``unrecognised`` when none)."""

    def field(k: int) -> bytes:
        return data[fields[k][0] : fields[k][0] + fields[k][1]]

    header = field(0) if fields else b""
    if header in ARTIFACT_HEADERS:
        want = 4 if header == b"CacheCompiledArtifact" else 3
        if len(fields) == want:
            return ArtifactLayout(header.decode())
        return ArtifactLayout(
            None,
            "unrecognised",
            f"{header.decode()} with {len(fields)} fields, where torch "
            f"2.10-2.15 write {want}; not judged",
        )
    if len(fields) == 3 and fields[0][1] == 32 and _TORCH29_KEY.match(field(1)):
        return ArtifactLayout(TORCH29_ARTIFACT)
    return ArtifactLayout(
        None,
        "unrecognised",
        "whole (its CRC32 holds), but in no standalone-compile layout of "
        "torch 2.9-2.15; not judged",
    )


@dataclass(frozen=True)
class Handle:
    """One graph of ``vllm_compile_cache.py``: the compiler that made it and its ``graph_handle`` (key, path)."""

    compiler: (
        str | None
    )  # "inductor_standalone", "inductor", "eager"; None when the key has no name
    key: str
    path: str


def graph_handles(src: bytes) -> list[Handle]:
    """Every graph handle in ``vllm_compile_cache.py``; ValueError when it is no literal dict.

    ``{(range, graph index, compiler name): value}``, where the value is
    ``{"graph_handle": (key, path), "cache_key": key}`` (vLLM 0.18-0.34) or the handle itself (0.16-0.17).
    """
    doc = ast.literal_eval(src.decode("utf-8"))
    if not isinstance(doc, dict):
        raise ValueError("not a dict")
    out = []
    for k, v in doc.items():
        compiler = k[2] if isinstance(k, tuple) and len(k) == 3 and isinstance(k[2], str) else None
        h = v.get("graph_handle") if isinstance(v, dict) else v
        if isinstance(h, (tuple, list)) and len(h) == 2 and all(isinstance(x, str) for x in h):
            out.append(Handle(compiler, h[0], h[1]))
    return out
