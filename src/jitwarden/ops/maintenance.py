"""Carry out a clean or prune plan: the thin disk layer, in a documented safe order.

For each action, with the root's lock already held by the caller:

1. re-check: the entry still exists; no parent between root and entry is a symlink
   (a symlinked *entry* is fine: it is moved as a link, its target never touched);
   no ``tmp.pid_*`` inside is younger than the orphan age (a live writer);
2. one atomic, no-replace ``rename`` into ``<root>/jitwarden-quarantine/`` with its record;
3. only with ``purge``: delete the slot (itself renamed into the trash first).

A kill at any moment leaves each entry wholly in place or wholly in quarantine.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass

from jitwarden.model.asjson import fields_json
from jitwarden.model.layout import (
    ENTRY_LOCK_FILE,
    ROOT_LOCK_FILE,
    SEAL_FILE,
    TRASH_DIR,
    is_write_leftover,
)
from jitwarden.model.settings import ORPHAN_AGE
from jitwarden.store import quarantine as q
from jitwarden.store import treesize

# Plans (jitwarden.ops.plans) import this module to carry themselves out; nothing here imports them:
# an action is read by its fields (path, root, id, kind, reasons, details, scope), a prune by its partition.


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one action: quarantined, deleted or skipped (and why)."""

    path: str
    id: str
    status: str  # quarantined | deleted | relocated | skipped
    why: str = ""
    quarantine_id: str | None = None
    bytes: int = 0

    def to_json(self) -> dict:
        return fields_json(self)


def escapes(root: str, path: str) -> str | None:
    """Why ``path`` may not be acted on as an entry of ``root``, or None (a symlinked parent, outside the root)."""
    rel = os.path.relpath(os.path.normpath(path), os.path.normpath(root))
    if (
        rel == os.curdir
        or rel == os.pardir
        or rel.startswith(os.pardir + os.sep)
        or os.path.isabs(rel)
    ):
        return "not inside its cache root"
    parent = os.path.dirname(rel)
    if parent and os.path.realpath(os.path.join(root, parent)) != os.path.join(
        os.path.realpath(root), parent
    ):
        return "a directory between the root and the entry is a symlink; not followed"
    return None


def leftovers(
    path: str, now: float, orphan_age: float
) -> tuple[list[str], list[tuple[str, float]]]:
    """(old, fresh) write leftovers directly inside an entry directory: names, and (name, age) of fresh ones."""
    old, fresh = [], []
    try:
        with os.scandir(path) as it:
            for e in it:
                if not is_write_leftover(e.name):
                    continue
                try:
                    age = now - e.stat(follow_symlinks=False).st_mtime
                except OSError:
                    continue
                (old.append(e.name) if age >= orphan_age else fresh.append((e.name, age)))
    except OSError:
        pass
    return old, fresh


def check(root: str, path: str, now: float, orphan_age: float) -> str | None:
    """Why the entry ``path`` of ``root`` must be skipped now, or None to go ahead (reads only)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "gone since the scan"
    except OSError as exc:
        return f"cannot stat: {exc.strerror}"
    why = escapes(root, path)
    if why:
        return why
    if stat.S_ISDIR(st.st_mode):
        _old, fresh = leftovers(path, now, orphan_age)
        if fresh:
            name, age = fresh[0]
            return f"being written by a live process ({name}, {age:.0f}s old)"
    return None


def clean(
    actions,
    *,
    purge: bool = False,
    orphan_age: float = ORPHAN_AGE.default,
    by: str = "clean",
    fingerprint: str | None = None,
    batch: str | None = None,
) -> list[Outcome]:
    """Carry out clean actions (:class:`jitwarden.ops.plans.Action`) in order; the caller holds the lock
    of every root involved. ``batch``: the run's id, recorded with each entry it quarantines."""
    if (
        not 0.0 <= orphan_age < float("inf")
    ):  # a negative or NaN age makes a live writer's files look old
        raise ValueError(f"orphan age must be a finite number of seconds >= 0, not {orphan_age!r}")
    outcomes = []
    for a in actions:
        now = time.time()
        why = check(a.root, a.path, now, orphan_age)
        if why:
            done = [Outcome(a.path, a.id, "skipped", why)]
        else:
            done = [
                _move(
                    path, a.root, eid, a.kind, _reason(a), a.details, purge, by, fingerprint, batch
                )
                for path, eid in _targets(a, now, orphan_age)
            ] or [
                Outcome(
                    a.path, a.id, "skipped", "no write leftovers older than the orphan age any more"
                )
            ]
        outcomes += done
    return outcomes


