"""How a program-header difference between a cached and a rebuilt cubin is worded (real H200 cubin)."""

from __future__ import annotations

import os
import struct
import tarfile

from jitwarden.formats import cubin_compare
from tests.helpers.paths import DATA

CAPTURE = os.path.join(DATA, "real", "triton_plain.tar.xz")


def _real_cubin() -> bytes:
    with tarfile.open(CAPTURE) as t:
        for m in t.getmembers():
            if m.name.endswith(".cubin") and m.isfile():
                return t.extractfile(m).read()
    raise AssertionError("no cubin in the capture")


def test_same_segment_count_names_the_field_that_differs():
    a = _real_cubin()
    (phoff,) = struct.unpack_from("<Q", a, 32)
    (phnum,) = struct.unpack_from("<H", a, 56)
    assert phnum > 0
    b = bytearray(a)
    (flags,) = struct.unpack_from("<I", b, phoff + 4)
    struct.pack_into(
        "<I", b, phoff + 4, flags ^ 0x4
    )  # the first segment's p_flags: another permission bit
    text = " ".join(str(x) for x in cubin_compare.compare(a, bytes(b)).differences)
    assert f"same {phnum} segments; their flags differ" in text
    assert f"{phnum} vs {phnum}" not in text
