"""The use log: which entries of a cache root guarded processes were served, and when (stdlib only).

``budget`` evicts least recently *used* first, and only the runtime sees a use: a Triton hit the guard
served, an FX graph Inductor is about to load. Each process appends ``<unix ns>\\t<entry id>\\n`` to a
file of its own, ``<root>/.jitwarden-uses/<pid>.<token>.log`` (made ``O_EXCL``, written ``O_APPEND``),
the first time it is served an entry and again at most every :data:`RECORD_EVERY_S` for that entry: one
``write`` per entry per process, a dict lookup on every later hit. It holds a shared ``flock`` on its
file while it lives (closed on exec, released on exit), so a reader that cannot take the lock knows a
live process may still load the entries that file names: they are pinned (:attr:`Uses.live`).

What ended processes logged is merged by ``budget`` into ``uses.tsv`` (:func:`compact`) so the
directory does not grow with every run. Nothing here raises into a workload (:func:`used` swallows
every error: a use not logged costs eviction order, never a load). A log sits in a directory the
root's writers can write; a forged line can only reorder eviction or pin an entry, never serve bytes.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from jitwarden.model.layout import USES_DIR

RECORD_EVERY_S = 600.0
"""A process logs an entry again only this long after it last logged it (the rate limit of the hot path)."""

COMPACT_FILE = "uses.tsv"
"""The merged log of ended processes (``<ns>\\t<id>`` per line, one line per id)."""

MAX_LOG = 16 << 20
"""Bytes read of one log; past it the rest is not read (its entries then count as not logged)."""

_LOG_NAME = re.compile(r"^[0-9]+\.[0-9a-f]+\.log$")
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_DIR = getattr(os, "O_DIRECTORY", 0)

_mutex = threading.Lock()
_fds: dict[str, int | None] = {}  # root -> this process's log fd (None: cannot log there)
_seen: dict[tuple[str, str], float] = {}  # (root, id) -> when this process last logged it
_pid = os.getpid()


def used(root: str, entry_id: str) -> None:
    """Log that ``entry_id`` of the cache root ``root`` was served to this process. Never raises."""
    try:
        now = time.time()
        key = (root, entry_id)
        last = _seen.get(key)
        if last is not None and now - last < RECORD_EVERY_S:
            return
        if "\n" in entry_id or "\t" in entry_id or not entry_id:
            return
        fd = _log_fd(root)
        if fd is None:
            return
        _seen[key] = now
        os.write(fd, f"{int(now * 1e9)}\t{entry_id}\n".encode("utf-8", "surrogateescape"))
    except Exception:
        pass


def _log_fd(root: str) -> int | None:
    global _pid
    if os.getpid() != _pid:  # a forked child: the parent's files, its lock shared; start our own
        with _mutex:
            _pid = os.getpid()
            _fds.clear()
            _seen.clear()
    fd = _fds.get(root, -1)
    if fd != -1:
        return fd
    with _mutex:
        if root not in _fds:
            _fds[root] = _open_log(root)
        return _fds[root]


def _open_log(root: str) -> int | None:
    """This process's log in ``root``, made now and held with a shared lock; None where it cannot be."""
    from jitwarden.store.entrylock import lock_mode
    from jitwarden.store.paths import UnsafeName, reserved_dir

    try:
        rfd = os.open(root, os.O_RDONLY | _O_DIR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        dfd = reserved_dir(rfd, USES_DIR, create=True)
        if dfd is None:
            return None
        try:
            name = f"{os.getpid()}.{os.urandom(4).hex()}.log"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC | _O_NOFOLLOW
            fd = os.open(name, flags, lock_mode(os.fstat(dfd).st_mode), dir_fd=dfd)
        finally:
            os.close(dfd)
        fcntl.flock(fd, fcntl.LOCK_SH)
        return fd
    except (OSError, UnsafeName):
        return None
    finally:
        os.close(rfd)


@dataclass(frozen=True, slots=True, kw_only=True)
class Uses:
    """What the use log of one root says: when each entry was last served, and which a live process holds."""

    last: Mapping[str, float] = field(
        default_factory=dict
    )  # entry id -> last served (unix seconds)
    live: frozenset[str] = frozenset()  # ids a live process's log names: never evicted
    live_logs: int = 0  # logs a live process holds (one per process and root it was served from)
    ended: tuple[str, ...] = ()  # log names of processes that ended (for :func:`compact`)
    unreadable: tuple[tuple[str, str], ...] = ()  # (log name, why)


def _uses_dir(root: str) -> int | None:
    """An fd of ``root``'s use-log dir (:data:`USES_DIR`, never through a link), None when it has none."""
    from jitwarden.store.paths import reserved_dir

    rfd = os.open(root, os.O_RDONLY | _O_DIR | os.O_CLOEXEC)
    try:
        return reserved_dir(rfd, USES_DIR)
    finally:
        os.close(rfd)


def read(root: str) -> Uses:
    """The use log of ``root`` (empty when there is none); reads only, never waits on a lock."""
    dfd = _uses_dir(root)
    if dfd is None:
        return Uses()
    try:
        return _read_dir(dfd)
    finally:
        os.close(dfd)


def _read_dir(dfd: int) -> Uses:
    last: dict[str, float] = {}
    live: set[str] = set()
    ended: list[str] = []
    bad: list[tuple[str, str]] = []
    n_live = 0
    for name in sorted(os.listdir(dfd)):
        if name != COMPACT_FILE and not _LOG_NAME.match(name):
            continue
        try:
            alive, ids = _read_one(dfd, name)
        except OSError as exc:
            bad.append((name, (exc.strerror or str(exc)).lower()))
            continue
        for eid, t in ids.items():
            if t > last.get(eid, 0.0):
                last[eid] = t
        if alive:
            n_live += 1
            live.update(ids)
        elif name != COMPACT_FILE:
            ended.append(name)
    return Uses(
        last=last,
        live=frozenset(live),
        live_logs=n_live,
        ended=tuple(ended),
        unreadable=tuple(bad),
    )


def _read_one(dfd: int, name: str) -> tuple[bool, dict[str, float]]:
    """(held by a live process, {id: last time}) of one log file."""
    from jitwarden.store.reads import NotRegularFile, kind_of, read_fd

    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK, dir_fd=dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, f"not a regular file ({kind_of(st.st_mode)})")
        alive = False
        if name != COMPACT_FILE:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                alive = True
        return alive, parse(read_fd(fd, MAX_LOG, st.st_size)[:MAX_LOG])
    finally:
        os.close(fd)


