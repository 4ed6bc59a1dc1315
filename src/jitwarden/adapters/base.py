"""What every cache kind shares, written once (stdlib only): finding roots, partitions, a no-follow
survey of one entry, and the one ownership rule.

An adapter's own module decides what an entry *means*; this module only reads what is on
disk, the same way for every kind: never following a symlink, never opening anything but
regular files, never executing or unpickling. The adapters use it from here; nothing is
re-exported through them (ARCHITECTURE.md, "How to add … A cache kind").
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache, reduce
from itertools import chain, islice
from operator import attrgetter, methodcaller, or_
from typing import ClassVar, NamedTuple

from jitwarden.env import locations
from jitwarden.formats import elf
from jitwarden.model.entries import CacheRoot, Entry, Judge, KindFacts
from jitwarden.model.findings import Finding
from jitwarden.model.layout import PARTITIONS_DIR, is_reserved
from jitwarden.store import partition
from jitwarden.store.paths import open_dir_at
from jitwarden.store.reads import stat_and_read

MAX_DEPTH = 64
"""A survey stops descending here: a hostile 10,000-deep tree costs a finding, not the stack."""


# ---------------------------------------------------------------- roots


class Denied(str):
    """The words of an error that is a permission refusal (EACCES, EPERM): what this user may not read is
    unknown, never damage. A type, not a sentence: a survey's and a reader's errors carry it as their why, and
    the finding made of one is ``unreadable`` (:func:`error_finding`), never ``corrupt``."""

    __slots__ = ()


DENIED_ERRNOS = frozenset({errno.EACCES, errno.EPERM})


def why(exc: OSError, words: str) -> str:
    """``words`` about ``exc``, a :class:`Denied` when it is a permission refusal."""
    return Denied(words) if exc.errno in DENIED_ERRNOS else words


def error_finding(message: str, cause: str) -> Finding:
    """The finding for an item that could not be read or listed: ``unreadable`` when ``cause`` is a permission
    refusal (:class:`Denied`), else ``corrupt``."""
    return Finding("unreadable" if isinstance(cause, Denied) else "corrupt", message)


def read_failure(exc: OSError, message: str) -> Finding:
    """The finding for a file whose read failed with ``exc``: ``unreadable`` for a permission refusal, else
    ``corrupt``, worded ``message``."""
    return error_finding(message, why(exc, message))


def distinct(roots: list[CacheRoot]) -> list[CacheRoot]:
    """``roots`` in order, each real path once, existing directories only."""
    out, seen = [], set()
    for r in roots:
        key = os.path.realpath(r.path)
        if key not in seen and os.path.isdir(r.path):
            seen.add(key)
            out.append(r)
    return out


def existing(kind: str, candidates) -> list[CacheRoot]:
    """Roots of ``kind`` from (path, source) candidates in precedence order: existing dirs, each real path once."""
    return distinct(
        [
            CacheRoot(kind=kind, path=os.path.abspath(os.path.expanduser(p)), source=src)
            for p, src in candidates
        ]
    )


def set_vars(env, *names: str) -> list[tuple[str, str]]:
    """(value, name) of each variable of ``names`` that ``env`` sets non-empty, in order: root candidates."""
    return [(env[n], n) for n in names if env.get(n)]


def private_dir(env) -> str | None:
    """Where jitwarden's private roots live (activation goes there when a user's root is unsafe); None when unknown."""
    try:
        from jitwarden.store.paths import memo_dir

        return os.path.join(memo_dir(env), "roots")
    except Exception:
        return None


def private_root(kind: str, env) -> list[tuple[str, str]]:
    """jitwarden's private root of ``kind``, as a candidate (none when its place is unknown)."""
    d = private_dir(env)
    return [(os.path.join(d, kind), "private")] if d else []


