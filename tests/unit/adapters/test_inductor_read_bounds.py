"""Inductor's and vLLM's cache files are read within a bound (ARCHITECTURE.md, "reads bounded by kind"): up to
``inductor_blobs.WHOLE_MAX`` whole; a larger one in one pass of 1 MiB chunks (``inductor_blobs.stream_blob``), so a pickle or an
artifact of gigabytes, real or a forged sparse file, costs its reading time and never its size in memory, and is
judged as a whole one is: pickle framing, the GPU it names, torch's CRC32, the seal's sha256, the FX graphs it loads.

The equivalence tests lower the bound so that every real file of the CPU torch's caches goes through the stream,
with chunks small enough that what is searched for is cut by a chunk's end, and ask for the same judgement.
"""

from __future__ import annotations

import os
import shutil
import tracemalloc

import pytest

from jitwarden.adapters import inductor as ind
from jitwarden.adapters import inductor_blobs
from jitwarden.adapters import vllm as vl
from tests.helpers.vllm_root import AOT_NEW, ART0, PREFIX, codes, cubin_of, judge


@pytest.fixture
def cache(inductor_cache):
    return inductor_cache


def _inductor(root, j=None):
    names, _ = ind.list_entry_names(root)
    return {n: ind.inspect_entry(root, n, j or judge(), os.getuid()) for n in names}


def _vllm(root, j=None):
    names, _ = vl.list_entry_names(root)
    return {n: vl.inspect_entry(root, n, j or judge(), os.getuid()) for n in names}


SEARCHED = "only searched for the GPU it names, not parsed"  # a large source or JSON file: said, not judged


def _view(es):
    return {
        n: (
            e.type,
            e.arch,
            sorted((f.code, f.message) for f in e.findings if SEARCHED not in f.message),
            e.facts.fx_graphs if e.type == "aotautograd" else None,
        )
        for n, e in es.items()
    }


def _through_the_stream(m) -> None:
    """Every file past 1 KiB goes through the stream, in chunks of 5,000 bytes that a 4 KiB overlap joins."""
    m.setattr(inductor_blobs, "WHOLE_MAX", 1024)
    m.setattr(inductor_blobs, "_CHUNK", 5000)
    m.setattr(inductor_blobs, "_HEAD", 600)


@pytest.fixture
def streamed(monkeypatch):
    """:func:`_through_the_stream`, and the paths streamed, in order."""
    _through_the_stream(monkeypatch)
    calls = []
    real_stream = inductor_blobs.stream_blob

    def counted(path, size, **kw):
        calls.append(path)
        return real_stream(path, size, **kw)

    monkeypatch.setattr(inductor_blobs, "stream_blob", counted)
    return calls


def test_a_real_inductor_cache_is_judged_the_same_through_the_stream(cache, monkeypatch):
    whole = _view(_inductor(cache))
    with monkeypatch.context() as m:
        _through_the_stream(m)
        through = _view(_inductor(cache))
    pickles = {n for n, (t, *_r) in through.items() if t in ("fxgraph", "aotautograd")}
    assert pickles, "the real cache holds pickles"
    assert through.keys() == whole.keys()
    for n in whole:  # the same findings and GPU everywhere; pickles judged whole, sources said to be only searched
        assert through[n][1:] == whole[n][1:], n
        if n in pickles:
            assert through[n] == whole[n], n
    assert all(not v[2] for v in whole.values())  # a clean cache, both ways
    assert any(
        v[3] for n, v in through.items() if n in pickles
    )  # the FX graphs an AOT result loads, found in the stream


