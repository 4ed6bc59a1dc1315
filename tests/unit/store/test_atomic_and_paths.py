"""The disk layer's writing primitives (store/paths, store/atomic): directories a user names resolved as the kernel does,
atomic writes beside the target renamed by fd, private staging dirs and removal that never follows a link."""

from __future__ import annotations

import errno
import os

import pytest

from jitwarden.store import atomic, paths, removal, tempdirs


def _tree(top) -> list:
    return sorted(
        os.path.relpath(os.path.join(d, n), top) for d, ds, fs in os.walk(top) for n in ds + fs
    )


def test_open_dir_path_makes_only_what_comes_after_the_last_dotdot(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError):
        paths.open_dir_path("a/b/../../c", create=True)
    assert _tree(tmp_path) == []
    os.makedirs("a/b")
    fd = paths.open_dir_path("a/b/../../c/d", create=True)
    os.close(fd)
    assert _tree(tmp_path) == ["a", "a/b", "c", "c/d"]


def test_open_dir_path_names_the_file_in_the_way(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError) as exc:
        paths.open_dir_path(str(tmp_path / "f" / "sub"), create=True)
    assert exc.value.filename == str(tmp_path / "f")


def test_open_parent_refuses_a_directory_but_not_a_link_at_the_name(tmp_path):
    (tmp_path / "d").mkdir()
    for p in (str(tmp_path / "d"), str(tmp_path) + "/", str(tmp_path / "d" / "..")):
        with pytest.raises(IsADirectoryError):
            paths.open_parent(p)
    os.symlink(
        tmp_path / "d", tmp_path / "ln"
    )  # a link to a directory is replaced by a write, never followed
    fd, name = paths.open_parent(str(tmp_path / "ln"))
    os.close(fd)
    assert name == "ln"


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


def test_rmtree_at_removes_a_staging_dir_without_following_links(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        name, sfd = tempdirs.make_temp_dir(fd, ".jitwarden-import.")
        assert oct(os.fstat(sfd).st_mode & 0o777) == oct(0o700)
        os.close(sfd)
        os.makedirs(tmp_path / name / "0" / "sub")
        (tmp_path / name / "0" / "f").write_text("y")
        os.symlink(outside, tmp_path / name / "0" / "link")
        removal.rmtree_at(fd, name)
    finally:
        os.close(fd)
    assert sorted(os.listdir(tmp_path)) == ["outside"] and (outside / "keep").read_text() == "x"


def test_open_beneath_names_the_linked_component(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "fxgraph")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(paths.UnsafeName) as exc:
            paths.open_beneath(fd, "fxgraph/ab", create=True)
    finally:
        os.close(fd)
    assert exc.value.errno in (errno.ELOOP, errno.ENOTDIR) and exc.value.strerror.startswith(
        "fxgraph is a symlink"
    )
    assert os.listdir(tmp_path / "real") == []
