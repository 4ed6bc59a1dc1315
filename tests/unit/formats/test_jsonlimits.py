"""The CLI's scans parse cache JSON with orjson first (issue 25); whatever it accepts must give the value the
standard library gives, and whatever it refuses the standard library decides: the same value or the same error."""

from __future__ import annotations

import json

import pytest

from jitwarden.formats import jsonlimits

orjson = pytest.importorskip("orjson")

CASES = [
    b'{"name": "add_kernel", "target": {"backend": "cuda", "arch": 90, "warp_size": 32}, "num_warps": 4}',
    b'{"a": 1, "a": 2, "b": [1, 2.5, -0.0, 1e2, 1E-7, true, false, null]}',  # duplicate key: the last wins
    b'{"big": 123456789012345678901234567890}',  # beyond 64 bits: orjson reads a float, the stdlib an int
    b'{"u64": [18446744073709551615, 18446744073709551616, -9223372036854775808, -9223372036854775809]}',
    b'{"f": [0.1, 2.2250738585072011e-308, 4.9e-324, 1e23, 9007199254740993.0, 1.7976931348623157e308, 1e400]}',
    b'{"x": NaN, "y": Infinity}',  # not JSON; the stdlib takes it
    b'{"s": "\\ud800 lone surrogate"}',  # orjson refuses a lone surrogate; the stdlib keeps it
    b'{"s": "caf\\u00e9 \xc3\xa9 \\"q\\" \\n"}',
    b'\xef\xbb\xbf{"bom": 1}',  # a UTF-8 byte order mark: the stdlib skips it
    '{"utf16": 1}'.encode("utf-16"),
    b'{"cut": [1, 2',
    b'{"ctl": "a\x01b"}',  # a raw control character: refused by both
    b"\xff\xfe garbage",
    b"",
    b"[1, 2, 3]",
    b'{"n": 1}   \n',
    b'{"n": 1} trailing',
    b'{"deep": ' + b"[" * 70 + b"]" * 70 + b"}",  # past MAX_DEPTH: refused before either parser
    b'{"\xed\xa0\x80": 1}',  # an encoded surrogate (invalid UTF-8): the stdlib's surrogatepass reads it
]


def outcome(data: bytes):
    try:
        v = jsonlimits.loads(data)
        return ("value", json.dumps(v, sort_keys=False, allow_nan=True), type(v).__name__)
    except (ValueError, UnicodeDecodeError) as exc:
        return ("error", type(exc).__name__)


@pytest.mark.parametrize("data", CASES)
def test_fast_decoder_gives_what_the_standard_library_gives(data, monkeypatch):
    monkeypatch.setattr(jsonlimits, "_FAST", None)
    plain = outcome(data)
    jsonlimits.use_fast_decoder(orjson.loads)
    assert outcome(data) == plain
