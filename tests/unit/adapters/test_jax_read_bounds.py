"""JAX ``-cache`` files are read within a bound (ARCHITECTURE.md, "Reads bounded by kind"; issue 32): a zlib bomb
costs its cap (``jaxexec.MAX_EXECUTABLE`` of output held), never what it claims, and a file past the adapter's
bound (``jax.MAX_ENTRY``) is judged by its head. Each peak is a child process's own ``ru_maxrss``, through the
paths a user and a workload take (``verify`` and the start-up check, ``flatseal.check_root``), against the same
child over the clean entry in the same run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib

import pytest

from jitwarden.adapters import jax as jx
from jitwarden.formats import jaxexec
from tests.helpers import jaxfiles
from tests.unit.adapters.test_jax import ADD, unpack

CHILD = r"""
import json, resource, sys
from jitwarden.adapters import jax as jx
from jitwarden.model.entries import Judge
from jitwarden.runtime import flatseal
root, how = sys.argv[1], sys.argv[2]
if how == "verify":
    e = jx.inspect_entry(root, sys.argv[3], Judge(target_arch=90))
    out = [[f.code, f.message] for f in e.findings]
else:
    out = flatseal.check_root("jax", root, None)
print(json.dumps({"rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "out": out}))
"""


def _child(root: str, how: str, name: str = ADD) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, root, how, name],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(proc.stdout)


@pytest.fixture
def cache(tmp_path):
    root = unpack("jax_cache", tmp_path)
    for n in os.listdir(root):  # one entry: the child's work is the file under test
        if n != ADD:
            p = os.path.join(root, n)
            if os.path.isfile(p):
                os.remove(p)
    return root


def _raw(path: str) -> bytes:
    with open(path, "rb") as f:
        return zlib.decompress(f.read())


SLACK_KB = 3 * (
    jaxexec.MAX_EXECUTABLE >> 10
)  # the cap held, a copy as it is cut, the parse's slices


def test_a_zlib_bomb_costs_its_cap_and_is_not_understood_past_it(cache):
    """2.5 MB inflating to 2.5 GiB (issue 32: 5.1 GB held before), its header still naming jit_f_add."""
    path = os.path.join(cache, ADD)
    base = _child(cache, "verify")
    assert base["out"] == []
    data = jaxfiles.bomb(_raw(path), 2560 << 20)
    assert len(data) < 3 << 20
    with open(path, "wb") as f:
        f.write(data)
    got = _child(cache, "verify")
    assert got["rss_kb"] < base["rss_kb"] + SLACK_KB, (got["rss_kb"], base["rss_kb"])
    assert [c for c, _m in got["out"]] == ["unrecognised"] and "past 64 MiB" in got["out"][0][1]
    start = _child(cache, "start-up")
    assert start["rss_kb"] < base["rss_kb"] + SLACK_KB, (start["rss_kb"], base["rss_kb"])
    assert start["out"] == []  # not damage: nothing quarantined


def test_a_bomb_of_another_module_is_still_a_mismatch_by_its_header(cache):
    sub = "jit_f_sub-" + ADD.split("-", 1)[1]
    os.rename(os.path.join(cache, ADD), os.path.join(cache, sub))
    data = jaxfiles.bomb(_raw(os.path.join(cache, sub)), 256 << 20)
    with open(os.path.join(cache, sub), "wb") as f:
        f.write(data)
    got = _child(cache, "verify", sub)
    assert sorted(c for c, _m in got["out"]) == ["mismatch", "unrecognised"]


def test_a_sparse_file_past_the_bound_costs_its_head(cache):
    """1.9 GB, a real entry's stream at its start (issue 32: 1.97 GB peak in verify, 1.96 GB at start-up)."""
    path = os.path.join(cache, ADD)
    with open(path, "rb") as f:
        real = f.read()
    base = _child(cache, "verify")
    jaxfiles.sparse(path, 1900 << 20, real)
    got = _child(cache, "verify")
    assert got["rss_kb"] < base["rss_kb"] + (8 << 10), (got["rss_kb"], base["rss_kb"])
    # the stream ends where the real file did, and the file goes on: damage JAX's zlib refuses
    assert [c for c, _m in got["out"]] == ["corrupt"]
    assert "goes on after the end of the zlib stream" in got["out"][0][1]
    jaxfiles.sparse(path, 1900 << 20)  # zeros: no compression JAX writes
    got = _child(cache, "verify")
    assert got["rss_kb"] < base["rss_kb"] + (8 << 10)
    assert [c for c, _m in got["out"]] == ["unrecognised"]
    assert "past the 64 MiB jitwarden reads of a JAX entry" in got["out"][0][1]


def test_a_large_real_stream_past_the_bound_is_judged_by_its_head(cache, monkeypatch):
    """A sound entry past the bound (the bound lowered): its header read from the head, nothing called damage."""
    from jitwarden.model.entries import Judge

    monkeypatch.setattr(jx, "MAX_ENTRY", 1000)
    monkeypatch.setattr(jx, "HEAD", 1500)
    e = jx.inspect_entry(cache, ADD, Judge(target_arch=90))
    assert [f.code for f in e.findings] == ["unrecognised"]
    assert e.facts.executable.executable_module == "jit_f_add"


def test_inflate_in_chunks_is_inflate_whole():
    raw = os.urandom(3000) * 50
    data = zlib.compress(raw)
    chunks = [data[i : i + 100] for i in range(0, len(data), 100)]
    assert jaxexec.inflate(chunks).data == jaxexec.inflate((data,)).data == raw
    cut = jaxexec.inflate(chunks, cap=1000)
    assert cut.cut and cut.data == raw[:1000] and cut.problem is None
    assert jaxexec.inflate((data[:-5],)).problem == "zlib stream cut short"


def test_a_seal_written_between_the_read_and_the_seal_check_is_no_crash(cache, monkeypatch):
    """A file past the bound is hashed only when its dir has a seal as it is read; a seal written just after (JAX's
    load hook sealing the dir meanwhile) leaves it unhashed at the seal check: not checked, never a TypeError."""
    import hashlib

    from jitwarden.model.entries import Judge
    from jitwarden.runtime import flatseal

    monkeypatch.setattr(jx, "MAX_ENTRY", 1000)
    monkeypatch.setattr(jx, "HEAD", 1500)
    with open(os.path.join(cache, ADD), "rb") as f:
        real = f.read()
    read = jx._read

    def read_then_seal(path, size, j):
        got = read(path, size, j)
        assert got[0] == (len(real), "")  # no seal yet: nothing hashed
        sha = hashlib.sha256(real).hexdigest()
        assert flatseal.seal_file("jax", cache, ADD, sha, len(real), "test")
        return got

    monkeypatch.setattr(jx, "_read", read_then_seal)
    e = jx.inspect_entry(cache, ADD, Judge(target_arch=90))
    assert [f.code for f in e.findings] == ["unrecognised"]
    assert not e.sealed
