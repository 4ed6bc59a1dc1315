"""A recorded workload's kernel list (issue 44): the lines ``run --record`` wrote, read back as typed records.

:mod:`jitwarden.runtime.record` appends the lines; this module reads them (bounded, a malformed line
skipped and counted), folds them into one :class:`Kernel` per cache key, and gives the summary a bundle
carries (:func:`summary`) and what a node learns from one (:func:`learn`: one ``listed`` line per kernel).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from jitwarden.formats import jsonlimits
from jitwarden.model.asjson import fields_json
from jitwarden.model.layout import RECORD_SUFFIX, RECORDS_DIR, record_file, record_relpath
from jitwarden.model.settings import home_dir
from jitwarden.store import appendlog, reads

MAX_LOG = 8 << 20
"""As :data:`jitwarden.runtime.record.MAX_LOG`: the bound a log is read with."""
EVENTS = ("hit", "compile", "listed")
MAX_LISTED = 200_000
"""Kernels one bundle's summary may list."""


@dataclass(frozen=True, kw_only=True)
class Event:
    """One line of a record: kernel ``key`` of ``kind`` named ``name`` was served (``hit``), compiled
    (``compile``, costing ``seconds``) or named by a bundle (``listed``) in start ``start``; ``inputs``: for a
    graph's compile, the hash of each input of its key (and the short values), None when not recorded."""

    start: str
    time: float
    kind: str
    key: str
    name: str
    event: str
    seconds: float = 0.0
    inputs: dict | None = None


@dataclass(frozen=True, kw_only=True)
class Kernel:
    """One kernel of a workload: its cache key, the compile time it cost (its latest compile's), its counts."""

    kind: str
    key: str
    name: str
    seconds: float
    hits: int
    compiles: int

    def to_json(self) -> dict:
        return fields_json(self, seconds=round(self.seconds, 4))


@dataclass(frozen=True, kw_only=True)
class Workload:
    """A workload's record for one fingerprint digest: its events in order, and lines that could not be read."""

    name: str
    digest: str
    events: tuple[Event, ...]
    skipped: int = 0

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        """One :class:`Kernel` per (kind, key), in the order first seen."""
        acc: dict[tuple[str, str], dict] = {}
        for e in self.events:
            k = acc.setdefault(
                (e.kind, e.key),
                {
                    "kind": e.kind,
                    "key": e.key,
                    "name": e.name,
                    "seconds": 0.0,
                    "hits": 0,
                    "compiles": 0,
                },
            )
            if e.event == "hit":
                k["hits"] += 1
            elif e.event == "compile":
                k["compiles"] += 1
                k["seconds"] = e.seconds
            elif not k["compiles"]:
                k["seconds"] = e.seconds  # listed: the builder's compile time
        return tuple(Kernel(**k) for k in acc.values())

    @property
    def starts(self) -> tuple[str, ...]:
        """The starts that hit or compiled, in order (``listed`` lines are none)."""
        return tuple(dict.fromkeys(e.start for e in self.events if e.event != "listed"))


def _event(doc) -> Event | None:
    if not isinstance(doc, dict):
        return None
    try:
        e = Event(
            start=str(doc["start"]),
            time=float(doc.get("time", 0.0)),
            kind=str(doc["kind"]),
            key=str(doc["key"]),
            name=str(doc.get("name") or ""),
            event=str(doc["event"]),
            seconds=max(0.0, float(doc.get("seconds", 0.0))),
            inputs=_inputs(doc.get("inputs")),
        )
    except (KeyError, TypeError, ValueError):
        return None
    return e if e.event in EVENTS and e.key else None


def _inputs(doc) -> dict | None:
    """A record line's ``inputs`` (``{"h": {name: hash}, "v": {name: value}}``, every name and value a
    string), else None: anything of another shape, as another writer may leave, is no inputs (pure)."""
    if not isinstance(doc, dict):
        return None
    h, v = doc.get("h"), doc.get("v", {})
    if not isinstance(h, dict) or not isinstance(v, dict):
        return None
    pairs = [*h.items(), *v.items()]
    if not all(isinstance(a, str) and isinstance(b, str) for a, b in pairs):
        return None
    more = doc.get("more")
    return {
        "h": dict(h),
        "v": {k: x for k, x in v.items() if k in h},
        **({"more": more} if isinstance(more, str) and more.isdigit() else {}),
    }


