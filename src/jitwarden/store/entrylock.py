"""Per-entry flock files shared by the guard and the start-up sweep (stdlib only).

- :data:`~jitwarden.model.layout.ENTRY_LOCK_FILE` (``.jitwarden-lock``): shared while verifying,
  exclusive while sealing or quarantining;
- :data:`~jitwarden.model.layout.ENTRY_WRITERS_FILE` (``.jitwarden-writers``): held shared by every
  writer from its first file to its group, so a reader can tell "mid-write" (a plain miss) from
  "damaged" (quarantine).

``flock`` needs only a read fd, so anyone who can open a lock file can hold it: a lock file is created
readable only by those who may write the entry's directory (0600 in a private one), and every wait has
a deadline (:data:`~jitwarden.model.settings.LOCK_TIMEOUT`): past it, :class:`LockTimeout`, and the workload takes a miss
instead of waiting on another user's lock forever (ARCHITECTURE.md, "The runtime").
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Mapping

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_FIRST_POLL_S, _LAST_POLL_S = 0.001, 0.05


class LockTimeout(OSError):
    """The lock was still held by another process at the deadline (errno ETIMEDOUT)."""


def deadline_s(env: Mapping[str, str] | None = None) -> float:
    """Seconds a wait on an entry lock may last (:data:`~jitwarden.model.settings.LOCK_TIMEOUT`)."""
    from jitwarden.model.settings import LOCK_TIMEOUT

    return LOCK_TIMEOUT.number(os.environ if env is None else env)


def lock_mode(dir_mode: int) -> int:
    """The mode of a new lock file in a directory of mode ``dir_mode`` (pure): readable (so lockable) only
    by those who may write the directory: 0600 in a private one, group or others added where they may."""
    return 0o600 | (dir_mode & 0o022) << 1


def wait_flock(fd: int, mode: int, timeout: float, what: str) -> None:
    """``flock(fd, mode)``, waiting at most ``timeout`` seconds (polled, backing off from 1 ms to 50 ms);
    :class:`LockTimeout` naming ``what`` past it. The one bounded wait on a lock another user may hold."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    end, pause = time.monotonic() + timeout, _FIRST_POLL_S
    while True:
        left = end - time.monotonic()
        if left <= 0:
            from jitwarden.model.settings import LOCK_TIMEOUT

            raise LockTimeout(
                errno.ETIMEDOUT,
                f"the lock {what} was still held by another process after {timeout:.3g}s "
                f"({LOCK_TIMEOUT.name})",
                what,
            )
        time.sleep(min(pause, left))
        pause = min(pause * 2, _LAST_POLL_S)
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            continue


def _open(entry_dir: str, name: str) -> int:
    """An fd of the lock file ``name`` in ``entry_dir`` (created with :func:`lock_mode` of the directory)."""
    from jitwarden.store.reads import NotRegularFile, kind_of

    path = os.path.join(entry_dir, name)
    try:
        dir_mode = os.stat(entry_dir).st_mode
    except FileNotFoundError:
        os.makedirs(entry_dir, exist_ok=True)
        dir_mode = os.stat(entry_dir).st_mode
    fd = os.open(
        path,
        os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK | _O_NOCTTY,
        lock_mode(dir_mode),
    )
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegularFile(errno.EINVAL, f"not a regular file ({kind_of(st.st_mode)})", path)
    if st.st_uid == os.geteuid() and st.st_mode & 0o066 & ~lock_mode(dir_mode):
        try:  # one an older jitwarden left readable by all: narrowed for the next opener
            os.fchmod(fd, lock_mode(dir_mode))
        except OSError:
            pass
    return fd


def lock(
    entry_dir: str, name: str, mode: int, block: bool = True, timeout: float | None = None
) -> int | None:
    """An fd holding flock ``mode`` on ``entry_dir/name``; None when ``block`` is False and it is taken.

    ``block``: wait at most ``timeout`` seconds (None: :func:`deadline_s`), then :class:`LockTimeout`.
    Re-checks after locking that the file is still the one at that path: the entry may have been
    renamed into quarantine while we waited. Opened with O_NONBLOCK and O_NOCTTY and checked to be a
    regular file, so a FIFO planted under the name cannot block the opener (NotRegularFile, an OSError).
    """
    path = os.path.join(entry_dir, name)
    wait = (deadline_s() if timeout is None else timeout) if block else 0.0
    end = time.monotonic() + wait
    for _ in range(100):
        try:
            fd = _open(entry_dir, name)
        except FileNotFoundError:
            continue
        try:
            if block:
                wait_flock(fd, mode, max(end - time.monotonic(), 0.0), path)
            else:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
    raise OSError(f"cannot lock {path}: it keeps moving")


def open_lock_file(dir_fd: int, name: str, *, create: bool = False) -> int | None:
    """An fd of the lock file ``name`` in ``dir_fd`` when it is a regular file this user owns; None otherwise.

    Never follows a link, never blocks on a FIFO; a lock file someone else planted (another owner)
    is no lock of ours, so it is refused like one that is absent.
    """
    try:
        fd = os.open(
            name,
            (os.O_RDWR | os.O_CREAT if create else os.O_RDONLY)
            | os.O_CLOEXEC
            | _O_NOFOLLOW
            | _O_NONBLOCK
            | _O_NOCTTY,
            0o600,
            dir_fd=dir_fd,
        )
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the last fd of the open file description releases the flock
