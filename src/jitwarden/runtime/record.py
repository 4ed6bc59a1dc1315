"""A workload's kernel record (issue 44): under ``JITWARDEN_RECORD=NAME`` every kernel hit and compile is one line.

The guard (Triton) and the torch hooks (Inductor's FX graphs, AOTAutograd) call :func:`hit` and
:func:`compiled`; each call appends one tuple to a buffer in memory (nothing else on a hit), and the
buffer goes to ``<jitwarden home>/records/<fingerprint digest>/<NAME>.jsonl`` in one append at exit
(``atexit``), or once it holds :data:`FLUSH_AT` events. The log is bounded (:data:`MAX_LOG`, its newest
lines kept: :mod:`jitwarden.store.appendlog`). Each line: ``start`` (one id for every process of one
start, ``JITWARDEN_RECORD_START``, which ``run --record`` sets), ``time``, ``kind`` (``triton``,
``inductor``, ``aot``, ``jax``, ``cupy``), ``key`` (the entry's name in its cache), ``name`` (the
kernel's), ``event`` (``hit`` | ``compile``) and ``seconds`` (what the compile cost). ``coverage`` and
``doctor`` read it (:mod:`jitwarden.ops.workload`). Never raises: a record that cannot be written is
one warning.
"""

from __future__ import annotations

import json
import os
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
_BUF: list[tuple[str, str, str, str, float, float]] = []
_HOOKED = False


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
    _BUF.append((kind, key, name, "hit", 0.0, time.time()))
    if len(_BUF) >= FLUSH_AT:
        flush()


def compiled(kind: str, key: str, name: str, seconds: float) -> None:
    """Kernel ``key`` of ``kind`` was compiled (a miss), costing ``seconds``."""
    _BUF.append((kind, key, name, "compile", seconds, time.time()))
    if len(_BUF) >= FLUSH_AT:
        flush()


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
    for kind, key, name, event, seconds, when in events:
        out.append(
            json.dumps(
                {
                    "v": SCHEMA,
                    "start": start,
                    "time": round(when, 3),
                    "kind": kind,
                    "key": key,
                    "name": name,
                    "event": event,
                    "seconds": round(seconds, 4),
                },
                separators=(",", ":"),
            )
        )
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
