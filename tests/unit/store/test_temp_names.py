"""Temporary names that fit NAME_MAX for any legal target name (store/fsutil.temp_name and its writers)."""

from __future__ import annotations

import os

import pytest

from jitwarden.store import fsutil

LONGEST = "k" * 255  # the longest legal name
WIDE = "é" * 127  # 254 bytes of two-byte characters: a cut must not split one of them in two


@pytest.mark.parametrize("name", [LONGEST, "k" * 246, WIDE, "short"])
def test_every_writer_writes_a_target_of_any_legal_length(tmp_path, name):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsutil.write_atomic(fd, name, b"one", f".{name}.")
        assert (tmp_path / name).read_bytes() == b"one"
        with fsutil.AtomicWriter(fd, name, f".{name}.", mode=0o600) as w:
            w.write(b"two")
        assert (tmp_path / name).read_bytes() == b"two"
    finally:
        os.close(fd)
    fsutil.write_json_atomic(str(tmp_path / name), {"n": 4}, f".{name}.")
    assert (tmp_path / name).read_bytes() == b'{"n": 4}'
    fsutil.write_bytes_atomic(str(tmp_path / name), b"five")
    assert (tmp_path / name).read_bytes() == b"five"
    assert os.listdir(tmp_path) == [name]  # no temporary left


def test_a_cut_name_stays_within_name_max_and_random():
    names = {fsutil.temp_name(f".{LONGEST}.") for _ in range(20)}
    assert len(names) == 20
    assert all(len(os.fsencode(n)) <= fsutil.NAME_MAX for n in names)
    n = fsutil.temp_name(os.path.join("/some/dir", f".{WIDE}."))
    base = os.path.basename(n)
    assert n.startswith("/some/dir/.é") and len(os.fsencode(base)) <= 255
    assert base.encode("utf-8")  # whole characters only: no lone surrogate from a split one