class Listing:
    """One directory's items as one ``scandir`` lists them, in its order: ``names``, and ``types``, one letter
    a name from the listing itself (``d`` directory, ``l`` symlink, ``f`` regular file, ``o`` anything else;
    no stat, no link followed). What each adapter's ``looks_like_root`` reads of a path, through
    :func:`listed`: the names and a byte each, never a ``DirEntry`` per item (a root lists 10,000s)."""

    __slots__ = ("names", "types")

    def __init__(self, names: list[str], types: str):
        self.names = names
        self.types = types

    def dirs(self, among=None):
        """The names of the directories (only those in ``among``, when given), in listing order (lazily: a
        caller may stop early)."""
        if among is None:
            return (n for n, t in zip(self.names, self.types) if t == "d")
        return (n for n, t in zip(self.names, self.types) if t == "d" and n in among)

    def has_name_ending(self, suffix: str) -> bool:
        """Whether a name ends with ``suffix``, or with ``suffix`` and a newline (where a regex's ``$`` also
        matches): a necessary condition of a ``^...suffix$`` pattern, in one C-level pass over the names."""
        return any(map(methodcaller("endswith", (suffix, suffix + "\n")), self.names))


_LISTINGS: dict[str, Listing] | None = None  # within listing_once(): each directory listed once


def _type_of(e: os.DirEntry) -> bytes:
    if e.is_dir(follow_symlinks=False):  # never a symlink
        return b"d"
    if e.is_symlink():
        return b"l"
    return b"f" if e.is_file(follow_symlinks=False) else b"o"


def listed(path: str) -> Listing:
    """The :class:`Listing` of the directory ``path`` (OSError when it cannot be listed); within
    :func:`listing_once`, listed once however many adapters ask (a root of 10,000 entries costs ~8 ms a listing)."""
    memo = _LISTINGS
    if memo is not None:
        got = memo.get(path)
        if got is not None:
            return got
    names, types = [], bytearray()
    with os.scandir(path) as it:
        for e in it:
            names.append(e.name)
            types += _type_of(e)
    got = Listing(names, types.decode("ascii"))
    if memo is not None:
        memo[path] = got
    return got


@contextmanager
def listing_once():
    """Within it, :func:`listed` lists each directory once: telling what a path named on the command line is
    asks every adapter, and most look at the same directory. The listings are dropped on leaving (a
    root's listing is as large as its names); not for threads (the CLI's discovery runs in one)."""
    global _LISTINGS
    outer = _LISTINGS
    if outer is None:
        _LISTINGS = {}
    try:
        yield
    finally:
        if outer is None:
            _LISTINGS = None


def holds(path: str, test, most: int | None = None, type_: str | None = None) -> bool:
    """Whether the directory ``path`` holds an item whose name passes ``test`` and, given ``type_``, is of that
    type (:class:`Listing`), among the first ``most`` listed (None: all): how a root is told by its entries
    (``looks_like_root``); False when it cannot be listed."""
    try:
        ls = listed(path)
    except OSError:
        return False
    if type_ is None:
        return any(map(test, islice(ls.names, most)))
    return any(t == type_ and test(n) for n, t in zip(islice(ls.names, most), ls.types))


def holds_match(path: str, pattern) -> bool:
    """Whether the directory ``path`` holds an item whose name ``pattern`` (a compiled regex) matches;
    False when it cannot be listed."""
    try:
        names = listed(path).names
    except OSError:
        return False
    return any(map(pattern.match, names))


def entries(path: str) -> list[os.DirEntry]:
    """The items of the directory ``path`` but jitwarden's reserved names, sorted by name: what an adapter's
    ``list_entry_names`` sorts into entries and strays (OSError when it cannot be listed). Their ``is_dir`` and
    ``is_symlink`` answer from the listing, never following a link."""
    with os.scandir(path) as it:
        return sorted((e for e in it if not is_reserved(e.name)), key=_BY_NAME)


# ---------------------------------------------------------------- partitions


def with_partitions(base: str) -> list[tuple[str, str | None]]:
    """``base`` and each ``base/jitwarden-v1/<digest>`` in it, as (dir, digest or None)."""
    out: list[tuple[str, str | None]] = [(base, None)]
    for d in locations.subdirs(os.path.join(base, PARTITIONS_DIR)):
        out.append((d, os.path.basename(d)))
    return out


