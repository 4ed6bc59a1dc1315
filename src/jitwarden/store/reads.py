"""Bounded reads: the one reader family of the disk layer (stdlib only; ARCHITECTURE.md, "Layers").

Every reader opens through :func:`open_regular`: never through a symlink (ELOOP), never blocking on a
FIFO or a device, anything but a regular file refused (:class:`NotRegularFile`, EINVAL). The bound
rule: a whole-file reader given ``max_bytes`` raises OSError EFBIG (:func:`too_large`) for a file that
holds more, so a file is never returned cut short; only :func:`read_head` cuts, by its name. A file
whose size already says it is past the bound is refused unread: a sparse file of gigabytes costs an
``fstat``. :func:`read_private` and :func:`read_own_json` add the memo's rule: only this user's words.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator

TYPE_CHECKING = False  # mypy takes it as true; importing typing costs 2 ms of every activation
if TYPE_CHECKING:
    from typing import Any, BinaryIO, Protocol

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_READ = (
    os.O_RDONLY
    | os.O_CLOEXEC
    | _O_NOFOLLOW
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
)

_IFMT, _IFREG = 0o170000, stat.S_IFREG

MAX_READ = 2 << 30
"""No file jitwarden reads is larger (the biggest cache files seen: vLLM artifacts of a few hundred MB)."""


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class NotRegularFile(OSError):
    """A path that should hold a regular file holds a FIFO, a device, a socket or a directory."""


def kind_of(mode: int) -> str:
    """'a FIFO', 'a character device', ... for a non-regular ``st_mode`` (pure)."""
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def too_large(max_bytes: int, path: str) -> OSError:
    """The one error of every bounded reader here for a file past its bound: EFBIG, its bound said in MiB."""
    bound = (
        f"{max_bytes >> 20} MiB"
        if max_bytes >= 1 << 20 and not max_bytes % (1 << 20)
        else f"{max_bytes} bytes"
    )
    return OSError(
        errno.EFBIG, f"larger than the {bound} jitwarden reads of such a file; not read", path
    )


def open_regular(
    path: str, *, dir_fd: int | None = None, follow: bool = False
) -> tuple[int, os.stat_result]:
    """(fd, stat) of the regular file ``path`` opened for reading: the one opener of every reader here.

    Opened with O_NOFOLLOW, O_NONBLOCK and O_NOCTTY, so a FIFO or a terminal in its place cannot
    block or take over the process, then checked with fstat: anything but a regular file raises
    :class:`NotRegularFile` (errno EINVAL). ``follow``: a path the user named on the command line,
    whose own symlink is followed (still never blocking, still a regular file only).
    """
    fd = os.open(path, _O_READ & ~_O_NOFOLLOW if follow else _O_READ, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if st.st_mode & _IFMT != _IFREG:
            raise NotRegularFile(errno.EINVAL, f"not a regular file ({kind_of(st.st_mode)})", path)
        return fd, st
    except BaseException:
        os.close(fd)
        raise


def read_fd(fd: int, max_bytes: int, expect: int = 0) -> bytes:
    """The bytes of ``fd`` up to its end, but at most ``max_bytes`` + 1 (one more tells the caller it is over).

    ``expect``: the size the file should have (a size hint, or its fstat size): a first read
    that returns no more than that is its end, so a whole file usually takes one read.
    """
    chunks, total = [], 0
    if expect:
        data = os.read(fd, min(expect, max_bytes) + 1)
        if len(data) <= expect or len(data) > max_bytes:
            return data
        chunks.append(data)
        total = len(data)
    while total <= max_bytes:
        b = os.read(fd, min(1 << 20, max_bytes + 1 - total))
        if not b:
            break
        chunks.append(b)
        total += len(b)
    return b"".join(chunks)


def read_head(path: str, n: int, *, dir_fd: int | None = None) -> bytes:
    """The first ``n`` bytes of the regular file ``path`` (fewer when it is shorter): headers, magic numbers."""
    fd, _st = open_regular(path, dir_fd=dir_fd)
    try:
        return os.read(fd, n)
    finally:
        os.close(fd)


def stat_and_read(
    name: str, *, dir_fd: int, head: int = 0, max_bytes: int = 1 << 20
) -> tuple[os.stat_result, bytes | None]:
    """(stat, bytes) of the regular file ``name`` in ``dir_fd``, opened once by :func:`open_regular`: the stat
    describes the very file whose bytes are returned. The bytes: its first ``head`` bytes, or with ``head`` 0
    the whole file when it holds at most ``max_bytes``; None when it holds more or a read fails (the caller
    reads it again by :func:`read_bytes` and reports why). OSError when it cannot be opened as a regular file
    (a symlink, a FIFO, gone): the caller stats it to say what it is."""
    fd, st = open_regular(name, dir_fd=dir_fd)
    try:
        if head:
            return st, os.read(fd, head)
        size = st.st_size
        if size > max_bytes:
            return st, None
        data = os.read(fd, size + 1)  # its end in one read, unless it grew since the fstat
        return st, (data if len(data) <= size else _whole(fd, st, max_bytes, 0, data))
    except OSError:
        return st, None
    finally:
        os.close(fd)


def _whole(
    fd: int, st: os.stat_result, max_bytes: int, expect: int, first: bytes = b""
) -> bytes | None:
    """The bytes of the open regular file ``fd`` (``st``: its fstat) to its end, None when it holds more than
    ``max_bytes``: the bound rule of the whole-file readers, in one place. A file whose size already says so
    is refused unread (a sparse file of gigabytes costs nothing); one that grows past it is never returned cut.
    ``first``: what was read of it already (its start)."""
    if st.st_size > max_bytes:
        return None
    if first:
        data = first + read_fd(fd, max_bytes - len(first)) if len(first) <= max_bytes else first
    else:
        data = read_fd(fd, max_bytes, expect or st.st_size)
    return data if len(data) <= max_bytes else None


def read_bytes(
    path: str,
    *,
    max_bytes: int = MAX_READ,
    size_hint: int = 0,
    dir_fd: int | None = None,
    follow: bool = False,
) -> bytes:
    """The whole regular file ``path``; OSError EFBIG when it holds more than ``max_bytes``.

    ``size_hint``: the size the caller expects (from a seal or a directory scan), else the
    file's own size is used, so a whole file usually takes one read (the guard's hit path).
    ``follow``: see :func:`open_regular` (a path the user named, a system library's link).
    """
    fd, st = open_regular(path, dir_fd=dir_fd, follow=follow)
    try:
        data = _whole(fd, st, max_bytes, size_hint)
    finally:
        os.close(fd)
    if data is None:
        raise too_large(max_bytes, path)
    return data


HASH_CHUNK = 1 << 20


def read_chunks(
    path: str,
    *,
    max_bytes: int = MAX_READ,
    size_hint: int = 0,
    dir_fd: int | None = None,
    chunk: int = HASH_CHUNK,
) -> Iterator[bytes]:
    """The regular file ``path`` in chunks of at most ``chunk`` bytes, for a reader that needs every byte of a
    file it must not hold whole (a hash, a checksum, a search): memory does not grow with the file. Opened by
    :func:`open_regular` when the first chunk is asked for, closed when the last is given (or the generator is
    dropped); OSError EFBIG past ``max_bytes``, refused unread when its size already says so. ``size_hint``:
    the size expected, so a small file takes one read, as :func:`read_bytes`'s do."""
    fd, st = open_regular(path, dir_fd=dir_fd)
    try:
        if st.st_size > max_bytes:
            raise too_large(max_bytes, path)
        expect = size_hint or st.st_size
        total = 0
        if 0 < expect < chunk:
            data = os.read(fd, expect + 1)
            total = len(data)
            if total > max_bytes:
                raise too_large(max_bytes, path)
            if data:
                yield data
            if total <= expect:  # its end: one read
                return
        while True:
            data = os.read(fd, min(chunk, max_bytes + 1 - total))
            if not data:
                return
            total += len(data)
            if total > max_bytes:
                raise too_large(max_bytes, path)
            yield data
    finally:
        os.close(fd)


if TYPE_CHECKING:

    class _Hasher(Protocol):
        def update(self, data: bytes, /) -> None: ...


def digest_file(
    path: str,
    hasher: _Hasher,
    *,
    max_bytes: int = MAX_READ,
    size_hint: int = 0,
    dir_fd: int | None = None,
) -> int:
    """Feed the regular file ``path`` to ``hasher.update`` (a ``hashlib`` object) by :func:`read_chunks` and return
    its size: memory does not grow with the file; OSError EFBIG past ``max_bytes``, before anything is fed
    when its size already says so."""
    total = 0
    for data in read_chunks(path, max_bytes=max_bytes, size_hint=size_hint, dir_fd=dir_fd):
        hasher.update(data)
        total += len(data)
    return total


def read_json(
    path: str,
    *,
    max_bytes: int = 16 << 20,
    size_hint: int = 0,
    dir_fd: int | None = None,
    follow: bool = False,
) -> Any:
    """The JSON document in the regular file ``path`` (:func:`read_bytes`), parsed with depth and size limits.

    OSError when it cannot be read as a regular file of at most ``max_bytes``, ValueError when it
    is not JSON we parse (too deep, not UTF-8, malformed).
    """
    from jitwarden.formats.jsonlimits import loads

    return loads(
        read_bytes(path, max_bytes=max_bytes, size_hint=size_hint, dir_fd=dir_fd, follow=follow),
        max_bytes=max_bytes,
    )


def open_regular_file(path: str, *, dir_fd: int | None = None, follow: bool = False) -> BinaryIO:
    """A binary read-only file object of the regular file ``path`` (:func:`open_regular`): for readers that stream."""
    fd, _st = open_regular(path, dir_fd=dir_fd, follow=follow)
    return os.fdopen(fd, "rb")


class NotPrivate(OSError):
    """A file, or the directory holding it, that another user could have written (errno EPERM)."""


def why_not_private(
    st: os.stat_result, uid: int | None = None, gid: int | None = None
) -> str | None:
    """Why a memo file or directory with stat ``st`` may hold someone else's words, else None (pure).

    Ours (root's too: a memo decides where kernels come from), and writable by nobody else:
    not world-writable, and group-writable only for our own group (a umask-002 home).
    """
    uid = os.getuid() if uid is None else uid
    gid = os.getgid() if gid is None else gid
    if st.st_uid != uid:
        return f"owned by uid {st.st_uid}"
    if st.st_mode & 0o002 or (st.st_mode & 0o020 and st.st_gid != gid):
        return f"writable by others (mode {st.st_mode & 0o7777:o})"
    return None


def read_private(path: str, *, max_bytes: int) -> bytes:
    """The whole regular file ``path`` when it and its directory are this user's alone (a memo).

    Opened like every reader here (:func:`open_regular`: no symlink, a FIFO never blocks),
    bounded like :func:`read_bytes` (EFBIG past ``max_bytes``); :class:`NotPrivate` when the file
    or its directory could have been written by someone else.
    """
    where = os.path.dirname(path) or os.curdir
    why = why_not_private(os.stat(where))
    if why:
        raise NotPrivate(errno.EPERM, f"directory {why}", where)
    fd, st = open_regular(path)
    try:
        why = why_not_private(st)
        if why:
            raise NotPrivate(errno.EPERM, why, path)
        data = read_fd(fd, max_bytes, st.st_size)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise too_large(max_bytes, path)
    return data


def read_own_json(path: str, *, max_bytes: int = 4 << 20, dir_fd: int | None = None) -> Any:
    """The JSON document in ``path`` when it is a regular file this user owns and nobody else may write.

    For memos that steer what a process trusts (a ptxas identified from the fingerprint memo):
    never blocks on a FIFO, never reads past ``max_bytes`` (EFBIG), refuses another user's file or a
    world-writable one (EPERM), parses with the depth limits of :func:`jitwarden.formats.jsonlimits.loads`.
    """
    from jitwarden.formats.jsonlimits import loads

    fd, st = open_regular(path, dir_fd=dir_fd)
    try:
        if st.st_uid != os.geteuid() or st.st_mode & 0o002:
            raise PermissionError(
                errno.EPERM,
                f"not this user's own file (uid {st.st_uid}, mode {st.st_mode & 0o7777:o})",
                path,
            )
        data = read_fd(fd, max_bytes, st.st_size)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise too_large(max_bytes, path)
    return loads(data, max_bytes=max_bytes)
