"""One disk budget over every cache kind of the live environment: whole entries, least recently used first.

``jitwarden budget 20G`` (``ccache -M`` for JIT caches) measures the live partition of each kind
(:func:`census`: every entry's bytes and inodes, when it was last served, whether a live process holds
it), and :func:`plan_budget` picks, purely, what to evict until the rest fits. The unit of eviction is
what must go together (:class:`Unit`): a Triton entry directory (its group and files), a JAX entry with
its ``-atime``, and an Inductor FX graph with the Triton kernels it names (``formats.fxkernels``; a
kernel two graphs name joins them).

"Used" is what the runtime saw serve an entry (``store/uselog``: the guard's hits, the FX graphs torch
is about to load), or JAX's own ``-atime`` record, which JAX writes on every read. The file system's
atime is never taken: ``verify`` and ``doctor`` read every file, and relatime/noatime mounts keep none
worth the name; never the mtime (a write time, not a use). An entry no log names was not served to a
guarded process since its log began: it ranks before every served one, oldest write first is *not*
assumed (ties by id). A unit a live process's log names, or whose entry lock a process holds, is pinned:
never evicted. What cannot be read is unknown: never evicted, counted and said (``unreadable``).

:class:`BudgetPlan.execute` takes the roots' locks, decides again under them (``replan``), takes each
directory entry's lock without waiting (busy: skipped) and moves units through ``maintenance.clean``
(quarantine first; deleted unless ``keep_quarantined``), then merges the logs of ended processes.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from jitwarden import adapters
from jitwarden.adapters import base
from jitwarden.env import locations
from jitwarden.formats.fxkernels import kernel_keys
from jitwarden.model import kinds
from jitwarden.model.asjson import fields_json
from jitwarden.model.entries import CacheRoot
from jitwarden.model.layout import ENTRY_LOCK_FILE, ENTRY_WRITERS_FILE
from jitwarden.model.text import human_size
from jitwarden.ops import maintenance
from jitwarden.ops.maintenance import Outcome
from jitwarden.store import entrylock, locks, partition, uselog
from jitwarden.store.reads import read_bytes, read_head

FX_PREFIXES = ("fxgraph/", "aotautograd/")
FX_READ_MAX = (
    64 << 20
)  # an FX pickle read whole up to this (ARCHITECTURE.md, "Reads bounded by kind")
JAX_ATIME = 8  # bytes of JAX's ``<key>-atime``: little-endian nanoseconds


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """The limits: bytes and inodes over every kind together (None: that one unbounded)."""

    max_bytes: int | None = None
    max_inodes: int | None = None

    def over(self, size: int, inodes: int) -> bool:
        return (self.max_bytes is not None and size > self.max_bytes) or (
            self.max_inodes is not None and inodes > self.max_inodes
        )

    def describe(self) -> str:
        parts = [human_size(self.max_bytes)] if self.max_bytes is not None else []
        parts += [f"{self.max_inodes:,} inodes"] if self.max_inodes is not None else []
        return " and ".join(parts) or "no limit"


@dataclass(frozen=True, slots=True, kw_only=True)
class Item:
    """One cache entry (or a file that goes with one, a JAX ``-atime``) as the budget sees it."""

    kind: str
    root: str
    id: str
    path: str
    bytes: int
    inodes: int
    last_used: float | None  # unix seconds it was last served; None: no record of a use
    used_by: str  # log | jax-atime | none
    live: bool = False  # named by a live process's use log
    unreadable: str | None = None  # why its size is unknown (never evicted)


@dataclass(frozen=True, slots=True, kw_only=True)
class Unit:
    """What is evicted together, least recently used of its members deciding nothing: its newest use does."""

    items: tuple[Item, ...]

    @property
    def bytes(self) -> int:
        return sum(i.bytes for i in self.items)

    @property
    def inodes(self) -> int:
        return sum(i.inodes for i in self.items)

    @property
    def last_used(self) -> float | None:
        times = [i.last_used for i in self.items if i.last_used is not None]
        return max(times) if times else None

    @property
    def live(self) -> bool:
        return any(i.live for i in self.items)

    @property
    def unreadable(self) -> bool:
        return any(i.unreadable for i in self.items)

    @property
    def head(self) -> Item:
        return self.items[0]

    def order(self) -> tuple[float, str, str]:
        """Eviction order: never served first, then the least recently served; ties by kind and id."""
        t = self.last_used
        return (-1.0 if t is None else t, self.head.kind, self.head.id)

    def to_json(self) -> dict:
        return {
            "kind": self.head.kind,
            "id": self.head.id,
            "path": self.head.path,
            "bytes": self.bytes,
            "inodes": self.inodes,
            "last_used": self.last_used,
            "used_by": self.head.used_by,
            "with": [{"kind": i.kind, "id": i.id, "bytes": i.bytes} for i in self.items[1:]],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class KindTotals:
    """Bytes, inodes and entries of one kind (``entries``: items that are entries, not companions)."""

    bytes: int = 0
    inodes: int = 0
    entries: int = 0

    def plus(self, i: Item) -> KindTotals:
        return KindTotals(
            bytes=self.bytes + i.bytes,
            inodes=self.inodes + i.inodes,
            entries=self.entries + (i.used_by != "companion"),
        )

    def to_json(self) -> dict:
        return fields_json(self)


def totals(items: Iterable[Item]) -> dict[str, KindTotals]:
    out: dict[str, KindTotals] = {}
    for i in items:
        out[i.kind] = out.get(i.kind, KindTotals()).plus(i)
    return dict(sorted(out.items()))


@dataclass(frozen=True, slots=True, kw_only=True)
class Census:
    """Every unit of the roots measured, and what could not be."""

    roots: tuple[CacheRoot, ...]
    units: tuple[Unit, ...]
    problems: tuple[tuple[str, str], ...] = ()  # (path, why): a root or log that could not be read
    live_logs: int = 0  # logs a live process holds (one per process and root it was served from)
    uses: dict = field(default_factory=dict)  # root path -> uselog.Uses (for compaction)

    @property
    def bytes(self) -> int:
        return sum(u.bytes for u in self.units)

    @property
    def inodes(self) -> int:
        return sum(u.inodes for u in self.units)


# ---------------------------------------------------------------- census (reads only)


def live_roots(env, digest: str) -> list[CacheRoot]:
    """The live environment's partition of every kind activation partitions, where it exists."""
    out, seen = [], set()
    for kind in (k.name for k in kinds.partitioned()):
        where = locations.default_base(kind, env)
        if not where:
            continue
        b = partition.base_of(where)
        p = partition.path_for(b, digest)
        if os.path.isdir(p) and os.path.realpath(p) not in seen:
            seen.add(os.path.realpath(p))
            out.append(CacheRoot(kind=kind, path=p, source="partition", partition=digest, base=b))
    return out


