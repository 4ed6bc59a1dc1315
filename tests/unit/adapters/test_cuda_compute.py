"""cuda-compute adapter on a REAL driver JIT cache (``$CUDA_CACHE_PATH`` or ``~/.nv/ComputeCache``).

Only the driver writes this cache, when it JIT-compiles PTX on a GPU. ``tests/data/cuda_compute_h200`` is one
the H200's driver 580.159.04 (CUDA 13.0) wrote when ``benchmarks/h200_compute_cache_probe.py`` loaded six
PTX modules through ``cuModuleLoadData`` (``facts.json`` records the run). Env vars and defaults follow the
CUDA Programming Guide, "CUDA Environment Variables" (``CUDA_CACHE_PATH``, ``CUDA_CACHE_MAXSIZE``,
``CUDA_CACHE_DISABLE``). ``JITWARDEN_LIBCUDA`` points at a stand-in libcuda (its mtime) beside a stand-in
``libnvidia-ptxjitcompiler.so.1`` (its one build date): the installed driver's evidence, which this machine lacks.
"""

from __future__ import annotations

import os
import shutil

import pytest

from jitwarden.adapters import cuda_compute as cc
from jitwarden.adapters import cuda_compute_entry
from tests.helpers import otherkinds as ok
from tests.helpers.paths import DATA

CC_DATA = os.path.join(DATA, "cuda_compute_h200", "ComputeCache")
FILES = (
    "2/4/aca7d279b8280d",
    "8/7/c971455a5e9bf5",
    "9/e/3710c30a7d4cc1",
    "9/f/bcc7849198d3d1",
    "b/4/51b1336e4e60a5",
    "e/f/ea6eb703b79df1",
)
ENTRY_BYTES = 3884


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    for k in ("CUDA_CACHE_PATH", "CUDA_CACHE_MAXSIZE", "CUDA_CACHE_DISABLE", "JITWARDEN_LIBCUDA"):
        monkeypatch.delenv(k, raising=False)
    cc.reset_driver_evidence()
    yield
    cc.reset_driver_evidence()


@pytest.fixture
def compute_cache(tmp_path):
    """A copy of the real H200 cache at ``<home>/.nv/ComputeCache``."""
    root = tmp_path / "home" / ".nv" / "ComputeCache"
    shutil.copytree(CC_DATA, root)
    return str(root)


def libcuda(tmp_path, monkeypatch, age_s: float | None, jit_date: bytes | None = None) -> str:
    """A stand-in libcuda built ``age_s`` ago (None: mtime 1, as in the Nix store), named through JITWARDEN_LIBCUDA,
    with a stand-in libnvidia-ptxjitcompiler.so.1 carrying ``jit_date`` beside it."""
    d = tmp_path / "driver"
    d.mkdir(exist_ok=True)
    p = d / "libcuda.so.1"
    p.write_bytes(b"\x7fELF")
    if age_s is None:
        os.utime(p, (1, 1))
    else:
        ok.set_age(str(p), age_s)
    if jit_date is not None:
        (d / "libnvidia-ptxjitcompiler.so.1").write_bytes(
            b"\x7fELF\0" + os.urandom(64) + jit_date + b"\0" + os.urandom(64)
        )
    monkeypatch.setenv("JITWARDEN_LIBCUDA", str(p))
    cc.reset_driver_evidence()
    return str(p)


def test_real_cache_entries(compute_cache, capsys):
    rc, doc = ok.verify(capsys, compute_cache, "--target", "90")
    assert doc["caches"][0]["kind"] == "cuda-compute" and rc == 0
    assert ok.codes(doc) == {f: [] for f in FILES}
    e = doc["entries"][0]
    assert (
        e["arch"] == 90 and e["cubin_sm"] == 90 and e["type"] == "jit" and e["bytes"] == ENTRY_BYTES
    )
    assert e["extra"] == {
        "jit_date": "Apr 29 2026",
        "jit_time": "17:12:06",
        "target": "sm_90",
        "producer": "driver-jit",
        "input": "ptx",
        "output": "cubin",
        "options": "",
    }
    assert (
        doc["caches"][0]["bytes"] == len(FILES) * ENTRY_BYTES
    )  # the index is the root's, not an entry
    rc, doc = ok.verify(capsys, compute_cache, "--target", "80")
    assert ok.codes(doc) == {f: ["foreign-arch"] for f in FILES} and rc == 0


def _rename_to_key(root: str, rel: str) -> str:
    """Store an edited entry under the name the driver would give its key: FNV-1a of the key text."""
    p = os.path.join(root, rel)
    data = open(p, "rb").read()
    text_len = int.from_bytes(data[4:8], "little")
    name = f"{cuda_compute_entry.fnv1a64(data[28 : 28 + text_len]):016x}"
    new = os.path.join(root, name[0], name[1], name[2:])
    os.makedirs(os.path.dirname(new), exist_ok=True)
    os.rename(p, new)
    return f"{name[0]}/{name[1]}/{name[2:]}"


