"""Prometheus textfile metrics (node-exporter textfile collector): remote and local cache traffic,
rejects by reason, quarantines, partitions and their bytes, the last verify.

Counters come from the files the remote cache writes per process (``<jitwarden home>/stats/
remote-<pid>.json``) and summed here; the rest is read from disk when the metrics are made.
``jitwarden verify`` records its time and result in ``<jitwarden home>/stats/last-verify.json``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from jitwarden.store import partition
from jitwarden.store.fsutil import memo_dir, write_json_atomic
from jitwarden.model.layout import QUARANTINE_DIR, is_reserved
from jitwarden.env.locations import PARTITION_VARS, default_base

LAST_VERIFY = "last-verify.json"


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple  # ((label, value), ...)
    value: float


_HELP = {
    "jitwarden_remote_requests_total": ("counter", "Remote cache lookups per file, by result (hit, miss, unavailable)."),
    "jitwarden_remote_rejects_total": ("counter", "Remote cache values refused, by reason (never loaded)."),
    "jitwarden_remote_puts_total": ("counter", "Signed values stored in the remote cache (writer role)."),
    "jitwarden_local_lookups_total": ("counter", "Local kernel cache lookups of processes with the remote cache on."),
    "jitwarden_quarantined_entries": ("gauge", "Entries moved into a cache root's quarantine."),
    "jitwarden_partition_bytes": ("gauge", "Bytes in one fingerprint partition of a cache root."),
    "jitwarden_partition_entries": ("gauge", "Entries in one fingerprint partition of a cache root."),
    "jitwarden_partition_last_used_timestamp_seconds": ("gauge", "When activation last used the partition."),
    "jitwarden_last_verify_timestamp_seconds": ("gauge", "When `jitwarden verify` last finished."),
    "jitwarden_last_verify_errors": ("gauge", "Entries at error level in the last `jitwarden verify`."),
}


def record_verify(summary: dict, env=None) -> None:
    """Remember when verify ran and what it found (never fails the command)."""
    try:
        d = os.path.join(memo_dir(env), "stats")
        os.makedirs(d, exist_ok=True)
        write_json_atomic(os.path.join(d, LAST_VERIFY), {"schema": 1, "time": time.time(),
                                                          "errors": summary.get("errors", 0),
                                                          "entries": summary.get("entries", 0)}, ".last-verify.")
    except OSError:
        pass


def remote_counters(env=None) -> dict:
    d = os.path.join(memo_dir(env), "stats")
    total: dict = {}
    try:
        names = os.listdir(d)
    except OSError:
        return total
    for n in names:
        if not (n.startswith("remote-") and n.endswith(".json")):
            continue
        try:
            with open(os.path.join(d, n)) as f:
                for k, v in json.load(f)["counters"].items():
                    if isinstance(v, int):
                        total[k] = total.get(k, 0) + v
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return total


def _tree(path: str) -> tuple[int, int]:
    """(bytes, top-level entries) of a directory, never following links."""
    size = 0
    for d, dirs, files in os.walk(path):
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


def collect(env=None, current: str | None = None) -> list[Sample]:
    env = os.environ if env is None else env
    out: list[Sample] = []
    c = remote_counters(env)
    for k, v in sorted(c.items()):
        if k in ("hit", "miss", "unavailable"):
            out.append(Sample("jitwarden_remote_requests_total", (("result", k),), v))
        elif k.startswith("reject:"):
            out.append(Sample("jitwarden_remote_rejects_total", (("reason", k[7:]),), v))
        elif k == "put":
            out.append(Sample("jitwarden_remote_puts_total", (), v))
        elif k in ("local-hit", "local-miss"):
            out.append(Sample("jitwarden_local_lookups_total", (("result", k[6:]),), v))
    for kind, var in PARTITION_VARS:
        cur = env.get(var)
        base = partition.base_of(cur) if cur else default_base(kind, env)
        try:
            q = sum(1 for e in os.scandir(os.path.join(base, QUARANTINE_DIR)) if e.is_dir(follow_symlinks=False))
        except OSError:
            q = None
        parts = partition.list_partitions(base)
        for pdir, _info in parts:
            try:
                q = (q or 0) + sum(1 for e in os.scandir(os.path.join(pdir, QUARANTINE_DIR))
                                   if e.is_dir(follow_symlinks=False))
            except OSError:
                pass
        if q is not None:
            out.append(Sample("jitwarden_quarantined_entries", (("kind", kind), ("root", base)), q))
        for pdir, info in parts:
            digest = os.path.basename(pdir)
            size, n = _tree(pdir)
            labels = (("kind", kind), ("root", base), ("partition", digest),
                      ("current", "1" if digest == current else "0"))
            out.append(Sample("jitwarden_partition_bytes", labels, size))
            out.append(Sample("jitwarden_partition_entries", labels, n))
            if info is not None and info.last_used:
                out.append(Sample("jitwarden_partition_last_used_timestamp_seconds", labels, info.last_used))
    try:
        with open(os.path.join(memo_dir(env), "stats", LAST_VERIFY)) as f:
            lv = json.load(f)
        out.append(Sample("jitwarden_last_verify_timestamp_seconds", (), float(lv["time"])))
        out.append(Sample("jitwarden_last_verify_errors", (), int(lv["errors"])))
    except (OSError, ValueError, KeyError, TypeError):
        pass
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
            val = repr(float(s.value)) if isinstance(s.value, float) and not float(s.value).is_integer() else \
                str(int(s.value))
            lines.append(f"{name}{{{lab}}} {val}" if lab else f"{name} {val}")
    return "\n".join(lines) + "\n"


def write_textfile(path: str, text: str) -> None:
    """Atomically, as the textfile collector requires (it may read at any moment)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