def expand_partitions(root: CacheRoot) -> list[CacheRoot]:
    """The root itself plus each jitwarden partition inside it (``<root>/jitwarden-v1/<digest>``); the same for every kind."""
    out = [root]
    pdir = os.path.join(root.path, PARTITIONS_DIR)
    if os.path.isdir(pdir) and not os.path.islink(pdir):
        for d in locations.subdirs(pdir):
            out.append(
                CacheRoot(
                    kind=root.kind,
                    path=d,
                    source="partition",
                    partition=os.path.basename(d),
                    base=root.path,
                )
            )
    # A root that is itself a partition (set by activation) keeps its label.
    inside = partition.split(root.path)
    if inside and root.partition is None:
        out[0] = CacheRoot(
            kind=root.kind, path=root.path, source=root.source, partition=inside[1], base=inside[0]
        )
    return out


# ---------------------------------------------------------------- the ownership rule


def root_safety(path: str, uid: int | None = None, risk: str | None = None) -> list[Finding]:
    """Problems of a root directory itself: writable by others, or owned by another user than ``uid``
    (default: ours); ``risk`` (an adapter's ``ROOT_RISK``) says what that lets others do through its tool."""
    try:
        problems = locations.root_problems(path, uid)
    except OSError:
        return []
    return [
        Finding("unsafe", f"cache root is {p}" + (f"; {risk}" if risk else "")) for p in problems
    ]


_MODE, _UID = attrgetter("mode"), attrgetter("uid")


def ownership_findings(s: Survey, root_uid: int | None, what: str = "entry") -> list[Finding]:
    """The one ownership rule, the same for every kind, over every item a survey saw (the entry itself,
    named by ``what``, each file, each directory in it): an item is ``unsafe`` when someone who is
    neither the reader (``root_uid``: ``ops/scan`` passes the uid running jitwarden, root's included, as the
    runtime judges by :mod:`jitwarden.store.trust`; None in a root named in ``JITWARDEN_TRUSTED_ROOTS``)
    nor root can change it.

    - World-writable (``o+w``, sticky or not: a sticky directory still lets anyone add files): anyone can.
    - Owned by another user than the reader: that user can rewrite it, and write its seal. This holds
      for root reading a user's cache too: a file owned by uid 1000 lets uid 1000 rewrite what root loads.
    - Owned by root (uid 0): not flagged. Root can rewrite any cache anyway, so a root-owned file gives
      no one a power they lacked; and sudo-run workloads (or root containers over a user's home) leave
      root-owned files in users' caches every day: flagging them would be an error without evidence.
    - Group-writable: not flagged. With a group per user (the common default) ``g+w`` exposes nothing.
    """
    trusted = None if root_uid is None else (root_uid, 0, -1)
    inside = (*s.files, *s.dirs)
    modes = reduce(or_, map(_MODE, inside), s.mode if s.is_dir else 0)
    owners = {*map(_UID, inside), s.uid} if s.is_dir else {*map(_UID, inside)}
    if not modes & stat.S_IWOTH and (trusted is None or owners <= {*trusted}):
        return []  # the common case, told by C-level passes over the modes and owners: nothing to name
    top = (
        [(what if what.endswith("directory") else f"{what} directory", s.mode, s.uid)]
        if s.is_dir
        else []
    )
    out = []
    for name, mode, uid in chain(
        top,
        ((f.name, f.mode, f.uid) for f in s.files),
        ((f"directory {d.name}", d.mode, d.uid) for d in s.dirs),
    ):
        if mode & stat.S_IWOTH:
            out.append(Finding("unsafe", f"{name} is world-writable (mode {mode & 0o7777:o})"))
        if trusted is not None and uid not in trusted:
            out.append(
                Finding(
                    "unsafe",
                    f"{name} is owned by uid {uid}, not by you (uid {root_uid})",
                )
            )
    return out


