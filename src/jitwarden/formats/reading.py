"""What every reader of a cache file's bytes says besides the facts it read (stdlib only).

A reader returns a frozen dataclass of its format's facts built on :class:`Reading`: ``problem`` is
damage the bytes prove (an adapter's ``corrupt``, or ``mismatch``), ``unknown`` what the reader did not
understand (``unrecognised``, never an error: design.md §3). See ARCHITECTURE.md ("How to add … A cache kind").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Reading:
    """A reader's verdict on the bytes: ``problem`` (damage) or ``unknown`` (not understood), or neither."""

    problem: str | None = None
    unknown: str | None = None
