"""jitwarden's own exclusive lock on a cache root, for every command that changes one (stdlib only).

``<root>/.jitwarden-lock`` (a reserved name no scanner takes for an entry) is held with
``fcntl.flock`` by ``clean``, ``prune`` and ``quarantine restore|empty`` while they act.
A second one waits, and says so on stderr, naming the holder's pid. Locks are taken in
sorted path order (a base before its partitions), so two commands never deadlock.
The guard inside Triton never takes it: compiling processes are not made to wait.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time

from .errors import EXIT_USAGE, JitwardenError

LOCK_NAME = ".jitwarden-lock"
POLL_S = 0.1


class LockError(JitwardenError):
    """The lock could not be taken: the root is read-only, or the wait timed out."""

    exit_code = EXIT_USAGE


def holder(path: str) -> str:
    """The pid written in a lock file, or ``?``."""
    try:
        with open(path, "rb") as f:
            text = f.read(32).decode("ascii", "replace").strip()
        return text if text.isdigit() else "?"
    except OSError:
        return "?"


def acquire(root: str, timeout: float | None = None, stream=None) -> int:
    """An fd holding the exclusive lock of ``root``; waits (visibly) for another holder, up to ``timeout`` s."""
    from .ages import display

    stream = sys.stderr if stream is None else stream
    path = os.path.join(root, LOCK_NAME)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as exc:
        raise LockError(f"cannot lock {display(root)}: {(exc.strerror or str(exc)).lower()}; nothing changed") from None
    try:
        start = time.monotonic()
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told:
                    print(f"jitwarden: waiting for the lock on {display(root)} held by pid {holder(path)}...",
                          file=stream, flush=True)
                    told = True
                if timeout is not None and time.monotonic() - start >= timeout:
                    raise LockError(f"gave up waiting for the lock on {display(root)} after {timeout:g}s "
                                    f"(held by pid {holder(path)}); nothing changed") from None
                time.sleep(POLL_S)
        if told:
            print(f"jitwarden: got the lock on {display(root)}", file=stream, flush=True)
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
def hold(roots, timeout: float | None = None, stream=None):
    """Hold the locks of every root in ``roots`` (sorted order) for the ``with`` body."""
    fds = []
    try:
        for r in sorted({os.path.abspath(r) for r in roots}):
            fds.append(acquire(r, timeout, stream))
        yield
    finally:
        for fd in reversed(fds):
            os.close(fd)  # closing releases the flock; the file stays (deleting lock files races)