# ---------------------------------------------------------------- the survey of one entry


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
_IFMT, _IFREG, _IFLNK, _IFDIR = 0o170000, stat.S_IFREG, stat.S_IFLNK, stat.S_IFDIR
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
                if nested and depth + 1 >= max_depth:
                    ls.too_deep = True
                else:
                    ls.dirs.append(below[relp])
                    if nested:
                        stack.append((relp, depth + 1))
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
    to_read, head_of = (reading.most, reading.head) if reading is not None else (0, None)
    whole_max = reading.whole_max if reading is not None else 0
    asked = (reading.suffixes if reading is not None else None) or ("",)  # "": every name
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
                elif fmt == _IFLNK:
                    target = link_target(name, fd)
                    links.append(
                        Link(name, target, leaves(bound, os.path.join(path, name), target))
                    )
                elif fmt == _IFDIR:
                    dirs.append(Dir(name, est.st_mtime, est.st_mode, est.st_uid))
                else:  # a FIFO, a device, a socket: recorded, never opened
                    others.append(file_of(name, est))
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


def not_a_directory(
    kind: str,
    root: str,
    name: str,
    s: Survey,
    findings: list[Finding],
    what: str,
    label: str | None,
    facts: KindFacts,
) -> Entry:
    """The entry, for a kind whose entries are directories, when ``root/name`` is none: a symlink (type
    ``link``, never followed; one that leaves the root is already in ``findings``, from
    :func:`survey_findings`) or a lone file (``other``). ``what`` names the entry in a finding."""
    if s.is_symlink:
        if not s.links[0].leaves:
            findings.append(
                Finding("unsafe", f"{what} is a symlink (-> {s.symlink_target}); not followed")
            )
        return Entry(
            kind,
            root,
            name,
            s.path,
            "link",
            label,
            None,
            0,
            0.0,
            findings=tuple(findings),
            facts=facts,
        )
    return Entry(
        kind,
        root,
        name,
        s.path,
        "other",
        label,
        None,
        s.bytes,
        s.mtime,
        findings=tuple(findings),
        facts=facts,
    )


def lone_file(
    kind: str, root: str, name: str, root_uid: int | None, facts: KindFacts, not_file: str
) -> tuple[Survey, list[Finding], Entry | None]:
    """The start of judging an entry of a kind that writes one regular file per entry: (its survey, the
    findings every kind shares, the finished entry when it is no regular file or None). A symlink is never
    followed (:func:`not_a_directory`); a directory, FIFO or device is ``unrecognised``, ``not_file`` saying why."""
    s = survey(root, name)
    out = survey_findings(s, root_uid, "entry")
    if s.is_symlink:
        return s, out, not_a_directory(kind, root, name, s, out, "entry", None, facts)
    if s.is_dir or not s.files:
        out.append(Finding("unrecognised", not_file))
        return (
            s,
            out,
            Entry(
                kind,
                root,
                name,
                s.path,
                "other",
                None,
                None,
                s.bytes,
                s.mtime,
                findings=tuple(out),
                facts=facts,
            ),
        )
    return s, out, None


def survey_findings(s: Survey, root_uid: int | None, what: str = "entry") -> list[Finding]:
    """The findings every kind but Triton shares: symlinks out of the root, the ownership rule, unreadable parts."""
    out = [
        Finding(
            "unsafe", f"{link.name or what} is a symlink leaving the cache root (-> {link.target})"
        )
        for link in s.links
        if link.leaves
    ]
    out += ownership_findings(s, root_uid, what)
    for rel, cause in s.errors:
        out.append(error_finding(f"{rel or what}: {cause}", cause))
    if s.too_deep:
        out.append(
            Finding(
                "corrupt",
                f"{what} nests directories deeper than {MAX_DEPTH} levels; not read further",
            )
        )
    return out


# ---------------------------------------------------------------- ELF headers (quick checks)


def elf_head(path: str, size: int) -> elf.ElfHead:
    """:func:`jitwarden.formats.elf.parse_head` of the file ``path`` (no symlink followed), reading only its header;
    ``size`` is the file's size from the survey. OSError propagates (reported as unreadable files are)."""
    from jitwarden.store.reads import read_head

    return elf.parse_head(read_head(path, elf.HEADER_SIZE), size)


