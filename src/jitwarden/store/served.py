"""Private copies of verified bytes: the paths the guard hands Triton (stdlib only; ARCHITECTURE.md, "Layers").

Triton re-opens every path a cache manager returns; returning the cache's own paths would let
anyone who can write the cache swap a file between the check and that read. The copies live
in one directory per process (mode 0700; in ``$XDG_RUNTIME_DIR`` or ``/dev/shm`` when there,
memory-backed and cheap, else the temp dir, else beside the cache), one set of files per hit
named ``<n>.<name>`` (the suffix is what Triton looks at). A thread's previous set is removed
at its next one (Triton reads every file before ``compile`` returns), the rest at exit, and
the leftovers of killed processes (their lock is free) when a later process starts.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from typing import Any

from jitwarden.store.fsutil import O_DIR_NOFOLLOW, open_lock_file, remove_tree

PREFIX = "jitwarden-served-"


class Served:
    """One process's private directory of served copies (see the module docstring)."""

    def __init__(self) -> None:
        import itertools
        import threading

        self.dir: str | None = None
        self.lock_fd: int | None = None
        self.count = itertools.count()
        self.local = threading.local()
        self.mutex = threading.Lock()

    @staticmethod
    def _parents(fallback: str) -> list[Any]:
        import tempfile

        out = []
        run = os.environ.get("XDG_RUNTIME_DIR")
        if run and os.path.isabs(run):
            out.append(run)
        return out + ["/dev/shm", tempfile.gettempdir(), fallback]

    def _make(self, fallback: str) -> str:
        import atexit
        import tempfile

        for parent in self._parents(fallback):
            try:
                d = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getuid()}-", dir=parent)
                dfd = os.open(d, O_DIR_NOFOLLOW)
                try:
                    fd = open_lock_file(dfd, ".lock", create=True)
                finally:
                    os.close(dfd)
                if fd is None:
                    continue
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                continue
            self.lock_fd = fd
            atexit.register(remove_tree, d)
            self._reap(parent, d)
            return d
        raise OSError(errno.ENOSPC, "no private place for verified copies")

    @staticmethod
    def _reap(parent: str, mine: str) -> None:
        """Remove the copies of processes that died without cleaning up (their lock is free)."""
        try:
            names = [n for n in os.listdir(parent) if n.startswith(f"{PREFIX}{os.getuid()}-")]
        except OSError:
            return
        for n in names[:32]:
            d = os.path.join(parent, n)
            if d == mine:
                continue
            try:
                st = os.lstat(d)
                if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                    continue
                dfd = os.open(d, O_DIR_NOFOLLOW)
            except OSError:
                continue
            try:
                fd = open_lock_file(dfd, ".lock")
            finally:
                os.close(dfd)
            if fd is None:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # alive
            finally:
                os.close(fd)
            remove_tree(d)

    def begin(self, fallback: str) -> tuple[str, str]:
        """(dir, prefix) for a fresh set of copies; the calling thread's previous set is removed."""
        with self.mutex:
            if self.dir is None or not os.path.isdir(self.dir):
                self.dir = self._make(fallback)
            base = self.dir
        for path in getattr(self.local, "prev", ()):
            try:
                os.unlink(path)
            except OSError:
                pass
        self.local.prev = []
        return base, f"{next(self.count)}."

    def write(self, where: tuple[str, str], name: str, data: bytes) -> str:
        path = os.path.join(where[0], where[1] + name)
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
        )
        self.local.prev.append(path)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        return path

    def serve(self, blobs: dict[str, Any], fallback: str) -> dict[str, Any]:
        """Write ``blobs`` (name -> bytes) as a fresh private set; name -> path. OSError when it cannot."""
        where = self.begin(fallback)
        return {name: self.write(where, name, data) for name, data in blobs.items()}
