"""Private temporary directories: made where only the caller can reach them (stdlib only; ARCHITECTURE.md, "Layers").

A directory jitwarden makes for itself (the guard's served copies, a rebuild's work files, a staging
area) is made with ``mkdtemp`` semantics: an exclusive ``mkdir`` of a random name, mode 0700, opened
without following a link and checked to be the directory just made. Where it is made matters as much:
a parent that another user owns or may write (an ``XDG_RUNTIME_DIR`` left over by ``su`` without ``-``,
another user's ``TMPDIR``) lets that user rename the directory away and put their own, or a symlink, in
its place. :func:`open_trusted_dir` walks every component of a parent from ``/`` by fd and refuses one
that is a link, or owned by anyone but the caller and root, or writable by others without the sticky bit.
:class:`Spill` is the unnamed file a streamed report sets bytes aside in.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator

_O_DIR_SEARCH = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)


class UntrustedDir(OSError):
    """A directory (or one on the way to it) that another user could change under us (errno EPERM)."""


def why_untrusted(st: os.stat_result, uid: int | None = None) -> str | None:
    """Why a directory with stat ``st`` could be changed by someone but the caller and root, else None (pure).

    Owned by the caller or root; not writable by group or others, unless sticky (``/tmp``, ``/dev/shm``:
    nobody but an entry's owner renames or removes it there).
    """
    uid = os.geteuid() if uid is None else uid
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid not in (uid, 0):
        return f"is owned by uid {st.st_uid}, neither this user (uid {uid}) nor root"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return f"is writable by others without the sticky bit (mode {st.st_mode & 0o7777:o})"
    return None


def open_trusted_dir(path: str) -> int:
    """An fd of the absolute directory ``path`` when every component from ``/`` passes :func:`why_untrusted`.

    Each component is opened by the fd of the one before with ``O_NOFOLLOW`` (a symlink anywhere on the
    way: ELOOP) and checked by ``fstat`` of what was opened, so nothing swapped in between a check and a
    use can pass. :class:`UntrustedDir` names the first component that fails; OSError when one is missing.
    """
    if not os.path.isabs(path):
        raise UntrustedDir(errno.EPERM, "not an absolute path", path)
    parts = [p for p in os.path.normpath(path).split(os.sep) if p]
    fd = os.open(os.sep, _O_DIR_SEARCH)
    where = os.sep
    try:
        while True:
            why = why_untrusted(os.fstat(fd))
            if why:
                raise UntrustedDir(errno.EPERM, f"{where} {why}", where)
            if not parts:
                return fd
            part = parts.pop(0)
            where = os.path.join(where, part)
            try:
                nxt = os.open(part, _O_DIR_SEARCH, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, fd):
                    raise UntrustedDir(errno.ELOOP, f"{where} is a symlink", where) from None
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def make_temp_dir(dir_fd: int, prefix: str) -> tuple[str, int]:
    """(name, fd) of a new directory ``<prefix><random>`` inside ``dir_fd``: mode 0700, made by an exclusive
    ``mkdir`` and opened without following a link; the fd is checked to be a directory of ours of that mode,
    so what was opened is what was made (OSError EPERM otherwise)."""
    for _ in range(100):
        name = f"{prefix}{os.urandom(6).hex()}"
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
        except FileExistsError:
            continue
        fd = os.open(name, _O_DIR_SEARCH, dir_fd=dir_fd)
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            os.close(fd)
            raise UntrustedDir(errno.EPERM, f"{name} is not the private directory just made", name)
        return name, fd
    raise FileExistsError(errno.EEXIST, "no free temporary name", prefix)  # pragma: no cover


def make_private_dir(parent: str, prefix: str) -> tuple[str, int]:
    """(path, fd) of a new directory ``<parent>/<prefix><random>`` (:func:`make_temp_dir`): a staging area in
    a place the caller chose and vetted (a cache root); ``parent`` is made when missing."""
    os.makedirs(parent, exist_ok=True)
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        name, fd = make_temp_dir(pfd, prefix)
        return os.path.join(parent, name), fd
    finally:
        os.close(pfd)


def system_temp_dirs() -> list[str]:
    """Where a private temporary directory may go, best first: what :mod:`tempfile` picks (``$TMPDIR``
    first) and the usual system places. A caller tries each with :func:`make_private_dir` and takes the first that
    passes."""
    import tempfile

    out: list[str] = []
    for d in (tempfile.gettempdir(), "/tmp", "/var/tmp"):
        if d and os.path.isabs(d) and d not in out:
            out.append(d)
    return out


def private_dir(prefix: str, where: str | None = None) -> str:
    """The path of a new private directory (:func:`make_temp_dir`) for work files, in ``where`` or else the
    first of :func:`system_temp_dirs`, whichever passes :func:`open_trusted_dir` (another user's ``TMPDIR``
    is passed over); OSError (the last reason) when none does."""
    last: OSError = UntrustedDir(errno.ENOENT, "no temporary directory")
    for parent in [where] if where else system_temp_dirs():
        try:
            pfd = open_trusted_dir(os.path.abspath(parent))
        except OSError as exc:
            last = exc
            continue
        try:
            name, fd = make_temp_dir(pfd, prefix)
        except OSError as exc:
            last = exc
            continue
        finally:
            os.close(pfd)
        os.close(fd)
        return os.path.join(os.path.abspath(parent), name)
    raise last


class Spill:
    """Bytes set aside in order and read back once, in that order: what a streamed report holds until its
    head can be written (``verify --format json``: the roots' totals come before the entries).

    On disk, so memory stays flat however much is set aside: an unnamed file in ``where`` (default: the
    system's temp dir) made with ``O_TMPFILE``, else an ``O_EXCL`` name removed at once, mode 0600: no
    other process finds it by name and nothing is left behind, however the process ends. Where neither
    can be made (no temp dir, a full disk), the bytes are held in memory instead: the report is the same.
    """

    def __init__(self, where: str | None = None) -> None:
        self._mem: list[bytes] | None = None
        self._fd: int | None = None
        self._size = 0
        try:
            self._fd = unnamed_file(where)
        except OSError:
            self._mem = []

    def write(self, data: bytes) -> None:
        """Append ``data``; a failed write moves what was set aside into memory and goes on there."""
        if self._mem is not None or self._fd is None:
            if self._mem is None:
                self._mem = []
            self._mem.append(data)
            return
        fd = self._fd
        try:
            view = memoryview(data)
            while view:
                view = view[os.pwrite(fd, view, self._size + len(data) - len(view)) :]
            self._size += len(data)
        except OSError:
            self._mem = [*self.chunks(), data]
            self.close()

    def chunks(self, size: int = 1 << 20) -> Iterator[bytes]:
        """What was written, in order, in pieces of at most ``size`` bytes (memory: as written)."""
        if self._mem is not None:
            yield from self._mem
            return
        if self._fd is None:
            return
        at = 0
        while at < self._size:
            piece = os.pread(self._fd, min(size, self._size - at), at)
            if not piece:
                raise OSError(errno.EIO, "set-aside bytes shorter than written")
            at += len(piece)
            yield piece

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def unnamed_file(where: str | None) -> int:
    """An fd open for reading and writing on a new regular file of ``where`` that no name reaches (see :class:`Spill`)."""
    import tempfile

    d = where or tempfile.gettempdir()
    if hasattr(os, "O_TMPFILE"):
        try:
            return os.open(d, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    fd, name = tempfile.mkstemp(prefix=".jitwarden-spill-", dir=d)
    os.unlink(name)
    return fd