def parse(raw: bytes) -> dict[str, float]:
    """{entry id: last time} of log lines (pure); a line that is not ``<ns>\\t<id>`` is skipped."""
    out: dict[str, float] = {}
    for line in raw.split(b"\n"):
        ns, tab, eid = line.partition(b"\t")
        if not tab or not eid or not ns.isdigit():
            continue
        key = eid.decode("utf-8", "surrogateescape")
        t = int(ns) / 1e9
        if t > out.get(key, 0.0):
            out[key] = t
    return out


def compact(root: str, uses: Uses, keep: Iterable[str]) -> None:
    """Merge what ended processes logged into ``uses.tsv`` (only ids in ``keep``: entries still there), then
    remove their logs. The caller holds the root's lock; a live process's log is never touched."""
    from jitwarden.store.atomic import AtomicWriter
    from jitwarden.store.entrylock import lock_mode

    dfd = _uses_dir(root)
    if dfd is None:
        return
    try:
        kept = set(keep)
        lines = sorted(
            f"{int(t * 1e9)}\t{eid}\n"
            for eid, t in uses.last.items()
            if eid in kept and eid not in uses.live
        )
        with AtomicWriter(dfd, COMPACT_FILE, mode=lock_mode(os.fstat(dfd).st_mode)) as w:
            w.write("".join(lines).encode("utf-8", "surrogateescape"))
        for name in uses.ended:
            try:
                os.unlink(name, dir_fd=dfd)
            except FileNotFoundError:
                pass
    finally:
        os.close(dfd)
