"""Append-only logs of jitwarden's own (a workload's kernel record): lines appended in one write, bounded in size.

One writer family for files that grow by lines: :func:`append` opens the log ``O_APPEND | O_NOFOLLOW |
O_NONBLOCK`` in a directory reached by fds (made ``0o700`` when missing), checks it is a regular file of
this user, and adds the bytes in one ``write`` (processes of one workload append to one log; the kernel
keeps each write whole on a local file system). A log that would pass its bound is rewritten first,
atomically, keeping its newest lines within half the bound: it never grows past ``max_bytes``.
"""

from __future__ import annotations

import errno
import os
import stat

from jitwarden.store.atomic import write_atomic
from jitwarden.store.paths import open_dir_path
from jitwarden.store.reads import NotRegularFile, kind_of, read_fd

_O_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def newest_lines(data: bytes, budget: int) -> bytes:
    """The last whole lines of ``data`` that fit ``budget`` bytes (pure): what a log keeps when it is cut."""
    if len(data) <= budget:
        return data
    cut = data[len(data) - budget :]
    nl = cut.find(b"\n")
    return b"" if nl < 0 else cut[nl + 1 :]


def append(path: str, data: bytes, *, max_bytes: int) -> None:
    """Append ``data`` (whole lines) to the log ``path``; OSError when it cannot be written (the caller warns).

    ``data`` longer than half ``max_bytes`` keeps only its newest lines too."""
    if not data:
        return
    head, name = os.path.split(path)
    dir_fd = open_dir_path(head or os.curdir, create=True, mode=0o700)
    try:
        fd = os.open(name, _O_APPEND, 0o600, dir_fd=dir_fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise NotRegularFile(
                    errno.EINVAL, f"not a regular file ({kind_of(st.st_mode)})", path
                )
            if st.st_uid != os.getuid():
                raise PermissionError(errno.EPERM, "the log belongs to another user", path)
            if st.st_size + len(data) <= max_bytes:
                _write_all(fd, data)
                return
            _compact(dir_fd, name, data, max_bytes)
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def _write_all(fd: int, data: bytes) -> None:
    view, n = memoryview(data), 0
    while n < len(view):
        n += os.write(fd, view[n:])


def _compact(dir_fd: int, name: str, data: bytes, max_bytes: int) -> None:
    """The log rewritten as its newest lines plus ``data``, within half ``max_bytes`` (one atomic rename)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        old = read_fd(fd, max_bytes)
    finally:
        os.close(fd)
    if old and not old.endswith(b"\n"):
        old = old[: old.rfind(b"\n") + 1]  # a line cut by a full disk or a kill: dropped
    write_atomic(dir_fd, name, newest_lines(old + data, max_bytes // 2), mode=0o600)