def census(roots: Iterable[CacheRoot]) -> Census:
    """Measure every entry of ``roots`` and group them into units (reads only, follows no link)."""
    roots = tuple(roots)
    items: list[Item] = []
    problems: list[tuple[str, str]] = []
    uses_of: dict[str, uselog.Uses] = {}
    for r in roots:
        try:
            uses = uselog.read(r.path)
        except OSError as exc:
            problems.append((r.path, f"use log unreadable: {(exc.strerror or str(exc)).lower()}"))
            uses = uselog.Uses()
        uses_of[r.path] = uses
        problems += [(os.path.join(r.path, n), f"use log: {why}") for n, why in uses.unreadable]
        try:
            names = adapters.get(r.kind).list_entry_names(r.path)[0]
        except OSError as exc:
            problems.append((r.path, f"cannot list: {(exc.strerror or str(exc)).lower()}"))
            continue
        for name in names:
            items += _items(r, name, uses)
    units = _group(items)
    n_live = sum(u.live_logs for u in uses_of.values())
    return Census(
        roots=roots,
        units=tuple(units),
        problems=tuple(problems),
        live_logs=n_live,
        uses=uses_of,
    )


def _items(r: CacheRoot, name: str, uses: uselog.Uses) -> list[Item]:
    """The entry ``name`` of ``r`` (and for JAX its ``-atime``), measured."""
    s = base.survey(r.path, name)
    why = "; ".join(f"{p or name}: {w}" for p, w in s.errors) or None
    inodes = 1 + len(s.files) + len(s.dirs) + len(s.links) + len(s.others) - (not s.is_dir)
    t = uses.last.get(name)
    used_by = "log" if t is not None else "none"
    out = []
    if r.kind == "jax" and name.endswith("-cache"):
        atime_name = name[: -len("-cache")] + "-atime"
        at = _jax_atime(os.path.join(r.path, atime_name))
        if at is not None:
            size, seen = at
            if t is None or seen > t:
                t, used_by = seen, "jax-atime"
            out.append(
                Item(
                    kind=r.kind,
                    root=r.path,
                    id=atime_name,
                    path=os.path.join(r.path, atime_name),
                    bytes=size,
                    inodes=1,
                    last_used=None,
                    used_by="companion",
                )
            )
    head = Item(
        kind=r.kind,
        root=r.path,
        id=name,
        path=s.path,
        bytes=s.bytes,
        inodes=max(inodes, 1),
        last_used=t,
        used_by=used_by,
        live=name in uses.live,
        unreadable=why,
    )
    return [head, *out]


