"""One scanner for every command: roots in, judged entries out.

``ls``, ``verify`` and ``status`` all call :func:`scan`, so they never disagree
about what a cache holds. Large roots are judged in parallel worker processes;
nothing here writes to a cache.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from operator import attrgetter

from jitwarden import adapters
from jitwarden.adapters import triton as tri
from jitwarden.adapters.base import expand_partitions
from jitwarden.model.errors import UsageError
from jitwarden.model.findings import Finding, Severity
from jitwarden.model.layout import QUARANTINE_DIR
from jitwarden.model.entries import CacheRoot, Entry, Judge

PARALLEL_THRESHOLD = 1500
CHUNK = 500


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
        return {
            "kind": self.root.kind,
            "root": self.root.path,
            "source": self.root.source,
            "partition": self.root.partition,
            "current": (self.root.partition == current_digest) if self.root.partition and current_digest else None,
            "entries": len(self.entries),
            "bytes": self.bytes,
            "findings": [f.to_json() for f in self.findings],
            "error": self.error,
            "quarantined": self.quarantined,
        }


@dataclass(frozen=True)
class Target:
    arch: int | None
    source: str  # cli, gpu, none

    def to_json(self) -> dict:
        return {"arch": self.arch, "source": self.source}


@dataclass(frozen=True)
class ScanReport:
    caches: tuple[CacheScan, ...]
    target: Target
    judge: Judge
    elapsed: float = 0.0

    @property
    def entries(self) -> list[Entry]:
        return [e for c in self.caches for e in c.entries]

    def with_findings(self, added: Mapping[str, tuple[Finding, ...]]) -> ScanReport:
        """This report with findings of a later stage (the rebuild) joined to the entries they are about, by path."""
        def grown(e: Entry) -> Entry:
            more = added.get(e.path)
            return replace(e, findings=e.findings + tuple(more)) if more else e

        return replace(self, caches=tuple(replace(c, entries=tuple(grown(e) for e in c.entries)) for c in self.caches))

    def _judged(self):
        """The findings of each entry that has any (most have none: they cost nothing here)."""
        return (e.findings for c in self.caches for e in c.entries if e.findings)

    def summary(self) -> dict:
        by_code: dict[str, int] = {}
        errors = warnings = 0
        for c in self.caches:
            for f in c.findings:
                by_code[f.code] = by_code.get(f.code, 0) + 1
                errors += f.severity == Severity.ERROR
                warnings += f.severity == Severity.WARN
        for fs in self._judged():
            for f in fs:
                by_code[f.code] = by_code.get(f.code, 0) + 1
            sev = max(f.severity for f in fs)
            errors += sev == Severity.ERROR
            warnings += sev == Severity.WARN
        entries = sum(len(c.entries) for c in self.caches)
        return {"entries": entries, "errors": errors, "warnings": warnings, "by_code": dict(sorted(by_code.items()))}

    @property
    def worst(self) -> Severity | None:
        sevs = [f.severity for c in self.caches for f in c.findings]
        sevs += [f.severity for fs in self._judged() for f in fs]
        return max(sevs, default=None)


# ---------------------------------------------------------------- roots


SEARCH_DEPTH = 3
"""How many levels below a path that is no cache root :func:`roots_from_paths` looks for roots (``~`` holds
``~/.triton/cache``, ``~/.cache/vllm``, ``~/.nv/ComputeCache`` two levels down)."""
SEARCH_DIRS = 20000
"""At most this many directories are looked at in that search: a home of datasets costs a bounded time."""


def roots_from_paths(paths: list[str], env=os.environ) -> list[tuple[CacheRoot, list[str] | None]]:
    """Roots named on the command line; a path that is itself one entry scans just that entry.

    A path is taken as a root only on evidence (an adapter's ``looks_like_root``, or being a root this
    environment uses). A parent of roots (``~``, ``~/.triton``) stands for the roots found beneath it,
    each reported on its own; a path with no cache of a known kind is a :class:`UsageError` (exit 2),
    never an empty, clean-looking report (ARCHITECTURE.md, "The flow of one command").
    """
    out = []
    known = None
    for p in paths:
        try:
            os.lstat(p)
        except FileNotFoundError:
            raise UsageError(f"{p}: no such file or directory") from None
        except OSError as exc:
            raise UsageError(f"{p}: {exc.strerror.lower()}") from None
        if not os.path.isdir(p):
            raise UsageError(f"{p}: not a directory (give a cache root such as ~/.triton/cache, or one entry's directory)")
        if not os.access(p, os.R_OK | os.X_OK):
            raise UsageError(f"{p}: permission denied")
        path = os.path.abspath(p)
        try:
            names = os.listdir(path)
        except OSError as exc:
            raise UsageError(f"{p}: cannot list: {exc.strerror}") from None
        kind = adapters.kind_of_path(path)
        if kind in (None, tri.KIND) and _holds_kernel_files(names):
            out.append((CacheRoot(tri.KIND, os.path.dirname(path), "cli"), [os.path.basename(path)]))
            continue
        if kind is None:
            if known is None:
                known = {os.path.realpath(r.path): r.kind for r, _ in default_roots(env)}
            kind = known.get(os.path.realpath(path))  # a root this environment uses, even while empty
        if kind is not None:
            out.append((CacheRoot(kind, path, "cli"), None))
            continue
        found, complete = roots_beneath(path)
        if not found:
            searched = f"nor within {SEARCH_DEPTH} levels below it" if complete else \
                f"nor in the first {SEARCH_DIRS} directories below it"
            raise UsageError(f"{p}: no cache of a known kind here, {searched} "
                             "(give a cache root such as ~/.triton/cache; `jitwarden doctor` lists the roots in use)")
        out += [(CacheRoot(k, r, "cli"), None) for k, r in found]
    return out


def roots_beneath(path: str, depth: int = SEARCH_DEPTH, limit: int = SEARCH_DIRS) -> tuple[list[tuple[str, str]], bool]:
    """((kind, root) of every cache root below ``path``, breadth first, never inside a root found; whether
    the search was complete): symlinks are not followed, jitwarden's own directories are skipped, and at
    most ``limit`` directories are looked at."""
    from jitwarden.model.layout import is_reserved

    found: list[tuple[str, str]] = []
    level, seen = [path], 0
    for _ in range(depth):
        below = []
        for d in level:
            try:
                with os.scandir(d) as it:
                    kids = sorted(e.path for e in it if not is_reserved(e.name) and e.is_dir(follow_symlinks=False))
            except OSError:
                continue
            for k in kids:
                seen += 1
                if seen > limit:
                    return found, False
                kind = adapters.kind_of_path(k)
                if kind is not None:
                    found.append((kind, k))
                else:
                    below.append(k)
        level = below
    return found, True


def _holds_kernel_files(names: list[str]) -> bool:
    """Whether a directory's names include a ``__grp__*`` file, a ``.cubin`` or a ``.so`` (one entry's own
    directory, not a root): one search of the names joined by NUL, which no name contains (10,000 names in
    a root: a per-name loop costs more than the search)."""
    blob = "\0" + "\0".join(names) + "\0"
    return "\0__grp__" in blob or ".cubin\0" in blob or ".so\0" in blob


def default_roots(env=os.environ, kinds: tuple[str, ...] | None = None) -> list[tuple[CacheRoot, list[str] | None]]:
    return [(r, None) for r in adapters.discover_roots(env, kinds)]


# ---------------------------------------------------------------- judging


def make_judge(target_arch: int | None, orphan_age: float = 3600.0, triton_version: str | None = None,
               fp=None) -> Judge:
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
    return Judge(target_arch, triton_version, tri.host_machine(), orphan_age, time.time(), versions=versions,
                 gpu_names=gpus, driver_version=driver, torch_cuda=torch_cuda,
                 python_tag=f"{sys.version_info[0]}{sys.version_info[1]}", uid=os.getuid())


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


def _judge_chunk(args) -> list[Entry]:
    kind, root, names, judge, root_uid = args
    inspect = adapters.get(kind).inspect_entry
    return [inspect(root, n, judge, root_uid) for n in names]


_ENTRY_FIELDS = attrgetter(*(f.name for f in dataclasses.fields(Entry)))


def _judge_chunk_flat(args) -> list[tuple]:
    """:func:`_judge_chunk` in a worker: each entry as the tuple of its fields, which pickles in a third
    of the time a frozen dataclass takes (the parent rebuilds ``Entry(*fields)``: the same entry)."""
    return [_ENTRY_FIELDS(e) for e in _judge_chunk(args)]


def _pool(jobs: int):
    try:
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
    except ValueError:
        ctx = multiprocessing.get_context()
    return ctx.Pool(jobs)


def scan(roots: list[tuple[CacheRoot, list[str] | None]], judge: Judge, target: Target, jobs: int | None = None,
         expand: bool = True) -> ScanReport:
    """Scan every root (and the partitions inside each) and judge each entry."""
    start = time.perf_counter()
    jobs = jobs or os.cpu_count() or 1
    plan: list[tuple[CacheRoot, list[str], tuple[Finding, ...], str | None, int | None]] = []
    seen = set()
    onlys: list[list[str] | None] = []
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
                root_uid = os.stat(r.path).st_uid
                if only is not None:
                    names = list(only)
                else:
                    names, _strays = adapter.list_entry_names(r.path)
            except OSError as exc:
                error = f"cannot list {r.path}: {exc.strerror}"
            plan.append((r, names, tuple(adapters.judge_root(adapter, r.path)) if only is None else (), error, root_uid))
            onlys.append(only)

    total = sum(len(p[1]) for p in plan)
    results: dict[int, list[Entry]] = {}
    if total >= PARALLEL_THRESHOLD and jobs > 1:
        tasks, owners = [], []
        for i, (r, names, _f, _e, uid) in enumerate(plan):
            for k in range(0, len(names), CHUNK):
                tasks.append((r.kind, r.path, names[k : k + CHUNK], judge, uid))
                owners.append(i)
        with _pool(jobs) as pool:
            for i, chunk in zip(owners, pool.imap(_judge_chunk_flat, tasks)):
                results.setdefault(i, []).extend(Entry(*fields) for fields in chunk)
    else:
        for i, (r, names, _f, _e, uid) in enumerate(plan):
            results[i] = _judge_chunk((r.kind, r.path, names, judge, uid))

    caches = tuple(CacheScan(r, tuple(results.get(i, ())), f, e, _count_quarantined(r.path) if only is None else 0)
                   for i, ((r, _n, f, e, _u), only) in enumerate(zip(plan, onlys)))
    return ScanReport(caches, target, judge, time.perf_counter() - start)
