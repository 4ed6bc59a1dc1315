"""Quarantine: move an entry aside by one atomic rename, restorably (stdlib only).

Layout (schema 2)::

    <root>/jitwarden-quarantine/<UTC stamp>-<flattened entry id>/
        .jitwarden-quarantine.json     where it came from, why, by whom
        <entry's own name>             the entry itself: a directory, a file or a symlink, untouched

The record is written *before* the rename, so an interrupted move leaves either the
entry in place (and an empty slot that ``empty`` removes) or the entry wholly in
quarantine with its record; never half an entry. The rename stays inside the root,
so it is atomic and never crosses a filesystem. Entry ids may be relative paths
(``fxgraph/ab/<key>``); the record keeps that path and restore puts the entry back
exactly there, refusing when the slot has been taken since.

Schema 1 (the guard's earlier layout: the entry dir itself renamed into quarantine,
record inside) is still read, restored and purged.

Deleting (only on request) first renames the slot into ``<root>/.jitwarden-trash/``,
then removes it there: a kill mid-delete never leaves half an entry where a restore
would find it. Nothing here follows a symlink.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import stat
import time
from dataclasses import dataclass, field

from .layout import QUARANTINE_DIR

RECORD = ".jitwarden-quarantine.json"
TRASH_DIR = ".jitwarden-trash"
SCHEMA = 2


class QuarantineError(Exception):
    """A quarantine or restore that cannot be done as asked (message for the user)."""


@dataclass(frozen=True, slots=True)
class Record:
    """One quarantined entry: where it is now, where it came from, and why."""

    id: str  # the slot's name: <stamp>-<flattened entry id>[-n]
    path: str  # the slot: <root>/jitwarden-quarantine/<id>
    entry_id: str  # relative to root, may contain "/"
    original_path: str
    root: str
    reason: str
    details: tuple[str, ...] = ()
    quarantined_at: float = 0.0
    by: str = ""
    fingerprint: str | None = None
    pid: int = 0
    bytes: int = 0
    extra: dict = field(default_factory=dict)
    payload: str | None = None  # the entry's name inside the slot (schema 2); None: the slot is the entry (schema 1)
    kind: str | None = None  # cache kind of the entry (triton, inductor, ...)
    present: bool = True  # False: an interrupted move left the slot without its entry

    @property
    def payload_path(self) -> str:
        """Where the quarantined entry itself is."""
        return os.path.join(self.path, self.payload) if self.payload else self.path

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA, "id": self.id, "path": self.path, "entry_id": self.entry_id,
            "original_path": self.original_path, "root": self.root, "reason": self.reason,
            "details": list(self.details), "quarantined_at": self.quarantined_at, "by": self.by,
            "fingerprint": self.fingerprint, "pid": self.pid, "bytes": self.bytes, "payload": self.payload,
            "kind": self.kind, "present": self.present,
        }


def quarantine_dir(root: str) -> str:
    return os.path.join(root, QUARANTINE_DIR)


def stamp(now: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))


def flatten(entry_id: str) -> str:
    """One path component for an entry id: ``fxgraph/ab/KEY`` → ``fxgraph%ab%KEY`` (pure)."""
    return entry_id.replace("%", "%25").replace(os.sep, "%")


# ---------------------------------------------------------------- renames that never replace

_RENAME_NOREPLACE = 1
_renameat2 = None


def _libc_renameat2():
    global _renameat2
    if _renameat2 is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.renameat2
            fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
            _renameat2 = fn
        except (OSError, AttributeError):
            _renameat2 = False
    return _renameat2


def rename_noreplace(src: str, dst: str) -> None:
    """``rename(src, dst)`` that fails with FileExistsError instead of replacing ``dst``.

    Plain ``rename`` silently replaces a file or an empty directory; restore must not.
    Uses ``renameat2(RENAME_NOREPLACE)``; where the kernel or filesystem lacks it, checks first.
    """
    fn = _libc_renameat2()
    if fn:
        AT_FDCWD = -100
        if fn(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), src, None, dst)
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
    os.rename(src, dst)


# ---------------------------------------------------------------- moving aside


def size_of(path: str) -> int:
    """Bytes of regular files under ``path`` (or of ``path`` itself), never following a symlink."""
    return tree_stats(path)[0]


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)


def tree_stats(path: str, skip: frozenset = frozenset()) -> tuple[int, float]:
    """(bytes of regular files, newest mtime) under ``path``, without recursion or following links.

    Walks by directory fds, so a 10,000-deep chain (paths far beyond PATH_MAX) costs no
    stack and one fd per level still holding unvisited siblings. Unreadable parts are skipped.
    """
    try:
        st = os.lstat(path)
    except OSError:
        return 0, 0.0
    if not stat.S_ISDIR(st.st_mode):
        return (st.st_size if stat.S_ISREG(st.st_mode) else 0), st.st_mtime
    total, newest = 0, 0.0
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return 0, st.st_mtime
    stack = [(fd, [])]
    first = True
    while stack:
        fd, todo = stack[-1]
        if first:
            first = False
            try:
                with os.scandir(fd) as it:
                    for e in it:
                        if e.name in skip:
                            continue
                        try:
                            s = e.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        newest = max(newest, s.st_mtime)
                        if stat.S_ISDIR(s.st_mode):
                            todo.append(e.name)
                        elif stat.S_ISREG(s.st_mode):
                            total += s.st_size
            except OSError:
                pass
        if not todo:
            os.close(fd)
            stack.pop()
            continue
        name = todo.pop()
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            continue
        if not todo:  # the last child: this level is done, its fd need not stay open
            os.close(fd)
            stack.pop()
        stack.append((child, []))
        first = True
    return total, newest


def move(entry_path: str, reason: str, details=(), *, root: str | None = None, entry_id: str | None = None,
         kind: str | None = None, by: str = "jitwarden", fingerprint: str | None = None,
         now: float | None = None) -> Record:
    """Rename ``entry_path`` (a directory, file or symlink) into ``root``'s quarantine; returns its record.

    ``root`` defaults to the entry's parent (the guard's Triton entries). Raises
    FileNotFoundError when the entry is already gone (someone else moved it).
    """
    now = time.time() if now is None else now
    entry_path = os.path.normpath(entry_path)
    if root is None:
        root, default_id = os.path.split(entry_path)
    else:
        root = os.path.normpath(root)
        default_id = os.path.relpath(entry_path, root)
    entry_id = entry_id or default_id
    if entry_id.startswith(os.pardir + os.sep) or entry_id == os.pardir or os.path.isabs(entry_id):
        raise QuarantineError(f"{entry_path} is not inside {root}")
    os.lstat(entry_path)  # FileNotFoundError when gone
    qdir = quarantine_dir(root)
    os.makedirs(qdir, exist_ok=True)
    base = f"{stamp(now)}-{flatten(entry_id)}"[:240]
    for n in range(1000):
        name = base if n == 0 else f"{base}-{n}"
        slot = os.path.join(qdir, name)
        try:
            os.mkdir(slot, 0o755)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - a thousand quarantines of one entry in one second
        raise QuarantineError(f"no free quarantine name for {entry_id}")
    payload = os.path.basename(entry_path)
    rec = Record(name, slot, entry_id, entry_path, root, reason, tuple(details), now, by, fingerprint,
                 os.getpid(), size_of(entry_path), payload=payload, kind=kind)
    try:
        _write_record(slot, rec)
        rename_noreplace(entry_path, os.path.join(slot, payload))
    except BaseException:
        _drop_slot(slot)
        raise
    from . import qregistry

    qregistry.remember(root)  # so `jitwarden quarantine ls` finds this root without --root (never raises)
    return rec


def _drop_slot(slot: str) -> None:
    """Remove a slot that holds only its record (an undone or interrupted move)."""
    for n in os.listdir(slot) if os.path.isdir(slot) else ():
        if n == RECORD or n.startswith(".jitwarden-q."):
            try:
                os.unlink(os.path.join(slot, n))
            except OSError:
                pass
    try:
        os.rmdir(slot)
    except OSError:
        pass


def _write_record(slot: str, rec: Record) -> None:
    from .fsutil import write_json_atomic

    write_json_atomic(os.path.join(slot, RECORD), rec.to_json(), ".jitwarden-q.")


# ---------------------------------------------------------------- reading


def read(qpath: str) -> Record:
    """The record of one slot; an 'unknown' record when its file is missing or damaged (schema 1 guesses)."""
    from .fsutil import read_nofollow

    qpath = os.path.normpath(qpath)
    qdir, name = os.path.split(qpath)
    root = os.path.dirname(qdir)
    guess = name.split("-", 1)[1] if "-" in name else name
    guess = guess.split("-", 1)[0]
    try:
        d = json.loads(read_nofollow(os.path.join(qpath, RECORD)))
        if not isinstance(d, dict):
            raise ValueError("not an object")
        payload = d.get("payload") or None
        if payload is not None and (not isinstance(payload, str) or os.sep in payload or payload in (".", "..")):
            raise ValueError("bad payload")
        entry_id = str(d.get("entry_id") or guess)
        where = os.path.join(qpath, payload) if payload else qpath
        present = os.path.lexists(where)
        return Record(name, qpath, entry_id, str(d.get("original_path") or os.path.join(root, entry_id)),
                      root, str(d.get("reason") or "unknown"), tuple(str(x) for x in d.get("details") or ()),
                      float(d.get("quarantined_at") or 0), str(d.get("by") or ""), d.get("fingerprint"),
                      int(d.get("pid") or 0), size_of(where) if present else 0, payload=payload,
                      kind=d.get("kind"), present=present)
    except (OSError, ValueError, TypeError, AttributeError):
        try:
            mtime = os.lstat(qpath).st_mtime
            held = [n for n in os.listdir(qpath) if n != RECORD and not n.startswith(".jitwarden-q.")]
        except OSError:
            mtime, held = 0.0, []
        return Record(name, qpath, guess, os.path.join(root, guess), root, "unknown", (), mtime, bytes=size_of(qpath),
                      present=bool(held))


def list_root(root: str, *, include_empty: bool = False) -> list[Record]:
    """Quarantined entries of one cache root (or partition), oldest first.

    Slots left empty by an interrupted move are skipped unless ``include_empty``.
    """
    qdir = quarantine_dir(root)
    try:
        with os.scandir(qdir) as it:
            names = sorted(e.name for e in it if e.is_dir(follow_symlinks=False) and not e.name.startswith("."))
    except OSError:
        return []
    recs = (read(os.path.join(qdir, n)) for n in names)
    return sorted((r for r in recs if r.present or include_empty), key=lambda r: (r.quarantined_at, r.id))


# ---------------------------------------------------------------- restoring and deleting


def _parent_inside(root: str, path: str) -> bool:
    """``path``'s parent is ``root`` or a real directory below it (no symlinked component)."""
    parent = os.path.dirname(os.path.normpath(path))
    rel = os.path.relpath(parent, root)
    if rel == os.curdir:
        return True
    if rel.startswith(os.pardir):
        return False
    return os.path.realpath(parent) == os.path.join(os.path.realpath(root), rel)