def older_than(mtime: float, judge, age: float | None = None) -> bool:
    """Whether something last written at ``mtime`` is older than ``age`` (default: the judge's orphan age)."""
    return judge.now - mtime >= (judge.orphan_age if age is None else age)


def unreadable(what: str, exc: OSError) -> Finding:
    """The finding for a file of an entry that could not be read: ``corrupt`` with the OS's words, except one
    past the bound jitwarden reads of its kind (EFBIG, ``store/reads.too_large``): that says nothing about its
    bytes, so it is ``unrecognised`` (not understood is not damage)."""
    if exc.errno == errno.EFBIG:
        return Finding("unrecognised", f"{what}: {exc.strerror}; not judged")
    if exc.errno in DENIED_ERRNOS:
        return Finding("unreadable", f"{what}: {exc.strerror} (a permission problem, not damage)")
    return Finding("corrupt", f"{what}: unreadable: {exc.strerror}")


def cubin_findings(rel: str, head: elf.ElfHead) -> list[Finding]:
    """A cubin judged by its header: unparseable, or no CUDA code at all; [] when sound (``head.sm`` is its SM)."""
    if head.problem:
        return [Finding("corrupt", f"{rel}: not a valid cubin: {head.problem}")]
    if head.machine != elf.EM_CUDA:
        return [Finding("mismatch", f"{rel} is an ELF for {head.machine_name}, not a CUDA cubin")]
    return []


def so_findings(rel: str, head: elf.ElfHead, host: str | None) -> list[Finding]:
    """A host shared object judged by its header: unparseable, not host code at all, or built for another CPU."""
    if head.problem:
        return [Finding("corrupt", f"{rel}: not a valid shared object: {head.problem}")]
    if head.machine == elf.EM_CUDA:
        return [Finding("mismatch", f"{rel} is a CUDA cubin, not a host shared object")]
    if host and head.machine_name != host:
        return [
            Finding(
                "foreign-arch",
                f"{rel} is built for {head.machine_name}, this host is {host}: unreachable here",
            )
        ]
    return []


# ---------------------------------------------------------------- seals of flat dirs (JAX, CuPy)


@lru_cache(maxsize=64)
def _dir_seal(d: str, mtime_ns: int, size: int) -> dict | None:
    """The files a directory's seal covers (name -> {sha256, size}); None when it is damaged. Cached by the
    seal file's mtime and size: every entry of a JAX or CuPy dir shares one seal."""
    from jitwarden.store import seal

    try:
        with os.scandir(d) as it:
            n = sum(1 for _ in it)
        s = seal.read(d, max_bytes=seal.dir_bound(n), name=seal.flat_name(d))
    except (seal.SealError, OSError):
        return None
    return dict(s.files) if s else None


def dir_seal_findings(
    d: str, name: str, data: bytes | tuple[int, str], judge: Judge
) -> tuple[bool, list[Finding]]:
    """(sealed, findings) of the file ``name`` of ``d`` whose bytes are ``data`` (or, for a file too large to hold,
    its (size, sha256 hex), the hex empty when not hashed), against the seal of ``d``
    (:mod:`jitwarden.runtime.flatseal` writes one per JAX or CuPy dir): ``corrupt`` when they differ."""
    import hashlib

    from jitwarden.model.layout import SEAL_FILE

    if not judge.check_seals:
        return False, []
    try:
        st = os.lstat(os.path.join(d, SEAL_FILE))
    except OSError:
        return False, []
    files = _dir_seal(d, st.st_mtime_ns, st.st_size) if stat.S_ISREG(st.st_mode) else None
    rec = files.get(name) if files else None
    if not isinstance(rec, dict):
        return False, []
    if isinstance(data, tuple):
        size, sha = data
        if not sha:  # not hashed: the dir had no seal as the file was read, so it is not checked
            return False, []
    else:
        size, sha = len(data), hashlib.sha256(data).hexdigest()
    if size != rec.get("size") or sha != rec.get("sha256"):
        return True, [
            Finding(
                "corrupt",
                f"{name} does not match its seal: changed since it was sealed (another "
                "entry's file under this key, or damaged)",
            )
        ]
    return True, []