def parse(raw: bytes) -> tuple[tuple[Event, ...], int]:
    """(the events of a log's bytes, how many lines were skipped as not a record line) (pure)."""
    out, skipped = [], 0
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            e = _event(jsonlimits.loads(line, max_depth=4, max_bytes=len(line)))
        except (ValueError, UnicodeDecodeError):
            e = None
        if e is None:
            skipped += 1
        else:
            out.append(e)
    return tuple(out), skipped


def path_of(name: str, digest: str, env=None) -> str | None:
    rel = record_relpath(name, digest)
    return None if rel is None else os.path.join(home_dir(os.environ if env is None else env), rel)


def load(name: str, digest: str, env=None) -> Workload | None:
    """Workload ``name``'s record for fingerprint ``digest``; None when there is none (or no such name)."""
    path = path_of(name, digest, env)
    if path is None:
        return None
    try:
        raw = reads.read_bytes(path, max_bytes=MAX_LOG)
    except FileNotFoundError:
        return None
    events, skipped = parse(raw)
    return Workload(name=name, digest=digest, events=events, skipped=skipped)


def recorded(env=None, digest: str | None = None) -> list[tuple[str, str]]:
    """(digest, workload file stem) of every record under jitwarden's home (of ``digest`` only, when given)."""
    top = os.path.join(home_dir(os.environ if env is None else env), RECORDS_DIR)
    out = []
    try:
        digests = sorted(os.listdir(top)) if digest is None else [digest]
    except OSError:
        return []
    for d in digests:
        try:
            names = sorted(os.listdir(os.path.join(top, d)))
        except OSError:
            continue
        out += [(d, n[: -len(RECORD_SUFFIX)]) for n in names if n.endswith(RECORD_SUFFIX)]
    return out


def find(name: str, digest: str, env=None) -> Workload | None:
    """Workload ``name``'s record for ``digest``, else the newest record of that name under another digest."""
    here = load(name, digest, env)
    if here is not None or record_file(name) is None:
        return here
    stem = record_file(name)[: -len(RECORD_SUFFIX)]  # type: ignore[index]
    others = [load(name, d, env) for d, n in recorded(env) if n == stem and d != digest]
    found = [w for w in others if w is not None and w.events]
    return max(found, key=lambda w: w.events[-1].time) if found else None


def merged(name: str, env=None) -> Workload | None:
    """Workload ``name``'s records under every fingerprint digest, as one, its events in time order: a start
    under another fingerprint (an environment variable of the fingerprint changed) is one of its starts too."""
    stem = record_file(name)
    if stem is None:
        return None
    stem = stem[: -len(RECORD_SUFFIX)]
    parts = [load(name, d, env) for d, n in recorded(env) if n == stem]
    found = [w for w in parts if w is not None]
    if not found:
        return None
    events = sorted((e for w in found for e in w.events), key=lambda e: e.time)
    return Workload(
        name=name,
        digest=found[0].digest,
        events=tuple(events),
        skipped=sum(w.skipped for w in found),
    )


# ---------------------------------------------------------------- what a bundle carries


def summary(w: Workload) -> list[dict]:
    """The kernel list a bundle's manifest carries for ``w`` (pure): kind, key, name and compile seconds."""
    return [
        {"kind": k.kind, "key": k.key, "name": k.name, "seconds": round(k.seconds, 4)}
        for k in w.kernels
    ]


def from_summary(name: str, digest: str, rows, start: str = "bundle") -> Workload:
    """The workload a bundle's summary describes (pure): one ``listed`` event per kernel; bad rows skipped."""
    events, skipped = [], 0
    for row in (rows if isinstance(rows, list) else [])[:MAX_LISTED]:
        e = _event(dict(row, start=start, event="listed")) if isinstance(row, dict) else None
        if e is None:
            skipped += 1
        else:
            events.append(e)
    return Workload(name=name, digest=digest, events=tuple(events), skipped=skipped)


def learn(w: Workload, env=None) -> str | None:
    """Add the kernels of ``w`` (from a bundle) to this node's record of ``w.name``: what ``coverage`` reads
    after a pull. The path written, None for a name that cannot be one; OSError when it cannot be written."""
    import json

    path = path_of(w.name, w.digest, env)
    if path is None:
        return None
    rows = [
        json.dumps(
            {
                "v": 1,
                "start": e.start,
                "time": e.time,
                "kind": e.kind,
                "key": e.key,
                "name": e.name,
                "event": "listed",
                "seconds": e.seconds,
            },
            separators=(",", ":"),
        )
        for e in w.events
    ]
    appendlog.append(path, ("\n".join(rows) + "\n").encode(), max_bytes=MAX_LOG)
    return path
