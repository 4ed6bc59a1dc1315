"""JSON from files others may write: bounded in size and nesting depth (stdlib only).

``json.loads`` recurses once per nesting level, so 100,000 ``[`` raise RecursionError
from deep inside a scan. :func:`loads` refuses such input up front with a ValueError
(what every caller already catches for malformed JSON), naming why.
"""

from __future__ import annotations

import json
import re

from jitwarden.model.errors import JitwardenError

TYPE_CHECKING = False  # mypy takes it as true; typing stays off the activation path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

MAX_DEPTH = 64
"""Deeper than anything jitwarden or the caches it reads write (Triton metadata: 3; vLLM factors: ~8)."""

MAX_BYTES = 64 << 20
"""Larger than any cache JSON we read (the biggest seen: vLLM factors, ~100 KB)."""

_BRACKETS_ONLY = (
    None  # (strings, empty pairs, non-brackets), built on the first input that looks deep:
)
# activation reads partition info through here in every process, and compiling costs more than the rest


def _brackets_only() -> tuple[Any, ...]:
    global _BRACKETS_ONLY
    if _BRACKETS_ONLY is None:  # two threads at once build the same tuple twice, harmlessly
        _BRACKETS_ONLY = (
            re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL),
            re.compile(rb"\[\]|\{\}"),
            bytes(b for b in range(256) if b not in b"[]{}"),
        )
    return _BRACKETS_ONLY


# the scanner json.loads runs (same decoder settings), called directly; neither is in typeshed
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_BLANKS = json.decoder.WHITESPACE.match  # type: ignore[attr-defined]


class JsonLimitError(JitwardenError, ValueError):
    """The JSON is larger or nested deeper than we read."""


_FAST = None  # a C decoder the CLI hands in (use_fast_decoder); the runtime never does: it stays stdlib only
_DIGITS = bytes(
    48 if 48 <= b <= 57 else 46 for b in range(256)
)  # bytes.translate: each digit to "0", the rest "."
_LONG_NUMBER = (
    b"0" * 20
)  # 20 digits in a row: maybe an integer past 64 bits, which orjson reads as a float


def use_fast_decoder(decode: Callable[[bytes], Any] | None) -> None:
    """Parse UTF-8 bytes with ``decode`` (``orjson.loads``) first, the standard library deciding whatever it
    refuses: the same value (orjson accepts only strict JSON: UTF-8, no NaN, no lone surrogate; it builds the
    same dict, last key winning, and the same correctly rounded floats) or the same error. A document with 20
    digits in a row goes to the standard library alone: orjson reads an integer past 64 bits as a float.
    The limits are checked before either. For the CLI's scans (``verify --quick``: two JSON files per Triton
    entry, ~4x faster); None: the standard library alone."""
    global _FAST
    _FAST = decode


def deeper_than(data: bytes, max_depth: int) -> bool:
    """Whether arrays and objects in ``data`` nest deeper than ``max_depth`` (brackets inside strings not counted).

    Strings and everything but brackets are dropped, then innermost pairs are removed one
    level per pass (C-speed regex passes, at most ``max_depth`` of them). Unbalanced
    brackets (not JSON at all) count as too deep when more than ``max_depth`` are left.
    """
    if data.count(b"[") + data.count(b"{") <= max_depth:  # the usual case: cannot be too deep
        return False
    strings, pairs, not_bracket = _brackets_only()
    brackets = strings.sub(b"", data).translate(None, not_bracket)
    for _ in range(max_depth):
        if not brackets:
            return False
        shorter = pairs.sub(b"", brackets)
        if (
            shorter == brackets
        ):  # unbalanced: not JSON either way; refuse it here when it could recurse deep
            return len(brackets) > max_depth
        brackets = shorter
    return bool(brackets)


def loads(data: bytes | str, *, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BYTES) -> Any:
    """``json.loads`` for untrusted bytes or text; JsonLimitError (a ValueError) past the limits."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise JsonLimitError(f"JSON of {len(raw)} bytes is larger than the {max_bytes} read")
    if deeper_than(raw, max_depth):
        raise JsonLimitError(f"JSON nested deeper than {max_depth} levels; not parsed")
    if _FAST is not None and type(data) is bytes and _LONG_NUMBER not in data.translate(_DIGITS):
        try:
            return _FAST(data)
        except Exception:
            pass
    try:
        if type(data) is bytes and data[:1] == b"{" and data[1:2] != b"\0":
            found, value = _scanned(data)
            if found:
                return value
        return json.loads(data)
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise JsonLimitError("JSON nested too deep to parse") from None


def _scanned(data: bytes) -> tuple[bool, Any]:
    """json.loads' own steps for UTF-8 bytes that open an object (every cache's JSON), without its encoding
    sniffing and wrappers: (True, the scanner's value) when the rest is blank; (False, None) when json.loads
    must decide (the same value, or the same error)."""
    text = data.decode("utf-8", "surrogatepass")
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        end = -1
    if end == len(text) or (end > 0 and _BLANKS(text, end).end() == len(text)):
        return True, value
    return False, None
