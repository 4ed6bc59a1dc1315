"""A workload's kernel record (issue 44): under ``JITWARDEN_RECORD=NAME`` every kernel hit and compile is one line.

The guard (Triton) and the torch hooks (Inductor's FX graphs, AOTAutograd) call :func:`hit` and
:func:`compiled`; each call appends one tuple to a buffer in memory (nothing else on a hit), and the
buffer goes to ``<jitwarden home>/records/<fingerprint digest>/<NAME>.jsonl`` in one append at exit
(``atexit``), or once it holds :data:`FLUSH_AT` events. The log is bounded (:data:`MAX_LOG`, its newest
lines kept: :mod:`jitwarden.store.appendlog`). Each line: ``start`` (one id for every process of one
start, ``JITWARDEN_RECORD_START``, which ``run --record`` sets), ``time``, ``kind`` (``triton``,
``inductor``, ``aot``, ``jax``, ``cupy``), ``key`` (the entry's name in its cache), ``name`` (the
kernel's), ``event`` (``hit`` | ``compile``) and ``seconds`` (what the compile cost). An FX graph or an
AOTAutograd graph is named by its order in the start (``graph 3``), and its compile line carries ``inputs``:
the hash torch gave each input of its key (:func:`key_inputs`, from the lines torch logs for the key), so
``doctor`` can say which input changed when a graph compiles again under a new key. ``coverage`` and
``doctor`` read it (:mod:`jitwarden.ops.workload`). Never raises: a record that cannot be written is
one warning.
"""

from __future__ import annotations

import json
import os
import re
import time

from jitwarden.model.layout import PARTITIONS_DIR, record_file, record_relpath
from jitwarden.model.settings import RECORD, RECORD_START, home_dir
from jitwarden.runtime.say import warn_once

SCHEMA = 1
MAX_LOG = 8 << 20
"""The bound of one workload's log: past it, it is rewritten as its newest lines (half of it)."""
FLUSH_AT = 4096
"""Events held in memory before they are appended (a workload of more kernels appends more than once)."""
KINDS = ("triton", "inductor", "aot", "jax", "cupy")

ON = False
"""Whether this process records (the ``RECORD`` setting names a workload): the callers test it before calling."""
_NAME: str | None = None
_START = ""
_BUF: list[tuple[str, str, str, str, float, float, dict | None]] = []
_HOOKED = False
_GRAPHS: dict[tuple[str, str], tuple[str, dict]] = {}
"""(kind, key) -> (the graph's name in this start, what its key was made of): :func:`key_inputs`."""
MAX_INPUTS = 256
"""Hashes one graph's record keeps: one per input of its key, then its items (each example input, each
``fx_kwargs`` item) while fewer are kept."""
MAX_ITEMS = 64
"""A list or dict input of more items than this (``inductor_config``) keeps only its digest."""
MAX_VALUE = 64
"""An input's value is kept beside its hash when its text is at most this long (a uuid, a flag, a version)."""
_LINE = re.compile(
    r"\[([^\]]{1,128})\] ([A-Za-z_][\w.]{0,127}(?:\[[^\]\n]{1,64}\])?): ?(.*)", re.DOTALL
)


def configure(env=None) -> bool:
    """Read ``JITWARDEN_RECORD`` from ``env`` (this process's environment): whether this process records now."""
    global ON, _NAME, _START, _HOOKED
    env = os.environ if env is None else env
    name = RECORD.text(env)
    if name is not None and record_file(name) is None:
        warn_once(
            "record-name",
            "jitwarden: %s=%r is no workload name (letters, digits, '.', '_', '-', '/'); "
            "nothing is recorded",
            RECORD.name,
            name,
        )
        name = None
    _NAME, ON = name, name is not None
    _START = RECORD_START.text(env) or f"{os.getpid()}-{int(time.time() * 1000)}"
    if ON and not _HOOKED:
        import atexit

        atexit.register(flush)
        _HOOKED = True
    return ON


def hit(kind: str, key: str, name: str) -> None:
    """Kernel ``key`` of ``kind`` was served from the cache."""
    _BUF.append((kind, key, name, "hit", 0.0, time.time(), None))
    if len(_BUF) >= FLUSH_AT:
        flush()


def compiled(kind: str, key: str, name: str, seconds: float, inputs: dict | None = None) -> None:
    """Kernel ``key`` of ``kind`` was compiled (a miss), costing ``seconds``; ``inputs``: what its key was made of."""
    _BUF.append((kind, key, name, "compile", seconds, time.time(), inputs))
    if len(_BUF) >= FLUSH_AT:
        flush()


