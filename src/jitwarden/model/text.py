"""Human text, both ways (pure): ages and sizes read from options, and written for people.

Reading: one parser for every option that takes an age (``--older-than``, ``--orphan-age``,
``--lock-timeout``, ``quarantine empty/purge --older-than``): an age needs a unit, so
``--older-than 7`` is refused instead of meaning seconds to one command and days to
another. ``0`` needs none. A size without a unit is bytes (sizes never meant anything else).

Writing: :func:`human_size` (``1.5 GiB``) and :func:`human_duration` (``3d``) for every
table, plan and message, and :func:`display` for any name or path that came from a disk.
"""

from __future__ import annotations

import math
import re
import time

AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_AGE_RE = re.compile(
    r"\s*(\d+(?:\.\d+)?)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|d|days?|w|weeks?)?\s*"
)


def parse_age(text: str, bare_unit: str | None = None) -> float:
    """Seconds in ``text`` (``7d``, ``12h``, ``30m``, ``90s``, ``2w``; ``0``); ValueError with a one-line reason.

    ``bare_unit``: the unit of a number given without one (only for settings whose documented
    form is a bare number, like ``JITWARDEN_ORPHAN_AGE`` in seconds); None: a unit is required.
    """
    s = str(text).strip().lower()
    m = _AGE_RE.fullmatch(s)
    if not m:
        if s.startswith("-"):
            raise ValueError(f"{text}: an age cannot be negative")
        raise ValueError(f"{text!r} is not an age (use e.g. 7d, 12h, 30m, 90s)")
    n, unit = float(m.group(1)), m.group(2)
    if unit is None:
        if n == 0:
            return 0.0
        if bare_unit is None:
            raise ValueError(
                f"{text}: an age needs a unit ({m.group(1)}s, {m.group(1)}m, {m.group(1)}h, "
                f"{m.group(1)}d or {m.group(1)}w)"
            )
        unit = bare_unit
    return n * AGE_UNITS[unit[0]]


def parse_size(text: str) -> int:
    """Bytes in ``text`` (``500M``, ``2G``, ``1.5GiB``, ``100k``, or a bare number of bytes); ValueError otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", str(text).lower())
    if not m:
        raise ValueError(f"{text!r} is not a size (use e.g. 500M, 2G, 1.5GiB)")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def age_arg(text: str) -> float:
    """argparse ``type=`` for an age: a bad value is a one-line usage error."""
    import argparse

    try:
        return parse_age(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def size_arg(text: str) -> int:
    """argparse ``type=`` for a size."""
    import argparse

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def human_size(n: float) -> str:
    """``512 B``, ``1.5 KiB``, ``2.0 GiB``, ``3.1 TiB``: a byte count in binary units."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def human_duration(seconds: float) -> str:
    """``3d``, ``5h``, ``12m``, ``40s``: the largest unit that fits, in whole units rounded down.

    A negative duration (a clock step, a file from the future) reads ``0s``; one that is not
    finite reads ``-``.
    """
    if not math.isfinite(seconds):
        return "-"
    s = max(0.0, seconds)
    for unit in ("d", "h", "m"):
        if s >= AGE_UNITS[unit]:
            return f"{int(s // AGE_UNITS[unit])}{unit}"
    return f"{int(s)}s"


def iso_time(t: float) -> str:
    """A Unix time as UTC ``YYYY-MM-DDTHH:MM:SSZ`` (pure)."""
    import time as _time

    return _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime(t))


def human_age(mtime: float | None, now: float | None = None) -> str:
    """How long ago the time stamp ``mtime`` was (:func:`human_duration`); ``-`` when unknown (0 or None)."""
    if not mtime:
        return "-"
    return human_duration((time.time() if now is None else now) - mtime)


def display(text: str) -> str:
    """A path or name safe to print on one line: undecodable bytes as ``\\xNN``, control characters escaped."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "backslashreplace")
    else:
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 entry``, ``2 entries``, ``0 segments``: a count with its noun in the right number (pure)."""
    if n == 1:
        return f"{n} {word}"
    if many is None:
        many = (
            word[:-1] + "ies" if word.endswith("y") and word[-2:-1] not in "aeiou" else word + "s"
        )
    return f"{n} {many}"
