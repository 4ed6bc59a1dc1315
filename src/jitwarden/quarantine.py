"""Quarantine: move an entry aside by one atomic rename, restorably (stdlib only).

An entry ``<root>/<id>`` moves to ``<root>/jitwarden-quarantine/<UTC stamp>-<id>/``
(same directory tree, so the same filesystem and an atomic ``rename``), and a
small record ``.jitwarden-quarantine.json`` inside says why and where from.
Nothing is deleted here except by :func:`purge`, on request.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field

from .layout import QUARANTINE_DIR

RECORD = ".jitwarden-quarantine.json"
SCHEMA = 1


class QuarantineError(Exception):
    """A quarantine or restore that cannot be done as asked (message for the user)."""


@dataclass(frozen=True, slots=True)
class Record:
    """One quarantined entry: where it is now, where it came from, and why."""

    id: str  # the quarantine name: <stamp>-<entry id>[-n]
    path: str
    entry_id: str
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

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA, "id": self.id, "path": self.path, "entry_id": self.entry_id,
            "original_path": self.original_path, "root": self.root, "reason": self.reason,
            "details": list(self.details), "quarantined_at": self.quarantined_at, "by": self.by,
            "fingerprint": self.fingerprint, "pid": self.pid, "bytes": self.bytes,
        }


def quarantine_dir(root: str) -> str:
    return os.path.join(root, QUARANTINE_DIR)


def stamp(now: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))


def move(entry_path: str, reason: str, details=(), *, by: str = "jitwarden", fingerprint: str | None = None,
         now: float | None = None) -> Record:
    """Rename ``entry_path`` into its root's quarantine and write the record; returns it.

    Raises FileNotFoundError when the entry is already gone (someone else moved it).
    """
    now = time.time() if now is None else now
    entry_path = os.path.normpath(entry_path)
    root, entry_id = os.path.split(entry_path)
    qdir = quarantine_dir(root)
    os.makedirs(qdir, exist_ok=True)
    base = f"{stamp(now)}-{entry_id}"
    for n in range(1000):
        name = base if n == 0 else f"{base}-{n}"
        dest = os.path.join(qdir, name)
        if os.path.lexists(dest):
            continue
        try:
            os.rename(entry_path, dest)
            break
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                continue
            raise
    else:  # pragma: no cover - a thousand quarantines of one entry in one second
        raise QuarantineError(f"no free quarantine name for {entry_id}")
    rec = Record(name, dest, entry_id, entry_path, root, reason, tuple(details), now, by, fingerprint,
                 os.getpid(), _size(dest))
    try:
        _write_record(dest, rec)
    except OSError:
        pass  # the move is what matters; `list` shows it with an unknown reason
    return rec


def _size(path: str) -> int:
    total = 0
    try:
        with os.scandir(path) as it:
            for e in it:
                st = e.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
    except OSError:
        pass
    return total


def _write_record(dest: str, rec: Record) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".jitwarden-q.", suffix=".tmp", dir=dest)
    with os.fdopen(fd, "w") as f:
        json.dump(rec.to_json(), f, sort_keys=True, indent=1)
    os.replace(tmp, os.path.join(dest, RECORD))


def read(qpath: str) -> Record:
    """The record of one quarantined dir; an 'unknown' record when its file is missing or damaged."""
    qpath = os.path.normpath(qpath)
    qdir, name = os.path.split(qpath)
    root = os.path.dirname(qdir)
    entry_id = name.split("-", 1)[1] if "-" in name else name
    entry_id = entry_id.split("-", 1)[0]
    try:
        with open(os.path.join(qpath, RECORD), "rb") as f:
            d = json.loads(f.read())
        return Record(name, qpath, str(d.get("entry_id") or entry_id), str(d.get("original_path") or os.path.join(root, entry_id)),
                      root, str(d.get("reason") or "unknown"), tuple(d.get("details") or ()),
                      float(d.get("quarantined_at") or 0), str(d.get("by") or ""), d.get("fingerprint"),
                      int(d.get("pid") or 0), _size(qpath))
    except (OSError, ValueError, TypeError, AttributeError):
        try:
            mtime = os.lstat(qpath).st_mtime
        except OSError:
            mtime = 0.0
        return Record(name, qpath, entry_id, os.path.join(root, entry_id), root, "unknown", (), mtime, bytes=_size(qpath))


def list_root(root: str) -> list[Record]:
    """Quarantined entries of one cache root (or partition), oldest first."""
    qdir = quarantine_dir(root)
    try:
        names = sorted(e.name for e in os.scandir(qdir) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []
    return sorted((read(os.path.join(qdir, n)) for n in names), key=lambda r: (r.quarantined_at, r.id))


def restore(rec: Record, *, replace: bool = False, now: float | None = None) -> Record | None:
    """Rename a quarantined entry back to where it came from.

    When a new entry already lives there (Triton rebuilt it), refuse unless
    ``replace``; then the new one is quarantined first, and its record returned.
    """
    if os.path.lexists(rec.original_path) and not replace:
        raise QuarantineError(f"{rec.original_path} exists (rebuilt since); pass --replace to swap it out")
    displaced = None
    if os.path.lexists(rec.original_path):
        displaced = move(rec.original_path, "replaced", [f"displaced by restoring {rec.id}"], by="restore", now=now)
    try:
        os.unlink(os.path.join(rec.path, RECORD))
    except OSError:
        pass
    try:
        os.rename(rec.path, rec.original_path)
    except OSError as exc:
        raise QuarantineError(f"cannot restore {rec.id}: {exc.strerror}") from None
    return displaced


def purge(rec: Record) -> None:
    """Delete one quarantined entry for good (only on request); never follows a symlink."""
    if os.path.islink(rec.path) or os.path.basename(os.path.dirname(rec.path)) != QUARANTINE_DIR:
        raise QuarantineError(f"refusing to delete {rec.path}: not a quarantined directory")
    shutil.rmtree(rec.path)
