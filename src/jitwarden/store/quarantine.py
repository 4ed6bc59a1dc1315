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
would find it. Nothing here follows a symlink: every change is made relative to a
directory fd opened from the root one component at a time (O_NOFOLLOW), and the
quarantine and trash directories must be what jitwarden made (:class:`UnsafeName`
otherwise), so nothing planted in a root can send a move or a delete outside it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from jitwarden.model.asjson import fields_json
from jitwarden.model.errors import ExitStatus, JitwardenError
from jitwarden.model.layout import QUARANTINE_DIR, TRASH_DIR
from jitwarden.store.paths import O_DIR_NOFOLLOW, inside, open_beneath, open_dir, reserved_dir
from jitwarden.store.reads import read_json
from jitwarden.store.removal import rmtree_trash
from jitwarden.store.treesize import size_of

RECORD = ".jitwarden-quarantine.json"
SCHEMA = 2


class QuarantineError(JitwardenError):
    """A quarantine or restore that cannot be done as asked (message for the user)."""

    exit_code = ExitStatus.USAGE


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
    extra: dict[str, Any] = field(default_factory=dict)
    payload: str | None = (
        None  # the entry's name inside the slot (schema 2); None: the slot is the entry (schema 1)
    )
    kind: str | None = None  # cache kind of the entry (triton, inductor, ...)
    present: bool = True  # False: an interrupted move left the slot without its entry
    batch: str | None = (
        None  # the run that moved it (``clean``, ``prune``, ``relocate``): restored together
    )

    @property
    def payload_path(self) -> str:
        """Where the quarantined entry itself is."""
        return os.path.join(self.path, self.payload) if self.payload else self.path

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **fields_json(self, omit=("extra",))}


def quarantine_dir(root: str) -> str:
    return os.path.join(root, QUARANTINE_DIR)


def stamp(now: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))


def new_batch(verb: str, now: float | None = None) -> str:
    """A new batch id for one run that quarantines (``clean-20261204T221500Z-3fa2c1``): every entry it moves
    records it, and ``quarantine restore --batch ID`` puts them all back, in every root."""
    import secrets

    return f"{verb}-{stamp(time.time() if now is None else now)}-{secrets.token_hex(3)}"


def flatten(entry_id: str) -> str:
    """One path component for an entry id: ``fxgraph/ab/KEY`` → ``fxgraph%ab%KEY`` (pure)."""
    return entry_id.replace("%", "%25").replace(os.sep, "%")


# ---------------------------------------------------------------- renames that never replace

_RENAME_NOREPLACE = 1
_renameat2: Any = None  # renameat2 from libc once looked up; False where there is none


def _libc_renameat2() -> Any:
    global _renameat2
    if _renameat2 is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.renameat2
            fn.argtypes = (
                ctypes.c_int,
                ctypes.c_char_p,
                ctypes.c_int,
                ctypes.c_char_p,
                ctypes.c_uint,
            )
            _renameat2 = fn
        except (OSError, AttributeError):
            _renameat2 = False
    return _renameat2


def rename_noreplace(
    src: str, dst: str, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
) -> None:
    """``rename(src, dst)`` that fails with FileExistsError instead of replacing ``dst``.

    Plain ``rename`` silently replaces a file or an empty directory; restore must not.
    Uses ``renameat2(RENAME_NOREPLACE)``; where the kernel or filesystem lacks it, checks first.
    Names are relative to the given directory fds, as with ``os.rename``.
    """
    fn = _libc_renameat2()
    AT_FDCWD = -100
    if fn:
        if (
            fn(
                AT_FDCWD if src_dir_fd is None else src_dir_fd,
                os.fsencode(src),
                AT_FDCWD if dst_dir_fd is None else dst_dir_fd,
                os.fsencode(dst),
                _RENAME_NOREPLACE,
            )
            == 0
        ):
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), src, None, dst)
    try:
        os.stat(dst, dir_fd=dst_dir_fd, follow_symlinks=False)
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
    except FileNotFoundError:
        pass
    os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


# ---------------------------------------------------------------- moving aside


