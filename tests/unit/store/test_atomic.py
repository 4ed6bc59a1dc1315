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


def _mode(p) -> int:
    return os.lstat(p).st_mode & 0o777


def test_write_private_makes_the_missing_dirs_0700_and_the_file_0600(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    target = home / "jw" / "stats" / "last.json"
    assert atomic.write_private_json(str(target), {"a": 1}, ".t.", under=str(home / "jw"))
    assert target.read_text() == '{"a": 1}'
    assert (_mode(home / "jw"), _mode(home / "jw" / "stats"), _mode(target)) == (
        0o700,
        0o700,
        0o600,
    )


def test_write_private_never_writes_through_a_link_below_its_home(tmp_path):
    """A ``stats`` dir swapped for a link (to anywhere, even a dir of the same user's) is refused, not followed."""
    jw, elsewhere = tmp_path / "jw", tmp_path / "elsewhere"
    jw.mkdir(mode=0o700)
    elsewhere.mkdir(mode=0o700)
    (jw / "stats").symlink_to(elsewhere)
    with pytest.raises(OSError):
        atomic.write_private(str(jw / "stats" / "x.json"), b"{}", ".t.", under=str(jw))
    assert os.listdir(elsewhere) == []


def test_the_users_own_link_at_the_home_is_followed(tmp_path):
    """``JITWARDEN_HOME`` (or ``~/.cache``) a link the user made: its target is judged, and written."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "jw").symlink_to(real)
    assert atomic.write_private(str(tmp_path / "jw" / "m.json"), b"{}", ".t.")
    assert (real / "m.json").read_bytes() == b"{}"


def test_a_dir_others_may_write_gets_nothing_and_nothing_is_made_below_it(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    assert not atomic.write_private(
        str(shared / "jw" / "m.json"), b"{}", ".t.", under=str(shared / "jw")
    )
    assert os.listdir(shared) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to hand a dir and a link to another uid")
def test_root_makes_nothing_in_a_users_dir_and_refuses_a_users_link(tmp_path):
    """Root with a user's HOME: the user's dir gets no root-owned subdir, and a link the user planted at the
    home (to a dir of root's) is refused, never followed into root's place."""
    user_home = tmp_path / "user"
    user_home.mkdir()
    os.chown(user_home, 4000, 4000)
    assert not atomic.write_private(str(user_home / ".cache" / "jw" / "m.json"), b"{}", ".t.")
    assert os.listdir(user_home) == []
    roots = tmp_path / "roots"
    roots.mkdir(mode=0o700)
    link = user_home / "jw"
    link.symlink_to(roots)
    os.lchown(link, 4000, 4000)
    assert not atomic.write_private(str(link / "m.json"), b"{}", ".t.")
    assert os.listdir(roots) == []