def _targets(a, now: float, orphan_age: float) -> list[tuple[str, str]]:
    """(path, entry id) of what clean action ``a`` moves: its entry, or the write leftovers in it past the orphan
    age (none left: empty)."""
    if a.scope == "leftovers":
        old, _fresh = leftovers(a.path, now, orphan_age)
        return [(os.path.join(a.path, n), f"{a.id}/{n}") for n in old]
    return [(a.path, a.id)]


def _reason(a) -> str:
    return a.reasons[0] if a.reasons else "clean"


def _move(
    path: str,
    root: str,
    entry_id: str,
    kind: str,
    reason: str,
    details,
    purge: bool,
    by: str,
    fingerprint: str | None,
    batch: str | None = None,
) -> Outcome:
    """Quarantine ``path`` (and with ``purge`` delete it); what happened."""
    try:
        rec = q.move(
            path,
            reason,
            details,
            root=root,
            entry_id=entry_id,
            kind=kind,
            by=by,
            fingerprint=fingerprint,
            batch=batch,
        )
    except FileNotFoundError:
        return Outcome(path, entry_id, "skipped", "gone since the scan")
    except (OSError, q.QuarantineError) as exc:
        return Outcome(path, entry_id, "skipped", _why(exc))
    if not purge:
        return Outcome(path, entry_id, "quarantined", "", rec.id, rec.bytes)
    try:
        q.purge(rec)
    except (OSError, q.QuarantineError) as exc:
        return Outcome(
            path, entry_id, "quarantined", f"not deleted: {_why(exc)}", rec.id, rec.bytes
        )
    return Outcome(path, entry_id, "deleted", "", rec.id, rec.bytes)


def _why(exc: Exception) -> str:
    if isinstance(exc, OSError):
        return (exc.strerror or str(exc)).lower()
    return str(exc)


# ---------------------------------------------------------------- relocate

_GROUP_MAX = 1 << 20


def relocate(actions, *, batch: str | None = None, orphan_age: float = 3600.0) -> list[Outcome]:
    """Point each moved Triton entry's group files at its own files (:class:`jitwarden.ops.plans.RelocateAction`);
    the caller holds the roots' locks and has proven the kernels.

    Per group file that changes: the old one is quarantined first (reason ``moved``, the run's ``batch``), then
    the new one is written atomically in the entry's directory, reached by fd from the root without following
    a link; the entry's seal, which covers the old group files, is quarantined before them (the entry is then
    unsealed: the guard proves and seals it on first use). A kill between two steps leaves an entry without
    its seal or group, which is a proof or a miss; ``quarantine restore --batch ID --replace`` puts them back.
    """
    from jitwarden.adapters import triton as tri
    from jitwarden.store import paths

    outcomes = []
    for a in actions:
        why = check(a.root, a.path, time.time(), orphan_age)
        if why:
            outcomes.append(Outcome(a.path, a.id, "skipped", why))
            continue
        try:
            root_fd = paths.open_dir(a.root)
            try:
                entry_fd = paths.open_beneath(root_fd, a.id)
            finally:
                os.close(root_fd)
        except OSError as exc:
            outcomes.append(Outcome(a.path, a.id, "skipped", _why(exc)))
            continue
        try:
            outcomes.append(_relocate_entry(a, entry_fd, tri.relocated_group, batch))
        finally:
            os.close(entry_fd)
    return outcomes


def _relocate_entry(a, entry_fd: int, relocated_group, batch: str | None) -> Outcome:
    from jitwarden.store import atomic

    names = os.listdir(entry_fd)
    present = {n for n in names if _regular(n, entry_fd)}
    groups = _relocated_groups(a, entry_fd, present, relocated_group)
    if isinstance(groups, Outcome):
        return groups
    if not groups:
        return Outcome(a.path, a.id, "skipped", "its group files point at its own files already")
    # A seal covers the group files as they were: it goes aside first, so the entry is unsealed (never sealed
    # over bytes nobody checked), and the guard proves and seals it again on its first use.
    aside = ([SEAL_FILE] if SEAL_FILE in present else []) + list(groups)
    qid, moved = None, 0
    for name in aside:
        try:
            rec = q.move(
                os.path.join(a.path, name),
                "moved",
                a.details,
                root=a.root,
                entry_id=f"{a.id}/{name}",
                kind=a.kind,
                by="relocate",
                batch=batch,
            )
            if name in groups:
                atomic.write_json_atomic(name, groups[name], ".jitwarden-group.", dir_fd=entry_fd)
        except (OSError, q.QuarantineError) as exc:
            return Outcome(a.path, a.id, "skipped", _why(exc), qid, moved)
        qid = qid or rec.id
        moved += rec.bytes
    return Outcome(a.path, a.id, "relocated", "", qid, moved)


