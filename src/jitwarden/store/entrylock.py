"""Per-entry flock files shared by the guard and the start-up sweep (stdlib only).

- :data:`~jitwarden.model.layout.ENTRY_LOCK_FILE` (``.jitwarden-lock``): shared while verifying,
  exclusive while sealing or quarantining;
- :data:`~jitwarden.model.layout.ENTRY_WRITERS_FILE` (``.jitwarden-writers``): held shared by every
  writer from its first file to its group, so a reader can tell "mid-write" (a plain miss) from
  "damaged" (quarantine).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)


def lock(entry_dir: str, name: str, mode: int, block: bool = True) -> int | None:
    """An fd holding flock ``mode`` on ``entry_dir/name``; None when ``block`` is False and it is taken.

    Re-checks after locking that the file is still the one at that path: the entry
    may have been renamed into quarantine while we waited. Opened with O_NONBLOCK and
    O_NOCTTY and checked to be a regular file, so a FIFO planted under the name cannot
    block the opener (NotRegularFile, an OSError, instead).
    """
    from jitwarden.store.fsutil import NotRegularFile, kind_of

    path = os.path.join(entry_dir, name)
    for _ in range(100):
        try:
            fd = os.open(
                path,
                os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK | _O_NOCTTY,
                0o644,
            )
        except FileNotFoundError:
            os.makedirs(entry_dir, exist_ok=True)
            continue
        st_mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(st_mode):
            os.close(fd)
            raise NotRegularFile(errno.EINVAL, f"not a regular file ({kind_of(st_mode)})", path)
        try:
            fcntl.flock(fd, mode if block else mode | fcntl.LOCK_NB)
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


def unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the last fd of the open file description releases the flock
