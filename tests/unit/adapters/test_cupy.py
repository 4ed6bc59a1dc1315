"""cupy adapter on REAL CuPy kernel caches captured on the H200 (``tests/data/real/jax_cupy``).

``cupy_cache.tar.xz``: CuPy 14.2.0 (cupy-cuda13x) on an H200 (sm_90): RawKernel (NVRTC and
``backend="nvcc"``), RawModule with ``name_expressions``, ElementwiseKernel, ReductionKernel, ``cp.fuse``,
built-in ops and a cuBLAS matmul. ``cupy_swapped.tar.xz``: the ``sub`` kernel's file copied over the ``add``
kernel's (both kernels named ``k``); stock CuPy then returned x-y (3.0 where 7.0 was expected).
See JAX_CUPY.md beside them.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tarfile

import pytest

from jitwarden import adapters
from jitwarden.adapters import cupy as cp
from tests.helpers import otherkinds as ok
from tests.helpers.paths import DATA

REAL = os.path.join(DATA, "real", "jax_cupy")
NVRTC = "1f073b36c7dc0c08f88e0dfc36bd6c0501f42343.cubin"  # cupy_sum, NVRTC: CuPy drops the cubin's last byte
NVCC = (
    "5df1347ceae95afef2943b99cc67bb42fdc3bad2.cubin"  # RawKernel k, backend="nvcc": a whole cubin
)
F = "e2864911f8465e8fbb5ac39d14f46c579b02112b.cubin"  # RawKernel f
EM_FLAGS = 48  # e_flags in an ELF64 header


def unpack(name: str, dest) -> str:
    with tarfile.open(os.path.join(REAL, f"{name}.tar.xz")) as t:
        t.extractall(str(dest), **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return os.path.join(str(dest), name)


def bad(doc) -> dict[str, list[str]]:
    return {k: v for k, v in ok.codes(doc).items() if v}


@pytest.fixture
def cache(tmp_path):
    return unpack("cupy_cache", tmp_path)


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def rehead(payload: bytes) -> bytes:
    """A file as CuPy writes it: the SHA-1 hex of the payload, then the payload."""
    return hashlib.sha1(payload).hexdigest().encode() + payload


def test_real_cache_has_no_false_alarm(cache, capsys):
    rc, doc = ok.verify(capsys, cache, "--target", "90", "--all")
    assert rc == 0 and doc["caches"][0]["kind"] == "cupy"
    assert bad(doc) == {} and len(doc["entries"]) == 16
    assert {e["cubin_sm"] for e in doc["entries"]} == {90}
    by = {e["id"]: e for e in doc["entries"]}
    assert by[NVRTC]["name"] == "cupy_sum" and by[NVCC]["name"] == "k" and by[F]["name"] == "f"
    assert sorted({e["extra"]["payload"] for e in doc["entries"]}) == ["cubin", "name-expressions"]


def test_the_captured_swap_passes_cupys_own_check(tmp_path, capsys):
    """The file stock CuPy loaded and ran as x-y: its header is a hash of its own payload, and the key's
    hash cannot be recomputed; only the seal (test_flatseal.py) can tell."""
    root = unpack("cupy_swapped", tmp_path)
    rc, doc = ok.verify(capsys, root, "--target", "90")
    assert rc == 0 and bad(doc) == {}


@pytest.mark.parametrize("how", ["truncated", "bitflip", "header"])
def test_damage_is_corrupt(cache, capsys, how):
    p = os.path.join(cache, NVRTC)
    data = bytearray(read(p))
    if how == "truncated":
        data = data[: len(data) - 100]
    elif how == "bitflip":
        data[len(data) // 2] ^= 0x01
    else:
        data[:40] = hashlib.sha1(b"another payload").hexdigest().encode()
    write(p, bytes(data))
    rc, doc = ok.verify(capsys, cache, "--target", "90")
    assert rc == 1 and bad(doc) == {NVRTC: ["corrupt"]}


def test_a_cubin_for_another_gpu_is_foreign_arch(cache, capsys):
    """A self-consistent file (header rehashed) whose cubin is for sm_80: unreachable on sm_90, not damage."""
    payload = bytearray(read(os.path.join(cache, NVCC))[40:])
    (flags,) = struct.unpack_from("<I", payload, EM_FLAGS)
    assert flags & 0xFF00 == 90 << 8  # the new ABI keeps the SM in bits 8-15
    struct.pack_into("<I", payload, EM_FLAGS, (flags & ~0xFF00) | (80 << 8))
    write(os.path.join(cache, NVCC), rehead(bytes(payload)))
    rc, doc = ok.verify(capsys, cache, "--target", "90")
    assert rc == 0 and bad(doc) == {NVCC: ["foreign-arch"]}
    rc, doc = ok.verify(capsys, cache, "--target", "80")
    assert NVCC not in bad(doc) and bad(doc)[NVRTC] == ["foreign-arch"]


def test_a_moved_file_is_caught_where_the_source_was_saved(cache, capsys):
    """With CUPY_CACHE_SAVE_CUDA_SOURCE CuPy saves ``<name>.cu``: the kernels it defines must be in the cubin."""
    write(
        os.path.join(cache, F + ".cu"),
        b'extern "C" __global__ void f(const float* x, float* y, int n) { }\n',
    )
    rc, doc = ok.verify(capsys, cache, "--target", "90")
    assert rc == 0 and bad(doc) == {}
    write(os.path.join(cache, F), read(os.path.join(cache, NVRTC)))  # cupy_sum's file under f's key
    rc, doc = ok.verify(capsys, cache, "--target", "90")
    assert rc == 1 and bad(doc) == {F: ["mismatch"]}


def test_a_name_expression_payload_must_name_kernels_of_its_cubin(cache, capsys):
    by = {e["id"]: e for e in ok.verify(capsys, cache, "--target", "90", "--all")[1]["entries"]}
    name = next(i for i, e in by.items() if e["extra"]["payload"] == "name-expressions")
    data = read(os.path.join(cache, name))[40:]
    (count,) = struct.unpack_from("<I", data, 8)
    (n,) = struct.unpack_from("<I", data, 12)
    forged = (
        data[:16] + b"x" * n + data[16 + n :]
    )  # another mangled name, same length, header rehashed
    write(os.path.join(cache, name), rehead(forged))
    rc, doc = ok.verify(capsys, cache, "--target", "90")
    assert count >= 1 and rc == 1 and bad(doc) == {name: ["mismatch"]}


def test_leftovers_and_unknown_payloads(cache, capsys):
    write(os.path.join(cache, "tmpab12cd_9"), b"partial")
    ok.set_age(os.path.join(cache, "tmpab12cd_9"), 7200)
    write(os.path.join(cache, "0" * 40 + ".cubin"), rehead(b"neither ELF nor PTX"))
    rc, doc = ok.verify(capsys, cache, "--target", "90", "--all")
    assert rc == 0 and bad(doc) == {
        "tmpab12cd_9": ["orphan"],
        "0" * 40 + ".cubin": ["unrecognised"],
    }


def test_roots_as_cupy_finds_them(cache, tmp_path):
    home = tmp_path / "home"
    default = home / ".cupy" / "kernel_cache"
    default.mkdir(parents=True)
    assert [r.path for r in cp.discover_roots({"HOME": str(home)})] == [str(default)]
    assert [
        (r.path, r.source) for r in cp.discover_roots({"HOME": str(home), "CUPY_CACHE_DIR": cache})
    ] == [(cache, "CUPY_CACHE_DIR"), (str(default), "default")]
    assert adapters.kind_of_path(cache) == "cupy" and adapters.kind_of_path(str(default)) == "cupy"


def test_clean_quarantines_and_restore_puts_back(cache, capsys, tmp_path, monkeypatch):
    from jitwarden.cli.main import main

    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the quarantine registry: this test's own
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))

    data = bytearray(read(os.path.join(cache, NVRTC)))
    data[-1] ^= 0x01
    write(os.path.join(cache, NVRTC), bytes(data))
    assert main(["clean", "--code", "corrupt", "-y", cache]) == 0
    capsys.readouterr()
    assert not os.path.exists(os.path.join(cache, NVRTC))
    rc, doc = ok.verify(capsys, cache, "--target", "90")
    assert rc == 0 and bad(doc) == {} and len(doc["entries"]) == 15
    assert main(["quarantine", "restore", "-y", NVRTC[:12]]) == 0
    capsys.readouterr()
    rc, doc = ok.verify(capsys, cache, "--target", "90")
    assert rc == 1 and bad(doc) == {NVRTC: ["corrupt"]}