def move(
    entry_path: str,
    reason: str,
    details: Iterable[str] = (),
    *,
    root: str | None = None,
    entry_id: str | None = None,
    kind: str | None = None,
    by: str = "jitwarden",
    fingerprint: str | None = None,
    now: float | None = None,
    origin: str | None = None,
    batch: str | None = None,
) -> Record:
    """Rename ``entry_path`` (a directory, file or symlink) into ``root``'s quarantine; returns its record.

    ``root`` defaults to the entry's parent (the guard's Triton entries). ``origin``: where the entry
    belongs when it was moved aside before (a background proof): the record names it, restore puts it there.
    ``batch``: the run that moves it (:func:`new_batch`), so ``quarantine restore --batch`` undoes the run. Raises
    FileNotFoundError when the entry is already gone (someone else moved it), OSError
    (ELOOP, ENOTDIR) when a directory between the root and the entry is a symlink, and
    :class:`UnsafeName` when the root's quarantine directory is not what jitwarden made.
    """
    now = time.time() if now is None else now
    entry_path = os.path.normpath(entry_path)
    if root is None:
        root = os.path.dirname(entry_path)
    root = os.path.normpath(root)
    rel = inside(root, entry_path)
    if rel is None:
        raise QuarantineError(f"{entry_path} is not inside {root}")
    entry_id = entry_id or rel
    if not _safe_rel(entry_id):
        raise QuarantineError(f"{entry_id!r} is not an entry id inside {root}")
    root_fd = open_dir(root)
    fds = [root_fd]
    try:
        parent_fd = open_beneath(root_fd, os.path.dirname(rel))
        fds.append(parent_fd)
        payload = os.path.basename(rel)
        os.stat(payload, dir_fd=parent_fd, follow_symlinks=False)  # FileNotFoundError when gone
        qfd = reserved_dir(root_fd, QUARANTINE_DIR, create=True)
        assert qfd is not None  # create=True
        fds.append(qfd)
        base = f"{stamp(now)}-{flatten(entry_id)}"[:240]
        for n in range(1000):
            name = base if n == 0 else f"{base}-{n}"
            try:
                os.mkdir(name, 0o755, dir_fd=qfd)
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover - a thousand quarantines of one entry in one second
            raise QuarantineError(f"no free quarantine name for {entry_id}")
        slot = os.path.join(root, QUARANTINE_DIR, name)
        rec = Record(
            name,
            slot,
            entry_id,
            os.path.normpath(origin) if origin else entry_path,
            root,
            reason,
            tuple(details),
            now,
            by,
            fingerprint,
            os.getpid(),
            size_of(payload, parent_fd),
            payload=payload,
            kind=kind,
            batch=batch,
        )
        try:
            slot_fd = os.open(name, O_DIR_NOFOLLOW, dir_fd=qfd)
            fds.append(slot_fd)
            _write_record(slot_fd, rec)
            rename_noreplace(payload, payload, src_dir_fd=parent_fd, dst_dir_fd=slot_fd)
        except BaseException:
            _drop_slot(qfd, name)
            raise
    finally:
        for fd in reversed(fds):
            os.close(fd)
    from jitwarden.store import qregistry

    qregistry.remember(
        root
    )  # so `jitwarden quarantine ls` finds this root without --root (never raises)
    return rec


def _safe_rel(rel: str) -> bool:
    """``rel`` names a place strictly inside a root: relative, normalised, no ``..`` (pure)."""
    return (
        isinstance(rel, str)
        and bool(rel)
        and not os.path.isabs(rel)
        and os.path.normpath(rel) == rel
        and os.pardir not in rel.split(os.sep)
        and "\0" not in rel
    )


def _drop_slot(qfd: int, name: str) -> None:
    """Remove a slot that holds only its record (an undone or interrupted move)."""
    try:
        fd = os.open(name, O_DIR_NOFOLLOW, dir_fd=qfd)
    except OSError:
        return
    try:
        for n in os.listdir(fd):
            if n == RECORD or n.startswith(".jitwarden-q."):
                try:
                    os.unlink(n, dir_fd=fd)
                except OSError:
                    pass
    finally:
        os.close(fd)
    _rmdir_empty(qfd, name)