def _relocated_groups(a, entry_fd: int, present: set[str], relocated_group) -> dict | Outcome:
    """{group file: its new content} of each group file of the entry that points elsewhere; the ``skipped``
    outcome, saying why, when one cannot be read or does not fit the entry (nothing of it is written)."""
    from jitwarden.store import reads

    groups = {}
    for name in sorted(n for n in present if n.startswith("__grp__") and n.endswith(".json")):
        try:
            doc = reads.read_json(name, dir_fd=entry_fd, max_bytes=_GROUP_MAX)
        except (OSError, ValueError) as exc:
            return Outcome(a.path, a.id, "skipped", f"{name}: {_why(exc)}")
        try:
            new = relocated_group(doc, a.path, present)
        except ValueError as exc:  # adapters.triton.ChildMismatch: nothing of the entry is written
            return Outcome(a.path, a.id, "skipped", f"{name}: {exc}")
        if new is not None:
            groups[name] = new
    return groups


def _regular(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


# ---------------------------------------------------------------- prune


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionFacts:
    """One fingerprint partition as found on disk (what :func:`jitwarden.ops.plans.plan_prune` decides from)."""

    base: str
    path: str
    digest: str
    last_used: float
    bytes: int
    current: bool
    newest: float = 0.0  # newest mtime inside: a write in progress shows here

    def to_json(self) -> dict:
        return fields_json(self, omit=("newest",))


def partition_facts(
    base: str, path: str, digest: str, last_used: float | None, current: str | None
) -> PartitionFacts:
    """Facts of one partition dir for :func:`jitwarden.ops.plans.plan_prune` (walks it, never following links)."""
    total, newest = treesize.tree_stats(
        path, skip=frozenset({ROOT_LOCK_FILE, ENTRY_LOCK_FILE})
    )  # our own locks are no use
    if not last_used:
        try:
            last_used = os.lstat(path).st_mtime
        except OSError:
            last_used = 0.0
    return PartitionFacts(
        base=base,
        path=path,
        digest=digest,
        last_used=float(last_used),
        bytes=total,
        current=digest == current,
        newest=newest,
    )


def prune(
    actions, *, current: str | None, keep_quarantined: bool = False, batch: str | None = None
) -> list[Outcome]:
    """Remove whole partitions (:class:`jitwarden.ops.plans.PruneAction`): each renamed into its base's
    quarantine, then deleted (unless kept)."""
    from jitwarden.model.layout import PARTITIONS_DIR

    outcomes = []
    for a in actions:
        p = a.partition
        if p.digest == current:  # the planner never asks; this is the last line of defence
            o = Outcome(p.path, p.digest, "skipped", "this environment's partition")
        else:
            try:
                st = os.lstat(p.path)
                bad = None if stat.S_ISDIR(st.st_mode) else "not a directory"
            except FileNotFoundError:
                bad = "gone since the scan"
            if bad:
                o = Outcome(p.path, p.digest, "skipped", bad)
            else:
                o = _move(
                    p.path,
                    p.base,
                    f"{PARTITIONS_DIR}/{p.digest}",
                    "partition",
                    "pruned",
                    (a.why,),
                    not keep_quarantined,
                    "prune",
                    p.digest,
                    batch,
                )
        outcomes.append(o)
    return outcomes


_TRASH_WALK_MAX = 100_000


def leftover_trash(paths) -> list[tuple[str, int, int]]:
    """(root, bytes, files) for each root whose ``.jitwarden-trash`` still holds what a killed deletion left.

    Never follows a symlink (a trash that is not a real directory is not counted); stops
    counting after a bounded number of files.
    """
    found = []
    for root in dict.fromkeys(paths):
        trash = os.path.join(root, TRASH_DIR)
        try:
            if not stat.S_ISDIR(os.lstat(trash).st_mode):
                continue
        except OSError:
            continue
        size = files = seen = 0
        for d, dirs, names in os.walk(trash, followlinks=False):
            for n in names + dirs:
                seen += 1
                try:
                    st = os.lstat(os.path.join(d, n))
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    size += st.st_size
                    files += 1
            if seen > _TRASH_WALK_MAX:
                break
        if seen:
            found.append((root, size, files))
    return found
