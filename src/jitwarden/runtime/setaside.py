"""The one runtime quarantine: set a damaged or unproven entry aside, under its writers lock, with one line.

The start-up sweep, the background prover, the torch hooks and the guard all quarantine through
:func:`set_aside` (ARCHITECTURE.md, "The runtime"): an entry directory is moved only while nobody
holds its writers lock (``ENTRY_WRITERS_FILE``: a writer mid-group is a plain miss, and that
writer's own seal settles the entry), and :func:`line` words what happened, the same way for all.
A leaf of the runtime; stdlib only, the quarantine store imported on first use.
"""

from __future__ import annotations

import fcntl
import os
import stat

from jitwarden.model.layout import ENTRY_WRITERS_FILE
from jitwarden.store.entrylock import lock, unlock

AT_STARTUP = (
    "found at start-up, it is rebuilt (or restored from Inductor's own bundle) when next used"
)
"""What follows a start-up quarantine (the sweep's and the background prover's)."""


def set_aside(
    path: str,
    code: str,
    details,
    *,
    by: str,
    root: str | None = None,
    entry_id: str | None = None,
    fingerprint: str | None = None,
    origin: str | None = None,
    kind: str | None = None,
):
    """Quarantine ``path`` (store.quarantine.move); its record, or None when a writer holds it or it is gone.

    A real directory (a cache entry) is moved under its writers lock, taken without waiting. A
    file (a pickle) or a symlink has no writers lock: it is one name, moved by one rename, under
    the lock its caller holds on the directory around it. OSError when the lock or the move fails.
    """
    from jitwarden.store import quarantine

    try:
        is_dir = stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return None
    wfd = lock(path, ENTRY_WRITERS_FILE, fcntl.LOCK_EX, block=False) if is_dir else None
    if is_dir and wfd is None:
        return None  # a writer is mid-entry: its own seal settles it
    try:
        return quarantine.move(
            path,
            code,
            details,
            root=root,
            entry_id=entry_id,
            by=by,
            fingerprint=fingerprint,
            origin=origin,
            kind=kind,
        )
    except FileNotFoundError:
        return None  # someone else moved it first
    finally:
        unlock(wfd)


#: How much of the evidence one runtime line carries; the record keeps all of it (``jitwarden quarantine ls``).
LINE_DETAILS = 120


def line(rec, what: str, code: str, details, then: str) -> str:
    """The one wording of a runtime quarantine: what was set aside, why, what happens next, how to undo it.
    Short: the evidence is cut at :data:`LINE_DETAILS` characters, between words (the record has it whole)."""
    why = "; ".join(details) or "-"
    if len(why) > LINE_DETAILS:
        cut = why.rfind(" ", 0, LINE_DETAILS)
        why = why[: cut if cut > 0 else LINE_DETAILS].rstrip(";,: ")
        why += " … (whole: `jitwarden quarantine ls`)"
    return (
        f"quarantined {what} {rec.entry_id} ({code}: {why}); {then}. "
        f"Restore with `jitwarden quarantine restore {rec.id}`"
    )