def _rmdir_empty(dir_fd: int, *names: str) -> None:
    """Remove each of ``names`` in ``dir_fd`` that is an empty directory; leave what is not (full, gone, a file)."""
    for name in names:
        try:
            os.rmdir(name, dir_fd=dir_fd)
        except OSError:
            pass


def _write_record(slot_fd: int, rec: Record) -> None:
    from jitwarden.store.atomic import write_json_atomic

    write_json_atomic(RECORD, rec.to_json(), ".jitwarden-q.", dir_fd=slot_fd)


# ---------------------------------------------------------------- reading


def read(qpath: str, qfd: int | None = None) -> Record:
    """The record of one slot; an 'unknown' record when its file is missing, damaged or forged.

    ``qfd``: an fd of the quarantine dir holding the slot (else opened by path, never through
    a symlink). A record naming a place outside the root is not believed: restore then puts
    the entry where its id says, inside the root.
    """
    qpath = os.path.normpath(qpath)
    qdir, name = os.path.split(qpath)
    root = os.path.dirname(qdir)
    guess = name.split("-", 1)[1] if "-" in name else name
    guess = guess.split("-", 1)[0]
    own_fd = qfd is None
    try:
        fd = os.open(qdir, O_DIR_NOFOLLOW) if qfd is None else qfd
    except OSError:
        return Record(
            name, qpath, guess, os.path.join(root, guess), root, "unknown", (), 0.0, present=False
        )
    try:
        return _read(fd, qpath, name, root, guess)
    finally:
        if own_fd:
            os.close(fd)


def _read(qfd: int, qpath: str, name: str, root: str, guess: str) -> Record:
    try:
        slot_fd = os.open(name, O_DIR_NOFOLLOW, dir_fd=qfd)
    except OSError:
        return Record(
            name, qpath, guess, os.path.join(root, guess), root, "unknown", (), 0.0, present=False
        )
    try:
        try:
            d = read_json(RECORD, dir_fd=slot_fd, max_bytes=1 << 20)
            return _recorded(d, qfd, slot_fd, qpath, name, root, guess)
        except (OSError, ValueError, TypeError, AttributeError, OverflowError):
            return _unrecorded(qfd, slot_fd, qpath, name, root, guess)
    finally:
        os.close(slot_fd)


def _recorded(
    d: object, qfd: int, slot_fd: int, qpath: str, name: str, root: str, guess: str
) -> Record:
    """The :class:`Record` a slot's record ``d`` says; ValueError (or another of :func:`_read`'s) when it
    is none a slot could hold: a payload that is no plain name, an entry id outside the root."""
    if not isinstance(d, dict):
        raise ValueError("not an object")
    payload = _payload(d)
    entry_id = d.get("entry_id") or guess
    if not _safe_rel(entry_id):
        raise ValueError("entry id outside the root")
    original = _original(d, root, entry_id)
    present = _lexists(payload, slot_fd) if payload else True
    if payload:
        size = size_of(payload, slot_fd) if present else 0
    else:
        size = size_of(name, qfd)
    return Record(
        name,
        qpath,
        entry_id,
        os.path.normpath(original),
        root,
        str(d.get("reason") or "unknown"),
        tuple(str(x) for x in d.get("details") or ()),
        float(d.get("quarantined_at") or 0),
        str(d.get("by") or ""),
        _str_or_none(d.get("fingerprint")),
        int(d.get("pid") or 0),
        size,
        payload=payload,
        kind=_str_or_none(d.get("kind")),
        present=present,
        batch=_str_or_none(d.get("batch")),
    )


def _payload(d: dict[str, Any]) -> str | None:
    """A record's ``payload`` (the entry's name inside its slot), None for none; ValueError when it is no
    plain name."""
    payload = d.get("payload") or None
    if payload is not None and (
        not isinstance(payload, str) or os.sep in payload or payload in (".", "..")
    ):
        raise ValueError("bad payload")
    return payload