def test_truncated_and_self_contradicting_entries(compute_cache, capsys):
    ok.truncate(os.path.join(compute_cache, FILES[0]), 0.7)
    p = os.path.join(compute_cache, FILES[1])
    data = open(p, "rb").read()
    open(p, "wb").write(
        data.replace(b"HOST64sm_90", b"HOST64sm_80", 1)
    )  # the record says sm_80, the cubin is sm_90
    with open(
        os.path.join(compute_cache, FILES[2]), "r+b"
    ) as f:  # the cubin's section table runs past the end
        f.seek(316 + 40)
        f.write((10**6).to_bytes(8, "little"))
    rc, doc = ok.verify(capsys, compute_cache, "--target", "90")
    c = ok.codes(doc)
    assert set(c[FILES[0]]) == {"corrupt"} and set(c[FILES[2]]) == {"corrupt"}, c
    # the edited key no longer hashes to the file's name: the driver never finds it there
    assert c[FILES[1]] == ["corrupt", "mismatch"], c
    assert c[FILES[3]] == [] and rc == 1
    # stored under its new key's name it is self-consistent but for the contradiction itself
    moved = _rename_to_key(compute_cache, FILES[1])
    rc, doc = ok.verify(capsys, compute_cache, "--target", "90")
    assert ok.codes(doc)[moved] == ["mismatch"]


def test_checksums_catch_a_flipped_byte_anywhere(compute_cache, capsys):
    """The header's hash is FNV-1a of the output, the file name FNV-1a of the key: one bit anywhere is seen."""
    data = open(os.path.join(compute_cache, FILES[0]), "rb").read()
    text_len = int.from_bytes(data[4:8], "little")
    for rel, pos in (
        (FILES[0], 28 + text_len + 1000),
        (FILES[1], 28 + text_len - 40),
        (FILES[2], len(data) - 1),
    ):
        with open(os.path.join(compute_cache, rel), "r+b") as f:
            f.seek(pos)
            b = f.read(1)
            f.seek(pos)
            f.write(bytes([b[0] ^ 0x10]))
    rc, doc = ok.verify(capsys, compute_cache, "--target", "90")
    e = {x["id"]: x for x in doc["entries"]}
    assert [f["code"] for f in e[FILES[0]]["findings"]] == ["corrupt"] and "FNV-1a" in e[FILES[0]][
        "findings"
    ][0]["message"]
    assert [f["code"] for f in e[FILES[1]]["findings"]] == ["corrupt"] and "file name" in e[
        FILES[1]
    ]["findings"][0]["message"]
    assert [f["code"] for f in e[FILES[2]]["findings"]] == ["corrupt"]
    assert all(e[r]["findings"] == [] for r in FILES[3:]) and rc == 1


def test_unknown_format_is_unrecognised_not_corrupt(compute_cache, capsys):
    os.makedirs(os.path.join(compute_cache, "0", "1"))
    open(os.path.join(compute_cache, "0", "1", "00aa11bb22cc33"), "wb").write(os.urandom(1000))
    # the driver's header with a key that is no stamp/HOST/target: a flavour not known
    p = os.path.join(compute_cache, FILES[3])
    data = bytearray(open(p, "rb").read())
    data[28:34] = b"Xyz 99"
    open(p, "wb").write(bytes(data))
    rc, doc = ok.verify(capsys, compute_cache, "--target", "90")
    e = next(e for e in doc["entries"] if e["id"] == "0/1/00aa11bb22cc33")
    assert [f["code"] for f in e["findings"]] == ["unrecognised"] and e["extra"] == {
        "format": "unknown"
    }
    assert "not the driver's entry format" in e["findings"][0]["message"]
    c = ok.codes(doc)
    # its key hash no longer matches (positive evidence), and what follows is not judged
    assert c[FILES[3]] == ["corrupt", "unrecognised"] and rc == 1


def test_jit_compiler_of_another_driver_is_stale(compute_cache, tmp_path, monkeypatch, capsys):
    libcuda(tmp_path, monkeypatch, None, b"Apr 29 2026")
    rc, doc = ok.verify(capsys, compute_cache, "--target", "90")
    assert ok.codes(doc) == {f: [] for f in FILES}
    libcuda(tmp_path, monkeypatch, None, b"Mar  5 2027")
    rc, doc = ok.verify(capsys, compute_cache, "--target", "90")
    assert ok.codes(doc) == {f: ["stale"] for f in FILES} and rc == 0
    msg = doc["entries"][0]["findings"][0]["message"]
    assert "built Apr 29 2026" in msg and "built Mar 5 2027" in msg


def test_written_before_the_driver_is_stale(compute_cache, tmp_path, monkeypatch, capsys):
    """No JIT compiler to read: an entry older than libcuda's mtime was written by an earlier driver."""
    for rel in FILES[:2]:
        ok.set_age(os.path.join(compute_cache, rel), 30 * 86400)
    libcuda(tmp_path, monkeypatch, 10 * 86400)
    rc, doc = ok.verify(capsys, compute_cache, "--target", "90")
    c = ok.codes(doc)
    assert [c[r] for r in FILES] == [["stale"], ["stale"], [], [], [], []], c
    msg = next(e for e in doc["entries"] if e["id"] == FILES[0])["findings"][0]["message"]
    assert "before the installed driver existed" in msg and "libcuda.so.1" in msg
    assert rc == 0  # stale is a warning


