"""The survey of one entry (stdlib only): what is on disk under an entry, listed by directory fds, never
following a symlink, never opening anything but regular files (a :class:`Survey` of :class:`File`,
:class:`Dir` and :class:`Link` records), and the files a kind's reader needs read as they are listed
(:class:`Reading`). Every kind surveys its entries here; what they mean is the adapters' to judge
(:mod:`jitwarden.adapters.base` holds the rules every kind shares, the ownership rule among them).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import ClassVar, NamedTuple

from jitwarden.store.paths import open_dir_at
from jitwarden.store.reads import stat_and_read


class Denied(str):
    """The words of an error that is a permission refusal (EACCES, EPERM): what this user may not read is
    unknown, never damage. A type, not a sentence: a survey's and a reader's errors carry it as their why, and
    the finding made of one is ``unreadable`` (:func:`~jitwarden.adapters.base.error_finding`), never ``corrupt``."""

    __slots__ = ()


DENIED_ERRNOS = frozenset({errno.EACCES, errno.EPERM})


def why(exc: OSError, words: str) -> str:
    """``words`` about ``exc``, a :class:`Denied` when it is a permission refusal."""
    return Denied(words) if exc.errno in DENIED_ERRNOS else words


MAX_DEPTH = 64
"""A survey stops descending here: a hostile 10,000-deep tree costs a finding, not the stack."""


class File(NamedTuple):
    """A regular file as ``lstat`` saw it; ``name`` is relative to the entry (``sub/x.o``), or the file's
    own name when the entry is one file. A NamedTuple, read by name like a frozen dataclass: the survey
    makes one per file of every entry, and a tuple is built at a third of the cost."""

    name: str
    size: int
    mtime: float
    mode: int
    uid: int


@dataclass(frozen=True, slots=True)
class Dir:
    """A directory inside an entry as ``lstat`` saw it; ``name`` is relative to the entry."""

    name: str
    mtime: float
    mode: int
    uid: int


@dataclass(frozen=True, slots=True)
class Link:
    """A symlink, never followed: ``target`` as written (``?`` when unreadable), and whether it ``leaves``
    the directory it must stay in (the cache root, or what the survey was told)."""

    name: str
    target: str
    leaves: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Survey:
    """What one entry (a file or a directory tree) holds, read without following anything.

    ``mode``/``uid``/``mtime``: the entry itself; ``errors``: (relative path or "" for the entry, why);
    ``others``: items that are neither regular files, symlinks nor directories (FIFOs, devices, sockets),
    as ``lstat`` saw them and never opened: an adapter judges them by the name they sit under.
    ``read``: the bytes of the files the survey was asked to read as it listed them (``reading``), by name,
    or None: each file opened once, its ``File`` the ``fstat`` of that open (no ``lstat`` beside it).
    """

    path: str
    is_dir: bool
    is_symlink: bool = False
    symlink_target: str | None = None
    mode: int = 0
    uid: int = -1
    mtime: float = 0.0
    files: tuple[File, ...] = ()
    links: tuple[Link, ...] = ()
    dirs: tuple[Dir, ...] = ()
    errors: tuple[tuple[str, str], ...] = ()
    too_deep: bool = False
    others: tuple[File, ...] = ()
    read: Mapping[str, bytes] | None = None

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def newest(self) -> float:
        return max((f.mtime for f in self.files), default=self.mtime)


def inside(path: str, base: str) -> bool:
    base = base.rstrip(os.sep) + os.sep
    return path.startswith(base)


def leaves(base: str, link_path: str, target: str) -> bool:
    """Whether the symlink at ``link_path`` points outside ``base`` (lexically or once resolved)."""
    resolved = os.path.normpath(os.path.join(os.path.dirname(link_path), target))
    real = os.path.realpath(link_path)
    return not (inside(resolved, base) or inside(real, os.path.realpath(base)))


def link_target(path: str, dir_fd: int | None = None) -> str:
    """Where the symlink at ``path`` (a name in ``dir_fd``, when given) points, as written; ``?`` when it cannot be read."""
    try:
        return os.readlink(path, dir_fd=dir_fd)
    except OSError:
        return "?"


_BY_NAME = attrgetter("name")


_NEW_TUPLE = tuple.__new__


def file_of(name: str, st: os.stat_result) -> File:
    """``File(name, st.st_size, st.st_mtime, st.st_mode, st.st_uid)`` (without the NamedTuple's Python
    ``__new__``: the survey makes one per file it lists, on the scan's hot path)."""
    return _NEW_TUPLE(File, (name, st.st_size, st.st_mtime, st.st_mode, st.st_uid))


def survey(
    root: str,
    rel: str,
    max_depth: int = MAX_DEPTH,
    *,
    nested: bool = True,
    links_within: str | None = None,
) -> Survey:
    """Read the entry ``root/rel`` (file or directory) without following symlinks or writing.

    ``nested=False`` lists the entry's own directory only (its subdirectories are recorded, not
    entered). Symlinks inside it are judged against ``links_within`` (default: the root).
    """
    s, fd = _survey(root, rel, max_depth, nested, links_within, None)
    if fd is not None:
        os.close(fd)
    return s


class surveyed:
    """:func:`survey`, with the entry's directory kept open: gives (survey, fd of the directory, or None
    when the entry is no directory or cannot be listed), closed on leaving. Reading its files by that
    fd (``dir_fd=``) opens what was listed: no path is resolved again, and a directory swapped for a
    symlink meanwhile is never entered. A class, not a generator: the scan enters one per entry."""

    __slots__ = ("_args", "_fd")

    def __init__(
        self,
        root: str,
        rel: str,
        *,
        nested: bool = True,
        links_within: str | None = None,
        reading: Reading | None = None,
    ):
        self._args = (root, rel, MAX_DEPTH, nested, links_within, reading)
        self._fd: int | None = None

    def __enter__(self) -> tuple[Survey, int | None]:
        s, self._fd = _survey(*self._args)
        return s, self._fd

    def __exit__(self, *_exc) -> None:
        if self._fd is not None:
            os.close(self._fd)


def _not_listed(root: str, path: str, why_: OSError) -> Survey:
    """The survey of ``path`` when it cannot be opened as a directory (``why``): a symlink, a lone file
    (or a FIFO, a device: no files), or a directory that cannot be listed."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return Survey(
            path=path, is_dir=False, errors=(("", why(exc, f"cannot stat: {exc.strerror}")),)
        )
    if stat.S_ISLNK(st.st_mode):
        target = link_target(path)
        return Survey(
            path=path,
            is_dir=False,
            is_symlink=True,
            symlink_target=target,
            mode=st.st_mode,
            uid=st.st_uid,
            mtime=st.st_mtime,
            links=(Link("", target, leaves(root, path, target)),),
        )
    if not stat.S_ISDIR(st.st_mode):
        files = (file_of(os.path.basename(path), st),) if stat.S_ISREG(st.st_mode) else ()
        return Survey(
            path=path, is_dir=False, mode=st.st_mode, uid=st.st_uid, mtime=st.st_mtime, files=files
        )
    # A directory after all: unreadable, or a file or link swapped for it since the open.
    errors = (
        ()
        if isinstance(why_, FileNotFoundError)
        else (("", why(why_, f"cannot list: {why_.strerror}")),)
    )
    return Survey(
        path=path,
        is_dir=True,
        is_symlink=False,
        symlink_target=None,
        mode=st.st_mode,
        uid=st.st_uid,
        mtime=st.st_mtime,
        errors=errors,
    )


@dataclass(frozen=True, slots=True)
class Reading:
    """Which files a survey reads as it lists them (:attr:`Survey.read`): ``head(name)`` gives, for a regular
    file's name, the bytes to read (``WHOLE``: all of it, when it holds at most ``whole_max``) or None (stat it
    only); at most ``most`` files an entry. One open gives the file's stat and its bytes: what its reader
    would open next anyway, without the ``lstat`` before it (the scan's hot path, ARCHITECTURE.md)."""

    WHOLE: ClassVar[int] = 0
    head: Callable[[str], int | None]
    most: int = 8
    whole_max: int = 1 << 20
    suffixes: tuple[str, ...] | None = None
    """When given, ``head`` is asked only of names ending with one of these (one C-level test a name)."""


def _survey(
    root: str,
    rel: str,
    max_depth: int,
    nested: bool,
    links_within: str | None,
    reading: Reading | None,
) -> tuple[Survey, int | None]:
    """:func:`survey` and the fd of the entry's directory (None when it is none or cannot be listed).

    The directory is opened once (``O_NOFOLLOW``), then listed and stat'ed through its fd (``fstatat``):
    no path below it is resolved again. A subdirectory is opened from it by its relative path, never
    through a symlink at the last step (the steps before were directories when listed). With ``reading``,
    the regular files it names are opened (by the same fd, never through a symlink, never blocking) and
    read as they are listed, their ``fstat`` standing for the ``fstatat``; one that is no regular file
    by then is stat'ed and recorded as what it is.
    """
    path = os.path.join(root, rel)
    try:
        top = open_dir_at(path)
    except OSError as exc:
        return _not_listed(root, path, exc), None
    if not nested:
        try:
            return _survey_flat(
                path, top, root if links_within is None else links_within, reading
            ), top
        except BaseException:
            os.close(top)
            raise
    try:
        st = os.fstat(top)
        ls = _Listing(path, root if links_within is None else links_within, reading)
        _walk(top, max_depth, ls)
    except BaseException:
        os.close(top)
        raise
    for found in (ls.files, ls.links, ls.dirs, ls.others):
        found.sort(key=_BY_NAME)
    return Survey(
        path=path,
        is_dir=True,
        is_symlink=False,
        symlink_target=None,
        mode=st.st_mode,
        uid=st.st_uid,
        mtime=st.st_mtime,
        files=tuple(ls.files),
        links=tuple(ls.links),
        dirs=tuple(ls.dirs),
        errors=tuple(ls.errors),
        too_deep=ls.too_deep,
        others=tuple(ls.others),
        read=ls.read or None,
    ), top


def _walk(top: int, max_depth: int, ls: _Listing) -> None:
    """Every directory below the open ``top`` listed into ``ls``, depth first, each opened by its relative path
    from ``top``; below ``max_depth`` levels none is entered (``ls.too_deep``)."""
    stack = [("", 0)]
    while stack:
        sub, depth = stack.pop()
        fd = _open_sub(top, sub, ls.errors) if sub else top
        if fd is None:
            continue
        try:
            below = _list_dir(fd, sub, ls)
        finally:
            if fd != top:
                os.close(fd)
        for relp in below:  # in the listing's order, entered last first
            if depth + 1 >= max_depth:
                ls.too_deep = True
            else:
                ls.dirs.append(below[relp])
                stack.append((relp, depth + 1))


def _survey_flat(path: str, fd: int, bound: str, reading: Reading | None) -> Survey:
    """:func:`_survey` of one directory not entered below (``nested=False``: a Triton entry, the scan's hot path),
    by the open ``fd``, in one loop: what :func:`_list_dir` and :func:`_read_now` record, item for item."""
    st = os.fstat(fd)
    files: list[File] = []
    links: list[Link] = []
    dirs: list[Dir] = []
    others: list[File] = []
    errors: list[tuple[str, str]] = []
    read: dict[str, bytes] = {}
    to_read, head_of, whole_max, asked = _plan(reading)
    try:
        it = os.scandir(fd)
    except OSError as exc:
        errors.append(("", f"cannot list: {exc.strerror}"))
    else:
        with it:
            for e in it:
                name = e.name
                if to_read and name.endswith(asked) and e.is_file(follow_symlinks=False):
                    head = head_of(name)  # type: ignore[misc]  # set with to_read
                    got = None if head is None else _read_as_listed(name, fd, head, whole_max, read)
                    if got is not None:
                        to_read -= 1
                        files.append(got)
                        continue
                try:
                    est = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone while listing: not damage
                except OSError as exc:
                    errors.append((name, f"cannot stat: {exc.strerror}"))
                    continue
                fmt = est.st_mode & _IFMT
                if fmt == _IFREG:
                    files.append(
                        _NEW_TUPLE(File, (name, est.st_size, est.st_mtime, est.st_mode, est.st_uid))
                    )
                else:
                    _not_regular(name, est, fmt, (path, fd, bound), links, dirs, others)
    files.sort()  # by name: names are unique in a directory, so the tuples compare by name alone
    for found in (links, dirs, others):
        if len(found) > 1:
            found.sort(key=_BY_NAME)
    return Survey(
        path=path,
        is_dir=True,
        mode=st.st_mode,
        uid=st.st_uid,
        mtime=st.st_mtime,
        files=tuple(files),
        links=tuple(links),
        dirs=tuple(dirs),
        errors=tuple(errors),
        others=tuple(others),
        read=read or None,
    )


def _plan(
    reading: Reading | None,
) -> tuple[int, Callable[[str], int | None] | None, int, tuple[str, ...]]:
    """(how many files to read, the head to read of a name, the most read whole, the suffixes of the names
    asked: "" for every name) of a flat survey; nothing read without ``reading``."""
    if reading is None:
        return 0, None, 0, ("",)
    return reading.most, reading.head, reading.whole_max, reading.suffixes or ("",)


def _not_regular(
    name: str,
    est: os.stat_result,
    fmt: int,
    at: tuple[str, int, str],
    links: list[Link],
    dirs: list[Dir],
    others: list[File],
) -> None:
    """An item of a flat survey that is no regular file recorded by what it is (``fmt``), ``at`` its
    directory's (path, fd, the bound its links are judged against): a symlink never followed, a directory
    never entered, anything else (a FIFO, a device, a socket) never opened."""
    if fmt == _IFLNK:
        path, fd, bound = at
        target = link_target(name, fd)
        links.append(Link(name, target, leaves(bound, os.path.join(path, name), target)))
    elif fmt == _IFDIR:
        dirs.append(Dir(name, est.st_mtime, est.st_mode, est.st_uid))
    else:
        others.append(file_of(name, est))


def _read_as_listed(
    name: str, fd: int, head: int, whole_max: int, read: dict[str, bytes]
) -> File | None:
    """The regular file ``name`` of the listed directory ``fd`` read (its ``head`` bytes, or 0: whole up to
    ``whole_max``) into ``read``: its ``File`` from the fstat of that open; None when it is no regular file
    since the listing (then stat'ed by the caller and recorded as what it is)."""
    try:
        st, data = stat_and_read(name, dir_fd=fd, head=head, max_bytes=whole_max)
    except OSError:
        return None
    if data is not None:
        read[name] = data
    return _NEW_TUPLE(File, (name, st.st_size, st.st_mtime, st.st_mode, st.st_uid))


class _Listing:
    """What one survey has found so far (mutable while it lists): its files, links, directories, other
    things and errors, the bytes it read, and how many more files it may read."""

    __slots__ = (
        "path",
        "bound",
        "reading",
        "to_read",
        "files",
        "links",
        "dirs",
        "others",
        "errors",
        "read",
        "too_deep",
    )

    def __init__(self, path: str, bound: str, reading: Reading | None) -> None:
        self.path, self.bound, self.reading = path, bound, reading
        self.to_read = reading.most if reading is not None else 0
        self.files: list[File] = []
        self.links: list[Link] = []
        self.dirs: list[Dir] = []
        self.others: list[File] = []
        self.errors: list[tuple[str, str]] = []
        self.read: dict[str, bytes] = {}
        self.too_deep = False


def _open_sub(top: int, sub: str, errors: list[tuple[str, str]]) -> int | None:
    """An fd of the subdirectory ``sub`` below ``top``; None when it went or cannot be opened (said)."""
    try:
        return open_dir_at(sub, dir_fd=top)
    except FileNotFoundError:
        return None  # gone while listing: not damage
    except OSError as exc:
        errors.append((sub, why(exc, f"cannot list: {exc.strerror}")))
        return None


def _list_dir(fd: int, sub: str, ls: _Listing) -> dict[str, Dir]:
    """List the directory ``fd`` (``sub`` below the entry) into ``ls``; returns its subdirectories by path."""
    below: dict[str, Dir] = {}
    try:
        it = os.scandir(fd)
    except OSError as exc:
        ls.errors.append((sub, why(exc, f"cannot list: {exc.strerror}")))
        return below
    with it:
        for e in it:
            name = e.name
            relp = f"{sub}/{name}" if sub else name
            if ls.to_read and e.is_file(follow_symlinks=False) and _read_now(name, relp, fd, ls):
                continue  # the listing's type: no stat
            try:
                est = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # gone while listing (a writer's temporary file renamed into place): not damage
            except OSError as exc:
                ls.errors.append((relp, why(exc, f"cannot stat: {exc.strerror}")))
                continue
            fmt = est.st_mode & _IFMT
            if fmt == _IFREG:
                ls.files.append(file_of(relp, est))
            elif fmt == _IFLNK:
                target = link_target(name, fd)
                ls.links.append(
                    Link(relp, target, leaves(ls.bound, os.path.join(ls.path, relp), target))
                )
            elif fmt == _IFDIR:
                below[relp] = Dir(relp, est.st_mtime, est.st_mode, est.st_uid)
            else:  # a FIFO, a device, a socket: recorded, never opened
                ls.others.append(file_of(relp, est))
    return below


def _read_now(name: str, relp: str, fd: int, ls: _Listing) -> bool:
    """Read the regular file ``name`` as it is listed, when ``ls.reading`` asks for it; False when it is
    not read (not asked for, or no regular file since the listing: stat'ed then, recorded as what it is)."""
    assert ls.reading is not None  # to_read is 0 without it
    suffixes = ls.reading.suffixes
    head = ls.reading.head(name) if not suffixes or name.endswith(suffixes) else None
    if head is None:
        return False
    try:
        st_read, data = stat_and_read(name, dir_fd=fd, head=head, max_bytes=ls.reading.whole_max)
    except OSError:
        return False
    ls.to_read -= 1
    ls.files.append(file_of(relp, st_read))
    if data is not None:
        ls.read[relp] = data
    return True


_IFMT, _IFREG, _IFLNK, _IFDIR = 0o170000, stat.S_IFREG, stat.S_IFLNK, stat.S_IFDIR
