"""The fixed finding vocabulary shared by every command (design.md section 3)."""

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
}


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
