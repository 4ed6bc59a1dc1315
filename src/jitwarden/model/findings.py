"""The fixed finding vocabulary shared by every command.

An error needs positive evidence of damage: a checksum that contradicts a seal, a file of a
format we fully know that breaks an invariant of that format, two facts of one entry that
contradict each other, a rebuild that differs in code. What jitwarden does not fully recognise
(a format, a flavour, a version, a producer) is ``unrecognised``: info, never ``corrupt`` or
``stale``, and the message says what was not understood.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Severity(enum.IntEnum):
    INFO = 0
    WARN = 1
    ERROR = 2

    def __str__(self) -> str:
        return self.name.lower()


CODES: dict[str, Severity] = {
    "corrupt": Severity.ERROR,
    "mismatch": Severity.ERROR,
    "foreign-path": Severity.ERROR,
    "incomplete": Severity.ERROR,
    "not-reproducible": Severity.ERROR,
    "unsafe": Severity.ERROR,
    "foreign-arch": Severity.INFO,
    "stale": Severity.WARN,
    "orphan": Severity.WARN,
    "unverifiable": Severity.WARN,
    "unrecognised": Severity.INFO,
}

MEANING: dict[str, str] = {
    "corrupt": "unreadable, truncated or unparseable files of a format jitwarden fully knows, or a checksum "
               "that does not match",
    "mismatch": "the entry contradicts itself (cubin SM vs recorded target, kernel symbol vs name)",
    "foreign-path": "a group file points outside its own entry (a copied cache)",
    "incomplete": "a file the entry lists is missing",
    "not-reproducible": "rebuilding from the entry's own PTX with the current toolchain gives different code",
    "unsafe": "a symlink leaving the root, a world-writable or foreign-owned file: nothing a clean may follow",
    "foreign-arch": "built for another GPU than the one judged against: harmless, unreachable here",
    "stale": "built by another toolchain, package version, driver or Python than this environment uses",
    "orphan": "leftovers of an interrupted write",
    "unverifiable": "a rebuild was asked for but cannot be made; says why",
    "unrecognised": "jitwarden cannot judge this entry: a format, flavour, version or producer it does not fully "
                    "know; says what was not understood. Never damage",
}
"""What each code means, in the words ``doctor`` and the docs use (one table with :data:`CODES`)."""


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    message: str

    @property
    def severity(self) -> Severity:
        return CODES[self.code]

    def to_json(self) -> dict:
        return {"code": self.code, "severity": str(self.severity), "message": self.message}


def worst(findings) -> Severity | None:
    """Highest severity among findings, or None when there are none."""
    return max((f.severity for f in findings), default=None)
