"""Prometheus textfile metrics (node-exporter textfile collector): remote and local cache traffic,
rejects by reason, quarantines, partitions and their bytes, the last verify.

Counters come from the files the remote cache writes per process (``<jitwarden home>/stats/
remote-<pid>.json``) and summed here; the rest is read from disk when the metrics are made.
``jitwarden verify`` records its time and result in ``<jitwarden home>/stats/last-verify.json``.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import TypeGuard

from jitwarden.env import locations
from jitwarden.model.errors import ExitStatus, JitwardenError
from jitwarden.model.kinds import DIR, partitioned
from jitwarden.model.layout import QUARANTINE_DIR, STATS_DIR, is_reserved
from jitwarden.store import atomic, partition, paths, reads
from jitwarden.store.atomic import write_stats
from jitwarden.store.paths import memo_dir

LAST_VERIFY = "last-verify.json"
LAST_BUDGET = "budget.json"
TEXTFILE = "jitwarden.prom"
MAX_STATS = 1 << 20
"""Larger than any stats file jitwarden writes (a few hundred bytes)."""


class MetricsError(JitwardenError, ValueError):
    """The metrics file cannot be written where asked; the message says why in one line."""

    exit_code = ExitStatus.USAGE


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple  # ((label, value), ...)
    value: float


_HELP = {
    "jitwarden_remote_requests_total": (
        "counter",
        "Remote cache lookups per file, by result (hit, miss, unavailable).",
    ),
    "jitwarden_remote_rejects_total": (
        "counter",
        "Remote cache values refused, by reason (never loaded).",
    ),
    "jitwarden_remote_puts_total": (
        "counter",
        "Signed values stored in the remote cache (writer role).",
    ),
    "jitwarden_local_lookups_total": (
        "counter",
        "Local kernel cache lookups of processes with the remote cache on.",
    ),
    "jitwarden_quarantined_entries": ("gauge", "Entries moved into a cache root's quarantine."),
    "jitwarden_partition_bytes": ("gauge", "Bytes in one fingerprint partition of a cache root."),
    "jitwarden_partition_entries": (
        "gauge",
        "Entries in one fingerprint partition of a cache root.",
    ),
    "jitwarden_partition_last_used_timestamp_seconds": (
        "gauge",
        "When activation last used the partition.",
    ),
    "jitwarden_last_verify_timestamp_seconds": ("gauge", "When `jitwarden verify` last finished."),
    "jitwarden_budget_bytes": (
        "gauge",
        "Bytes of one cache kind of this environment after the last budget run.",
    ),
    "jitwarden_budget_entries": ("gauge", "Entries of one cache kind after the last budget run."),
    "jitwarden_budget_evictions_total": ("counter", "Entries `jitwarden budget` evicted, by kind."),
    "jitwarden_budget_evicted_bytes_total": (
        "counter",
        "Bytes `jitwarden budget` evicted, by kind.",
    ),
    "jitwarden_last_verify_errors": (
        "gauge",
        "Entries at error level in the last `jitwarden verify`.",
    ),
}


def record_verify(summary: dict, env=None) -> None:
    """Remember when verify ran and what it found (never fails the command)."""
    doc = {
        "schema": 1,
        "time": time.time(),
        "errors": summary.get("errors", 0),
        "entries": summary.get("entries", 0),
    }
    _write_stats(LAST_VERIFY, doc, ".last-verify.", env)


def _write_stats(name: str, doc: dict, prefix: str, env=None) -> None:
    """:func:`~jitwarden.store.atomic.write_stats`, never failing the command."""
    try:
        write_stats(name, doc, prefix, env)
    except (OSError, ValueError, TypeError):
        pass


def record_budget(after, evicted: dict, env=None) -> None:
    """Remember what a budget run left per kind (``after``: kind -> totals) and add its evictions
    (kind -> (entries, bytes)) to the running counts; never fails the command."""
    problems: list = []
    old = last_budget(env, problems) or {}
    kinds: dict = {}
    for kind in sorted(set(after) | set(evicted) | set(old)):
        was = old.get(kind, {})
        t = after.get(kind)
        n, b = evicted.get(kind, (0, 0))
        kinds[kind] = {
            "bytes": t.bytes if t is not None else 0,
            "entries": t.entries if t is not None else 0,
            "evictions": int(was.get("evictions", 0)) + n,
            "evicted_bytes": int(was.get("evicted_bytes", 0)) + b,
        }
    _write_stats(LAST_BUDGET, {"schema": 1, "time": time.time(), "kinds": kinds}, ".budget.", env)


def last_budget(env=None, problems: list | None = None) -> dict | None:
    """{kind: {bytes, entries, evictions, evicted_bytes}} of the last budget run, every value a count; None
    when none is recorded; a damaged record is a line in ``problems``."""
    problems = [] if problems is None else problems
    sfd = _stats_fd(env)
    if sfd is None:
        return None
    try:
        doc = _read_stats(sfd, LAST_BUDGET, problems)
    finally:
        os.close(sfd)
    kinds = doc.get("kinds") if doc is not None else None
    if doc is None:
        return None
    fields = ("bytes", "entries", "evictions", "evicted_bytes")
    if not isinstance(kinds, dict) or not all(
        isinstance(v, dict) and all(_count(v.get(f)) for f in fields) for v in kinds.values()
    ):
        problems.append(f"{STATS_DIR}/{LAST_BUDGET}: not a valid record; left out of the metrics")
        return None
    return kinds


def _budget_samples(env, problems: list) -> list[Sample]:
    kinds = last_budget(env, problems) or {}
    out = []
    for kind, v in sorted(kinds.items()):
        labels = (("kind", kind),)
        out.append(Sample("jitwarden_budget_bytes", labels, v["bytes"]))
        out.append(Sample("jitwarden_budget_entries", labels, v["entries"]))
        out.append(Sample("jitwarden_budget_evictions_total", labels, v["evictions"]))
        out.append(Sample("jitwarden_budget_evicted_bytes_total", labels, v["evicted_bytes"]))
    return out


def _stats_fd(env) -> int | None:
    """An fd of ``<jitwarden home>/stats`` (never through a symlink below the home), None when there is none."""
    try:
        top = paths.open_dir_path(memo_dir(env))
    except OSError:
        return None
    try:
        return paths.open_dir_at(STATS_DIR, dir_fd=top)
    except OSError:
        return None
    finally:
        os.close(top)


def _count(v: object) -> TypeGuard[int]:
    return type(v) is int and v >= 0


def _read_stats(sfd: int, name: str, problems: list) -> dict | None:
    """The JSON object in ``stats/<name>`` through the bounded reader; None (and a line in ``problems``) when unreadable."""
    try:
        doc = reads.read_json(name, dir_fd=sfd, max_bytes=MAX_STATS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = f"unreadable ({exc.strerror or exc})"
    except ValueError as exc:
        why = f"not JSON we read ({exc})"
    else:
        if isinstance(doc, dict):
            return doc
        why = "not a jitwarden stats record"
    problems.append(f"{STATS_DIR}/{name}: {why}; left out of the metrics")
    return None


def remote_counters(env=None, problems: list | None = None) -> dict:
    """The remote cache's counters summed over every process's ``stats/remote-<pid>.json``.

    A file that is not a regular file (a FIFO never blocks), not JSON, or whose counters are
    not counts (negative, fractional, ``Infinity``) is left out, with a line in ``problems``.
    """
    problems = [] if problems is None else problems
    total: dict = {}
    sfd = _stats_fd(env)
    if sfd is None:
        return total
    try:
        for n in sorted(os.listdir(sfd)):
            if not (n.startswith("remote-") and n.endswith(".json")):
                continue
            doc = _read_stats(sfd, n, problems)
            if doc is None:
                continue
            counters = doc.get("counters")
            if not isinstance(counters, dict) or not all(
                isinstance(k, str) and _count(v) for k, v in counters.items()
            ):
                problems.append(
                    f"{STATS_DIR}/{n}: its counters are not counts; left out of the metrics"
                )
                continue
            for k, v in counters.items():
                total[k] = total.get(k, 0) + v
    finally:
        os.close(sfd)
    return total


def last_verify(env=None, problems: list | None = None) -> tuple[float, int] | None:
    """(when, entries at error level) of the last ``jitwarden verify``; None when none is recorded or it is unreadable.

    ``time`` must be a finite number and ``errors`` a count: ``Infinity``, ``NaN`` or a string
    is a damaged record (a line in ``problems``), never a metric.
    """
    problems = [] if problems is None else problems
    sfd = _stats_fd(env)
    if sfd is None:
        return None
    try:
        doc = _read_stats(sfd, LAST_VERIFY, problems)
    finally:
        os.close(sfd)
    if doc is None:
        return None
    t, errors = doc.get("time"), doc.get("errors")
    if not (
        isinstance(t, (int, float))
        and type(t) is not bool
        and math.isfinite(t)
        and t >= 0
        and _count(errors)
    ):
        problems.append(
            f"{STATS_DIR}/{LAST_VERIFY}: not a valid record (time {t!r}, errors {errors!r}); "
            "left out of the metrics (the next `jitwarden verify` writes it again)"
        )
        return None
    return float(t), errors


def _tree(path: str) -> tuple[int, int]:
    """(bytes, top-level entries) of a directory, never following links."""
    size = 0
    for d, _dirs, files in os.walk(path):
        for n in files:
            try:
                size += os.lstat(os.path.join(d, n)).st_size
            except OSError:
                pass
    try:
        entries = sum(1 for n in os.listdir(path) if not is_reserved(n))
    except OSError:
        entries = 0
    return size, entries


def node_samples(
    env=None, current: str | None = None, problems: list | None = None
) -> list[Sample]:
    """Every sample; what could not be read is left out, with a line in ``problems`` (the CLI prints them)."""
    env = os.environ if env is None else env
    problems = [] if problems is None else problems
    out = _remote_samples(remote_counters(env, problems))
    for row in partitioned(DIR):
        out += _partition_samples(row.name, locations.partition_base(row.name, env), current)
    out += _budget_samples(env, problems)
    lv = last_verify(env, problems)
    if lv is not None:
        out.append(Sample("jitwarden_last_verify_timestamp_seconds", (), lv[0]))
        out.append(Sample("jitwarden_last_verify_errors", (), lv[1]))
    return out


def _remote_samples(counters: dict) -> list[Sample]:
    """The remote cache's and the local lookups' counters, by name."""
    out: list[Sample] = []
    for k, v in sorted(counters.items()):
        if k in ("hit", "miss", "unavailable"):
            out.append(Sample("jitwarden_remote_requests_total", (("result", k),), v))
        elif k.startswith("reject:"):
            out.append(Sample("jitwarden_remote_rejects_total", (("reason", k[7:]),), v))
        elif k == "put":
            out.append(Sample("jitwarden_remote_puts_total", (), v))
        elif k in ("local-hit", "local-miss"):
            out.append(Sample("jitwarden_local_lookups_total", (("result", k[6:]),), v))
    return out


def _slots(quarantine: str) -> int:
    """How many slots a quarantine directory holds; OSError when it cannot be listed."""
    return sum(1 for e in os.scandir(quarantine) if e.is_dir(follow_symlinks=False))


def _partition_samples(kind: str, base: str, current: str | None) -> list[Sample]:
    """One partitioned kind's samples: its quarantined entries (the base's and every partition's; none
    when not even the base's quarantine could be listed and no partition's was), each partition's size,
    entries and last use."""
    out: list[Sample] = []
    try:
        q: int | None = _slots(os.path.join(base, QUARANTINE_DIR))
    except OSError:
        q = None
    parts = partition.list_partitions(base)
    for pdir, _info in parts:
        try:
            q = (q or 0) + _slots(os.path.join(pdir, QUARANTINE_DIR))
        except OSError:
            pass
    if q is not None:
        out.append(Sample("jitwarden_quarantined_entries", (("kind", kind), ("root", base)), q))
    for pdir, info in parts:
        digest = os.path.basename(pdir)
        size, n = _tree(pdir)
        labels = (
            ("kind", kind),
            ("root", base),
            ("partition", digest),
            ("current", "1" if digest == current else "0"),
        )
        out.append(Sample("jitwarden_partition_bytes", labels, size))
        out.append(Sample("jitwarden_partition_entries", labels, n))
        if info is not None and info.last_used:
            out.append(
                Sample("jitwarden_partition_last_used_timestamp_seconds", labels, info.last_used)
            )
    return out


def _esc(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(samples: list[Sample]) -> str:
    """The Prometheus text exposition format, one HELP/TYPE block per metric name."""
    lines = []
    by: dict[str, list[Sample]] = {}
    for s in samples:
        by.setdefault(s.name, []).append(s)
    for name in sorted(by):
        kind, help_ = _HELP.get(name, ("gauge", name))
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        for s in by[name]:
            lab = ",".join(f'{k}="{_esc(v)}"' for k, v in s.labels)
            val = (
                repr(float(s.value))
                if isinstance(s.value, float) and not float(s.value).is_integer()
                else str(int(s.value))
            )
            lines.append(f"{name}{{{lab}}} {val}" if lab else f"{name} {val}")
    return "\n".join(lines) + "\n"


def write_textfile(path: str, text: str) -> None:
    """Write ``path`` atomically, as the textfile collector requires (it may read at any moment).

    A random ``O_EXCL | O_NOFOLLOW`` temporary beside it, renamed by the directory's fd: a link
    planted at any name is never followed. :class:`MetricsError` in one line (and no temporary
    left behind) when ``path`` is a directory, its directory is missing, a file, or read-only.
    """
    try:
        fd, name = paths.open_parent(path)
    except (IsADirectoryError, NotADirectoryError, FileNotFoundError) as exc:
        raise MetricsError(_unwritable(path, exc, exc.filename or os.path.dirname(path))) from None
    try:
        atomic.write_atomic(fd, name, text.encode(), f".{name}.")
    except OSError as exc:
        raise MetricsError(_unwritable(path, exc)) from None
    finally:
        os.close(fd)


def _unwritable(path: str, exc: OSError, where: str | None = None) -> str:
    """One line for the metrics file ``path`` that cannot be written (pure); ``where``: the directory
    :func:`~jitwarden.store.paths.open_parent` could not reach (None once it was reached: then a write failed)."""
    if isinstance(exc, IsADirectoryError):
        return f"{path} is a directory; the metrics file must be a file"
    if where is None:
        return f"cannot write {path}: {(exc.strerror or str(exc)).lower()}"
    return (
        f"{where} is not a directory"
        if isinstance(exc, NotADirectoryError)
        else f"{where}: no such directory"
    )
