"""JSON from files others may write: bounded in size and nesting depth (stdlib only).

``json.loads`` recurses once per nesting level, so 100,000 ``[`` raise RecursionError
from deep inside a scan. :func:`loads` refuses such input up front with a ValueError
(what every caller already catches for malformed JSON), naming why.
"""

from __future__ import annotations

import json
import re

MAX_DEPTH = 64
"""Deeper than anything jitwarden or the caches it reads write (Triton metadata: 3; vLLM factors: ~8)."""

MAX_BYTES = 64 << 20
"""Larger than any cache JSON we read (the biggest seen: vLLM factors, ~100 KB)."""

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKETS = re.compile(rb"[\[\]{}]")


class JsonLimitError(ValueError):
    """The JSON is larger or nested deeper than we read."""


def depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in ``data``, brackets inside strings not counted."""
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH:  # the usual case: cannot be too deep
        return data.count(b"[") + data.count(b"{")
    deepest = level = 0
    for m in _BRACKETS.finditer(_STRING.sub(b'""', data)):
        if m.group() in (b"[", b"{"):
            level += 1
            deepest = max(deepest, level)
        else:
            level -= 1
    return deepest


def loads(data, *, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BYTES):
    """``json.loads`` for untrusted bytes or text; JsonLimitError (a ValueError) past the limits."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise JsonLimitError(f"JSON of {len(raw)} bytes is larger than the {max_bytes} read")
    d = depth(raw)
    if d > max_depth:
        raise JsonLimitError(f"JSON nested deeper than {max_depth} levels ({d}); not parsed")
    try:
        return json.loads(data)
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise JsonLimitError("JSON nested too deep to parse") from None