def test_damaged_and_sealed_pickles_through_the_stream(cache, streamed):
    es = _inductor(cache)
    fx = next(n for n, e in es.items() if e.type == "fxgraph")
    (pkl,) = [p for p in os.listdir(os.path.join(cache, fx)) if not p.startswith(".")]
    path = os.path.join(cache, fx, pkl)
    data = open(path, "rb").read()
    assert len(data) > 1024
    open(path, "wb").write(data[:-1] + b"\x00")
    e = ind.inspect_entry(cache, fx, judge(), os.getuid())
    assert codes(e) == ["corrupt"] and "does not end with STOP" in e.findings[0].message
    assert path in streamed
    # Cut inside its first frame, a STOP put back at the end: the frame's length in the head says so.
    assert data[1] >= 4 and data[2] == 0x95  # torch pickles with protocol 4+, framed
    flen = int.from_bytes(data[3:11], "little")
    open(path, "wb").write(data[: 11 + flen // 2] + b".")
    e = ind.inspect_entry(cache, fx, judge(), os.getuid())
    assert codes(e) == ["corrupt"] and "first frame needs" in e.findings[0].message


def test_a_sealed_pickle_past_the_bound_is_checked_against_its_seal(cache, monkeypatch):
    from jitwarden.store import seal

    es = _inductor(cache)
    fx = next(n for n, e in es.items() if e.type == "fxgraph")
    d = os.path.join(cache, fx)
    seal.write(d, seal.compute(d, [p for p in os.listdir(d) if not p.startswith(".")]))
    monkeypatch.setattr(inductor_blobs, "WHOLE_MAX", 1024)
    assert codes(ind.inspect_entry(cache, fx, judge(), os.getuid())) == []
    (pkl,) = [p for p in os.listdir(d) if not p.startswith(".")]
    path = os.path.join(d, pkl)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF  # framing intact: only the seal can tell
    open(path, "wb").write(bytes(data))
    e = ind.inspect_entry(cache, fx, judge(), os.getuid())
    assert codes(e) == ["corrupt"] and "does not match its sealed sha256" in e.findings[0].message


def test_a_vllm_root_is_judged_the_same_through_the_stream(vllm_root, monkeypatch):
    whole = _view(_vllm(vllm_root))
    with monkeypatch.context() as m:
        _through_the_stream(m)
        through = _view(_vllm(vllm_root))
    for n in (
        PREFIX,
        f"{AOT_NEW}/rank_0_0",
    ):  # the binary artifact (CRC, fields, GPU) and the AOT model pickle
        assert through[n][:3] == whole[n][:3], n
        assert not whole[n][2], whole[n]


def test_a_damaged_vllm_artifact_through_the_stream(vllm_root, streamed):
    path = os.path.join(vllm_root, PREFIX, ART0)
    data = bytearray(open(path, "rb").read())
    assert len(data) > 1024
    data[len(data) - 10] ^= 0x01
    open(path, "wb").write(bytes(data))
    e = vl.inspect_entry(vllm_root, PREFIX, judge(), os.getuid())
    assert path in streamed
    assert any(f.code == "corrupt" and "CRC32" in f.message for f in e.findings), e.findings


def _sparse(path: str, size: int, pieces: dict[int, bytes]) -> None:
    with open(path, "wb") as f:
        for at, b in sorted(pieces.items()):
            f.seek(at)
            f.write(b)
        f.truncate(size)


def _peak(fn):
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


PROPS80 = b"DeviceProperties(type='cuda', index=0, multi_processor_count=108, cc=80, major=8"


def test_a_sparse_fx_pickle_of_a_gigabyte_costs_no_memory_and_is_still_judged(cache):
    es = _inductor(cache)
    fx = next(n for n, e in es.items() if e.type == "fxgraph")
    (pkl,) = [p for p in os.listdir(os.path.join(cache, fx)) if not p.startswith(".")]
    path = os.path.join(cache, fx, pkl)
    size = (1 << 30) + 7
    # PROTO 4 with no frame, the device properties cut by the first 1 MiB chunk's end, STOP at the very end.
    _sparse(path, size, {0: b"\x80\x04K\x01", (1 << 20) - 30: PROPS80, size - 1: b"."})
    e, peak = _peak(lambda: ind.inspect_entry(cache, fx, judge(), os.getuid()))
    assert peak < 16 << 20  # before: the whole gigabyte was read into memory
    assert e.arch == 80
    assert [f.code for f in e.findings] == ["foreign-arch"] and "sm_80" in e.findings[0].message
    _sparse(path, size, {0: b"\x80\x04K\x01"})  # no STOP: a cut-off write
    e, peak = _peak(lambda: ind.inspect_entry(cache, fx, judge(), os.getuid()))
    assert peak < 16 << 20 and codes(e) == ["corrupt"]


def test_a_file_past_what_is_read_at_all_is_not_called_damaged(cache):
    es = _inductor(cache)
    fx = next(n for n, e in es.items() if e.type == "fxgraph")
    (pkl,) = [p for p in os.listdir(os.path.join(cache, fx)) if not p.startswith(".")]
    path = os.path.join(cache, fx, pkl)
    os.truncate(path, 3 << 30)  # past reads.MAX_READ: refused unread
    e, peak = _peak(lambda: ind.inspect_entry(cache, fx, judge(), os.getuid()))
    assert peak < 16 << 20
    assert codes(e) == ["unrecognised"] and "not read" in e.findings[0].message


def test_a_large_inductor_cubin_is_judged_by_its_elf_header(cache, built_cache):
    dst = os.path.join(cache, "zz", "kernel.cubin")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy(cubin_of(built_cache, 80), dst)
    assert ind.inspect_entry(cache, "zz", judge(), os.getuid()).arch == 80  # whole: its ELF parsed
    os.truncate(dst, 300 << 20)  # its real header, then zeros
    e, peak = _peak(lambda: ind.inspect_entry(cache, "zz", judge(), os.getuid()))
    assert peak < 16 << 20
    assert e.arch == 80
    assert sorted(f.code for f in e.findings) == ["foreign-arch", "unrecognised"]
    assert any("only its ELF header was read" in f.message for f in e.findings)


def test_a_large_deepgemm_cubin_in_a_vllm_root_is_judged_by_its_elf_header(vllm_root, built_cache):
    name = "deep_gemm/cache/kernel.fp8_gemm_nt.0123abcd"
    d = os.path.join(vllm_root, name)
    (cub,) = [f for f in os.listdir(d) if f.endswith(".cubin")]
    shutil.copy(cubin_of(built_cache, 80), os.path.join(d, cub))
    os.truncate(os.path.join(d, cub), 300 << 20)
    e, peak = _peak(lambda: vl.inspect_entry(vllm_root, name, judge(), os.getuid()))
    assert peak < 16 << 20
    assert e.arch == 80 and e.type != "cubin"
    assert sorted(f.code for f in e.findings) == ["foreign-arch", "unrecognised"]
