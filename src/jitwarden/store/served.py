"""Private copies of verified bytes: the paths the guard hands Triton (stdlib only; ARCHITECTURE.md, "Layers").

Triton re-opens every path a cache manager returns; returning the cache's own paths would let
anyone who can write the cache swap a file between the check and that read. The copies live
in one directory per process, in the first of ``$XDG_RUNTIME_DIR``, ``/dev/shm`` (memory-backed
and cheap), the temp dir and the cache's own base whose every component only the caller and root
can change (:func:`jitwarden.store.tempdirs.open_trusted_dir`: another user's runtime dir, left
over by ``su`` without ``-``, is passed over). The directory is made with ``mkdtemp`` semantics
(:func:`~jitwarden.store.tempdirs.make_temp_dir`: exclusive, 0700, checked by its fd), kept open,
and every copy is written through that fd, never by path. One set of files per hit is named
``<n>.<name>`` (the suffix is what Triton looks at). A thread's previous set is removed at its
next one (Triton reads every file before ``compile`` returns), the rest at exit, and the
leftovers of killed processes (their lock is free) when a later process starts.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from typing import Any

from jitwarden.store.entrylock import open_lock_file
from jitwarden.store.removal import remove_tree_at
from jitwarden.store.tempdirs import make_temp_dir, open_trusted_dir

PREFIX = "jitwarden-served-"
SHARED_MEMORY = "/dev/shm"
"""Memory-backed and cheap where the machine has it (a test points it elsewhere to play a machine without)."""
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW


class Served:
    """One process's private directory of served copies (see the module docstring)."""

    def __init__(self) -> None:
        import atexit
        import itertools
        import threading

        self.dir: str | None = None
        self.dir_fd: int | None = None  # the directory made: every copy is written through it
        self.parent_fd: int | None = None  # its trusted parent: the removal at exit goes through it
        self.lock_fd: int | None = None
        self.name = ""  # its name in the parent
        self.count = itertools.count()
        self.local = threading.local()
        self.mutex = threading.Lock()
        atexit.register(self._drop)

    @staticmethod
    def _parents(fallback: str) -> list[Any]:
        import tempfile

        out = []
        run = os.environ.get("XDG_RUNTIME_DIR")
        if run and os.path.isabs(run):
            out.append(run)
        return out + [SHARED_MEMORY, tempfile.gettempdir(), "/tmp", fallback]

    def _make(self, fallback: str) -> str:
        why: OSError = OSError(errno.ENOSPC, "no private place for verified copies")
        for parent in dict.fromkeys(self._parents(fallback)):
            try:
                pfd = open_trusted_dir(os.path.abspath(parent))
            except OSError as exc:
                why = exc
                continue
            try:
                name, dfd = make_temp_dir(pfd, f"{PREFIX}{os.geteuid()}-")
            except OSError as exc:
                os.close(pfd)
                why = exc
                continue
            fd = open_lock_file(dfd, ".lock", create=True)
            if fd is None:  # a directory of ours that will not hold a file: give it back
                os.close(dfd)
                remove_tree_at(pfd, name)
                os.close(pfd)
                continue
            fcntl.flock(fd, fcntl.LOCK_EX)  # a new lock file in a directory only we can reach
            self._reap(pfd, name)
            self.parent_fd, self.dir_fd, self.lock_fd, self.name = pfd, dfd, fd, name
            return os.path.join(parent, name)
        raise OSError(errno.ENOSPC, f"no private place for verified copies ({why.strerror or why})")

    @staticmethod
    def _reap(parent_fd: int, mine: str) -> None:
        """Remove the copies of processes that died without cleaning up (their lock is free)."""
        try:
            with os.scandir(parent_fd) as it:
                names = [e.name for e in it if e.name.startswith(f"{PREFIX}{os.geteuid()}-")]
        except OSError:
            return
        for n in names[:32]:
            if n == mine:
                continue
            try:
                dfd = os.open(n, _O_DIR, dir_fd=parent_fd)
            except OSError:
                continue
            try:
                st = os.fstat(dfd)
                fd = open_lock_file(dfd, ".lock") if st.st_uid == os.geteuid() else None
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
            remove_tree_at(parent_fd, n)

    def _still_ours(self) -> bool:
        """Whether the path of our directory still leads to the directory we made (its fd)."""
        if self.dir is None or self.dir_fd is None:
            return False
        try:
            st, mine = os.stat(self.dir, follow_symlinks=False), os.fstat(self.dir_fd)
        except OSError:
            return False
        return stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def begin(self, fallback: str) -> tuple[str, str]:
        """(dir, prefix) for a fresh set of copies; the calling thread's previous set is removed."""
        with self.mutex:
            if not self._still_ours():
                self._drop()
                self.dir = self._make(fallback)
            base, dfd = self.dir, self.dir_fd
        assert base is not None
        for name in getattr(self.local, "prev", ()):
            try:
                os.unlink(name, dir_fd=dfd)
            except OSError:
                pass
        self.local.prev = []
        return base, f"{next(self.count)}."

    def _drop(self) -> None:
        """Remove our directory (through its parent's fd) and forget it: at exit, or when its path no longer
        leads to it (a temp-dir cleaner removed it)."""
        if self.parent_fd is not None and self.name:
            remove_tree_at(self.parent_fd, self.name)
        for fd in (self.dir_fd, self.parent_fd, self.lock_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.dir = self.dir_fd = self.parent_fd = self.lock_fd = None
        self.name = ""

    def write(self, where: tuple[str, str], name: str, data: bytes) -> str:
        """Write ``data`` as the new file ``<prefix><name>`` through our directory's fd; its path."""
        dfd = self.dir_fd
        if dfd is None or where[0] != self.dir:
            raise OSError(errno.ENOENT, "the private directory of this set is gone", where[0])
        fname = where[1] + name
        fd = os.open(
            fname,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW,
            0o600,
            dir_fd=dfd,
        )
        self.local.prev.append(fname)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        return os.path.join(where[0], fname)

    def serve(self, blobs: dict[str, Any], fallback: str) -> dict[str, Any]:
        """Write ``blobs`` (name -> bytes) as a fresh private set; name -> path. OSError when it cannot."""
        where = self.begin(fallback)
        return {name: self.write(where, name, data) for name, data in blobs.items()}
