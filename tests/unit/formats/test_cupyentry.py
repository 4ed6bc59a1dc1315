"""CuPy kernel-cache files (formats/cupyentry.py) read from the real cache captured on the H200
(tests/data/real/jax_cupy/cupy_cache.tar.xz, CuPy 14.2, sm_90): CuPy's own SHA-1 header check, the payload's
shape, and a name-expression module whose names must be kernels of its cubin."""

from __future__ import annotations

import glob
import hashlib
import os
import struct

import pytest

from jitwarden.formats import cupyentry
from tests.unit.adapters.test_cupy import unpack


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, bytes]:
    root = unpack("cupy_cache", tmp_path_factory.mktemp("cupy"))
    out = {}
    for p in glob.glob(os.path.join(root, "*.cubin")):
        with open(p, "rb") as f:
            out[os.path.basename(p)] = f.read()
    return out


def _signed(payload: bytes) -> bytes:
    return hashlib.sha1(payload).hexdigest().encode() + payload


def _names_module(files) -> bytes:
    return next(d for d in files.values() if d[40:].startswith(cupyentry.NE_MAGIC))


def test_every_real_file_is_a_whole_sm90_module(files):
    assert len(files) == 16
    for name, data in files.items():
        got = cupyentry.parse(data, ".cubin")
        assert (got.problem, got.unknown) == (None, None), name
        assert got.payload in ("cubin", "name-expressions") and got.cubin_sm == 90
        assert got.kernels


def test_a_name_expression_module_lists_its_mangled_names_among_its_kernels(files):
    got = cupyentry.parse(_names_module(files), ".cubin")
    assert got.payload == "name-expressions"
    assert got.mangled_names == ("_Z5scaleIdEvPT_S0_i", "_Z5scaleIfEvPT_S0_i")
    assert set(got.mangled_names) <= set(got.kernels)


def test_a_payload_that_does_not_match_its_header_is_a_miss_for_cupy(files):
    data = bytearray(next(iter(files.values())))
    data[-1] ^= 1
    got = cupyentry.parse(bytes(data), ".cubin")
    assert got.problem and "does not match" in got.problem and not got.contradiction


def test_a_name_its_cubin_lacks_is_a_contradiction(files):
    body = _names_module(files)[40:]
    forged = body.replace(b"_Z5scaleIfEvPT_S0_i", b"_Z5scaleIxEvPT_S0_i", 1)  # same length
    got = cupyentry.parse(_signed(forged), ".cubin")
    assert got.contradiction and "_Z5scaleIxEvPT_S0_i" in (got.problem or "")


def test_a_cut_name_list_is_not_understood_not_damage(files):
    body = _names_module(files)[40:]
    (count,) = struct.unpack_from("<I", body, len(cupyentry.NE_MAGIC))
    cut = body[: len(cupyentry.NE_MAGIC) + 4 + 6]  # inside the first name
    got = cupyentry.parse(_signed(cut), ".cubin")
    assert got.problem is None and got.payload == "name-expressions"
    assert got.unknown == f"name-expression payload cut short in name 1 of {count}"


def test_a_ptx_payload_gives_its_target_and_entries(cache):
    _root, records = cache
    (path,) = glob.glob(os.path.join(records["add_sm80"]["path"], "*.ptx"))
    with open(path, "rb") as f:
        text = f.read()
    got = cupyentry.parse(_signed(text), ".cubin")
    assert (got.problem, got.unknown, got.payload) == (None, None, "ptx")
    assert got.ptx_target == "sm_80"
    assert got.kernels == ("add_kernel",)


@pytest.mark.parametrize(
    ("data", "suffix", "payload", "unknown"),
    [
        (b"", ".cubin", None, "does not start with the 40 hex digits"),
        (b"Z" * 40 + b"\x7fELF", ".cubin", None, "does not start with the 40 hex digits"),
        (_signed(b"whatever"), ".cubin", None, "neither a cubin nor PTX"),
        (_signed(b".version 8.0\n"), ".cubin", "ptx", "without a PTX .target"),
        (_signed(b"lto"), ".ltoir", "ltoir", None),
        (_signed(b"rocm"), ".hsaco", "hsaco", "ROCm code object"),
    ],
)
def test_what_is_not_understood_is_said_never_called_damage(data, suffix, payload, unknown):
    got = cupyentry.parse(data, suffix)
    assert got.problem is None and got.payload == payload
    assert (got.unknown is None) if unknown is None else unknown in got.unknown
