"""A Triton entry's files are read within bounds of their kind (ARCHITECTURE.md, "The flow of one command"):
a forged sparse file of gigabytes costs ``verify`` and the guard a header, not its size in memory and time.
JSON past the 64 MiB the JSON reader parses is refused unread (corrupt, as before, now said plainly); a cubin
past 256 MiB is judged by its ELF header (its SM against the metadata), the rest reported as not read."""

from __future__ import annotations

import os
import tracemalloc

from jitwarden.adapters import triton
from jitwarden.model.entries import Judge

JUDGE = Judge(target_arch=90, host_machine="x86_64")


def _entry(cache, arch=90) -> str:
    _root, records = cache
    return next(r for r in records.values() if r["arch"] == arch)["path"]


def _inspect(path: str):
    tracemalloc.start()
    try:
        e = triton.inspect_entry(os.path.dirname(path), os.path.basename(path), JUDGE)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return e, peak


def _named(path: str, suffix: str) -> str:
    return next(
        os.path.join(path, n)
        for n in sorted(os.listdir(path))
        if n.endswith(suffix) and not n.startswith("__grp__")
    )


def test_a_sparse_metadata_of_gigabytes_is_refused_unread(cache):
    path = _entry(cache)
    os.truncate(_named(path, ".json"), 3 << 30)  # sparse: no disk, 3 GiB to a reader that reads it
    e, peak = _inspect(path)
    assert peak < 32 << 20  # it was never read: before, 2 GiB were read and then refused
    msgs = [f.message for f in e.findings if f.code == "corrupt"]
    assert any("larger than the 64 MiB jitwarden reads of such a file" in m for m in msgs), msgs


def test_a_sparse_cubin_of_gigabytes_is_judged_by_its_header(cache):
    path = _entry(cache)
    before = triton.inspect_entry(os.path.dirname(path), os.path.basename(path), JUDGE)
    assert not before.findings and before.facts.cubin_sm == 90
    cubin = _named(path, ".cubin")
    os.truncate(
        cubin, 1 << 30
    )  # the real header, then zeros to 1 GiB (a valid ELF's tables sit inside it)
    e, peak = _inspect(path)
    assert peak < 32 << 20
    assert e.facts.cubin_sm == 90  # from its header
    assert [(f.code, f.severity.name) for f in e.findings] == [("unrecognised", "INFO")]
    assert "only its ELF header was read" in e.findings[0].message


def test_a_large_cubin_of_another_sm_is_still_a_mismatch(cache):
    path = _entry(cache, arch=80)
    cubin = _named(path, ".cubin")
    os.truncate(cubin, 300 << 20)
    other = _entry(cache, arch=90)
    md = _named(path, ".json")
    with open(
        _named(other, ".json"), "rb"
    ) as f:  # the metadata of an sm_90 kernel over an sm_80 cubin's header
        doc = f.read()
    import json

    meta = json.loads(doc)
    with open(md) as f:
        meta["hash"] = json.load(f)["hash"]
    with open(md, "w") as f:
        json.dump(meta, f)
    e, _peak = _inspect(path)
    assert any(
        f.code == "mismatch" and "assembled for sm_80, metadata says sm_90" in f.message
        for f in e.findings
    )
