"""The one atomic writer (store/atomic.py): temporary names that fit NAME_MAX for any legal target name, a link at
the target replaced and never followed, nothing left behind by a write that fails half way."""

from __future__ import annotations

import os

import pytest

from jitwarden.store import atomic

LONGEST = "k" * 255  # the longest legal name
WIDE = "é" * 127  # 254 bytes of two-byte characters: a cut must not split one of them in two


@pytest.mark.parametrize("name", [LONGEST, "k" * 246, WIDE, "short"])
def test_every_writer_writes_a_target_of_any_legal_length(tmp_path, name):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        atomic.write_atomic(fd, name, b"one", f".{name}.")
        assert (tmp_path / name).read_bytes() == b"one"
        with atomic.AtomicWriter(fd, name, f".{name}.", mode=0o600) as w:
            w.write(b"two")
        assert (tmp_path / name).read_bytes() == b"two"
    finally:
        os.close(fd)
    atomic.write_json_atomic(str(tmp_path / name), {"n": 4}, f".{name}.")
    assert (tmp_path / name).read_bytes() == b'{"n": 4}'
    atomic.write_bytes_atomic(str(tmp_path / name), b"five")
    assert (tmp_path / name).read_bytes() == b"five"
    assert os.listdir(tmp_path) == [name]  # no temporary left


def test_a_cut_name_stays_within_name_max_and_random():
    names = {atomic.temp_name(f".{LONGEST}.") for _ in range(20)}
    assert len(names) == 20
    assert all(len(os.fsencode(n)) <= atomic.NAME_MAX for n in names)
    n = atomic.temp_name(os.path.join("/some/dir", f".{WIDE}."))
    base = os.path.basename(n)
    assert n.startswith("/some/dir/.é") and len(os.fsencode(base)) <= 255
    assert base.encode("utf-8")  # whole characters only: no lone surrogate from a split one


def test_write_atomic_replaces_a_link_and_leaves_nothing_on_failure(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.symlink(victim, tmp_path / "out")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        atomic.write_atomic(fd, "out", b"new", ".out.", mode=0o600)
        assert victim.read_text() == "precious" and (tmp_path / "out").read_bytes() == b"new"
        assert oct((tmp_path / "out").stat().st_mode & 0o777) == oct(0o600)
        (tmp_path / "dir").mkdir()
        with pytest.raises(IsADirectoryError):
            atomic.write_atomic(fd, "dir", b"x", ".dir.")
        with pytest.raises(RuntimeError), atomic.AtomicWriter(fd, "late", ".late.") as w:
            w.write(b"half")
            raise RuntimeError("killed half way")
    finally:
        os.close(fd)
    assert sorted(os.listdir(tmp_path)) == ["dir", "out", "victim"]
