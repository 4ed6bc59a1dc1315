"""One scanner for every command: roots in, judged entries out.

``ls``, ``verify`` and ``status`` all call :func:`scan`, so they never disagree
about what a cache holds. Large roots are judged in parallel worker processes;
nothing here writes to a cache.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import dataclass, field

from .adapters import triton as tri
from .errors import UsageError
from .findings import Finding, Severity
from .layout import QUARANTINE_DIR

PARALLEL_THRESHOLD = 1500
CHUNK = 500


@dataclass(frozen=True)
class CacheScan:
    """One cache root as scanned: its entries and any problem of the root itself."""

    root: tri.CacheRoot
    entries: tuple[tri.Entry, ...]
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
    judge: tri.Judge
    elapsed: float = 0.0
    extra: dict = field(default_factory=dict)  # per entry path: findings added by later stages (rebuild)

    @property
    def entries(self) -> list[tri.Entry]:
        return [e for c in self.caches for e in c.entries]

    def findings_of(self, entry: tri.Entry) -> tuple[Finding, ...]:
        return entry.findings + tuple(self.extra.get(entry.path, ()))

    def summary(self) -> dict:
        by_code: dict[str, int] = {}
        errors = warnings = 0
        for c in self.caches:
            for f in c.findings:
                by_code[f.code] = by_code.get(f.code, 0) + 1
                errors += f.severity == Severity.ERROR
                warnings += f.severity == Severity.WARN
        for e in self.entries:
            fs = self.findings_of(e)
            for f in fs:
                by_code[f.code] = by_code.get(f.code, 0) + 1
            sev = max((f.severity for f in fs), default=None)
            errors += sev == Severity.ERROR
            warnings += sev == Severity.WARN
        return {"entries": len(self.entries), "errors": errors, "warnings": warnings, "by_code": dict(sorted(by_code.items()))}

    @property
    def worst(self) -> Severity | None:
        sevs = [f.severity for c in self.caches for f in c.findings]
        sevs += [f.severity for e in self.entries for f in self.findings_of(e)]
        return max(sevs, default=None)


# ---------------------------------------------------------------- roots


def roots_from_paths(paths: list[str]) -> list[tuple[tri.CacheRoot, list[str] | None]]:
    """Roots named on the command line; a path that is itself one entry scans just that entry."""
    out = []
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
        if any(n.startswith("__grp__") for n in names) or any(n.endswith((".cubin", ".so")) for n in names):
            out.append((tri.CacheRoot(tri.KIND, os.path.dirname(path), "cli"), [os.path.basename(path)]))
        else:
            out.append((tri.CacheRoot(tri.KIND, path, "cli"), None))
    return out


def default_roots(env=os.environ) -> list[tuple[tri.CacheRoot, list[str] | None]]:
    return [(r, None) for r in tri.discover_roots(env)]


# ---------------------------------------------------------------- judging


def make_judge(target_arch: int | None, orphan_age: float = 3600.0, triton_version: str | None = None) -> tri.Judge:
    if triton_version is None:
        triton_version = installed_triton_version()
    return tri.Judge(target_arch, triton_version, tri.host_machine(), orphan_age, time.time())


def installed_triton_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return None


def _count_quarantined(root: str) -> int:
    try:
        with os.scandir(os.path.join(root, QUARANTINE_DIR)) as it:
            return sum(1 for e in it if e.is_dir(follow_symlinks=False))
    except OSError:
        return 0


def _judge_chunk(args) -> list[tri.Entry]:
    root, names, judge, root_uid = args
    return [tri.inspect_entry(root, n, judge, root_uid) for n in names]


def _pool(jobs: int):
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:
        ctx = multiprocessing.get_context()
    return ctx.Pool(jobs)


def scan(roots: list[tuple[tri.CacheRoot, list[str] | None]], judge: tri.Judge, target: Target, jobs: int | None = None,
         expand: bool = True) -> ScanReport:
    """Scan every root (and the partitions inside each) and judge each entry."""
    start = time.perf_counter()
    jobs = jobs or os.cpu_count() or 1
    plan: list[tuple[tri.CacheRoot, list[str], tuple[Finding, ...], str | None, int | None]] = []
    seen = set()
    onlys: list[list[str] | None] = []
    for root, only in roots:
        subroots = tri.expand_partitions(root) if expand and only is None else [root]
        for r in subroots:
            key = (os.path.realpath(r.path), tuple(only or ()))
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
                    names, _strays = tri.list_entry_names(r.path)
            except OSError as exc:
                error = f"cannot list {r.path}: {exc.strerror}"
            plan.append((r, names, tuple(tri.root_findings(r.path)) if only is None else (), error, root_uid))
            onlys.append(only)

    total = sum(len(p[1]) for p in plan)
    results: dict[int, list[tri.Entry]] = {}
    if total >= PARALLEL_THRESHOLD and jobs > 1:
        tasks, owners = [], []
        for i, (r, names, _f, _e, uid) in enumerate(plan):
            for k in range(0, len(names), CHUNK):
                tasks.append((r.path, names[k : k + CHUNK], judge, uid))
                owners.append(i)
        with _pool(jobs) as pool:
            for i, chunk in zip(owners, pool.imap(_judge_chunk, tasks)):
                results.setdefault(i, []).extend(chunk)
    else:
        for i, (r, names, _f, _e, uid) in enumerate(plan):
            results[i] = _judge_chunk((r.path, names, judge, uid))

    caches = tuple(CacheScan(r, tuple(results.get(i, ())), f, e, _count_quarantined(r.path) if only is None else 0)
                   for i, ((r, _n, f, e, _u), only) in enumerate(zip(plan, onlys)))
    return ScanReport(caches, target, judge, time.perf_counter() - start)