def restore(rec: Record, *, replace: bool = False, now: float | None = None) -> Record | None:
    """Rename a quarantined entry back to where it came from, exactly as it was.

    When a new entry lives there now (Triton rebuilt it), refuse unless ``replace``;
    then the new one is quarantined first, and its record returned.
    """
    if not rec.present or not os.path.lexists(rec.payload_path):
        raise QuarantineError(f"{rec.id} holds no entry (an interrupted move); `jitwarden quarantine empty` removes it")
    target = rec.original_path
    if os.path.lexists(target) and not replace:
        raise QuarantineError(f"{target} exists (rebuilt since); pass --replace to swap it out")
    displaced = None
    if os.path.lexists(target):
        displaced = move(target, "replaced", [f"displaced by restoring {rec.id}"], root=rec.root,
                         entry_id=rec.entry_id, kind=rec.kind, by="restore", now=now)
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        if not _parent_inside(rec.root, parent + os.sep + "x"):
            raise QuarantineError(f"cannot restore {rec.id}: {parent} is not a directory inside {rec.root}")
        os.makedirs(parent, exist_ok=True)
    if not _parent_inside(rec.root, target):
        raise QuarantineError(f"cannot restore {rec.id}: a parent of {target} is a symlink; not followed")
    if rec.payload is None:  # schema 1: the slot is the entry, with the record inside
        try:
            os.unlink(os.path.join(rec.path, RECORD))
        except OSError:
            pass
    try:
        rename_noreplace(rec.payload_path, target)
    except FileExistsError:
        raise QuarantineError(f"{target} was taken while restoring {rec.id}; nothing changed") from None
    except OSError as exc:
        raise QuarantineError(f"cannot restore {rec.id}: {exc.strerror}") from None
    if rec.payload is not None:
        _drop_slot(rec.path)
    return displaced


