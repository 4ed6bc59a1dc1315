"""Small disk helpers shared by the scanner, the rebuild, seals and partitions (stdlib only).

Reads never follow a symlink; writes are atomic (temp file in the same directory,
then rename) and leave files readable like Triton's own.
"""

from __future__ import annotations

import errno
import json
import os
import stat

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_READ = (os.O_RDONLY | os.O_CLOEXEC | _O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
           | getattr(os, "O_NOCTTY", 0))
_UMASK: list[int] = []
O_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | _O_NOFOLLOW
"""Flags that open a directory to list it and to open what it holds by ``dir_fd``: a symlink in its
place fails (ELOOP), so does anything but a directory (ENOTDIR, before it is opened: a FIFO cannot block)."""

MAX_READ = 2 << 30
"""No file jitwarden reads is larger (the biggest cache files seen: vLLM artifacts of a few hundred MB)."""

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


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


def open_regular(path: str, *, dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """(fd, stat) of the regular file ``path`` opened for reading: the one opener of every reader here.

    Opened with O_NOFOLLOW, O_NONBLOCK and O_NOCTTY, so a FIFO or a terminal in its place cannot
    block or take over the process, then checked with fstat: anything but a regular file raises
    :class:`NotRegularFile` (errno EINVAL).
    """
    fd = os.open(path, _O_READ, dir_fd=dir_fd)
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


def read_bytes(path: str, *, max_bytes: int = MAX_READ, size_hint: int = 0, dir_fd: int | None = None) -> bytes:
    """The whole regular file ``path``; OSError EFBIG when it holds more than ``max_bytes``.

    ``size_hint``: the size the caller expects (from a seal or a directory scan), else the
    file's own size is used, so a whole file usually takes one read (the guard's hit path).
    """
    fd, st = open_regular(path, dir_fd=dir_fd)
    try:
        data = read_fd(fd, max_bytes, size_hint or st.st_size)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise OSError(errno.EFBIG, f"larger than {max_bytes} bytes; not read", path)
    return data


def read_json(path: str, *, max_bytes: int = 16 << 20, size_hint: int = 0, dir_fd: int | None = None):
    """The JSON document in the regular file ``path`` (:func:`read_bytes`), parsed with depth and size limits.

    OSError when it cannot be read as a regular file of at most ``max_bytes``, ValueError when it
    is not JSON we parse (too deep, not UTF-8, malformed).
    """
    from jitwarden.formats.jsonlimits import loads

    return loads(read_bytes(path, max_bytes=max_bytes, size_hint=size_hint, dir_fd=dir_fd), max_bytes=max_bytes)


# ---------------------------------------------------------------- writing


def umask() -> int:
    """The process umask, read once (reading it means setting it)."""
    if not _UMASK:
        old = os.umask(0o022)
        os.umask(old)
        _UMASK.append(old)
    return _UMASK[0]


def write_json_atomic(path: str, doc, prefix: str, *, dir_fd: int | None = None, mode: int | None = None) -> str:
    """Write ``doc`` as JSON to ``path`` atomically; a crash leaves the old file or none, never half.

    With ``dir_fd``, ``path`` is a name inside that directory: the temp file and the rename
    stay in it, whatever happens to the path that led there. ``mode``: None for a file readable
    like Triton's own (0666 less the umask), 0o600 for one only this user may read.
    """
    where, name = (None, path) if dir_fd is not None else os.path.split(path)
    for _ in range(100):
        tmp = f"{prefix}{os.urandom(6).hex()}.tmp"  # what secrets.token_hex(6) returns, without importing secrets
        tmp_at = tmp if dir_fd is not None else os.path.join(where, tmp)
        try:
            fd = os.open(tmp_at, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | _O_NOFOLLOW,
                         0o666 & ~umask() if mode is None else mode, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - a hundred random names taken
        raise FileExistsError(errno.EEXIST, "no free temporary name", path)
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
    base_fd = os.open(os.path.dirname(parent) or os.curdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
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


def _why_not_ours(st: os.stat_result, want_dir: bool, owners=()) -> str | None:
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


def unsafe_reserved(root_fd: int, names) -> list[str]:
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
    if create:
        try:
            os.mkdir(name, 0o755, dir_fd=root_fd)
        except FileExistsError:
            pass
    try:
        fd = os.open(name, _O_DIR, dir_fd=root_fd)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        why = unsafe_reserved(root_fd, {name: True}) or [f"{name} is not a directory"]
        raise UnsafeName(errno.EPERM, f"{why[0]}; not what jitwarden made, refusing to use it") from None
    why = _why_not_ours(os.fstat(fd), True, (os.fstat(root_fd).st_uid,))
    if why:
        os.close(fd)
        raise UnsafeName(errno.EPERM, f"{name} {why}; not what jitwarden made, refusing to use it")
    return fd


def open_beneath(root_fd: int, rel: str, create: bool = False) -> int:
    """An fd of the directory ``rel`` below ``root_fd``, walked one component at a time, never through a symlink.

    ``rel`` must be relative and free of ``..``; ``create`` makes missing directories on the way.
    OSError (ELOOP or ENOTDIR) when a component is a symlink or not a directory.
    """
    parts = [p for p in rel.split(os.sep) if p not in ("", os.curdir)]
    if os.path.isabs(rel) or os.pardir in parts:
        raise UnsafeName(errno.EPERM, f"{rel} is not a path inside the root", rel)
    fd = os.dup(root_fd)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            nxt = os.open(part, _O_DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


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


def memo_dir(env=None) -> str:
    """Where jitwarden keeps memos and private roots: ``$JITWARDEN_HOME``, else ``${XDG_CACHE_HOME:-~/.cache}/jitwarden``."""
    env = os.environ if env is None else env
    if env.get("JITWARDEN_HOME"):
        return env["JITWARDEN_HOME"]
    base = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")  # env's own home
    return os.path.join(base, "jitwarden")
