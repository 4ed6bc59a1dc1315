"""The one atomic writer, and new files made exclusively (stdlib only; ARCHITECTURE.md, "Layers").

Every file jitwarden replaces (a seal, a memo, a partition's info, a quarantine record, the
quarantine registry, a bundle, a key, a metrics file) is written by :class:`AtomicWriter`: an
``O_EXCL | O_NOFOLLOW`` temporary with an unpredictable name (:func:`temp_name`, within NAME_MAX for
any legal target) beside the target in the target's directory fd, written, ``fsync``-ed, then renamed
onto the target by that directory fd: a reader sees the old file or the new, never half; a crash
leaves the old one; a link or file planted at any name is never followed nor reused, and nothing
swapped along the path that led to the directory can redirect the rename. A file that must not
replace anything is created ``O_EXCL`` (:func:`create_new`, :func:`write_new`, :func:`write_new_file`).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from types import TracebackType

TYPE_CHECKING = False  # mypy takes it as true; importing typing costs 2 ms of every activation
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | _O_NOFOLLOW
_O_DIR_FOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_UMASK: list[int] = []

NAME_MAX = 255
"""The longest name a directory entry may have (Linux, every common filesystem), in bytes."""


def umask() -> int:
    """The process umask, read once (reading it means setting it)."""
    if not _UMASK:
        old = os.umask(0o022)
        os.umask(old)
        _UMASK.append(old)
    return _UMASK[0]


def temp_name(prefix: str) -> str:
    """``<prefix><12 random hex>.tmp``, the prefix's last component cut (in bytes, never inside a UTF-8
    character) so the name fits :data:`NAME_MAX`: a target of any legal length gets a temporary beside it."""
    head, base = os.path.split(prefix)
    suffix = (
        f"{os.urandom(6).hex()}.tmp"  # what secrets.token_hex(6) returns, without importing secrets
    )
    room = NAME_MAX - len(suffix)
    raw = os.fsencode(base)
    if len(raw) > room:
        while room and raw[room] & 0xC0 == 0x80:  # never half a UTF-8 character
            room -= 1
        base = os.fsdecode(raw[:room])
    return os.path.join(head, base + suffix)


def _new_temp(prefix: str, mode: int, dir_fd: int, target: str) -> tuple[int, str]:
    """(write fd, name) of a new temporary :func:`temp_name` in ``dir_fd``, created ``O_EXCL | O_NOFOLLOW``."""
    for _ in range(100):
        tmp = temp_name(prefix)
        try:
            return os.open(tmp, _O_NEW, mode, dir_fd=dir_fd), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", target)  # pragma: no cover


def _is_dir_at(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


class AtomicWriter:
    """A new file written beside ``name`` in ``dir_fd`` and renamed onto it by fd on success, removed on failure.

    The temporary is :func:`temp_name` of ``prefix`` (default ``.<name>.``). ``mode``: None for 0666
    less the umask (readable like Triton's own files), else exactly that, whatever the umask. Use as a
    context manager; ``write(bytes)``; ``fd`` is the temporary's, for a caller that needs its stat.
    """

    def __init__(
        self, dir_fd: int, name: str, prefix: str | None = None, mode: int | None = None
    ) -> None:
        self.dir_fd, self.name = dir_fd, name
        want = 0o666 & ~umask() if mode is None else mode
        self.fd, self.tmp = _new_temp(f".{name}." if prefix is None else prefix, want, dir_fd, name)
        self.pos = 0
        """Bytes written so far (the file's size once done)."""
        if mode is not None:
            os.fchmod(self.fd, mode)  # exactly this mode, whatever the umask

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
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None:
                os.fsync(self.fd)  # the bytes are on disk before the name points at them
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


def write_atomic(
    dir_fd: int, name: str, data: bytes, prefix: str | None = None, *, mode: int | None = None
) -> None:
    """``data`` into ``name`` in ``dir_fd`` atomically (:class:`AtomicWriter`); a reader sees the old file or the new."""
    with AtomicWriter(dir_fd, name, prefix, mode) as w:
        w.write(data)


def _write_by_path(path: str, data: bytes, prefix: str | None, mode: int | None) -> None:
    """:func:`write_atomic` into ``path``, a file of jitwarden's own (a memo, an entry's file): its directory
    opened once by its path, the temporary and the rename by that fd (the last name is replaced, never followed)."""
    where, name = os.path.split(path)
    fd = os.open(where or os.curdir, _O_DIR_FOLLOW)
    try:
        write_atomic(fd, name, data, prefix, mode=mode)
    finally:
        os.close(fd)


def write_json_atomic(
    path: str,
    doc: Any,
    prefix: str | None = None,
    *,
    dir_fd: int | None = None,
    mode: int | None = None,
) -> str:
    """``doc`` as JSON (sorted keys) into ``path`` atomically; ``path``. With ``dir_fd``, ``path`` is a name
    in that directory. ``mode``: as :class:`AtomicWriter` (0o600 for a file only this user may read)."""
    data = json.dumps(doc, sort_keys=True).encode()
    if dir_fd is None:
        _write_by_path(path, data, prefix, mode)
    else:
        write_atomic(dir_fd, path, data, prefix, mode=mode)
    return path


def write_bytes_atomic(path: str, data: bytes, *, mode: int | None = None) -> None:
    """``data`` as the file ``path`` (jitwarden's own), replaced atomically (:class:`AtomicWriter`)."""
    _write_by_path(path, data, None, mode)


def create_new(name: str, *, dir_fd: int, mode: int = 0o644) -> int:
    """A write fd of a file ``name`` that did not exist (``O_EXCL | O_NOFOLLOW``) inside ``dir_fd``."""
    return os.open(name, _O_NEW, mode, dir_fd=dir_fd)


def write_new(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to the new regular file ``name`` in ``dir_fd`` (O_EXCL: never over or through anything
    there); removed again when the write fails."""
    fd = create_new(name, dir_fd=dir_fd, mode=mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def write_new_file(path: str, data: bytes, mode: int = 0o600) -> None:
    """A new file ``path`` holding ``data`` (:func:`write_new` in its directory): FileExistsError if anything
    is there, a symlink included; never left half-written under its name."""
    where, name = os.path.split(path)
    fd = os.open(where or os.curdir, _O_DIR_FOLLOW)
    try:
        write_new(fd, name, data, mode)
    finally:
        os.close(fd)


def private_dir(path: str, under: str | None = None) -> int | None:
    """An fd of the directory ``path`` when it is this user's alone (root's too), made (0700, with its missing
    parents) only inside a directory that is; None, nothing made, when one of them could be written by someone
    else: root with a user's HOME leaves no root-owned dir or file there for the user's runs to refuse.

    ``under``: jitwarden's home or config dir that ``path`` lies in, which may be the user's own link (followed,
    its target judged); every component of ``path`` below it is opened without following a link (default: the
    dir itself). A link in ``under``'s place that another user made is refused. OSError for any other failure."""
    from jitwarden.store.paths import nearest_existing, open_dir_at
    from jitwarden.store.reads import why_not_private

    base = path if under is None else under
    rel = os.path.relpath(path, base)
    below = [] if rel == os.curdir else rel.split(os.sep)
    if os.pardir in below:
        raise ValueError(f"{path} is not inside {base}")
    top, missing = nearest_existing(
        base
    )  # the nearest dir there is: nothing made in another user's
    try:
        fd = open_dir_at(
            top
        )  # a dir in its place opened as it was judged, never swapped for a link meanwhile
    except OSError as exc:
        lst = os.lstat(top)
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR) or not stat.S_ISLNK(lst.st_mode):
            raise  # O_DIRECTORY | O_NOFOLLOW on a link: ENOTDIR (ELOOP on some systems)
        if lst.st_uid != os.getuid():
            return None  # a link another user planted at jitwarden's home
        fd = os.open(top, _O_DIR_FOLLOW)  # the user's own link: its target judged below
    try:
        if why_not_private(os.fstat(fd)):
            os.close(fd)
            return None
        for part in [*missing, *below]:
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            sub = open_dir_at(part, dir_fd=fd)
            os.close(fd)
            fd = sub
            if why_not_private(os.fstat(fd)):
                os.close(fd)
                return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private(
    path: str, data: bytes, prefix: str, *, under: str | None = None, keep: int = 0
) -> bool:
    """``data`` into ``path`` atomically (mode 0600) in a dir of this user's alone (:func:`private_dir`, with
    ``under``); False, nothing written or made, where that dir could be written by someone else. ``keep``: then
    only the newest ``keep`` files of the dir that end as ``path`` does stay (a dir of memos, one per key)."""
    where, name = os.path.split(path)
    fd = private_dir(where or os.curdir, under)
    if fd is None:
        return False
    try:
        write_atomic(fd, name, data, prefix, mode=0o600)
        if keep:
            _keep_newest(fd, os.path.splitext(name)[1], keep)
    finally:
        os.close(fd)
    return True


def write_private_json(path: str, doc: Any, prefix: str, *, under: str | None = None) -> bool:
    """``doc`` as JSON (sorted keys) by :func:`write_private`."""
    return write_private(path, json.dumps(doc, sort_keys=True).encode(), prefix, under=under)


def write_stats(name: str, doc: Any, prefix: str, env: Mapping[str, str] | None = None) -> bool:
    """``doc`` as ``<jitwarden home>/stats/<name>`` (:func:`write_private_json`: a ``stats`` dir swapped for a link
    is never written through, nothing is written where another user could write): verify's and budget's last
    results, a remote-guarded process's counters."""
    from jitwarden.model.layout import STATS_DIR
    from jitwarden.store.paths import memo_dir

    home = memo_dir(env)
    return write_private_json(os.path.join(home, STATS_DIR, name), doc, prefix, under=home)


def _keep_newest(dir_fd: int, ext: str, keep: int) -> None:
    """Only the newest ``keep`` regular files of ``dir_fd`` whose names end in ``ext`` stay."""
    with os.scandir(dir_fd) as it:
        files = [e for e in it if e.name.endswith(ext) and e.is_file(follow_symlinks=False)]
    files.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime_ns, reverse=True)
    for e in files[keep:]:
        try:
            os.unlink(e.name, dir_fd=dir_fd)
        except OSError:
            pass
