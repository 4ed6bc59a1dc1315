"""jitwarden's own exclusive lock on a cache root, for every command that changes one (stdlib only).

``<root>/.jitwarden-lock`` (:data:`~jitwarden.model.layout.ROOT_LOCK_FILE`, a reserved name no scanner takes for an entry) is held with
``fcntl.flock`` by ``clean``, ``prune`` and ``quarantine restore|empty`` while they act.
A second one waits, and says so on stderr, naming the holder's pid. Locks are taken in
sorted path order (a base before its partitions), so two commands never deadlock.
The guard inside Triton never takes it: compiling processes are not made to wait.

Taking the lock is also where a root is vetted before anything changes in it: the lock
file and every directory jitwarden keeps in the root (quarantine, trash, partitions) must
be what jitwarden made, never a symlink, a hard link, a FIFO or another user's; otherwise
the command stops with one line and changes nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TextIO

from jitwarden.model.errors import EXIT_USAGE, JitwardenError
from jitwarden.model.layout import ROOT_LOCK_FILE
from jitwarden.store.entrylock import lock_mode

POLL_S = 0.1
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)


class LockError(JitwardenError):
    """The lock could not be taken: the root is read-only, or the wait timed out."""

    exit_code = EXIT_USAGE


def holder(path: str) -> str:
    """The pid written in a lock file, or ``?``."""
    from jitwarden.store.reads import read_head

    try:
        text = read_head(path, 32).decode("ascii", "replace").strip()
        return text if text.isdigit() else "?"
    except OSError:
        return "?"


def reserved_names() -> dict[str, bool]:
    """Every name jitwarden keeps directly in a root: name -> True for a directory."""
    from jitwarden.model.layout import PARTITIONS_DIR, QUARANTINE_DIR, TRASH_DIR

    return {ROOT_LOCK_FILE: False, QUARANTINE_DIR: True, TRASH_DIR: True, PARTITIONS_DIR: True}


def vet(root: str, root_fd: int | None = None) -> None:
    """LockError (one line) when a name jitwarden keeps in ``root`` is not what jitwarden made."""
    from jitwarden.model.text import display
    from jitwarden.store.paths import open_dir, unsafe_reserved

    fd = open_dir(root) if root_fd is None else root_fd
    try:
        bad = unsafe_reserved(fd, reserved_names())
    finally:
        if root_fd is None:
            os.close(fd)
    if bad:
        raise LockError(
            f"refusing to act on {display(root)}: {display(bad[0])}; not what jitwarden made "
            f"(remove it after checking who put it there); nothing changed"
        )


def _wait_for(fd: int, root: str, path: str, timeout: float | None, stream: TextIO) -> None:
    """Take the exclusive lock on ``fd``, saying once on ``stream`` that another pid holds it and again
    when it is got; :class:`LockError` after ``timeout`` seconds of waiting."""
    from jitwarden.model.text import display

    start = time.monotonic()
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if not told:
                print(
                    f"jitwarden: waiting for the lock on {display(root)} held by pid {holder(path)}...",
                    file=stream,
                    flush=True,
                )
                told = True
            if timeout is not None and time.monotonic() - start >= timeout:
                raise LockError(
                    f"gave up waiting for the lock on {display(root)} after {timeout:g}s "
                    f"(held by pid {holder(path)}); nothing changed"
                ) from None
            time.sleep(POLL_S)
    if told:
        print(f"jitwarden: got the lock on {display(root)}", file=stream, flush=True)


def acquire(root: str, timeout: float | None = None, stream: TextIO | None = None) -> int:
    """An fd holding the exclusive lock of ``root``; waits (visibly) for another holder, up to ``timeout`` s.

    Opened relative to the root's fd with O_NOFOLLOW, O_NONBLOCK and O_NOCTTY, then checked
    (a regular file of ours with one link) before the pid is written into it.
    """
    from jitwarden.model.text import display
    from jitwarden.store.paths import open_dir

    stream = sys.stderr if stream is None else stream
    path = os.path.join(root, ROOT_LOCK_FILE)
    try:
        root_fd = open_dir(root)
    except OSError as exc:
        raise LockError(
            f"cannot lock {display(root)}: {(exc.strerror or str(exc)).lower()}; nothing changed"
        ) from None
    try:
        vet(root, root_fd)
        root_st = os.fstat(root_fd)
        owners = (os.geteuid(), root_st.st_uid)
        try:
            fd = os.open(
                ROOT_LOCK_FILE,
                os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK | _O_NOCTTY,
                lock_mode(root_st.st_mode),  # only those who may write the root can hold its lock
                dir_fd=root_fd,
            )
        except OSError as exc:
            raise LockError(
                f"cannot lock {display(root)}: {(exc.strerror or str(exc)).lower()}; nothing changed"
            ) from None
    finally:
        os.close(root_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid not in owners:
            raise LockError(
                f"refusing to act on {display(root)}: {ROOT_LOCK_FILE} changed while it was opened "
                "(not a regular file of ours with one link); nothing changed"
            )
        _wait_for(fd, root, path, timeout, stream)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the pid is a courtesy for whoever waits
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def hold(
    roots: Iterable[str], timeout: float | None = None, stream: TextIO | None = None
) -> Iterator[None]:
    """Hold the locks of every root in ``roots`` (sorted order) for the ``with`` body."""
    fds = []
    try:
        for r in sorted({os.path.abspath(r) for r in roots}):
            fds.append(acquire(r, timeout, stream))
        yield
    finally:
        for fd in reversed(fds):
            release(fd)


def release(fd: int) -> None:
    """Give a lock back: its pid is cleared first, so a lock file never names a process that no longer holds
    it; closing releases the flock, and the file stays (deleting lock files races)."""
    try:
        os.ftruncate(fd, 0)
    except OSError:
        pass
    os.close(fd)
