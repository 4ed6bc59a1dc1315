"""Typed plans for every destructive command: decided by pure functions, carried out by ``execute()``.

``plan_clean`` (scan report + :class:`Selection` -> :class:`CleanPlan`), ``plan_relocate`` (scan report +
rebuild verdicts -> :class:`RelocatePlan`), ``plan_prune`` (partition
facts -> :class:`PrunePlan`), ``plan_restore`` and ``plan_empty`` (quarantine records ->
:class:`RestorePlan`, :class:`EmptyPlan`) read nothing but their arguments (``plan_restore`` only
asks whether a path is taken). Each plan is frozen, is what the CLI prints before asking, and its
``execute()`` takes the roots' locks and acts through :mod:`jitwarden.ops.maintenance` and the
quarantine, in the safe order ARCHITECTURE.md gives.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from jitwarden.model.asjson import fields_json
from jitwarden.model.errors import ExitStatus, JitwardenError
from jitwarden.model.findings import CODES, NEVER_CLEANED, Severity
from jitwarden.model.settings import ORPHAN_AGE
from jitwarden.model.text import human_duration, human_size
from jitwarden.ops import maintenance
from jitwarden.ops.maintenance import Outcome, PartitionFacts
from jitwarden.store import locks
from jitwarden.store import quarantine as q
from jitwarden.store.paths import UnsafeName

ERROR_CODES = frozenset(c for c, s in CODES.items() if s == Severity.ERROR) - NEVER_CLEANED


def _under_locks(
    plan,
    locked,
    lock_timeout: float | None,
    replan,
    *,
    act,
    why: str,
    path_of=lambda a: a.path,
    name_of=lambda path: "",
) -> list[Outcome]:
    """What every plan's ``execute()`` does: hold the locks of ``locked``, judge again there (``replan``, no
    arguments, a fresh plan; none: ``plan`` itself), ``act`` on the actions ``plan`` showed that are still
    chosen, and report each shown one no longer chosen as skipped, ``why``."""
    shown = {path_of(a) for a in plan.actions}
    with locks.hold(locked, lock_timeout):
        again = replan() if replan is not None else plan
        chosen = [a for a in again.actions if path_of(a) in shown]
        outcomes = act(chosen)
    left = shown - {path_of(a) for a in chosen}
    return outcomes + [Outcome(p, name_of(p), "skipped", why) for p in sorted(left)]


@dataclass(frozen=True, slots=True)
class Selection:
    """Which entries a clean takes: by finding code, age and kind (all given must hold)."""

    codes: frozenset[str] = ERROR_CODES  # empty: any entry (then older_than must be set)
    older_than: float | None = None  # seconds: only entries whose newest file is older
    kinds: frozenset[str] | None = None
    now: float = 0.0

    def describe(self) -> str:
        parts = []
        if self.codes:
            parts.append(
                "every error-level finding"
                if self.codes == ERROR_CODES
                else ", ".join(sorted(self.codes))
            )
        if self.older_than is not None:
            parts.append(f"older than {human_duration(self.older_than)}")
        if self.kinds:
            parts.append("kind " + ", ".join(sorted(self.kinds)))
        if not self.codes and self.older_than is None:
            parts.insert(0, "every entry")  # clean --all
        return "; ".join(parts) or "nothing"


def selection(
    codes=(),
    stale=False,
    foreign_arch=False,
    orphans=False,
    older_than=None,
    kinds=None,
    now: float = 0.0,
    every: bool = False,
) -> Selection:
    """The selection the clean options ask for: no code option and no age means every error; ``every``
    (``clean --all``): every entry, whatever its findings (pure)."""
    chosen = set(codes or ())
    chosen |= {"stale"} if stale else set()
    chosen |= {"foreign-arch"} if foreign_arch else set()
    chosen |= {"orphan"} if orphans else set()
    if every:
        return Selection(frozenset(), None, frozenset(kinds) if kinds else None, now)
    if not chosen and older_than is None:
        chosen = set(ERROR_CODES)
    return Selection(frozenset(chosen), older_than, frozenset(kinds) if kinds else None, now)


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """One thing to move aside: a whole entry, or only the stale write leftovers inside it."""

    kind: str
    root: str
    id: str
    path: str
    type: str
    bytes: int
    mtime: float
    reasons: tuple[str, ...]  # the finding codes (or "older-than") that selected it
    details: tuple[str, ...]  # the findings' messages
    scope: str = (
        "entry"  # entry | leftovers (tmp.pid_* older than the orphan age, inside a good entry)
    )

    def to_json(self) -> dict:
        return fields_json(self)


@dataclass(frozen=True, slots=True)
class CleanPlan:
    """Entries to move into quarantine, and why: decided by :func:`plan_clean`, carried out by :meth:`execute`."""

    actions: tuple[Action, ...]
    selection: Selection
    notes: tuple[
        str, ...
    ] = ()  # problems clean does not act on (unsafe roots), with what to do instead

    @property
    def bytes(self) -> int:
        return sum(a.bytes for a in self.actions if a.scope == "entry")

    @property
    def roots(self) -> list[str]:
        return sorted({a.root for a in self.actions})

    def by_reason(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.actions:
            for r in a.reasons:
                out[r] = out.get(r, 0) + 1
        return dict(sorted(out.items()))

    def to_json(self) -> dict:
        return {
            "selection": {
                "codes": sorted(self.selection.codes),
                "older_than_s": self.selection.older_than,
                "kinds": sorted(self.selection.kinds) if self.selection.kinds else None,
            },
            "actions": [a.to_json() for a in self.actions],
            "entries": len(self.actions),
            "bytes": self.bytes,
            "by_reason": self.by_reason(),
            "notes": list(self.notes),
        }

    def execute(
        self,
        *,
        purge: bool = False,
        orphan_age: float = ORPHAN_AGE.default,
        fingerprint: str | None = None,
        lock_timeout: float | None = None,
        replan=None,
        batch: str | None = None,
    ) -> list[Outcome]:
        """Carry the plan out under every root's lock (ARCHITECTURE.md, "The flow of one command").
        ``batch``: this run's id, recorded with every entry it quarantines (``quarantine restore --batch``).

        ``replan`` (no arguments, returns a fresh plan) judges again under the lock: only what
        this plan showed and is still selected is moved; the rest is reported as skipped.
        """
        return _under_locks(
            self,
            self.roots,
            lock_timeout,
            replan,
            act=lambda actions: maintenance.clean(
                actions, purge=purge, orphan_age=orphan_age, fingerprint=fingerprint, batch=batch
            ),
            why="no longer selected (changed since the plan)",
        )


def plan_clean(report, sel: Selection) -> CleanPlan:
    """The entries of ``report`` that ``sel`` takes, and why (pure).

    Only entries: a root with a problem of its own (world-writable, foreign-owned) is
    named in ``notes``, never changed. An entry whose only selected finding is
    ``orphan`` loses just its old write leftovers, unless it is itself a leftover
    (``partial``: files without a group, never loaded).
    """
    actions, notes = [], []
    for c in report.caches:
        for f in c.findings:
            notes.append(f"{c.root.path}: {f.code}: {f.message}; clean does not change cache roots")
        for e in c.entries:
            why = _selected(e, sel)
            if why is None:
                continue
            reasons, details = why
            scope = "entry"
            if reasons == ("orphan",) and e.type not in ("partial", "empty", "other"):
                scope = "leftovers"
            actions.append(
                Action(
                    kind=e.kind,
                    root=e.root,
                    id=e.id,
                    path=e.path,
                    type=e.type,
                    bytes=0 if scope == "leftovers" else e.bytes,
                    mtime=e.mtime,
                    reasons=reasons,
                    details=details,
                    scope=scope,
                )
            )
    return CleanPlan(tuple(actions), sel, tuple(notes))


def _selected(e, sel: Selection) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(reasons, details) when ``sel`` takes entry ``e``: its selected findings' codes and messages,
    ``all`` (``clean --all``) or its age; None when it does not (pure)."""
    if sel.kinds and e.kind not in sel.kinds:
        return None
    if sel.older_than is not None and not (e.mtime and sel.now - e.mtime > sel.older_than):
        return None
    if sel.codes:
        hits = [f for f in e.findings if f.code in sel.codes]
        if not hits:
            return None
        return tuple(dict.fromkeys(f.code for f in hits)), tuple(f.message for f in hits)
    if sel.older_than is None:  # clean --all
        return ("all",), ()
    return ("older-than",), (f"newest file {human_duration(sel.now - e.mtime)} old",)


