"""What ``clean`` and ``prune`` would remove, decided by pure functions over scan results.

Nothing here touches the disk: :func:`plan_clean` maps a scan report and a
:class:`Selection` to a :class:`Plan`; :func:`plan_prune` maps partition facts to the
partitions to drop. :mod:`jitwarden.ops.maintenance` carries a plan out.
"""

from __future__ import annotations

from dataclasses import dataclass

from jitwarden.model.findings import CODES, Severity
from jitwarden.model.text import human_duration, human_size

ERROR_CODES = frozenset(c for c, s in CODES.items() if s == Severity.ERROR)


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
            parts.append("every error-level finding" if self.codes == ERROR_CODES else ", ".join(sorted(self.codes)))
        if self.older_than is not None:
            parts.append(f"older than {human_duration(self.older_than)}")
        if self.kinds:
            parts.append("kind " + ", ".join(sorted(self.kinds)))
        return "; ".join(parts) or "nothing"


def selection(codes=(), stale=False, foreign_arch=False, orphans=False, older_than=None, kinds=None,
              now: float = 0.0) -> Selection:
    """The selection the clean options ask for: no code option and no age means every error (pure)."""
    chosen = set(codes or ())
    chosen |= {"stale"} if stale else set()
    chosen |= {"foreign-arch"} if foreign_arch else set()
    chosen |= {"orphan"} if orphans else set()
    if not chosen and older_than is None:
        chosen = set(ERROR_CODES)
    return Selection(frozenset(chosen), older_than, frozenset(kinds) if kinds else None, now)


@dataclass(frozen=True, slots=True)
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
    scope: str = "entry"  # entry | leftovers (tmp.pid_* older than the orphan age, inside a good entry)

    def to_json(self) -> dict:
        return {"kind": self.kind, "root": self.root, "id": self.id, "path": self.path, "type": self.type,
                "bytes": self.bytes, "mtime": self.mtime, "reasons": list(self.reasons),
                "details": list(self.details), "scope": self.scope}


@dataclass(frozen=True, slots=True)
class Plan:
    actions: tuple[Action, ...]
    selection: Selection
    notes: tuple[str, ...] = ()  # problems clean does not act on (unsafe roots), with what to do instead

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
        return {"selection": {"codes": sorted(self.selection.codes), "older_than_s": self.selection.older_than,
                              "kinds": sorted(self.selection.kinds) if self.selection.kinds else None},
                "actions": [a.to_json() for a in self.actions], "entries": len(self.actions), "bytes": self.bytes,
                "by_reason": self.by_reason(), "notes": list(self.notes)}


def plan_clean(report, sel: Selection) -> Plan:
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
            if sel.kinds and e.kind not in sel.kinds:
                continue
            if sel.older_than is not None and not (e.mtime and sel.now - e.mtime > sel.older_than):
                continue
            fs = report.findings_of(e)
            if sel.codes:
                hits = [f for f in fs if f.code in sel.codes]
                if not hits:
                    continue
                reasons = tuple(dict.fromkeys(f.code for f in hits))
                details = tuple(f.message for f in hits)
            else:
                reasons, details = ("older-than",), (f"newest file {human_duration(sel.now - e.mtime)} old",)
            scope = "entry"
            if reasons == ("orphan",) and e.type not in ("partial", "empty", "other"):
                scope = "leftovers"
            actions.append(Action(e.kind, e.root, e.id, e.path, e.type, 0 if scope == "leftovers" else e.bytes,
                                  e.mtime, reasons, details, scope))
    return Plan(tuple(actions), sel, tuple(notes))


# ---------------------------------------------------------------- prune


@dataclass(frozen=True, slots=True)
class PartitionFacts:
    """One fingerprint partition as found on disk."""

    base: str
    path: str
    digest: str
    last_used: float
    bytes: int
    current: bool
    newest: float = 0.0  # newest mtime inside: a write in progress shows here

    def to_json(self) -> dict:
        return {"base": self.base, "path": self.path, "digest": self.digest, "last_used": self.last_used,
                "bytes": self.bytes, "current": self.current}


@dataclass(frozen=True, slots=True)
class PruneAction:
    partition: PartitionFacts
    why: str

    def to_json(self) -> dict:
        return {**self.partition.to_json(), "why": self.why}


def plan_prune(parts: list[PartitionFacts], keep: int | None = None, max_size: int | None = None,
               older_than: float | None = None, now: float = 0.0, busy_age: float = 0.0) -> list[PruneAction]:
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
        ps = sorted(bases[base], key=lambda p: (not p.current, -p.last_used, p.digest))  # current first, then MRU
        drop: dict[str, str] = {}
        for i, p in enumerate(ps):
            if p.current or (busy_age and now - p.newest < busy_age):
                continue
            if keep is not None and i >= keep:
                drop[p.path] = f"not among the {keep} most recently used"
            elif older_than is not None and now - p.last_used > older_than:
                drop[p.path] = f"unused for {human_duration(now - p.last_used)}"
        if max_size is not None:
            total = sum(p.bytes for p in ps if p.path not in drop)
            for p in reversed(ps):  # least recently used first
                if total <= max_size:
                    break
                if p.current or p.path in drop or (busy_age and now - p.newest < busy_age):
                    continue
                drop[p.path] = f"partitions of {base} exceed {human_size(max_size)}"
                total -= p.bytes
        out += [PruneAction(p, drop[p.path]) for p in reversed(ps) if p.path in drop]
    return out