def _original(d: dict[str, Any], root: str, entry_id: str) -> str:
    """Where a record says its entry came from, inside ``root``: a record never sends an entry outside
    its root (then the entry id's place in it)."""
    original = d.get("original_path")
    if not isinstance(original, str) or not _safe_rel(inside(root, original) or ""):
        return os.path.join(root, entry_id)
    return original


def _unrecorded(qfd: int, slot_fd: int, qpath: str, name: str, root: str, guess: str) -> Record:
    """A slot whose record is missing or unreadable: what its name and contents tell (reason unknown)."""
    try:
        mtime = os.fstat(slot_fd).st_mtime
        held = [n for n in os.listdir(slot_fd) if n != RECORD and not n.startswith(".jitwarden-q.")]
    except OSError:
        mtime, held = 0.0, []
    return Record(
        name,
        qpath,
        guess,
        os.path.join(root, guess),
        root,
        "unknown",
        (),
        mtime,
        bytes=size_of(name, qfd),
        present=bool(held),
    )


def _str_or_none(x: object) -> str | None:
    return x if isinstance(x, str) else None


def _lexists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except OSError:
        return False


def list_root(root: str, *, include_empty: bool = False) -> list[Record]:
    """Quarantined entries of one cache root (or partition), oldest first.

    Slots left empty by an interrupted move are skipped unless ``include_empty``.
    :class:`UnsafeName` when the root's quarantine dir is not what jitwarden made.
    """
    try:
        root_fd = open_dir(root)
    except OSError:
        return []
    try:
        qfd = reserved_dir(root_fd, QUARANTINE_DIR)
    finally:
        os.close(root_fd)
    if qfd is None:
        return []
    try:
        with os.scandir(qfd) as it:
            names = sorted(
                e.name for e in it if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
            )
        qdir = quarantine_dir(root)
        recs = [read(os.path.join(qdir, n), qfd) for n in names]
    except OSError:
        return []
    finally:
        os.close(qfd)
    return sorted(
        (r for r in recs if r.present or include_empty), key=lambda r: (r.quarantined_at, r.id)
    )


# ---------------------------------------------------------------- restoring and deleting


class _Root:
    """The fds restore and purge act through: the root, and its quarantine dir (checked)."""

    def __init__(self, root: str):
        self.fd = open_dir(root)
        try:
            qfd = reserved_dir(self.fd, QUARANTINE_DIR)
        except BaseException:
            os.close(self.fd)
            raise
        if qfd is None:
            os.close(self.fd)
            raise FileNotFoundError(errno.ENOENT, "no quarantine here", quarantine_dir(root))
        self.qfd = qfd

    def __enter__(self) -> _Root:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.qfd)
        os.close(self.fd)


def restore(rec: Record, *, replace: bool = False, now: float | None = None) -> Record | None:
    """Rename a quarantined entry back to where it came from, exactly as it was.

    When a new entry lives there now (Triton rebuilt it), refuse unless ``replace``;
    then the new one is quarantined first, and its record returned. Everything is checked
    before anything moves: the target is inside the root, reached without a symlink.
    """
    rel = inside(rec.root, rec.original_path)
    if rel is None or not _safe_rel(rel):
        raise QuarantineError(
            f"cannot restore {rec.id}: its record names {rec.original_path}, outside {rec.root}"
        )
    with _Root(rec.root) as r:
        try:
            slot_fd = os.open(rec.id, O_DIR_NOFOLLOW, dir_fd=r.qfd)
        except OSError as exc:
            raise QuarantineError(
                f"{rec.id} is not a quarantine slot here ({(exc.strerror or '').lower()})"
            ) from None
        try:
            src_fd, src = (slot_fd, rec.payload) if rec.payload else (r.qfd, rec.id)
            if not rec.present or not _lexists(src, src_fd):
                raise QuarantineError(
                    f"{rec.id} holds no entry (an interrupted move); "
                    "`jitwarden quarantine empty` removes it"
                )
            parent = os.path.dirname(rel)
            try:
                parent_fd = open_beneath(r.fd, parent, create=True)
            except OSError:
                raise QuarantineError(
                    f"cannot restore {rec.id}: a parent of {rec.original_path} is a symlink "
                    "or not a directory; not followed"
                ) from None
            try:
                displaced = _put_back(rec, rel, (src_fd, src), slot_fd, parent_fd, replace, now)
            finally:
                os.close(parent_fd)
        finally:
            os.close(slot_fd)
        if rec.payload is not None:
            _drop_slot(r.qfd, rec.id)
    return displaced