def _jax_atime(path: str) -> tuple[int, float] | None:
    """(size, the time JAX recorded) of a ``<key>-atime``, None when absent or not JAX's 8 bytes."""
    try:
        raw = read_head(path, JAX_ATIME + 1)
    except OSError:
        return None
    if len(raw) != JAX_ATIME:
        return None
    return len(raw), int.from_bytes(raw, "little") / 1e9


def _fx_kernels(i: Item) -> frozenset[str]:
    """The Triton keys the pickles of an FX-graph (or AOTAutograd) entry name; empty when unreadable."""
    s = base.survey(i.root, i.id)
    keys: set[str] = set()
    for f in s.files:
        try:
            keys |= kernel_keys(
                read_bytes(
                    os.path.join(i.path, f.name) if s.is_dir else i.path, max_bytes=FX_READ_MAX
                )
            )
        except OSError:
            continue
    return frozenset(keys)


def _group(items: list[Item]) -> list[Unit]:
    """Units: each entry with its companions; an FX graph with the Triton entries it names (union by key)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    def join(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    triton = {
        i.id: n for n, i in enumerate(items) if i.kind == "triton" and i.used_by != "companion"
    }
    last_head = -1
    for n, i in enumerate(items):
        if i.used_by == "companion":
            join(last_head, n)  # a JAX -atime follows its entry
            continue
        last_head = n
        if i.kind in ("inductor", "vllm") and i.id.startswith(FX_PREFIXES) and not i.unreadable:
            for key in _fx_kernels(i):
                if key in triton:
                    join(n, triton[key])
    members: dict[int, list[Item]] = {}
    for n, i in enumerate(items):
        members.setdefault(find(n), []).append(i)
    return [Unit(items=tuple(v)) for _k, v in sorted(members.items())]


# ---------------------------------------------------------------- plan (pure)


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetPlan:
    """Units to evict, least recently used first, until the rest fits ``budget``; decided by :func:`plan_budget`."""

    budget: Budget
    evict: tuple[Unit, ...]
    before: dict[str, KindTotals]
    after: dict[str, KindTotals]
    pinned: tuple[Unit, ...] = ()  # held by a live process: never evicted
    unknown: tuple[Unit, ...] = ()  # could not be read: never evicted
    fits: bool = (
        True  # whether what stays fits the budget (False: pinned or unknown entries exceed it)
    )

    @property
    def bytes(self) -> int:
        return sum(u.bytes for u in self.evict)

    @property
    def inodes(self) -> int:
        return sum(u.inodes for u in self.evict)

    @property
    def roots(self) -> list[str]:
        return sorted({i.root for u in self.evict for i in u.items})

    def by_kind(self) -> dict[str, KindTotals]:
        return totals(i for u in self.evict for i in u.items)

    def to_json(self) -> dict:
        return {
            "budget": {"bytes": self.budget.max_bytes, "inodes": self.budget.max_inodes},
            "before": {k: v.to_json() for k, v in self.before.items()},
            "after": {k: v.to_json() for k, v in self.after.items()},
            "evict": {k: v.to_json() for k, v in self.by_kind().items()},
            "pinned": len(self.pinned),
            "unknown": len(self.unknown),
            "fits": self.fits,
        }

    def execute(
        self,
        *,
        keep_quarantined: bool = False,
        lock_timeout: float | None = None,
        replan: Callable[[], tuple[BudgetPlan, Census]] | None = None,
        batch: str | None = None,
    ) -> list[Outcome]:
        """Evict under every root's lock; ``replan`` (a fresh plan and its census) decides again there, and
        only units this plan showed that are still chosen are moved. Each directory entry's lock and writers
        lock are taken without waiting: one held is a live process's, and its unit is skipped."""
        shown = {u.head.path for u in self.evict}
        outcomes: list[Outcome] = []
        with locks.hold(self.roots, lock_timeout):
            again, cen = replan() if replan is not None else (self, None)
            chosen = [u for u in again.evict if u.head.path in shown]
            for u in chosen:
                outcomes += _evict(u, keep_quarantined, batch)
            if cen is not None:
                _compact(cen, {o.path for o in outcomes if o.status != "skipped"})
        gone = shown - {u.head.path for u in chosen}
        return outcomes + [
            Outcome(p, os.path.basename(p), "skipped", "no longer chosen (used since the plan)")
            for p in sorted(gone)
        ]