def parse_key_lines(lines) -> dict:
    """``{"h": {input: its hash}, "v": {input: its value}}`` of the lines torch logs for an FX graph's or an
    AOTAutograd graph's key (``[hash] name: value``, ``[hash] name[item]: value``; pure). Every input of the
    key has one hash: a list or dict input (``inductor_config``: hundreds of items) the digest of its items'
    hashes, and its items each their own while the record holds fewer than :data:`MAX_INPUTS` (those of
    inputs of at most :data:`MAX_ITEMS` items; ``"more"`` counts the items left out). A value is kept only
    when short (:data:`MAX_VALUE`) and printable; a line of no such shape is skipped."""
    import hashlib

    groups: dict[str, list[tuple[str, str, str]]] = {}
    for line in lines if isinstance(lines, (list, tuple)) else ():
        m = _LINE.match(line) if isinstance(line, str) else None
        if m is not None:
            h, name, value = m.groups()
            groups.setdefault(name.split("[", 1)[0], []).append((name, h, value))
    hashes: dict[str, str] = {}
    values: dict[str, str] = {}
    more = 0

    def keep(name: str, h: str, value: str | None) -> None:
        hashes[name] = h[:12]
        if value is not None and len(value) <= MAX_VALUE and value.isprintable():
            values[name] = value

    for attr, items in groups.items():
        if len(items) == 1 and items[0][0] == attr:
            keep(attr, items[0][1], items[0][2])
            continue
        keep(attr, hashlib.sha256("|".join(h for _n, h, _v in items).encode()).hexdigest(), None)
        if len(items) > MAX_ITEMS:
            more += len(items)
            continue
        for name, h, value in items:
            if len(hashes) < MAX_INPUTS:
                keep(name, h, value)
            else:
                more += 1
    return {"h": hashes, "v": values, **({"more": str(more)} if more else {})}


def key_inputs(kind: str, key, lines) -> None:
    """Torch computed ``key`` for a graph of ``kind`` (``inductor``, ``aot``) from the inputs ``lines`` name: the
    graph is named by its order in this start, the first time its key is seen."""
    if isinstance(key, str) and (kind, key) not in _GRAPHS:
        n = sum(k == kind for k, _ in _GRAPHS) + 1
        _GRAPHS[(kind, key)] = (f"graph {n}", parse_key_lines(lines))


def graph_name(kind: str, key: str) -> str:
    """The name of the graph of ``kind`` whose key is ``key`` in this start (``graph 3``); ``kind`` when the key
    was computed where no hook saw it."""
    got = _GRAPHS.get((kind, key))
    return got[0] if got else kind


def graph_inputs(kind: str, key: str) -> dict | None:
    """What the key ``key`` of a graph of ``kind`` was made of (:func:`parse_key_lines`), None when unseen or
    when torch listed no inputs (AOTAutograd lists them only under debug logging)."""
    got = _GRAPHS.get((kind, key))
    return got[1] if got and got[1]["h"] else None


def digest(env=None) -> str:
    """The fingerprint digest of this process's partitions (the record's directory), ``unpartitioned`` without one."""
    env = os.environ if env is None else env
    for var in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR"):
        parent, leaf = os.path.split((env.get(var) or "").rstrip(os.sep))
        if leaf and os.path.basename(parent) == PARTITIONS_DIR:
            return leaf
    return "unpartitioned"


def path_of(workload: str, fp_digest: str, env=None) -> str | None:
    """Where workload ``workload``'s record for fingerprint ``fp_digest`` lives (None: no valid name)."""
    rel = record_relpath(workload, fp_digest)
    env = os.environ if env is None else env
    return None if rel is None else os.path.join(home_dir(env), rel)


def lines(events, start: str) -> bytes:
    """The log lines of ``events`` (pure): one JSON object a line."""
    out = []
    for kind, key, name, event, seconds, when, inputs in events:
        doc = {
            "v": SCHEMA,
            "start": start,
            "time": round(when, 3),
            "kind": kind,
            "key": key,
            "name": name,
            "event": event,
            "seconds": round(seconds, 4),
        }
        if inputs:
            doc["inputs"] = inputs
        out.append(json.dumps(doc, separators=(",", ":")))
    return ("\n".join(out) + "\n").encode() if out else b""


def flush() -> None:
    """Append what is buffered to this workload's log; one warning when it cannot be written."""
    if not _BUF or _NAME is None:
        return
    events = list(_BUF)
    del _BUF[:]
    try:
        from jitwarden.store.appendlog import append

        where = path_of(_NAME, digest())
        if where is not None:
            append(where, lines(events, _START), max_bytes=MAX_LOG)
    except Exception as exc:
        warn_once(
            "record-write",
            "jitwarden: cannot write the kernel record of %s (%s); nothing more is recorded",
            _NAME,
            exc,
        )


configure()
