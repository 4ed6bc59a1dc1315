"""What the static launcher is served is read within the size its seal records (runtime/guards/inductor._sealed_bytes):
a cubin swapped for a sparse file of gigabytes after the check is refused unread, never held in the workload's memory."""

from __future__ import annotations

import os
import tracemalloc

from jitwarden.runtime.guards import inductor
from jitwarden.store import seal


def test_the_sealed_bytes_are_served_and_a_larger_file_is_refused_unread(tmp_path):
    entry = tmp_path / "ENTRY"
    entry.mkdir()
    (entry / "k.cubin").write_bytes(b"\x7fELF" + bytes(range(256)) * 40)
    seal.write(str(entry), seal.compute(str(entry), ["k.cubin"]))
    assert inductor._sealed_bytes(str(entry), "k.cubin") == (entry / "k.cubin").read_bytes()
    os.truncate(entry / "k.cubin", 3 << 30)  # sparse: 3 GiB to a reader that reads it
    tracemalloc.start()
    try:
        assert inductor._sealed_bytes(str(entry), "k.cubin") is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
