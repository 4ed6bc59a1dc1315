"""cuda-compute adapter: the driver's JIT cache (``$CUDA_CACHE_PATH`` or ``~/.nv/ComputeCache``).

Only the driver writes this cache, and only when it JIT-compiles PTX on a GPU, so this machine cannot
make one. The fixture follows the layout the CUDA Programming Guide ("CUDA Environment Variables":
``CUDA_CACHE_PATH``, ``CUDA_CACHE_MAXSIZE``, ``CUDA_CACHE_DISABLE``) and real caches show: an ``index``
file and opaque files in one-hex-digit subdirectories. The files' bytes are opaque to jitwarden, so the
fixture's bytes are arbitrary; everything judged here is what the filesystem says (names, sizes, mtimes,
modes, links) and the environment. ``JITWARDEN_LIBCUDA`` stands in for the installed libcuda, whose mtime
is the evidence of when the driver was built.
"""

from __future__ import annotations

import os

import pytest

import otherkinds as ok
from jitwarden.adapters import cuda_compute as cc

FILES = ("0/3/9d1c2f7a5e0b4a8c", "0/7/1b2c3d4e5f60718a", "a/e/77aa00ff11ee22dd", "f/1/0a0b0c0d0e0f1011")


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    for k in ("CUDA_CACHE_PATH", "CUDA_CACHE_MAXSIZE", "CUDA_CACHE_DISABLE", "JITWARDEN_LIBCUDA"):
        monkeypatch.delenv(k, raising=False)
    cc.reset_driver_evidence()
    yield
    cc.reset_driver_evidence()


@pytest.fixture
def compute_cache(tmp_path):
    root = tmp_path / "home" / ".nv" / "ComputeCache"
    root.mkdir(parents=True)
    (root / "index").write_bytes(os.urandom(512))
    for i, rel in enumerate(FILES):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(4096 * (i + 1)))
    return str(root)


def libcuda(tmp_path, monkeypatch, age_s: float) -> str:
    """A stand-in libcuda built ``age_s`` ago, named through JITWARDEN_LIBCUDA."""
    p = tmp_path / "libcuda.so.1"
    p.write_bytes(b"\x7fELF")
    ok.set_age(str(p), age_s)
    monkeypatch.setenv("JITWARDEN_LIBCUDA", str(p))
    cc.reset_driver_evidence()
    return str(p)


def test_entries_are_the_hashed_files(compute_cache, capsys):
    rc, doc = ok.verify(capsys, compute_cache, "--target", "90")
    assert doc["caches"][0]["kind"] == "cuda-compute" and rc == 0
    assert sorted(ok.codes(doc)) == sorted(FILES)
    assert all(c == [] for c in ok.codes(doc).values())
    assert doc["caches"][0]["bytes"] == sum(4096 * (i + 1) for i in range(len(FILES)))


def test_written_before_the_driver_is_stale(compute_cache, tmp_path, monkeypatch, capsys):
    for rel in FILES[:2]:
        ok.set_age(os.path.join(compute_cache, rel), 30 * 86400)
    libcuda(tmp_path, monkeypatch, 10 * 86400)
    rc, doc = ok.verify(capsys, compute_cache, "--target", "90")
    c = ok.codes(doc)
    assert [c[r] for r in FILES] == [["stale"], ["stale"], [], []], c
    msg = next(e for e in doc["entries"] if e["id"] == FILES[0])["findings"][0]["message"]
    assert "before the installed driver existed" in msg and "libcuda.so.1" in msg
    assert rc == 0  # stale is a warning


def test_newer_than_the_driver_is_not_judged(compute_cache, tmp_path, monkeypatch, capsys):
    """After the driver was built says nothing: an older driver may have written it after that date. Not flagged."""
    libcuda(tmp_path, monkeypatch, 400 * 86400)
    rc, doc = ok.verify(capsys, compute_cache, "--target", "90")
    assert all(c == [] for c in ok.codes(doc).values())


def test_size_against_maxsize_and_disable(compute_cache, monkeypatch, capsys):
    total = sum(4096 * (i + 1) for i in range(len(FILES))) + 512  # entries + index
    rc, doc = ok.verify(capsys, compute_cache)
    assert ok.root_codes(doc) == []
    monkeypatch.setenv("CUDA_CACHE_MAXSIZE", str(total - 1))
    rc, doc = ok.verify(capsys, compute_cache)
    assert ok.root_codes(doc) == ["stale"] and "thrashing" in doc["caches"][0]["findings"][0]["message"]
    monkeypatch.setenv("CUDA_CACHE_MAXSIZE", str(int(total / 0.95)))
    rc, doc = ok.verify(capsys, compute_cache)
    assert ok.root_codes(doc) == ["stale"] and "near its limit" in doc["caches"][0]["findings"][0]["message"]
    monkeypatch.setenv("CUDA_CACHE_MAXSIZE", str(total * 4))
    rc, doc = ok.verify(capsys, compute_cache)
    assert ok.root_codes(doc) == []
    monkeypatch.setenv("CUDA_CACHE_DISABLE", "1")
    rc, doc = ok.verify(capsys, compute_cache)
    assert ok.root_codes(doc) == ["stale"] and "CUDA_CACHE_DISABLE=1" in doc["caches"][0]["findings"][0]["message"]
    assert rc == 0


def test_maxsize_parsing():
    assert cc.maxsize({"CUDA_CACHE_MAXSIZE": "1000"}) == (1000, "CUDA_CACHE_MAXSIZE=1000")
    assert cc.maxsize({"CUDA_CACHE_MAXSIZE": str(8 << 30)})[0] == 4 << 30
    assert cc.maxsize({})[0] in (cc.DEFAULT_MAXSIZE, cc.EMBEDDED_MAXSIZE)
    assert cc.maxsize({"CUDA_CACHE_MAXSIZE": "lots"})[0] in (cc.DEFAULT_MAXSIZE, cc.EMBEDDED_MAXSIZE)


def test_unsafe_files_and_links(compute_cache, tmp_path, capsys):
    os.chmod(os.path.join(compute_cache, FILES[0]), 0o666)
    os.symlink(str(tmp_path), os.path.join(compute_cache, "0", "3", "evil"))
    rc, doc = ok.verify(capsys, compute_cache)
    c = ok.codes(doc)
    assert c[FILES[0]] == ["unsafe"] and c["0/3/evil"] == ["unsafe"] and rc == 1


def test_world_writable_root(compute_cache, capsys):
    os.chmod(compute_cache, 0o777)
    rc, doc = ok.verify(capsys, compute_cache)
    assert ok.root_codes(doc) == ["unsafe"] and rc == 1


def test_discovery(tmp_path):
    home = tmp_path / "home"
    (home / ".nv" / "ComputeCache").mkdir(parents=True)
    assert [(r.path, r.source) for r in cc.discover_roots({"HOME": str(home)})] == [(str(home / ".nv" / "ComputeCache"), "default")]
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
