"""One scanner for every command: roots in, judged entries out.

``ls``, ``verify`` and ``status`` all call :func:`scan`, so they never disagree
about what a cache holds. Large roots are judged in parallel worker processes;
nothing here writes to a cache.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any

from jitwarden import adapters
from jitwarden.adapters import triton as tri
from jitwarden.adapters.base import DENIED_ERRNOS, expand_partitions
from jitwarden.env import interpreter
from jitwarden.model.asjson import fields_json
from jitwarden.model.entries import VERDICTS, CacheRoot, Entry, Judge, verdict_of
from jitwarden.model.findings import Finding, Severity
from jitwarden.model.layout import QUARANTINE_DIR
from jitwarden.model.settings import ORPHAN_AGE
from jitwarden.ops import scanmemo
from jitwarden.store.paths import open_dir_at

PARALLEL_THRESHOLD = 1500
CHUNK = 250
"""Entries judged (and, streamed, held) at a time by one process: the pool's workers take the next chunk when
free; the last ones are cut in quarters, so at the end one of them waits at most ~10 ms for the other."""


@dataclass(frozen=True)
class CacheScan:
    """One cache root as scanned: its entries and any problem of the root itself."""

    root: CacheRoot
    entries: tuple[Entry, ...]
    findings: tuple[Finding, ...] = ()
    error: str | None = None
    quarantined: int = 0  # entries the guard moved to <root>/jitwarden-quarantine/

    @property
    def bytes(self) -> int:
        return sum(e.bytes for e in self.entries)

    def to_json(self, current_digest: str | None = None) -> dict:
        return cache_json(
            self.root,
            len(self.entries),
            self.bytes,
            self.findings,
            self.error,
            self.quarantined,
            current_digest,
        )


def cache_json(
    root: CacheRoot,
    entries: int,
    bytes: int,
    findings,
    error: str | None,
    quarantined: int,
    current_digest: str | None,
) -> dict:
    """One root's object in a scan's JSON (``caches``), for a :class:`CacheScan` and a :class:`CacheTotals` alike."""
    return {
        "kind": root.kind,
        "root": root.path,
        "source": root.source,
        "partition": root.partition,
        "current": (root.partition == current_digest)
        if root.partition and current_digest
        else None,
        "entries": entries,
        "bytes": bytes,
        "findings": [f.to_json() for f in findings],
        "error": error,
        "quarantined": quarantined,
    }


@dataclass(frozen=True)
class Tally:
    """What a report counts of judged entries, without the entries: how many, their bytes, how many are at
    error and at warning level (by each entry's worst finding), the worst severity, findings by code, and
    what vouches for the others (``verdicts``: entries by :data:`~jitwarden.model.entries.VERDICTS` word).
    Tallies of chunks add up (:meth:`plus`) to the tally of them all, in any grouping."""

    entries: int = 0
    bytes: int = 0
    errors: int = 0
    warnings: int = 0
    worst: Severity | None = None
    by_code: tuple[tuple[str, int], ...] = ()  # findings by code, sorted by code
    verdicts: tuple[int, ...] = (0,) * len(VERDICTS)  # proven, sealed, unproven
    entries_by_code: tuple[
        tuple[str, int], ...
    ] = ()  # entries with a finding of each code (a root: one)

    def plus(self, other: Tally) -> Tally:
        codes, holders = dict(self.by_code), dict(self.entries_by_code)
        for k, n in other.by_code:
            codes[k] = codes.get(k, 0) + n
        for k, n in other.entries_by_code:
            holders[k] = holders.get(k, 0) + n
        worst = max((s for s in (self.worst, other.worst) if s is not None), default=None)
        return Tally(
            self.entries + other.entries,
            self.bytes + other.bytes,
            self.errors + other.errors,
            self.warnings + other.warnings,
            worst,
            tuple(sorted(codes.items())),
            tuple(a + b for a, b in zip(self.verdicts, other.verdicts)),
            tuple(sorted(holders.items())),
        )

    @property
    def unproven(self) -> int:
        """Entries that passed the structural checks only (what ``--strict`` refuses)."""
        return self.verdicts[VERDICTS.index("unproven")]

    def summary(self) -> dict:
        """The ``summary`` object of a scan's JSON (``verdicts``: added in schema 2, entries by verdict word)."""
        return {
            "entries": self.entries,
            "errors": self.errors,
            "warnings": self.warnings,
            "by_code": dict(self.by_code),
            "entries_by_code": dict(self.entries_by_code),
            "verdicts": dict(zip(VERDICTS, self.verdicts)),
        }


def tally(entries, root_findings=()) -> Tally:
    """The :class:`Tally` of ``entries`` (pure). ``root_findings``: a root's own findings, each counted as one
    at its severity (a root is not an entry). The one counting rule of :meth:`ScanReport.summary`."""
    by_code: dict[str, int] = {}
    holders: dict[str, int] = {}
    n = size = errors = warnings = 0
    worst = None
    verdicts = dict.fromkeys(VERDICTS, 0)
    for f in root_findings:
        by_code[f.code] = by_code.get(f.code, 0) + 1
        holders[f.code] = holders.get(f.code, 0) + 1
        errors += f.severity == Severity.ERROR
        warnings += f.severity == Severity.WARN
        worst = f.severity if worst is None or f.severity > worst else worst
    for e in entries:
        n += 1
        size += e.bytes
        fs = e.findings
        if fs:  # most entries have none: they cost two additions here
            for f in fs:
                by_code[f.code] = by_code.get(f.code, 0) + 1
            for code in {f.code for f in fs}:
                holders[code] = holders.get(code, 0) + 1
            sev = max(f.severity for f in fs)
            errors += sev == Severity.ERROR
            warnings += sev == Severity.WARN
            worst = sev if worst is None or sev > worst else worst
        v = verdict_of(e)
        if v is not None:
            verdicts[v] += 1
    return Tally(
        n,
        size,
        errors,
        warnings,
        worst,
        tuple(sorted(by_code.items())),
        tuple(verdicts.values()),
        tuple(sorted(holders.items())),
    )


@dataclass(frozen=True)
class CacheTotals:
    """One cache root as a streamed scan leaves it (:func:`scan_streamed`): its counts, not its entries."""

    root: CacheRoot
    entries: int
    bytes: int
    findings: tuple[Finding, ...] = ()
    error: str | None = None
    quarantined: int = 0

    def to_json(self, current_digest: str | None = None) -> dict:
        return cache_json(
            self.root,
            self.entries,
            self.bytes,
            self.findings,
            self.error,
            self.quarantined,
            current_digest,
        )


@dataclass(frozen=True)
class Target:
    arch: int | None
    source: str  # cli, gpu, none

    def to_json(self) -> dict:
        return fields_json(self)


@dataclass(frozen=True)
class ScanReport:
    caches: tuple[CacheScan, ...]
    target: Target
    judge: Judge
    elapsed: float = 0.0

    @property
    def entries(self) -> list[Entry]:
        return [e for c in self.caches for e in c.entries]

    def with_findings(
        self, added: Mapping[str, tuple[Finding, ...]], proven: frozenset[str] = frozenset()
    ) -> ScanReport:
        """This report with findings of a later stage (the rebuild) joined to the entries they are about, by
        path; the entries at ``proven`` paths marked proven (rebuilt, and the code matched)."""

        def grown(e: Entry) -> Entry:
            more = added.get(e.path)
            if e.path in proven:
                e = replace(e, proven=True)
            return replace(e, findings=e.findings + tuple(more)) if more else e

        return replace(
            self,
            caches=tuple(
                replace(c, entries=tuple(grown(e) for e in c.entries)) for c in self.caches
            ),
        )

    def tally(self) -> Tally:
        """The :class:`Tally` of every entry and every root's own findings."""
        t = Tally()
        for c in self.caches:
            t = t.plus(tally(c.entries, c.findings))
        return t

    def summary(self) -> dict:
        return self.tally().summary()

    @property
    def worst(self) -> Severity | None:
        return self.tally().worst


@dataclass(frozen=True)
class StreamedScan:
    """A scan whose entries were handed on chunk by chunk as they were judged, in order, and never kept
    (:func:`scan_streamed`): memory stays flat in the number of entries. Its roots carry counts
    (:class:`CacheTotals`); ``tally`` counts every entry and root finding, as :meth:`ScanReport.tally` does."""

    caches: tuple[CacheTotals, ...]
    target: Target
    judge: Judge
    tally: Tally
    elapsed: float = 0.0

    def summary(self) -> dict:
        return self.tally.summary()

    @property
    def worst(self) -> Severity | None:
        return self.tally.worst


# ---------------------------------------------------------------- judging


def make_judge(
    target_arch: int | None,
    orphan_age: float = ORPHAN_AGE.default,
    triton_version: str | None = None,
    fp=None,
) -> Judge:
    """The judge for this environment: its packages, GPUs and driver come from ``fp`` when given."""
    if fp is not None:
        versions = tuple((p.name, p.version) for p in fp.packages)
        torch = fp.package("torch")
        gpus = tuple(g.name for g in fp.gpus if getattr(g, "name", None))
        driver, torch_cuda = fp.driver_version, getattr(torch, "cuda", None)
    else:
        versions, gpus, driver, torch_cuda = installed_versions(), (), None, None
    if triton_version is None:
        triton_version = dict(versions).get("triton")
    return Judge(
        target_arch=target_arch,
        triton_version=triton_version,
        host_machine=tri.host_machine(),
        orphan_age=orphan_age,
        now=time.time(),
        versions=versions,
        gpu_names=gpus,
        driver_version=driver,
        torch_cuda=torch_cuda,
        python_tag=interpreter.python_tag(),
        uid=os.getuid(),
    )


def installed_versions() -> tuple[tuple[str, str], ...]:
    """(package, version) of the packages whose caches we judge, from their dist-info names on sys.path."""
    from jitwarden.env.fingerprint import PACKAGES, _find_dists

    dists = _find_dists({d for _, ds in PACKAGES for d in ds})
    out = []
    for name, candidates in PACKAGES:
        hit = next((d for d in candidates if d in dists), None)
        if hit is not None:
            out.append((name, dists[hit][1]))
    return tuple(out)


def _count_quarantined(root: str) -> int:
    try:
        with os.scandir(os.path.join(root, QUARANTINE_DIR)) as it:
            return sum(1 for e in it if e.is_dir(follow_symlinks=False))
    except OSError:
        return 0


Fresh = dict[str, "tuple[Any, int] | None"]
"""What a chunk judged from its bytes, for the memo: name -> (record, newest ctime), None where not memoisable."""


def _judge_chunk(args) -> tuple[list[Entry], Fresh | None]:
    """(the entries of one chunk, judged; what it judged anew, for the memo, or None without one). A task is
    ``(kind, root, names, judge, root_uid, memo_index)``, ``memo_index`` the root's memo's in
    :data:`_RECALLED` (None: no memo): an entry whose record still holds is rebuilt from it, the others are judged
    from their bytes."""
    kind, root, names, judge, root_uid, index = args[:6]
    memo = adapters.memo_of(kind) if index is not None else None
    recalled = _RECALLED.get(index, {})
    inspect = adapters.get(kind).inspect_entry
    fresh: Fresh = {}
    out = []
    root_fd = _root_fd(root) if memo is not None and recalled else None
    try:
        for n in names:
            if memo is None:
                e = _inspected(inspect, kind, root, n, judge, root_uid)
            else:
                rec = recalled.get(n)
                e = memo.recall(root, n, scanmemo.decode(rec), root_fd) if rec is not None else None
                if e is None:
                    e, fresh[n] = _stamped(memo, kind, root, n, judge, root_uid)
            if e.findings and not os.path.lexists(e.path):
                continue  # gone since the listing (a clean, an eviction, the tool's own rename): not damage
            out.append(e)
    finally:
        if root_fd is not None:
            os.close(root_fd)
    return out, (fresh if memo is not None else None)


def _root_fd(root: str) -> int | None:
    """An fd of ``root`` its entries are recalled by (one lookup of the root per chunk, not one per entry); None
    when it cannot be opened so (a link in its place: each entry is then opened by its path, as it is judged)."""
    try:
        return open_dir_at(root)
    except OSError:
        return None


def _stamped(memo, kind: str, root: str, name: str, judge: Judge, root_uid):
    """(the entry judged by the memo's adapter, (its record, newest ctime) or None)."""
    got = _inspected(memo.judge_stamped, kind, root, name, judge, root_uid)
    if isinstance(got, Entry):  # an error of jitwarden's own: said, and not memoised
        return got, None
    e, record, newest = got
    return e, ((record, newest) if record is not None else None)


def _inspected(inspect, kind: str, root: str, name: str, judge: Judge, root_uid):
    """One entry judged. An error of jitwarden's own while judging it (a reader meeting bytes it was not written
    for) is that entry's ``unrecognised`` finding, saying so: never damage, and never the end of the scan of the
    others (docs/threat-model.md, promise 5)."""
    try:
        return inspect(root, name, judge, root_uid)
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
        why = why if len(why) <= 160 else why[:157] + "..."
        return Entry(
            kind,
            root,
            name,
            os.path.join(root, name),
            "other",
            None,
            None,
            0,
            0.0,
            findings=(
                Finding(
                    "unrecognised",
                    f"jitwarden could not judge this entry ({why}); not judged, and a bug of "
                    "jitwarden's to report, not damage",
                ),
            ),
        )


_ENTRY_FIELDS = attrgetter(*(f.name for f in dataclasses.fields(Entry)))


def _judge_chunk_flat(args) -> tuple[list[tuple], Fresh | None]:
    """:func:`_judge_chunk` in a worker: each entry as the tuple of its fields, which pickles in a third
    of the time a frozen dataclass takes (the parent rebuilds ``Entry(*fields)``: the same entry)."""
    entries, fresh = _judge_chunk(args)
    return [_ENTRY_FIELDS(e) for e in entries], fresh


def _judge_chunk_emitted(args) -> tuple[Tally, object, Fresh | None]:
    """:func:`_judge_chunk`, then the chunk's :class:`Tally` and ``emit(entries)`` (for :func:`scan_streamed`):
    what travels back from a worker is counts and the emitted bytes, never the entries."""
    *task, emit = args
    entries, fresh = _judge_chunk(tuple(task))
    return tally(entries), emit(entries), fresh


def _pool(jobs: int, records: dict[int, dict[str, bytes]]):
    """``jobs`` worker processes, each given the memos' ``records`` (forked: inherited, not pickled)."""
    try:
        import multiprocessing

        ctx: Any = multiprocessing.get_context("fork")
    except ValueError:
        ctx = multiprocessing.get_context()
    return ctx.Pool(jobs, initializer=_recall, initargs=(records,))


@dataclass(frozen=True)
class _Planned:
    """One root to scan: the entry names to judge (sorted), its own findings, why it could not be listed."""

    root: CacheRoot
    names: list[str]
    findings: tuple[Finding, ...]
    error: str | None
    root_uid: int | None
    whole: bool  # the whole root (not entries named one by one): its quarantine is counted

    def quarantined(self) -> int:
        return _count_quarantined(self.root.path) if self.whole else 0


def _judged_uid(path: str) -> int | None:
    """Whose trust the ownership rule judges a root's items for (:func:`adapters.base.ownership_findings`): the
    reader's, root's runs included (the one rule, :mod:`jitwarden.store.trust`); None inside a root named in
    ``JITWARDEN_TRUSTED_ROOTS``, whose owners the user accepted."""
    from jitwarden.store import trust

    return None if trust.in_trusted_root(path) else os.geteuid()


def _denied_root(path: str, exc: OSError) -> tuple[Finding, ...]:
    """A root this user may not list: its ``unreadable`` finding (unknown, never clean), naming its owner and
    mode, for doctor's fix; () for any other error (a root that went away is said as the root's error)."""
    if exc.errno not in DENIED_ERRNOS:
        return ()
    try:
        st = os.stat(path)
        whose = f"owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)}"
    except OSError:
        whose = "its owner and mode unknown"
    return (
        Finding(
            "unreadable",
            f"cannot list the cache root: {exc.strerror} ({whose}); nothing in it was checked",
        ),
    )


def _plan(roots: list[tuple[CacheRoot, list[str] | None]], expand: bool) -> list[_Planned]:
    """Every root (and the partitions inside each, with ``expand``) once, with the names of its entries."""
    plan: list[_Planned] = []
    seen = set()
    for root, only in roots:
        adapter = adapters.get(root.kind)
        subroots = expand_partitions(root) if expand and only is None else [root]
        for r in subroots:
            key = (r.kind, os.path.realpath(r.path), tuple(only or ()))
            if key in seen:
                continue
            seen.add(key)
            error = None
            names: list[str] = []
            root_uid = None
            try:
                os.stat(r.path)
                root_uid = _judged_uid(r.path)
                if only is not None:
                    names = list(only)
                else:
                    names, _strays = adapter.list_entry_names(r.path)
            except OSError as exc:
                error = f"cannot list {r.path}: {exc.strerror}"
                denied = _denied_root(r.path, exc)
            else:
                denied = ()
            findings = tuple(adapters.judge_root(adapter, r.path)) if only is None else ()
            findings = denied + findings
            plan.append(_Planned(r, names, findings, error, root_uid, only is None))
    return plan


_RECALLED: dict[int, dict[str, bytes]] = {}
"""The records of each root's memo, by its index in the plan: set where the chunks are judged (:func:`_recall`,
a pool's initializer: a forked worker inherits them, never pickled per chunk)."""


def _recall(records: dict[int, dict[str, bytes]]) -> None:
    _RECALLED.clear()
    _RECALLED.update(records)


def _memos(plan: list[_Planned], judge: Judge) -> list[scanmemo.RootMemo | None]:
    """Each root's memo (:mod:`jitwarden.ops.scanmemo`), None where it has none."""
    return [
        None if p.error else scanmemo.open_memo(p.root.kind, p.root.path, judge, p.root_uid)
        for p in plan
    ]


def _judged(
    plan: list[_Planned],
    judge: Judge,
    jobs: int,
    work,
    extra: tuple = (),
    here=None,
    memos: list[scanmemo.RootMemo | None] | None = None,
):
    """(index in ``plan``, ``work(task)``) for every chunk of ``CHUNK`` entries of every root, in the order of
    the plan and of the names: in a pool of ``jobs`` worker processes when there are enough entries to pay
    for them (``PARALLEL_THRESHOLD``), else here, by ``here`` (default ``work``). A task is
    ``(kind, root, names, judge, root_uid, memo_index, *extra)`` (:func:`_judge_chunk`)."""
    records = {i: m.records for i, m in enumerate(memos or ()) if m is not None}
    tasks, owners = [], []
    for i, p in enumerate(plan):
        index = i if i in records else None
        for k in range(0, len(p.names), CHUNK):
            tasks.append(
                (p.root.kind, p.root.path, p.names[k : k + CHUNK], judge, p.root_uid, index, *extra)
            )
            owners.append(i)
    if len(tasks) < 2 or jobs < 2 or sum(len(p.names) for p in plan) < PARALLEL_THRESHOLD:
        here = here or work
        _recall(records)
        try:
            for i, t in zip(owners, tasks):
                yield i, here(t)
        finally:
            _recall({})
        return
    _split_tail(tasks, owners, jobs)
    with _pool(jobs, records) as pool:
        yield from zip(owners, pool.imap(work, tasks))


def _split_tail(tasks: list[tuple], owners: list[int], jobs: int) -> None:
    """The last ``jobs`` chunks in quarters, in place: a worker that finds the queue empty waits for the others'
    last chunk, so the smaller that chunk, the shorter the wait (the order of the entries is the same)."""
    cut, tail = len(tasks) - jobs, max(1, CHUNK // 4)
    split = [
        (i, (*t[:2], t[2][q : q + tail], *t[3:]))
        for i, t in zip(owners[cut:], tasks[cut:])
        for q in range(0, len(t[2]), tail)
    ]
    owners[cut:] = [i for i, _ in split]
    tasks[cut:] = [t for _, t in split]


def _save_memos(
    plan: list[_Planned], memos: list[scanmemo.RootMemo | None], fresh: dict[int, Fresh]
) -> None:
    for i, (p, memo) in enumerate(zip(plan, memos)):
        if memo is not None:
            memo.save(p.names, fresh.get(i, {}), p.whole)


def scan(
    roots: list[tuple[CacheRoot, list[str] | None]],
    judge: Judge,
    target: Target,
    jobs: int | None = None,
    expand: bool = True,
) -> ScanReport:
    """Scan every root (and the partitions inside each) and judge each entry."""
    start = time.perf_counter()
    plan = _plan(roots, expand)
    jobs = jobs or os.cpu_count() or 1
    memos = _memos(plan, judge)
    results: dict[int, list[Entry]] = {}
    fresh: dict[int, Fresh] = {}
    for i, (chunk, new) in _judged(
        plan, judge, jobs, _judge_chunk_flat, here=_judge_chunk, memos=memos
    ):
        got = results.setdefault(i, [])
        if chunk and type(chunk[0]) is tuple:  # from a worker: fields (_judge_chunk_flat)
            chunk = [Entry(*fields) for fields in chunk]
        got.extend(chunk)
        fresh.setdefault(i, {}).update(new or {})
    _save_memos(plan, memos, fresh)
    caches = tuple(
        CacheScan(p.root, tuple(results.get(i, ())), p.findings, p.error, p.quarantined())
        for i, p in enumerate(plan)
    )
    return ScanReport(caches, target, judge, time.perf_counter() - start)


def scan_streamed(
    roots: list[tuple[CacheRoot, list[str] | None]],
    judge: Judge,
    target: Target,
    emit,
    sink,
    jobs: int | None = None,
    expand: bool = True,
) -> StreamedScan:
    """:func:`scan`, with each chunk of judged entries handed to ``emit`` where it was judged (a worker
    process: ``emit`` must pickle, a module-level function or a ``functools.partial`` of one) and what it
    returns to ``sink`` here, chunk by chunk in the order :func:`scan` lists the entries; the entries are
    then dropped. What ``sink`` is given is the caller's affair (the CLI: encoded JSON, set aside)."""
    start = time.perf_counter()
    plan = _plan(roots, expand)
    jobs = jobs or os.cpu_count() or 1
    totals = [tally((), p.findings) for p in plan]
    memos = _memos(plan, judge)
    fresh: dict[int, Fresh] = {}
    for i, (t, out, new) in _judged(plan, judge, jobs, _judge_chunk_emitted, (emit,), memos=memos):
        totals[i] = totals[i].plus(t)
        sink(out)
        fresh.setdefault(i, {}).update(new or {})
    _save_memos(plan, memos, fresh)
    everything = Tally()
    for t in totals:
        everything = everything.plus(t)
    caches = tuple(
        CacheTotals(p.root, t.entries, t.bytes, p.findings, p.error, p.quarantined())
        for p, t in zip(plan, totals)
    )
    return StreamedScan(caches, target, judge, everything, time.perf_counter() - start)
