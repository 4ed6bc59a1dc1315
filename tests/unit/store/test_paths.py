"""Walking paths by directory fds (store/paths.py): directories a user names resolved as the kernel does, a link
at a name replaced by a write and never followed, a linked component named in the error."""

from __future__ import annotations

import errno
import os

import pytest

from jitwarden.store import paths


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


def test_which_finds_what_shutil_which_finds(tmp_path, monkeypatch):
    """``run``'s own ``which`` (no shutil on its start) answers as ``shutil.which`` does, for every shape of hit
    and miss: not executable, a directory of that name, the first of two on PATH, a name with a slash."""
    import shutil

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "plain").write_text("")  # not executable
    (a / "tool").mkdir()  # a directory of the name
    for d in (a, b):
        exe = d / "both"
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    (b / "tool").write_text("#!/bin/sh\n")
    (b / "tool").chmod(0o755)
    path = f"{a}{os.pathsep}{b}"
    monkeypatch.setenv("PATH", path)
    for name in ("plain", "tool", "both", "missing", str(b / "tool"), str(a / "plain"), "sub/x"):
        for p in (path, None, ""):
            assert paths.which(name, p) == shutil.which(name, path=p), (name, p)