# ---------------------------------------------------------------- relocate


@dataclass(frozen=True, slots=True)
class RelocateAction:
    """One moved Triton entry whose kernel a rebuild proved: its group files are pointed at its own files."""

    kind: str
    root: str
    id: str
    path: str
    bytes: int
    details: tuple[str, ...]  # the ``moved`` findings' messages

    def to_json(self) -> dict:
        return fields_json(self, omit=("bytes", "details"))


@dataclass(frozen=True, slots=True)
class RelocatePlan:
    """Moved entries to point at their own files (``actions``) and those left as they are, with why (``kept``):
    decided by :func:`plan_relocate` after a rebuild, carried out by :meth:`execute`."""

    actions: tuple[RelocateAction, ...]
    kept: tuple[tuple[str, str, str], ...]  # (path, id, why not relocated)

    @property
    def roots(self) -> list[str]:
        return sorted({a.root for a in self.actions})

    def execute(
        self,
        *,
        batch: str | None = None,
        orphan_age: float = 3600.0,
        lock_timeout: float | None = None,
        replan=None,
    ) -> list[Outcome]:
        """Rewrite under every root's lock; ``replan`` judges again there (only what was shown and still
        qualifies is changed). Each old group file goes into quarantine with ``batch`` before its new one is
        written."""
        return _under_locks(
            self,
            self.roots,
            lock_timeout,
            replan,
            act=lambda actions: maintenance.relocate(actions, batch=batch, orphan_age=orphan_age),
            why="no longer moved and proven (changed since the plan)",
        )


