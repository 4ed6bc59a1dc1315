"""jitwarden's own lock on a cache root (store/locks.py): one holder at a time, a second one told who holds it
and bounded by its timeout, the pid cleared on release; a root whose reserved names are not what jitwarden made
is refused in one line before anything changes."""

from __future__ import annotations

import io
import os

import pytest

from jitwarden.model.layout import QUARANTINE_DIR, ROOT_LOCK_FILE
from jitwarden.store import locks


def test_one_holder_at_a_time_and_the_second_is_told_who(tmp_path):
    path = tmp_path / ROOT_LOCK_FILE
    fd = locks.acquire(str(tmp_path))
    try:
        assert path.read_text() == f"{os.getpid()}\n" and locks.holder(str(path)) == str(
            os.getpid()
        )
        said = io.StringIO()
        with pytest.raises(locks.LockError) as exc:
            locks.acquire(str(tmp_path), timeout=0.3, stream=said)
        assert f"held by pid {os.getpid()}" in str(exc.value) and "after 0.3s" in str(exc.value)
        assert (
            said.getvalue()
            == f"jitwarden: waiting for the lock on {tmp_path} held by pid {os.getpid()}...\n"
        )
        assert exc.value.exit_code == 2
    finally:
        locks.release(fd)
    assert path.read_text() == ""  # never names a process that no longer holds it
    assert locks.holder(str(path)) == "?"
    locks.release(locks.acquire(str(tmp_path), timeout=0))  # free again, taken at once


def test_hold_takes_every_root_and_gives_them_back(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    with locks.hold([str(b), str(a), str(a)]):
        for r in (a, b):
            with pytest.raises(locks.LockError):
                locks.acquire(str(r), timeout=0, stream=io.StringIO())
    for r in (a, b):
        locks.release(locks.acquire(str(r), timeout=0))


@pytest.mark.parametrize(
    "planted", ["lock-link", "quarantine-link", "quarantine-file", "lock-hardlink"]
)
def test_a_reserved_name_jitwarden_did_not_make_is_refused(tmp_path, planted):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "f").write_text("precious")
    root = tmp_path / "root"
    root.mkdir()
    if planted == "lock-link":
        os.symlink(victim / "f", root / ROOT_LOCK_FILE)
    elif planted == "lock-hardlink":
        os.link(victim / "f", root / ROOT_LOCK_FILE)
    elif planted == "quarantine-link":
        os.symlink(victim, root / QUARANTINE_DIR)
    else:
        (root / QUARANTINE_DIR).write_text("x")
    with pytest.raises(locks.LockError) as exc:
        locks.acquire(str(root), timeout=0)
    assert str(exc.value).startswith(f"refusing to act on {root}: ") and "nothing changed" in str(
        exc.value
    )
    assert "\n" not in str(exc.value)
    assert (victim / "f").read_text() == "precious"


def test_a_root_that_cannot_be_opened_is_one_line(tmp_path):
    with pytest.raises(
        locks.LockError,
        match=r"^cannot lock .*missing: no such file or directory; nothing changed$",
    ):
        locks.acquire(str(tmp_path / "missing"))