def _put_back(
    rec: Record,
    rel: str,
    source: tuple[int, str],
    slot_fd: int,
    parent_fd: int,
    replace: bool,
    now: float | None,
) -> Record | None:
    """Rename the quarantined entry (``source``: its directory fd and name) to its name in ``parent_fd``
    without replacing anything: what is there now quarantined first when ``replace`` (its record
    returned), else refused."""
    src_fd, src = source
    name = os.path.basename(rel)
    displaced = None
    if _lexists(name, parent_fd):
        if not replace:
            raise QuarantineError(
                f"{rec.original_path} exists (rebuilt since); pass --replace to swap it out"
            )
        displaced = move(
            os.path.join(rec.root, rel),
            "replaced",
            [f"displaced by restoring {rec.id}"],
            root=rec.root,
            entry_id=rec.entry_id,
            kind=rec.kind,
            by="restore",
            now=now,
        )
    if rec.payload is None:  # schema 1: the slot is the entry, with the record inside
        try:
            os.unlink(RECORD, dir_fd=slot_fd)
        except OSError:
            pass
    try:
        rename_noreplace(src, name, src_dir_fd=src_fd, dst_dir_fd=parent_fd)
    except FileExistsError:
        raise QuarantineError(
            f"{rec.original_path} was taken while restoring {rec.id}; nothing changed"
        ) from None
    except OSError as exc:
        raise QuarantineError(f"cannot restore {rec.id}: {exc.strerror}") from None
    return displaced


def purge(rec: Record) -> None:
    """Delete one quarantined entry for good (only on request): rename into the trash, then remove there."""
    if (
        os.path.basename(os.path.dirname(rec.path)) != QUARANTINE_DIR
        or os.sep in rec.id
        or rec.id in (".", "..")
    ):
        raise QuarantineError(f"refusing to delete {rec.path}: not a quarantined directory")
    with _Root(rec.root) as r:
        try:
            st = os.stat(rec.id, dir_fd=r.qfd, follow_symlinks=False)
        except FileNotFoundError:
            raise QuarantineError(f"{rec.id} is gone (removed by another process?)") from None
        if not stat.S_ISDIR(st.st_mode):
            raise QuarantineError(f"refusing to delete {rec.path}: not a quarantined directory")
        tfd = reserved_dir(r.fd, TRASH_DIR, create=True)
        assert tfd is not None  # create=True
        try:
            dest = f"{rec.id}.{os.getpid()}.{time.monotonic_ns()}"
            os.rename(rec.id, dest, src_dir_fd=r.qfd, dst_dir_fd=tfd)
            rmtree_trash(tfd, dest)
        finally:
            os.close(tfd)
        _rmdir_empty(r.fd, TRASH_DIR, QUARANTINE_DIR)  # leave no empty dirs behind


def drop_empty_slot(rec: Record) -> None:
    """Remove a slot an interrupted move left without its entry."""
    if rec.present:
        raise QuarantineError(f"{rec.id} holds an entry")
    with _Root(rec.root) as r:
        _drop_slot(r.qfd, rec.id)


def finish_trash(root: str) -> int:
    """Finish deletions a killed purge left in ``<root>/.jitwarden-trash``; returns how many.

    :class:`UnsafeName` when the trash is not what jitwarden made (a symlink out of the root).
    """
    root_fd = open_dir(root)
    try:
        tfd = reserved_dir(root_fd, TRASH_DIR)
        if tfd is None:
            return 0
        try:
            names = os.listdir(tfd)
            for n in names:
                rmtree_trash(tfd, n)
        finally:
            os.close(tfd)
        _rmdir_empty(root_fd, TRASH_DIR)
        return len(names)
    finally:
        os.close(root_fd)