def plan_relocate(report, verdicts: dict[str, str]) -> RelocatePlan:
    """The Triton entries of ``report`` with a ``moved`` finding that can point at their own files (pure):
    those whose rebuild ``verdicts`` (entry path -> verdict) say ``verified`` and that have no error-level
    finding. Every other moved entry is kept, with why: nothing is relocated on trust."""
    actions, kept = [], []
    for e in report.entries:
        moved = tuple(f.message for f in e.findings if f.code == "moved")
        if e.kind != "triton" or not moved:
            continue
        errors = sorted({f.code for f in e.findings if f.severity == Severity.ERROR})
        verdict = verdicts.get(e.path)
        if errors:
            kept.append((e.path, e.id, f"has {', '.join(errors)}: `jitwarden clean` instead"))
        elif verdict != "verified":
            kept.append(
                (e.path, e.id, f"not proven by a rebuild ({verdict or 'nothing to rebuild'})")
            )
        else:
            actions.append(RelocateAction(e.kind, e.root, e.id, e.path, e.bytes, moved))
    return RelocatePlan(tuple(actions), tuple(kept))


# ---------------------------------------------------------------- prune


@dataclass(frozen=True, slots=True)
class PruneAction:
    partition: PartitionFacts
    why: str

    def to_json(self) -> dict:
        return {**self.partition.to_json(), "why": self.why}


@dataclass(frozen=True, slots=True)
class PrunePlan:
    """Whole partitions to remove, least recently used first: decided by :func:`plan_prune`."""

    actions: tuple[PruneAction, ...]
    current: str | None  # this environment's digest: never removed, whatever the plan says

    @property
    def bytes(self) -> int:
        return sum(a.partition.bytes for a in self.actions)

    def execute(
        self,
        *,
        keep_quarantined: bool = False,
        lock_timeout: float | None = None,
        replan=None,
        batch: str | None = None,
    ) -> list[Outcome]:
        """Remove the partitions under the locks of their bases and themselves; ``replan`` decides again there."""
        paths = {a.partition.path for a in self.actions}
        return _under_locks(
            self,
            {a.partition.base for a in self.actions} | paths,
            lock_timeout,
            replan,
            act=lambda chosen: maintenance.prune(
                chosen, current=self.current, keep_quarantined=keep_quarantined, batch=batch
            ),
            why="no longer chosen (used or changed since the plan)",
            path_of=lambda a: a.partition.path,
            name_of=os.path.basename,
        )


def plan_prune(
    parts: list[PartitionFacts],
    keep: int | None = None,
    max_size: int | None = None,
    older_than: float | None = None,
    now: float = 0.0,
    busy_age: float = 0.0,
    current: str | None = None,
) -> PrunePlan:
    """Whole partitions to remove, least recently used first; never the current one (pure).

    Per base: beyond the ``keep`` most recently used (the current one counts and always
    stays), unused for more than ``older_than`` seconds, then the least recently used
    until the rest fit in ``max_size`` bytes. A partition written to within ``busy_age``
    seconds is in use and kept.
    """
    out: list[PruneAction] = []
    bases: dict[str, list[PartitionFacts]] = {}
    for p in parts:
        bases.setdefault(p.base, []).append(p)
    for base in sorted(bases):
        ps = sorted(
            bases[base], key=lambda p: (not p.current, -p.last_used, p.digest)
        )  # current first, then MRU

        def busy(p: PartitionFacts) -> bool:
            return bool(busy_age and now - p.newest < busy_age)

        drop = _beyond_keep_or_age(ps, keep, older_than, now, busy)
        if max_size is not None:
            drop.update(_beyond_size(ps, drop, max_size, busy, base))
        out += [PruneAction(p, drop[p.path]) for p in reversed(ps) if p.path in drop]
    return PrunePlan(tuple(out), current)


def _beyond_keep_or_age(
    ps: list[PartitionFacts], keep: int | None, older_than: float | None, now: float, busy
) -> dict[str, str]:
    """path -> why, of the partitions of one base (most recently used first, the current one first) past
    the ``keep`` most recently used or unused for more than ``older_than`` seconds; never the current one
    nor a ``busy`` one (pure)."""
    drop: dict[str, str] = {}
    for i, p in enumerate(ps):
        if p.current or busy(p):
            continue
        if keep is not None and i >= keep:
            drop[p.path] = f"not among the {keep} most recently used"
        elif older_than is not None and now - p.last_used > older_than:
            drop[p.path] = f"unused for {human_duration(now - p.last_used)}"
    return drop