def _rmtree(path: str) -> None:
    """Delete ``path`` (inside the trash) without recursion and without following a symlink.

    Each subdirectory is first renamed up beside ``path`` in the trash, then emptied on its
    own: any depth (a 10,000-deep chain) takes no stack, no long paths and one fd at a time.
    A directory we may not enter or change is made so first (it is ours, and going).
    """
    trash = os.path.dirname(path)
    work = [path]
    n = 0
    while work:
        p = work.pop()
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(p)
            continue
        if st.st_mode & 0o700 != 0o700:
            os.chmod(p, st.st_mode | 0o700)
        fd = os.open(p, _DIR_FLAGS)
        try:
            with os.scandir(fd) as it:
                names = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
            for name, is_dir in names:  # noqa: B007
                if is_dir:
                    n += 1
                    flat = f"{os.path.basename(path)}.d{n}"
                    try:
                        os.rename(name, os.path.join(trash, flat), src_dir_fd=fd)
                    except PermissionError:  # moving a dir needs write access to it (its "..")
                        os.chmod(name, 0o700, dir_fd=fd)
                        os.rename(name, os.path.join(trash, flat), src_dir_fd=fd)
                    work.append(os.path.join(trash, flat))
                else:
                    os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)
        os.rmdir(p)


def purge(rec: Record) -> None:
    """Delete one quarantined entry for good (only on request): rename into the trash, then remove there."""
    if os.path.islink(rec.path) or os.path.basename(os.path.dirname(rec.path)) != QUARANTINE_DIR:
        raise QuarantineError(f"refusing to delete {rec.path}: not a quarantined directory")
    trash = os.path.join(rec.root, TRASH_DIR)
    os.makedirs(trash, exist_ok=True)
    dest = os.path.join(trash, f"{rec.id}.{os.getpid()}.{time.monotonic_ns()}")
    os.rename(rec.path, dest)
    _rmtree(dest)
    for d in (trash, os.path.dirname(rec.path)):  # leave no empty dirs behind
        try:
            os.rmdir(d)
        except OSError:
            pass


def drop_empty_slot(rec: Record) -> None:
    """Remove a slot an interrupted move left without its entry."""
    if rec.present:
        raise QuarantineError(f"{rec.id} holds an entry")
    _drop_slot(rec.path)


def finish_trash(root: str) -> int:
    """Finish deletions a killed purge left in ``<root>/.jitwarden-trash``; returns how many."""
    trash = os.path.join(root, TRASH_DIR)
    try:
        names = os.listdir(trash)
    except OSError:
        return 0
    for n in names:
        _rmtree(os.path.join(trash, n))
    try:
        os.rmdir(trash)
    except OSError:
        pass
    return len(names)