def _evictions(cen: Census, budget: Budget) -> tuple[list[Unit], int, int]:
    """(the units to evict, least recently used first, until the rest fits ``budget``; the bytes and inodes
    that stay): never a pinned or an unreadable unit (pure)."""
    size, inodes = cen.bytes, cen.inodes
    evict: list[Unit] = []
    for u in sorted((u for u in cen.units if not u.live and not u.unreadable), key=Unit.order):
        if not budget.over(size, inodes):
            break
        evict.append(u)
        size -= u.bytes
        inodes -= u.inodes
    return evict, size, inodes


def plan_budget(cen: Census, budget: Budget) -> BudgetPlan:
    """The least recently used units to evict until the rest fits ``budget`` (pure).

    Pinned (a live process's) and unreadable units stay whatever the budget says; when they alone exceed
    it, the plan evicts everything else and says it does not fit.
    """
    all_items = [i for u in cen.units for i in u.items]
    before = totals(all_items)
    pinned = tuple(u for u in cen.units if u.live)
    unknown = tuple(u for u in cen.units if u.unreadable and not u.live)
    evict, size, inodes = _evictions(cen, budget)
    gone = {id(i) for u in evict for i in u.items}
    after = totals(i for i in all_items if id(i) not in gone)
    return BudgetPlan(
        budget=budget,
        evict=tuple(evict),
        before=before,
        after=after,
        pinned=pinned,
        unknown=unknown,
        fits=not budget.over(size, inodes),
    )


# ---------------------------------------------------------------- execute


