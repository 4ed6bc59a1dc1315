"""The disk layer's primitives: every other layer reads, writes, makes and removes through these (stdlib only).

Reads never follow a symlink (unless the user named the path), never block, and are bounded;
directories below a root are reached by fd one component at a time; writes are atomic (an
``O_EXCL`` temporary beside the target, renamed by the directory's fd) and leave files readable
like Triton's own. ``tests/unit/test_io_contract.py`` keeps the other layers on them
(ARCHITECTURE.md, "Layers").
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

if TYPE_CHECKING:
    from collections.abc import Iterator

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_READ = (
    os.O_RDONLY
    | os.O_CLOEXEC
    | _O_NOFOLLOW
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
)
_UMASK: list[int] = []
O_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | _O_NOFOLLOW
"""Flags that open a directory to list it and to open what it holds by ``dir_fd``: a symlink in its
place fails (ELOOP), so does anything but a directory (ENOTDIR, before it is opened: a FIFO cannot block)."""

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


# ---------------------------------------------------------------- reading: one family, one bound rule
# Every reader opens through open_regular: never through a symlink (ELOOP), never blocking on a
# FIFO or a device, anything but a regular file refused (NotRegularFile, EINVAL). The bound rule:
# a whole-file reader given ``max_bytes`` raises OSError EFBIG for a file that holds more, so a
# file is never returned cut short; only read_head cuts, by its name.


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
        if not stat.S_ISREG(st.st_mode):
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
        return st, (os.read(fd, head) if head else _whole(fd, st, max_bytes, 0))
    except OSError:
        return st, None
    finally:
        os.close(fd)


def _whole(fd: int, st: os.stat_result, max_bytes: int, expect: int) -> bytes | None:
    """The bytes of the open regular file ``fd`` (``st``: its fstat) to its end, None when it holds more than
    ``max_bytes``: the bound rule of the whole-file readers, in one place. A file whose size already says so
    is refused unread (a sparse file of gigabytes costs nothing); one that grows past it is never returned cut."""
    if st.st_size > max_bytes:
        return None
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


def digest_file(
    path: str,
    hasher: Any,
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


# ---------------------------------------------------------------- writing


def umask() -> int:
    """The process umask, read once (reading it means setting it)."""
    if not _UMASK:
        old = os.umask(0o022)
        os.umask(old)
        _UMASK.append(old)
    return _UMASK[0]


def write_json_atomic(
    path: str, doc: object, prefix: str, *, dir_fd: int | None = None, mode: int | None = None
) -> str:
    """Write ``doc`` as JSON to ``path`` atomically; a crash leaves the old file or none, never half.

    With ``dir_fd``, ``path`` is a name inside that directory: the temp file and the rename
    stay in it, whatever happens to the path that led there. ``mode``: None for a file readable
    like Triton's own (0666 less the umask), 0o600 for one only this user may read.
    """
    at = prefix if dir_fd is not None else os.path.join(os.path.dirname(path), prefix)
    fd, tmp_at = _new_temp(at, mode, dir_fd, path)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, sort_keys=True)
        os.replace(tmp_at, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return path
    except BaseException:
        try:
            os.unlink(tmp_at, dir_fd=dir_fd)
        except OSError:
            pass
        raise


# ---------------------------------------------------------------- acting inside a root, by directory fds

_O_DIR = O_DIR_NOFOLLOW


class UnsafeName(OSError):
    """A name jitwarden reserves inside a cache root holds something jitwarden did not make.

    A symlink, a hard-linked file, another user's file or directory, a file where a directory
    belongs: acting through it could reach outside the root, so jitwarden refuses.
    """


def open_dir(path: str) -> int:
    """An fd of the cache root ``path``. The path a user names may be a symlink; a partition
    (``<base>/jitwarden-v1/<digest>``) is opened from its base, never through a symlink below it."""
    from jitwarden.model.layout import PARTITIONS_DIR

    parent, digest = os.path.split(os.path.normpath(path))
    if os.path.basename(parent) != PARTITIONS_DIR or digest in ("", os.curdir, os.pardir):
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    base_fd = os.open(
        os.path.dirname(parent) or os.curdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    )
    try:
        pfd = reserved_dir(base_fd, PARTITIONS_DIR)
        if pfd is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), parent)
        try:
            return os.open(digest, _O_DIR, dir_fd=pfd)
        finally:
            os.close(pfd)
    finally:
        os.close(base_fd)


def _why_not_ours(st: os.stat_result, want_dir: bool, owners: tuple[int, ...] = ()) -> str | None:
    """Why ``st`` is not a file or directory jitwarden made, or None. ``owners``: uids allowed besides ours
    (the root's owner: root cleaning a user's cache acts on what that user's jitwarden made)."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if want_dir and not stat.S_ISDIR(st.st_mode):
        return f"is {kind_of(st.st_mode) if not stat.S_ISREG(st.st_mode) else 'a file'}, not a directory"
    if not want_dir and not stat.S_ISREG(st.st_mode):
        return f"is {kind_of(st.st_mode)}, not a regular file"
    if not want_dir and st.st_nlink > 1:
        return f"is a file with {st.st_nlink} hard links"
    if st.st_uid != os.geteuid() and st.st_uid not in owners:
        return f"is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}) nor the root's owner"
    if want_dir and st.st_mode & 0o002 and not st.st_mode & 0o1000:
        return f"is world-writable (mode {st.st_mode & 0o7777:o})"
    return None


def unsafe_reserved(root_fd: int, names: dict[str, bool]) -> list[str]:
    """Sentences naming each of ``names`` (name -> True for a directory) in the root that jitwarden did not make.

    Absent names are fine; reads only.
    """
    out = []
    owners = (os.fstat(root_fd).st_uid,)
    for name, want_dir in names.items():
        try:
            st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError as exc:
            out.append(f"{name} cannot be examined: {(exc.strerror or str(exc)).lower()}")
            continue
        why = _why_not_ours(st, want_dir, owners)
        if why:
            if stat.S_ISLNK(st.st_mode):
                try:
                    why += f" (-> {os.readlink(name, dir_fd=root_fd)})"
                except OSError:
                    pass
            out.append(f"{name} {why}")
    return out


def reserved_dir(root_fd: int, name: str, create: bool = False) -> int | None:
    """An fd of the directory ``name`` that jitwarden keeps in a root; None when absent (and not ``create``).

    Never follows a symlink; raises :class:`UnsafeName` when ``name`` is not a directory
    jitwarden made (see :func:`unsafe_reserved`).
    """
    try:
        fd = _open_made(name, root_fd, _O_DIR, create)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        why = unsafe_reserved(root_fd, {name: True}) or [f"{name} is not a directory"]
        raise UnsafeName(
            errno.EPERM, f"{why[0]}; not what jitwarden made, refusing to use it"
        ) from None
    not_ours = _why_not_ours(os.fstat(fd), True, (os.fstat(root_fd).st_uid,))
    if not_ours:
        os.close(fd)
        raise UnsafeName(
            errno.EPERM, f"{name} {not_ours}; not what jitwarden made, refusing to use it"
        )
    return fd


def open_beneath(root_fd: int, rel: str, create: bool = False) -> int:
    """An fd of the directory ``rel`` below ``root_fd``, walked one component at a time, never through a symlink.

    ``rel`` must be relative and free of ``..``; ``create`` makes missing directories on the way.
    :class:`UnsafeName` (errno ELOOP or ENOTDIR, naming the component) when a component is a symlink
    or not a directory.
    """
    parts = [p for p in rel.split(os.sep) if p not in ("", os.curdir)]
    if os.path.isabs(rel) or os.pardir in parts:
        raise UnsafeName(errno.EPERM, f"{rel} is not a path inside the root", rel)

    def step(fd: int, _i: int, part: str) -> int:
        try:
            return _open_made(part, fd, _O_DIR, create)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            where = os.path.join(*parts[: parts.index(part) + 1])
            try:
                mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
                what = (
                    "a symlink"
                    if stat.S_ISLNK(mode)
                    else ("a file" if stat.S_ISREG(mode) else kind_of(mode))
                )
            except OSError:
                what = None
            why = f"{where} is {what}, not a directory" if what else f"{where} is not a directory"
            raise UnsafeName(exc.errno, f"{why}; refusing to go through it", where) from None

    return _descend(os.dup(root_fd), parts, step)


def inside(root: str, path: str) -> str | None:
    """``path`` relative to ``root`` when it is lexically inside it (not the root itself), else None (pure)."""
    rel = os.path.relpath(os.path.normpath(path), os.path.normpath(root))
    if rel in (os.curdir, os.pardir) or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
        return None
    return rel


def package_dir(name: str) -> str | None:
    """Directory of an installed top-level package, found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for loc in spec.submodule_search_locations or ():
        return loc
    return os.path.dirname(spec.origin) if spec.origin else None


def memo_dir(env: Mapping[str, str] | None = None) -> str:
    """Where jitwarden keeps memos and private roots: ``$JITWARDEN_HOME``, else ``${XDG_CACHE_HOME:-~/.cache}/jitwarden``."""
    from jitwarden.model.settings import home_dir

    return home_dir(os.environ if env is None else env)


# ---------------------------------------------------------------- paths a user names, and writing beside a target
# The one way the layers above create directories, stage and write files (ARCHITECTURE.md, "Layers";
# docs/threat-model.md, "Disk rules"): every step by a directory fd, O_NOFOLLOW where jitwarden
# names the component, O_EXCL random temporaries created beside the target and renamed by fd.

_O_DIR_FOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def fd_path(fd: int) -> str:
    """A path that resolves to exactly the open directory ``fd`` (``/proc/self/fd/N``), for an API that takes paths.

    Nothing swapped in along the path that led to the directory can redirect it. OSError when
    ``/proc`` is not mounted.
    """
    p = f"/proc/self/fd/{fd}"
    if not os.path.isdir(p):
        raise OSError(errno.ENOENT, "/proc/self/fd is not available", p)
    return p


def open_dir_path(path: str, *, create: bool = False, mode: int = 0o755) -> int:
    """An fd of the directory a user named (``-o``, ``--textfile-dir``, ``JITWARDEN_CONFIG_DIR``), resolved as the kernel does.

    The user's own symlinks are followed and ``..`` means the parent of what was reached (never
    collapsed beforehand, as ``abspath`` would). ``create``: missing components are made one at a
    time by fd, but only after the last ``..``: a directory the kernel would not reach is never
    made. OSError: ENOENT (missing, or missing before a ``..``), ENOTDIR (a file on the way).
    """
    if not path:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    parts = [p for p in path.split("/") if p not in ("", os.curdir)]
    last_up = max((i for i, p in enumerate(parts) if p == os.pardir), default=-1)

    def step(fd: int, i: int, part: str) -> int:
        if create and i > last_up:
            _make_dir(part, fd, mode)
        try:
            return os.open(part, _O_DIR_FOLLOW, dir_fd=fd)
        except OSError as exc:
            raise type(exc)(
                exc.errno,
                exc.strerror,
                "/".join(parts[: i + 1])
                if not path.startswith("/")
                else "/" + "/".join(parts[: i + 1]),
            ) from None

    return _descend(os.open("/" if path.startswith("/") else os.curdir, _O_DIR_FOLLOW), parts, step)


def open_parent(path: str, *, create: bool = False) -> tuple[int, str]:
    """(fd of the directory that holds ``path``, the last name) for writing ``path`` there by fd.

    OSError EISDIR when ``path`` names no file (ends with ``/``, ``.`` or ``..``) or names a
    directory (a symlink at the name is fine: it is replaced, never followed); the parent as in
    :func:`open_dir_path`.
    """
    head, name = os.path.split(path)
    if name in ("", os.curdir, os.pardir):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", path)
    fd = open_dir_path(head or os.curdir, create=create)
    try:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return fd, name
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", path)
        return fd, name
    except BaseException:
        os.close(fd)
        raise


class AtomicWriter:
    """A new file written beside ``name`` in ``dir_fd`` and renamed onto it by fd on success, removed on failure.

    The temporary is ``<prefix><random>.tmp``, created ``O_EXCL | O_NOFOLLOW`` (a planted link or
    file at any name is never followed nor reused). ``mode``: None for 0666 less the umask,
    else exactly that. Use as a context manager; ``write(bytes)``.
    """

    def __init__(self, dir_fd: int, name: str, prefix: str, mode: int | None = None):
        self.dir_fd, self.name = dir_fd, name
        self.fd, self.tmp = _new_temp(prefix, mode, dir_fd, name)
        if mode is not None:
            os.fchmod(self.fd, mode)  # exactly this mode, whatever the umask

    pos = 0
    """Bytes written so far (the file's size once done)."""

    def write(self, data: bytes) -> int:
        view, n = memoryview(data), 0
        while n < len(view):
            n += os.write(self.fd, view[n:])
        self.pos += n
        return n

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        pass

    def __enter__(self) -> AtomicWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: object, tb: object
    ) -> Literal[False]:
        try:
            if exc_type is None:
                os.close(self.fd)
                self.fd = -1
                if _is_dir_at(self.dir_fd, self.name):
                    raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", self.name)
                os.replace(self.tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
                self.tmp = ""
        finally:
            if self.fd >= 0:
                os.close(self.fd)
            if self.tmp:
                try:
                    os.unlink(self.tmp, dir_fd=self.dir_fd)
                except OSError:
                    pass
        return False


def _is_dir_at(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def write_atomic(
    dir_fd: int, name: str, data: bytes, prefix: str, *, mode: int | None = None
) -> None:
    """``data`` into ``name`` in ``dir_fd`` atomically (:class:`AtomicWriter`); a reader sees the old file or the new."""
    with AtomicWriter(dir_fd, name, prefix, mode) as w:
        w.write(data)


def write_file_atomic(
    path: str, data: bytes, prefix: str, *, mode: int | None = None, create_dirs: bool = False
) -> None:
    """``data`` into the file a user named (:func:`open_parent`, :func:`write_atomic`); never into a directory."""
    fd, name = open_parent(path, create=create_dirs)
    try:
        write_atomic(fd, name, data, prefix, mode=mode)
    finally:
        os.close(fd)


def make_temp_dir(dir_fd: int, prefix: str) -> tuple[str, int]:
    """(name, fd) of a new private directory (0700) ``<prefix><random>`` inside ``dir_fd``: a staging area."""
    for _ in range(100):
        name = f"{prefix}{os.urandom(6).hex()}"
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
        except FileExistsError:
            continue
        return name, os.open(name, O_DIR_NOFOLLOW, dir_fd=dir_fd)
    raise FileExistsError(errno.EEXIST, "no free temporary name", prefix)  # pragma: no cover


def open_dir_at(name: str, *, dir_fd: int | None = None) -> int:
    """An fd of the directory ``name`` (inside ``dir_fd``), never through a symlink (ELOOP) nor onto a non-directory."""
    return os.open(name, O_DIR_NOFOLLOW, dir_fd=dir_fd)


def create_new(name: str, *, dir_fd: int, mode: int = 0o644) -> int:
    """A write fd of a file ``name`` that did not exist (``O_EXCL | O_NOFOLLOW``) inside ``dir_fd``."""
    return os.open(
        name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | _O_NOFOLLOW, mode, dir_fd=dir_fd
    )


def open_regular_file(path: str, *, dir_fd: int | None = None, follow: bool = False) -> BinaryIO:
    """A binary read-only file object of the regular file ``path`` (:func:`open_regular`): for readers that stream."""
    fd, _st = open_regular(path, dir_fd=dir_fd, follow=follow)
    return os.fdopen(fd, "rb")


def rmtree_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` inside ``dir_fd`` and everything below it, never following a symlink.

    For jitwarden's own staging directories (shallow): one fd per level is held while it
    walks. Every step is relative to a directory fd: nothing outside ``name`` can be reached.
    OSError on the first step that fails.
    """
    _rmtree(dir_fd, name, quiet=False)


def _rmtree(dir_fd: int, top: str, quiet: bool, flat: bool = False) -> None:
    """The one no-follow removal walk, every step relative to ``dir_fd``: :func:`rmtree_at` (``quiet``
    False: OSError on the first step that fails), :func:`remove_tree_at` (``quiet``: what fails is left,
    and the rest still goes) and :func:`rmtree_trash` (``flat``: each subdirectory is renamed up beside
    ``top`` and emptied on its own, so any depth takes no stack; one we may not enter is made so first).
    """
    work, n = [top], 0
    while work:
        p = work.pop()
        try:
            try:
                st = os.stat(p, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(p, dir_fd=dir_fd)
                continue
            if flat and st.st_mode & 0o700 != 0o700:
                chmod_at(dir_fd, p, st.st_mode | 0o700)
            fd = os.open(p, O_DIR_NOFOLLOW, dir_fd=dir_fd)
            try:
                with os.scandir(fd) as it:
                    names = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
                for sub, is_dir in names:
                    try:
                        if not is_dir:
                            os.unlink(sub, dir_fd=fd)
                        elif flat:
                            n += 1
                            work.append(_move_up(fd, sub, dir_fd, f"{top}.d{n}"))
                        else:
                            _rmtree(fd, sub, quiet)
                    except OSError:
                        if not quiet:
                            raise
            finally:
                os.close(fd)
            os.rmdir(p, dir_fd=dir_fd)
        except OSError:
            if not quiet:
                raise


def remove_empty_dir(path: str) -> bool:
    """Remove the directory ``path`` when it is empty (rmdir never removes anything else); whether it went."""
    return _went(os.rmdir, path)


# --- added by remote-memo-settings ---


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


def ensure_dir(path: str, mode: int = 0o777) -> None:
    """Make the directory ``path`` and its parents when missing (``mode`` less the umask for new ones)."""
    os.makedirs(path, mode=mode, exist_ok=True)


def private_tempdir(prefix: str, where: str | None) -> str:
    """A new directory of mode 0700 in ``where`` (None: the system's temp dir) with a unique name starting with ``prefix`` (O_EXCL-like: never
    an existing one), for a place nobody else can have prepared."""
    import tempfile

    return tempfile.mkdtemp(prefix=prefix, dir=where)


# --- added by runtime-house ---


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
            | os.O_NONBLOCK
            | getattr(os, "O_NOCTTY", 0),
            0o644,
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


def remove_empty_dir_at(dir_fd: int, name: str) -> bool:
    """Remove the empty directory ``name`` in ``dir_fd``; False when it is not there, not empty or not a directory."""
    return _went(os.rmdir, name, dir_fd=dir_fd)


def make_private_dir(parent: str, prefix: str) -> tuple[str, int]:
    """(path, fd) of a new directory ``<parent>/<prefix><random>``, 0700, made with an exclusive ``mkdir``.

    ``parent`` is made when missing; the new directory is opened without following a link.
    """
    os.makedirs(parent, exist_ok=True)
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        name, fd = make_temp_dir(pfd, prefix)
        return os.path.join(parent, name), fd
    finally:
        os.close(pfd)


def make_dir_at(dir_fd: int, name: str, mode: int = 0o755) -> int:
    """Make the new directory ``name`` in ``dir_fd`` (FileExistsError when anything is there); its fd."""
    os.mkdir(name, mode, dir_fd=dir_fd)
    return os.open(name, _O_DIR, dir_fd=dir_fd)


def write_new(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to the new regular file ``name`` in ``dir_fd`` (O_EXCL: never over or through anything there)."""
    fd = os.open(
        name,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        mode,
        dir_fd=dir_fd,
    )
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def rename_at(src_dir_fd: int, src: str, dst_dir_fd: int, dst: str) -> None:
    """``rename(2)`` of ``src`` to ``dst`` by directory fds (onto nothing or an empty directory; never through a link)."""
    os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


def remove_tree_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` in ``dir_fd`` and everything below it, by directory fds, never following a link; quiet on errors."""
    _rmtree(dir_fd, name, quiet=True)


def remove_tree(path: str) -> None:
    """Remove the directory ``path`` and everything below it (:func:`remove_tree_at` from its parent); quiet on errors."""
    parent, name = os.path.split(os.path.normpath(path))
    try:
        pfd = os.open(parent or os.curdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        remove_tree_at(pfd, name)
    finally:
        os.close(pfd)


def rename_path(src: str, dst: str) -> None:
    """``rename(2)`` of ``src`` to ``dst`` by their parent directories' fds (onto nothing or an empty directory)."""
    sp, sn = os.path.split(os.path.normpath(src))
    dp, dn = os.path.split(os.path.normpath(dst))
    sfd = os.open(sp or os.curdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        dfd = os.open(dp or os.curdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            rename_at(sfd, sn, dfd, dn)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)


def open_entry_dir(path: str) -> int:
    """An fd of the directory ``path``, opened from its parent without following a link at ``path`` itself.

    FileNotFoundError when it is absent; OSError (ELOOP, ENOTDIR) when it is a symlink or not a directory.
    """
    parent, name = os.path.split(path.rstrip(os.sep))
    pfd = os.open(parent or os.curdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return os.open(name, _O_DIR, dir_fd=pfd)
    finally:
        os.close(pfd)


# --- added by ops-house ---
# Removing trees (moved here from store/quarantine.py) and the private work files of verify --rebuild and
# the canary: the one place those touch the disk.


def chmod_at(dir_fd: int, name: str, mode: int) -> None:
    """chmod a directory entry without following a symlink (through an O_PATH fd where there is one)."""
    o_path = getattr(os, "O_PATH", 0)
    if not o_path:  # pragma: no cover - Linux has O_PATH
        os.chmod(name, mode, dir_fd=dir_fd)
        return
    fd = os.open(name, o_path | _O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.ENOTDIR, "not a directory", name)
        os.chmod(f"/proc/self/fd/{fd}", mode)
    finally:
        os.close(fd)


def rmtree_trash(trash_fd: int, top: str) -> None:
    """Delete ``top`` inside the trash without recursion and without following a symlink.

    Each subdirectory is first renamed up beside ``top`` in the trash, then emptied on its
    own: any depth (a 10,000-deep chain) takes no stack, no long paths and one fd at a time.
    A directory we may not enter or change is made so first (it is ours, and going). Every
    step is relative to the trash's fd: nothing outside it can be reached.
    """
    _rmtree(trash_fd, top, quiet=False, flat=True)


def private_dir(prefix: str) -> str:
    """A new directory only this user may enter (mode 0700) in the system's temp dir, for work files."""
    return private_tempdir(prefix, None)


def make_dirs(path: str) -> None:
    """``path`` and its missing parents as directories (an existing one is fine); OSError otherwise."""
    os.makedirs(path, exist_ok=True)


def write_new_file(path: str, data: bytes, mode: int = 0o600) -> None:
    """A new file ``path`` holding ``data``: created exclusively (FileExistsError if anything is there,
    a symlink included), never left half-written under its name by an error (removed then)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | _O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        remove_file(path)
        raise


def write_bytes_atomic(path: str, data: bytes) -> None:
    """``data`` as the file ``path``, replaced atomically: written to an exclusive temporary beside it, then
    renamed onto it; a crash leaves the old file or none, never half."""
    where, name = os.path.split(path)
    fd, tmp = _new_temp(os.path.join(where, f".{name}."), None, None, path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        remove_file(tmp)
        raise


def remove_file(path: str) -> bool:
    """Unlink ``path`` (a symlink itself, never its target); False when it could not be (gone, or refused)."""
    return _went(os.unlink, path)


# --- added by dedup ---


def _move_up(fd: int, name: str, to_fd: int, flat: str) -> str:
    """Rename the directory ``name`` in ``fd`` to ``flat`` in ``to_fd`` (made writable first when it must be:
    moving a directory rewrites its ``..``); ``flat``."""
    try:
        os.rename(name, flat, src_dir_fd=fd, dst_dir_fd=to_fd)
    except PermissionError:
        chmod_at(fd, name, 0o700)
        os.rename(name, flat, src_dir_fd=fd, dst_dir_fd=to_fd)
    return flat


def _went(op: Callable[..., object], *args: Any, **kw: Any) -> bool:
    """Whether ``op(*args, **kw)`` (an unlink or rmdir) succeeded; an OSError is a False, never raised."""
    try:
        op(*args, **kw)
        return True
    except OSError:
        return False


def _open_made(name: str, dir_fd: int, flags: int, create: bool, mode: int = 0o755) -> int:
    """An fd of the directory ``name`` in ``dir_fd`` opened with ``flags``; ``create``: made first when missing."""
    if create:
        _make_dir(name, dir_fd, mode)
    return os.open(name, flags, dir_fd=dir_fd)


def _make_dir(name: str, dir_fd: int, mode: int) -> None:
    """The directory ``name`` in ``dir_fd``, made when nothing is there (anything already there is left as it is)."""
    try:
        os.mkdir(name, mode, dir_fd=dir_fd)
    except FileExistsError:
        pass


def _new_temp(prefix: str, mode: int | None, dir_fd: int | None, target: str) -> tuple[int, str]:
    """(write fd, name) of a new temporary ``<prefix><random>.tmp`` (in ``dir_fd`` when given), created
    ``O_EXCL | O_NOFOLLOW``: a planted link or file at any name is never followed nor reused. ``mode``:
    None for 0666 less the umask. The one temporary of every atomic write here (``target``: what it becomes)."""
    for _ in range(100):
        tmp = f"{prefix}{os.urandom(6).hex()}.tmp"  # what secrets.token_hex(6) returns, without importing secrets
        try:
            return os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | _O_NOFOLLOW,
                0o666 & ~umask() if mode is None else mode,
                dir_fd=dir_fd,
            ), tmp
        except FileExistsError:
            continue
    raise FileExistsError(
        errno.EEXIST, "no free temporary name", target
    )  # pragma: no cover - a hundred names taken


def _descend(fd: int, parts: list[str], step: Callable[[int, int, str], int]) -> int:
    """The directory fd reached from ``fd`` (taken over) through ``step(fd, i, part)`` for each of ``parts`` in
    turn (each opens the next one in ``fd``): every fd on the way is closed, the last one too on an error."""
    try:
        for i, part in enumerate(parts):
            nxt = step(fd, i, part)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


# --- added by scan ---


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
            self._fd = _unnamed_file(where)
        except OSError:
            self._mem = []

    def write(self, data: bytes) -> None:
        """Append ``data``; a failed write moves what was set aside into memory and goes on there."""
        if self._mem is not None:
            self._mem.append(data)
            return
        assert self._fd is not None  # held on disk, so the file is open
        try:
            view = memoryview(data)
            while view:
                view = view[os.pwrite(self._fd, view, self._size + len(data) - len(view)) :]
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


def _unnamed_file(where: str | None) -> int:
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