def _beyond_size(
    ps: list[PartitionFacts], drop: dict[str, str], max_size: int, busy, base: str
) -> dict[str, str]:
    """path -> why, of the least recently used partitions of one base not already in ``drop`` whose removal
    makes the rest fit in ``max_size`` bytes; never the current one nor a ``busy`` one (pure)."""
    more: dict[str, str] = {}
    total = sum(p.bytes for p in ps if p.path not in drop)
    for p in reversed(ps):  # least recently used first
        if total <= max_size:
            break
        if p.current or p.path in drop or busy(p):
            continue
        more[p.path] = f"partitions of {base} exceed {human_size(max_size)}"
        total -= p.bytes
    return more


# ---------------------------------------------------------------- quarantine restore / empty


class PlanError(JitwardenError):
    """An ``execute()`` stopped at its first failure: ``why``, after ``done`` records were carried out."""

    exit_code = ExitStatus.USAGE

    def __init__(self, why: str, done: int, record_id: str | None = None):
        super().__init__(why)
        self.why, self.done, self.record_id = why, done, record_id


def _apply(records, action) -> list[str]:
    """``action`` on each record in order; the first failure stops with a :class:`PlanError`."""
    done: list[str] = []
    for r in records:
        try:
            action(r)
        except q.QuarantineError as exc:
            raise PlanError(str(exc), len(done)) from None
        except UnsafeName as exc:
            raise PlanError(exc.strerror or str(exc), len(done), r.id) from None
        except OSError as exc:
            raise PlanError((exc.strerror or str(exc)).lower(), len(done), r.id) from None
        done.append(r.id)
    return done


@dataclass(frozen=True, slots=True)
class RestorePlan:
    """Quarantined entries to put back where they were; ``conflicts`` name those whose place is taken again."""

    records: tuple[q.Record, ...]
    conflicts: frozenset[str]  # record ids whose original path exists (rebuilt since)
    replace: bool  # quarantine what is there now, then restore

    @property
    def blocked(self) -> tuple[q.Record, ...]:
        """Records that cannot be restored without ``replace``."""
        return () if self.replace else tuple(r for r in self.records if r.id in self.conflicts)

    def to_json(self) -> list[dict]:
        return [
            {"id": r.id, "to": r.original_path, "replaces": r.id in self.conflicts}
            for r in self.records
        ]

    def execute(self, *, lock_timeout: float | None = None) -> list[str]:
        """Restore under the roots' locks, in order; the ids restored. Refuses a blocked plan."""
        if self.blocked:
            raise PlanError(f"{self.blocked[0].original_path} exists", 0, self.blocked[0].id)
        with locks.hold({r.root for r in self.records}, lock_timeout):
            return _apply(self.records, lambda r: q.restore(r, replace=self.replace))


def plan_restore(records, replace: bool = False) -> RestorePlan:
    """What restoring ``records`` would do (reads only whether each original path is taken)."""
    recs = tuple(records)
    return RestorePlan(
        recs, frozenset(r.id for r in recs if os.path.lexists(r.original_path)), replace
    )


@dataclass(frozen=True, slots=True)
class EmptyPlan:
    """Quarantined entries to delete for good, and empty slots that interrupted moves left."""

    records: tuple[q.Record, ...]
    slots: tuple[q.Record, ...]

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.records)

    def to_json(self) -> list[dict]:
        return [{"id": r.id, "path": r.path, "bytes": r.bytes} for r in self.records]

    def execute(self, *, lock_timeout: float | None = None) -> list[str]:
        """Delete under the roots' locks (each slot renamed into the trash first); the ids deleted."""
        roots = {r.root for r in self.records} | {r.root for r in self.slots}
        with locks.hold(roots, lock_timeout):
            done = _apply(self.records, q.purge)
            try:
                for r in self.slots:
                    q.drop_empty_slot(r)
                for d in sorted(roots):
                    q.finish_trash(d)
            except (OSError, q.QuarantineError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise PlanError(why, len(done)) from None
        return done


def plan_empty(
    records, ids_given: bool, older_than: float | None = None, now: float = 0.0
) -> EmptyPlan:
    """From every record of the roots (``include_empty``): the present ones chosen, older than the cutoff (pure);
    empty slots too, older than the same cutoff (``--older-than 7d`` with nothing that old plans nothing)."""
    if older_than is not None:
        records = [r for r in records if r.quarantined_at < now - older_than]
    present = [r for r in records if r.present]
    return EmptyPlan(
        tuple(present), () if ids_given else tuple(r for r in records if not r.present)
    )