def _evict(u: Unit, keep_quarantined: bool, batch: str | None) -> list[Outcome]:
    """Move every item of ``u`` aside, or none when an entry lock of one of them is held."""
    from jitwarden.ops.plans import Action

    held: list[int] = []
    try:
        for i in u.items:
            if not os.path.isdir(i.path) or os.path.islink(i.path):
                continue
            for name in (ENTRY_LOCK_FILE, ENTRY_WRITERS_FILE):
                try:
                    fd = entrylock.lock(i.path, name, fcntl.LOCK_EX, block=False)
                except OSError:
                    fd = None
                if fd is None:
                    return [
                        Outcome(i.path, i.id, "skipped", "in use: a process holds its entry lock")
                    ]
                held.append(fd)
        actions = [
            Action(
                kind=i.kind,
                root=i.root,
                id=i.id,
                path=i.path,
                type="entry",
                bytes=i.bytes,
                mtime=0.0,
                reasons=("budget",),
                details=(f"least recently used ({i.used_by})",),
            )
            for i in u.items
        ]
        return maintenance.clean(actions, purge=not keep_quarantined, by="budget", batch=batch)
    finally:
        for fd in held:
            entrylock.unlock(fd)


def _compact(cen: Census, evicted: set[str]) -> None:
    """Merge the logs of ended processes (only ids still there); a failure leaves the logs as they are."""
    for root, uses in cen.uses.items():
        keep = {
            i.id for u in cen.units for i in u.items if i.root == root and i.path not in evicted
        }
        try:
            uselog.compact(root, uses, keep)
        except OSError:
            pass


# ---------------------------------------------------------------- what the commands share


def evicted_by_kind(plan: BudgetPlan, outcomes: Iterable[Outcome]) -> dict[str, tuple[int, int]]:
    """{kind: (entries, bytes)} evicted by ``outcomes`` of ``plan`` (companions counted in bytes only)."""
    kind_of = {i.path: i for u in plan.evict for i in u.items}
    out: dict[str, tuple[int, int]] = {}
    for o in outcomes:
        i = kind_of.get(o.path)
        if i is None or o.status == "skipped":
            continue
        n, b = out.get(i.kind, (0, 0))
        out[i.kind] = (n + (i.used_by != "companion"), b + o.bytes)
    return out


def budget_of(size: str | None, inodes: str | None, env) -> Budget:
    """The budget the command line (``size``, ``inodes``) or else the environment sets; UsageError for a bad
    value and for none at all (CLI > env, as ccache has it)."""
    from jitwarden.model.errors import UsageError
    from jitwarden.model.settings import BUDGET, BUDGET_INODES
    from jitwarden.model.text import parse_size

    size = size if size is not None else BUDGET.raw(env)
    inodes = inodes if inodes is not None else BUDGET_INODES.raw(env)
    if size is None and inodes is None:
        raise UsageError(
            f"budget needs a SIZE (20G), --inodes N, or {BUDGET.name} / {BUDGET_INODES.name}"
        )
    try:
        max_bytes = parse_size(size) if size is not None else None
    except ValueError as exc:
        raise UsageError(f"budget: {exc}") from None
    try:
        max_inodes = int(inodes) if inodes is not None else None
    except ValueError:
        raise UsageError(f"budget: --inodes {inodes!r} is not a whole number") from None
    if max_inodes is not None and max_inodes < 0:
        raise UsageError("budget: --inodes must be at least 0")
    return Budget(max_bytes=max_bytes, max_inodes=max_inodes)


def planned(env, digest: str, budget: Budget) -> tuple[BudgetPlan, Census]:
    """The census of the live environment's partitions and the plan over it (reads only)."""
    cen = census(live_roots(env, digest))
    return plan_budget(cen, budget), cen


def apply(
    plan: BudgetPlan,
    env,
    digest: str,
    *,
    keep_quarantined: bool = False,
    lock_timeout: float | None = None,
    batch: str | None = None,
) -> list[Outcome]:
    """Carry ``plan`` out, decided again under the locks over a fresh census of the same roots."""
    return plan.execute(
        keep_quarantined=keep_quarantined,
        lock_timeout=lock_timeout,
        batch=batch,
        replan=lambda: planned(env, digest, plan.budget),
    )
