"""Human ages and sizes on the command line: ``7d``, ``12h``, ``30m``, ``90s``; ``500M``, ``2G`` (pure)."""

from __future__ import annotations

import re

_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_age(text: str) -> float:
    """Seconds in ``text`` (``7d``, ``12h``, ``30m``, ``90s``, ``2w``, or a bare number of seconds); ValueError otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", str(text).lower())
    if not m:
        raise ValueError(f"{text!r} is not an age (use e.g. 7d, 12h, 30m, 90s)")
    return float(m.group(1)) * _AGE_UNITS[m.group(2) or "s"]


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


def display(text: str) -> str:
    """A path or name safe to print on one line: undecodable bytes as ``\\xNN``, control characters escaped."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "backslashreplace")
    else:
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
