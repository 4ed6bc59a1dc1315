"""No lock without a bound (store/entrylock.py, store/locks.py; the guard's use in runtime/guards/triton.py).

``flock`` needs only a read fd: another user who can open a lock file can hold it. Lock files are
created readable only by those who may write the directory, and a guarded compile waits for an entry
lock at most ``JITWARDEN_LOCK_TIMEOUT`` seconds, then takes a miss and compiles privately.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from jitwarden.model.layout import ENTRY_LOCK_FILE, ROOT_LOCK_FILE, SEAL_FILE
from jitwarden.store import entrylock, locks
from tests.helpers.guarded import ADD, compile_jobs

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
second_user = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("flock") is None,
    reason="needs root, setpriv and flock to play a second user",
)


@pytest.fixture
def shared():
    """A directory every user can reach (pytest's tmp_path is 0700): root's, 0755."""
    d = tempfile.mkdtemp(prefix="jw-lock-test-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


HOLD = (
    "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
    "fcntl.flock(fd, fcntl.LOCK_EX); time.sleep(600)"
)


def hold_as_nobody(path: str) -> subprocess.Popen:
    """Another user holding ``path`` exclusively (as ``flock -x path sleep`` would, in one process that
    ``kill`` ends) until killed; returns once held."""
    p = subprocess.Popen([*AS_NOBODY, sys.executable, "-c", HOLD, path], stdout=subprocess.DEVNULL)
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(500):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BlockingIOError:
                return p
            assert p.poll() is None, "the second user could not take the lock"
            time.sleep(0.02)
    finally:
        os.close(fd)
    p.kill()
    raise AssertionError("the second user never took the lock")


@pytest.mark.parametrize(
    "dir_mode, want", [(0o755, 0o600), (0o700, 0o600), (0o775, 0o640), (0o777, 0o644)]
)
def test_a_lock_file_is_readable_only_by_those_who_may_write_the_directory(
    tmp_path, dir_mode, want
):
    d = tmp_path / "entry"
    d.mkdir()
    d.chmod(dir_mode)
    entrylock.unlock(entrylock.lock(str(d), ENTRY_LOCK_FILE, fcntl.LOCK_SH))
    assert os.stat(d / ENTRY_LOCK_FILE).st_mode & 0o777 == want
    root = tmp_path / "root"
    root.mkdir()
    root.chmod(dir_mode)
    locks.release(locks.acquire(str(root)))
    assert os.stat(root / ROOT_LOCK_FILE).st_mode & 0o777 == want


def test_a_lock_file_left_readable_by_all_is_narrowed(tmp_path):
    d = tmp_path / "entry"
    d.mkdir()
    d.chmod(0o755)
    (d / ENTRY_LOCK_FILE).touch(0o644)
    os.chmod(d / ENTRY_LOCK_FILE, 0o644)
    entrylock.unlock(entrylock.lock(str(d), ENTRY_LOCK_FILE, fcntl.LOCK_SH))
    assert os.stat(d / ENTRY_LOCK_FILE).st_mode & 0o777 == 0o600


@second_user
def test_another_user_cannot_open_a_lock_in_a_private_entry(shared):
    d = os.path.join(shared, "entry")
    os.mkdir(d, 0o755)
    entrylock.unlock(entrylock.lock(d, ENTRY_LOCK_FILE, fcntl.LOCK_EX))
    p = subprocess.run(
        [*AS_NOBODY, "flock", "-n", "-x", os.path.join(d, ENTRY_LOCK_FILE), "true"],
        capture_output=True,
        text=True,
    )
    assert p.returncode != 0 and "Permission denied" in p.stderr


@second_user
def test_a_wait_on_another_users_lock_has_a_deadline(shared):
    d = os.path.join(shared, "entry")
    os.mkdir(d)
    os.chmod(d, 0o777)  # a lock file all may open (a shared root)
    entrylock.unlock(entrylock.lock(d, ENTRY_LOCK_FILE, fcntl.LOCK_EX))
    holder = hold_as_nobody(os.path.join(d, ENTRY_LOCK_FILE))
    try:
        with pytest.raises(entrylock.LockTimeout) as err:
            entrylock.lock(d, ENTRY_LOCK_FILE, fcntl.LOCK_EX, timeout=0.3)
        assert "JITWARDEN_LOCK_TIMEOUT" in str(err.value)
        assert entrylock.lock(d, ENTRY_LOCK_FILE, fcntl.LOCK_SH, block=False) is None
    finally:
        holder.kill()
        holder.wait()


@second_user
@pytest.mark.slow
def test_a_guarded_compile_on_an_entry_another_user_locks_finishes_privately(shared):
    """The attack of issue 32: ``flock -x $E/.jitwarden-lock sleep`` on an unsealed entry, as another user."""
    cache = os.path.join(shared, "triton")
    first = compile_jobs(cache, ADD)
    entry = os.path.join(cache, first["add_sm90"]["id"])
    lockfile = os.path.join(entry, ENTRY_LOCK_FILE)
    os.chmod(lockfile, 0o644)  # as jitwarden before this fix left every lock file
    os.unlink(
        os.path.join(entry, SEAL_FILE)
    )  # unsealed: the careful path takes the lock exclusively
    holder = hold_as_nobody(lockfile)
    try:
        start = time.monotonic()
        out = compile_jobs(cache, ADD, extra_env={"JITWARDEN_LOCK_TIMEOUT": "1"})
        waited = time.monotonic() - start
    finally:
        holder.kill()
        holder.wait()
    print(f"guarded compile with another user holding its entry lock: returned in {waited:.2f}s")
    assert out["add_sm90"]["cubin"] == first["add_sm90"]["cubin"]  # compiled, the right kernel
    assert "JITWARDEN_LOCK_TIMEOUT" in out["_stderr"]  # the expiry said
    assert out["_stderr"].count("jitwarden:") == 1  # once
    assert not os.path.exists(os.path.join(entry, SEAL_FILE))  # nothing sealed under their lock


@second_user
@pytest.mark.slow
def test_a_lock_taken_before_the_group_is_published_is_waited_on_within_the_deadline(shared):
    """The entry's lock held from before the compile (the writer's put_group waits for it): the kernel
    is published as stock Triton publishes it, unsealed, and the compile returns."""
    first = compile_jobs(os.path.join(shared, "a"), ADD)
    entry = os.path.join(shared, "b", first["add_sm90"]["id"])
    os.makedirs(entry)
    lockfile = os.path.join(entry, ENTRY_LOCK_FILE)
    with open(lockfile, "w"):
        pass
    os.chmod(lockfile, 0o644)  # as jitwarden before this fix left every lock file
    holder = hold_as_nobody(lockfile)
    try:
        out = compile_jobs(
            os.path.join(shared, "b"), ADD, extra_env={"JITWARDEN_LOCK_TIMEOUT": "1"}
        )
    finally:
        holder.kill()
        holder.wait()
    assert out["add_sm90"]["cubin"] == first["add_sm90"]["cubin"]
    assert "JITWARDEN_LOCK_TIMEOUT" in out["_stderr"]
    assert out["_stderr"].count("jitwarden:") == 1
    assert not os.path.exists(os.path.join(entry, SEAL_FILE))
