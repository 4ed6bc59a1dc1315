"""The guard's served copies live where only the caller can reach them (store/served.py, store/tempdirs.py).

Each attack is played by another uid (``setpriv``) that owns or may write a parent the old code used:
a foreign ``XDG_RUNTIME_DIR`` (``su`` without ``-``), a foreign ``TMPDIR``, a 0777 directory, a symlink.
Whatever it does, the bytes at a served path are the verified bytes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from jitwarden.store import served as served_mod
from jitwarden.store import tempdirs

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
VERIFIED = b"\x7fELF verified add_kernel" * 64
SUBSTITUTE = b"\x7fELF substitute sub_kernel" * 64

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to play a second user",
)


@pytest.fixture
def shared():
    """A directory every user can reach (pytest's tmp_path is 0700): root's, 0755."""
    d = tempfile.mkdtemp(prefix="jw-served-test-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def no_shm(monkeypatch, tmp_path):
    """A machine without /dev/shm, so the parents after it are the ones tried."""
    monkeypatch.setattr(served_mod, "SHARED_MEMORY", str(tmp_path / "no-shm"))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR


def foreign_dir(where: str, name: str, mode: int = 0o700) -> str:
    d = os.path.join(where, name)
    os.mkdir(d)
    os.chown(d, NOBODY, NOBODY)
    os.chmod(d, mode)
    return d


def as_nobody(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*AS_NOBODY, sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )


SWAP_DIR = """
    import os, sys
    d, name, data = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
    os.rename(d, d + ".gone")          # the parent is ours: move the victim's directory away
    os.mkdir(d, 0o777)                 # and put our own in its place
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
"""

SWAP_LINK = """
    import os, sys
    d, target = sys.argv[1], sys.argv[2]
    os.rename(d, d + ".gone")
    os.symlink(target, d)              # the next copies go wherever we point
"""


def attack(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*AS_NOBODY, sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def assert_trusted_path(path: str) -> None:
    """Every directory on the way to a served file is only the caller's and root's to change."""
    d = os.path.dirname(path)
    st = os.lstat(d)
    assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o700
    while d != os.sep:
        d = os.path.dirname(d)
        assert tempdirs.why_untrusted(os.lstat(d)) is None, d


def test_a_foreign_runtime_dir_is_passed_over_and_its_owner_cannot_swap_the_copy(
    shared, monkeypatch, tmp_path
):
    run = foreign_dir(shared, "run-1000")
    monkeypatch.setenv("XDG_RUNTIME_DIR", run)
    s = served_mod.Served()
    path = s.serve({"add_kernel.cubin": VERIFIED}, str(tmp_path))["add_kernel.cubin"]
    assert not path.startswith(run + os.sep)
    assert_trusted_path(path)
    d, name = os.path.split(path)
    attack(SWAP_DIR, d, name, SUBSTITUTE.hex())  # refused: the parent is not the attacker's
    assert read(path) == VERIFIED
    again = s.serve({"add_kernel.cubin": VERIFIED}, str(tmp_path))["add_kernel.cubin"]
    assert read(again) == VERIFIED
    s._drop()


def test_a_symlink_put_in_place_of_the_directory_never_receives_a_copy(
    shared, monkeypatch, tmp_path
):
    run = foreign_dir(shared, "run-1000")
    evil = foreign_dir(shared, "evil", 0o777)
    monkeypatch.setenv("XDG_RUNTIME_DIR", run)
    s = served_mod.Served()
    first = s.serve({"add_kernel.cubin": VERIFIED}, str(tmp_path))["add_kernel.cubin"]
    attack(SWAP_LINK, os.path.dirname(first), evil)
    second = s.serve({"add_kernel.cubin": VERIFIED}, str(tmp_path))["add_kernel.cubin"]
    assert os.listdir(evil) == []  # root wrote nothing outside its own directory
    assert read(second) == VERIFIED
    assert_trusted_path(second)
    s._drop()


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_directory_others_may_write_is_passed_over(shared, monkeypatch, tmp_path, mode):
    run = os.path.join(shared, "run")
    os.mkdir(run)
    os.chmod(run, mode)  # root's own, but writable by others without the sticky bit
    monkeypatch.setenv("XDG_RUNTIME_DIR", run)
    s = served_mod.Served()
    path = s.serve({"k.cubin": VERIFIED}, str(tmp_path))["k.cubin"]
    assert not path.startswith(run + os.sep)
    assert_trusted_path(path)
    s._drop()


def test_a_runtime_dir_reached_through_a_symlink_is_passed_over(shared, monkeypatch, tmp_path):
    real = os.path.join(shared, "real")
    os.mkdir(real, 0o700)
    link = os.path.join(shared, "link")
    os.symlink(real, link)
    with pytest.raises(tempdirs.UntrustedDir):
        os.close(tempdirs.open_trusted_dir(link))
    monkeypatch.setenv("XDG_RUNTIME_DIR", link)
    s = served_mod.Served()
    path = s.serve({"k.cubin": VERIFIED}, str(tmp_path))["k.cubin"]
    assert not path.startswith((link + os.sep, real + os.sep))
    s._drop()


def test_a_foreign_tmpdir_is_passed_over(shared, monkeypatch, no_shm, tmp_path):
    tmp = foreign_dir(shared, "tmp-1000", 0o777)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", tmp)
    s = served_mod.Served()
    path = s.serve({"k.cubin": VERIFIED}, str(tmp_path))["k.cubin"]
    assert not path.startswith(tmp + os.sep)
    d, name = os.path.split(path)
    attack(SWAP_DIR, d, name, SUBSTITUTE.hex())
    assert read(path) == VERIFIED
    assert_trusted_path(path)
    s._drop()
    p = tempdirs.private_dir("jw-work-")  # the rebuild's and the canary's work dirs: the same rule
    try:
        assert not p.startswith(tmp + os.sep)
        assert_trusted_path(os.path.join(p, "x"))
    finally:
        os.rmdir(p)


RACE = """
    import os, sys, time
    run, data = sys.argv[1], bytes.fromhex(sys.argv[2])
    end = time.monotonic() + float(sys.argv[3])
    while time.monotonic() < end:      # swap every file as it appears, in every served dir we can see
        try:
            for d in os.listdir(run):
                p = os.path.join(run, d)
                for n in os.listdir(p):
                    if n.endswith(".cubin"):
                        tmp = os.path.join(run, "x")
                        with open(tmp, "wb") as f:
                            f.write(data)
                        os.replace(tmp, os.path.join(p, n))
        except OSError:
            pass
"""


def test_a_file_swapped_as_it_appears_never_reaches_the_reader(shared, monkeypatch, tmp_path):
    run = foreign_dir(shared, "run-1000", 0o777)
    monkeypatch.setenv("XDG_RUNTIME_DIR", run)
    racer = subprocess.Popen(
        [*AS_NOBODY, sys.executable, "-c", textwrap.dedent(RACE), run, SUBSTITUTE.hex(), "3"]
    )
    try:
        s = served_mod.Served()
        for _ in range(200):
            path = s.serve({"add_kernel.cubin": VERIFIED}, str(tmp_path))["add_kernel.cubin"]
            assert read(path) == VERIFIED
        s._drop()
    finally:
        racer.wait(timeout=30)
