"""Tree removal by fds, at any depth, never following a link (store/removal.py)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

from jitwarden.store import removal
from tests.helpers.paths import SRC

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]

DEPTH = 3000  # deeper than Python's recursion limit, and its path longer than PATH_MAX


def deep_tree(
    parent: str, name: str, depth: int = DEPTH, mode: int = 0o755, owner: int = -1, roots: int = -1
) -> None:
    """``parent/name/d/d/.../d`` ``depth`` levels deep with a file at every tenth level, made by fds
    (``owner``: chowned to that uid; ``roots``: that level is root's own, 0755, and holds a file)."""
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    os.mkdir(name, dir_fd=fd)
    nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = nxt
    for i in range(depth):
        os.chown(fd, *((0, 0) if i == roots else (owner, owner)))
        if i == roots:
            os.close(os.open("rootfile", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
        if i % 10 == 0:
            f = os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
            os.chown(f, owner, owner)
            os.close(f)
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        if i % 500 == 499:
            os.chmod(f"/proc/self/fd/{fd}", mode)
        os.close(fd)
        fd = nxt
    os.close(fd)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize(
    "how",
    [
        "rmtree_at",
        pytest.param("remove_tree_at", marks=pytest.mark.slow),
        pytest.param("rmtree_trash", marks=pytest.mark.slow),
        pytest.param("remove_tree", marks=pytest.mark.slow),
    ],
)
def test_a_3000_deep_tree_is_removed_by_fds(tmp_path, how):
    deep_tree(str(tmp_path), "top")
    before = open_fds()
    if how == "remove_tree":
        removal.remove_tree(str(tmp_path / "top"))
    else:
        fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            getattr(removal, how)(fd, "top")
        finally:
            os.close(fd)
    assert os.listdir(tmp_path) == []
    assert open_fds() == before  # one fd at a time, every one closed


def test_the_trash_walk_enters_directories_made_unenterable(tmp_path):
    deep_tree(str(tmp_path), "top", depth=1200, mode=0o000)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        removal.rmtree_trash(fd, "top")
    finally:
        os.close(fd)
    assert os.listdir(tmp_path) == []


def test_a_symlink_inside_is_removed_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    deep_tree(str(tmp_path), "top", depth=5)
    os.symlink(outside, tmp_path / "top" / "d" / "link")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        removal.rmtree_at(fd, "top")
    finally:
        os.close(fd)
    assert sorted(os.listdir(tmp_path)) == ["outside"]
    assert (outside / "keep").read_text() == "x"


RM_AS_NOBODY = """
import os, sys
sys.path.insert(0, sys.argv[2])
from jitwarden.store import removal
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
for how in (removal.rmtree_at, removal.rmtree_trash):
    try:
        how(fd, "top")
        print("removed")
    except OSError as exc:
        print("OSError", exc.errno)
removal.remove_tree_at(fd, "top")  # quiet: returns
print("quiet")
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv"
)
def test_a_failure_deep_down_is_an_oserror():
    """What cannot be removed 3,000 levels down is an OSError, as the docstrings promise (a user's tree
    holding a directory of root's: its file cannot go)."""
    tmp_path = pathlib.Path(
        tempfile.mkdtemp(prefix="jw-removal-test-")
    )  # reachable by another user
    os.chmod(tmp_path, 0o755)
    base = tmp_path / "base"
    base.mkdir()
    deep_tree(str(base), "top", owner=NOBODY, roots=2500)
    os.chown(base, NOBODY, NOBODY)
    out = subprocess.run(
        [*AS_NOBODY, sys.executable, "-c", RM_AS_NOBODY, str(base), SRC],
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        assert out.stdout.split("\n")[:3] == ["OSError 13", "OSError 13", "quiet"], out.stderr[
            -2000:
        ]
        assert "RecursionError" not in out.stderr
    finally:
        fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            removal.rmtree_at(fd, "base")  # root's turn: shutil.rmtree would recurse
        finally:
            os.close(fd)
        os.rmdir(tmp_path)