def test_mtimes_that_say_nothing(compute_cache, tmp_path, monkeypatch, capsys):
    """Newer than libcuda says nothing (an older driver may have written it later); Nix's mtime 1 says nothing."""
    libcuda(tmp_path, monkeypatch, 400 * 86400)
    rc, doc = ok.verify(capsys, compute_cache, "--target", "90")
    assert all(c == [] for c in ok.codes(doc).values())
    libcuda(tmp_path, monkeypatch, None)
    rc, doc = ok.verify(capsys, compute_cache, "--target", "90")
    assert all(c == [] for c in ok.codes(doc).values())


def test_size_against_maxsize_and_disable(compute_cache, monkeypatch, capsys):
    total = len(FILES) * ENTRY_BYTES + os.path.getsize(os.path.join(compute_cache, "index"))
    rc, doc = ok.verify(capsys, compute_cache)
    assert ok.root_codes(doc) == []
    monkeypatch.setenv("CUDA_CACHE_MAXSIZE", str(total - 1))
    rc, doc = ok.verify(capsys, compute_cache)
    assert (
        ok.root_codes(doc) == ["stale"]
        and "thrashing" in doc["caches"][0]["findings"][0]["message"]
    )
    monkeypatch.setenv("CUDA_CACHE_MAXSIZE", str(int(total / 0.95)))
    rc, doc = ok.verify(capsys, compute_cache)
    assert (
        ok.root_codes(doc) == ["stale"]
        and "near its limit" in doc["caches"][0]["findings"][0]["message"]
    )
    monkeypatch.setenv("CUDA_CACHE_MAXSIZE", str(total * 4))
    rc, doc = ok.verify(capsys, compute_cache)
    assert ok.root_codes(doc) == []
    monkeypatch.setenv("CUDA_CACHE_DISABLE", "1")
    rc, doc = ok.verify(capsys, compute_cache)
    assert (
        ok.root_codes(doc) == ["stale"]
        and "CUDA_CACHE_DISABLE=1" in doc["caches"][0]["findings"][0]["message"]
    )
    assert rc == 0


def test_maxsize_parsing():
    assert cc.maxsize({"CUDA_CACHE_MAXSIZE": "1000"}) == (1000, "CUDA_CACHE_MAXSIZE=1000")
    assert cc.maxsize({"CUDA_CACHE_MAXSIZE": str(8 << 30)})[0] == 4 << 30
    assert cc.maxsize({})[0] in (cc.DEFAULT_MAXSIZE, cc.EMBEDDED_MAXSIZE)
    assert cc.maxsize({"CUDA_CACHE_MAXSIZE": "lots"})[0] in (
        cc.DEFAULT_MAXSIZE,
        cc.EMBEDDED_MAXSIZE,
    )


def test_unsafe_files_and_links(compute_cache, tmp_path, capsys):
    os.chmod(os.path.join(compute_cache, FILES[0]), 0o666)
    os.symlink(str(tmp_path), os.path.join(compute_cache, "2", "4", "evil"))
    rc, doc = ok.verify(capsys, compute_cache)
    c = ok.codes(doc)
    assert c[FILES[0]] == ["unsafe"] and c["2/4/evil"] == ["unsafe"] and rc == 1


def test_world_writable_root(compute_cache, capsys):
    os.chmod(compute_cache, 0o777)
    rc, doc = ok.verify(capsys, compute_cache)
    assert ok.root_codes(doc) == ["unsafe"] and rc == 1


def test_discovery(tmp_path):
    home = tmp_path / "home"
    (home / ".nv" / "ComputeCache").mkdir(parents=True)
    assert [(r.path, r.source) for r in cc.discover_roots({"HOME": str(home)})] == [
        (str(home / ".nv" / "ComputeCache"), "default")
    ]
    (tmp_path / "jit").mkdir()
    env = {"HOME": str(home), "CUDA_CACHE_PATH": str(tmp_path / "jit")}
    assert [r.source for r in cc.discover_roots(env)] == ["CUDA_CACHE_PATH", "default"]
    assert cc.looks_like_root(str(home / ".nv" / "ComputeCache"))
    (tmp_path / "jit" / "index").write_bytes(b"x")
    assert not cc.looks_like_root(str(tmp_path / "jit"))
    (tmp_path / "jit" / "a").mkdir()
    assert cc.looks_like_root(str(tmp_path / "jit"))


def test_clean_quarantines_stale_files_not_the_index(compute_cache, tmp_path, monkeypatch):
    ok.set_age(os.path.join(compute_cache, FILES[3]), 30 * 86400)
    libcuda(tmp_path, monkeypatch, 10 * 86400)
    plan, outcomes = ok.clean_codes(compute_cache, "cuda-compute", ("stale",))
    assert [a.id for a in plan.actions] == [FILES[3]]
    assert [o.status for o in outcomes] == ["quarantined"]
    assert not os.path.exists(os.path.join(compute_cache, FILES[3]))
    assert os.path.exists(os.path.join(compute_cache, "index"))
