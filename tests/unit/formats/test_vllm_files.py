"""The bytes of vLLM's compile cache (formats/vllm_files.py), read from real torch standalone-compile artifacts
(tests/helpers/inductor_real.py) and the ``vllm_compile_cache.py`` vLLM writes: a CRC or length that does not hold
is damage, a whole file of a layout not read is ``unrecognised``, the literal is read, never executed."""

from __future__ import annotations

import os
import zlib

import pytest

from jitwarden.formats import vllm_files
from tests.helpers.vllm_root import ART0, ART1, PREFIX


def _real(inductor_build, name: str) -> bytes:
    with open(os.path.join(inductor_build["artifacts"], name), "rb") as f:
        return f.read()


def _crc(body: bytes) -> bytes:
    return zlib.crc32(body).to_bytes(4, "big") + body


def _fields(*fields: bytes) -> bytes:
    return _crc(b"".join(len(f).to_bytes(8, "big") + f for f in fields))


def test_a_real_artifact_is_read_whole_and_from_its_head(inductor_build):
    data = _real(inductor_build, "artifact_binary")
    layout = "CacheCompiledArtifact"  # torch 2.13's save(format="binary")
    got = vllm_files.artifact_layout(data)
    assert (got.layout, got.code) == (layout, None)
    # a file too large to hold: its head, its size and its CRC taken in one pass over it
    head = data[: len(data) - 64]
    got = vllm_files.artifact_layout(head, size=len(data), crc_after_4=zlib.crc32(data[4:]))
    assert (got.layout, got.code) == (layout, None)


def test_damage_to_a_real_artifact_is_corrupt(inductor_build):
    data = _real(inductor_build, "artifact_binary")
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 1
    assert (
        vllm_files.artifact_layout(bytes(flipped)).why
        == "checksum (CRC32) does not match: damaged or truncated"
    )
    for cut in (data[:8], data[: len(data) - 1]):
        assert vllm_files.artifact_layout(cut).code == "corrupt"
    # a CRC that holds over a field cut short: the length says so
    re_crcd = _crc(data[4 : len(data) - 10])
    got = vllm_files.artifact_layout(re_crcd)
    assert got.code == "corrupt" and "runs past the end of the file" in got.why


def test_layouts_not_read_are_unrecognised_never_damage():
    key29 = b"Y" + b"A" * 69 + b"=="
    assert (
        vllm_files.artifact_layout(_fields(b"k" * 32, key29, b"code")).layout
        == vllm_files.TORCH29_ARTIFACT
    )
    for data, why in (
        (
            _fields(b"CacheCompiledArtifact", b"k", b"code"),
            "with 3 fields, where torch 2.10-2.15 write 4",
        ),
        (_fields(b"SomethingNew", b"k", b"key", b"code"), "in no standalone-compile layout"),
        (_fields(b"k" * 31, key29, b"code"), "in no standalone-compile layout"),
    ):
        got = vllm_files.artifact_layout(data)
        assert (got.layout, got.code) == (None, "unrecognised") and why in got.why
    data = _fields(b"CacheCompiledArtifact", b"k", b"key", b"code")
    got = vllm_files.artifact_layout(data[:30], size=len(data), crc_after_4=zlib.crc32(data[4:]))
    # a length field past the head held: not judged
    assert got.code == "unrecognised" and "past the first 30 bytes" in got.why


def test_the_graph_handles_vllm_wrote(vllm_root):
    prefix = os.path.join(vllm_root, PREFIX)
    with open(os.path.join(prefix, "vllm_compile_cache.py"), "rb") as f:
        handles = vllm_files.graph_handles(f.read())
    assert [(h.compiler, h.key, h.path) for h in handles] == [
        ("inductor_standalone", k, os.path.join(prefix, k)) for k in (ART0, ART1)
    ]


def test_older_handles_and_what_is_no_literal_dict():
    src = b"{((1, 8192), 0, 'inductor'): ('key0', '/p/key0'), 'odd': ('k', 'p'), ((1, 2), 1, 'eager'): 3}"
    assert [(h.compiler, h.key) for h in vllm_files.graph_handles(src)] == [
        ("inductor", "key0"),
        (None, "k"),
    ]
    for bad in (b"[1, 2]", b"__import__('os').system('true')", b"{"):
        with pytest.raises((ValueError, SyntaxError)):
            vllm_files.graph_handles(bad)
