"""The fixed finding vocabulary shared by every command.

An error needs positive evidence of damage: a checksum that contradicts a seal, a file of a
format we fully know that breaks an invariant of that format, two facts of one entry that
contradict each other, a rebuild that differs in code. What jitwarden does not fully recognise
(a format, a flavour, a version, a producer) is ``unrecognised``: info, never ``corrupt`` or
``stale``, and the message says what was not understood.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


class Severity(enum.IntEnum):
    INFO = 0
    WARN = 1
    ERROR = 2

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Code:
    """One finding code: how bad it is, what it means, how ``doctor`` counts it, and its fix."""

    severity: Severity
    meaning: str
    what: str  # after "N entries" / "1 entry" in doctor's summary: worded for either number
    fix: (
        str | None
    )  # the command doctor prints, which clears the finding when run; None where nothing should be removed


CATALOG: dict[str, Code] = {
    "corrupt": Code(
        Severity.ERROR,
        "unreadable, truncated or unparseable files of a format jitwarden fully knows; a checksum that does "
        "not match the seal",
        "with unreadable, truncated or tampered files: loading them crashes or runs the wrong code",
        "jitwarden clean --code corrupt",
    ),
    "mismatch": Code(
        Severity.ERROR,
        "the entry contradicts itself: cubin SM vs metadata target, PTX `.target` vs metadata, kernel symbol "
        "vs metadata name, metadata hash vs the entry's key, a launcher `.so` named for one CPU and built for "
        "another, a seal made under another fingerprint than the partition the entry is in (moved or copied in "
        "from another environment: the runtime refuses to load it)",
        "whose facts contradict each other (e.g. another kernel's or another GPU's binary under this key)",
        "jitwarden clean --code mismatch",
    ),
    "foreign-path": Code(
        Severity.ERROR,
        "a group file points outside its own entry, into files that exist there (a copied cache): the tool "
        "loads them",
        "copied from another tree that still exists: the tool would load files from there",
        "jitwarden clean --code foreign-path",
    ),
    "incomplete": Code(
        Severity.ERROR,
        "a file the entry lists is missing",
        "missing files their group lists or needs (an interrupted write)",
        "jitwarden clean --code incomplete",
    ),
    "not-reproducible": Code(
        Severity.ERROR,
        "rebuilding the entry's own PTX with the current toolchain gives different code (`--rebuild`)",
        "whose cubin no ptxas rebuilds from the entry's own PTX",
        "jitwarden clean --rebuild --code not-reproducible",
    ),
    "unsafe": Code(
        Severity.ERROR,
        "a symlink leaving the cache root, a world-writable or foreign-owned root, entry or file: nothing a "
        "clean may follow",
        "unsafe to follow or trust (a symlink, world-writable or foreign-owned)",
        "jitwarden clean --code unsafe",
    ),
    "unreadable": Code(
        Severity.ERROR,
        "a cache root, entry or file this user may not read (a permission refusal): unknown, neither clean nor "
        "damage; no gate passes what it could not read, and `clean` never moves it (its owner may use it)",
        "with files this user may not read (a permission problem, not damage)",
        None,
    ),
    "foreign-arch": Code(
        Severity.INFO,
        "built for another GPU (or CPU) than the one judged against: harmless, unreachable here",
        "built for another GPU: harmless here, unreachable",
        "jitwarden clean --foreign-arch",
    ),
    "stale": Code(
        Severity.WARN,
        "built by another toolchain, package version, driver or Python than this environment uses, or "
        "reproduced only by a ptxas this environment does not use",
        "built by another toolchain, package version or driver than this environment's: unreachable from this "
        "one, though another venv or container on this machine may still use them (clean moves them into a "
        "quarantine they can be restored from)",
        "jitwarden clean --stale",
    ),
    "moved": Code(
        Severity.WARN,
        "a group file names its files at absolute paths of another tree that no longer exist (a moved or "
        "copied cache): Triton drops the group and recompiles",
        "moved or copied from another tree whose paths are gone: Triton recompiles them (`jitwarden relocate` "
        "proves them by a rebuild and points them at their own files, so they hit again)",
        "jitwarden relocate",
    ),
    "orphan": Code(
        Severity.WARN,
        "leftovers of an interrupted write (`tmp.pid_*`, files with no group) older than `--orphan-age`",
        "with leftovers of interrupted writes",
        "jitwarden clean --orphans",
    ),
    "unverifiable": Code(
        Severity.WARN,
        "a rebuild was asked for but cannot be made; says why",
        "a rebuild could not check (see `jitwarden verify --rebuild` for why)",
        None,
    ),
    "unrecognised": Code(
        Severity.INFO,
        "jitwarden cannot judge this entry: a format, flavour, version or producer it does not fully know; says "
        "what was not understood. Never damage",
        "jitwarden cannot judge (a format, flavour, version or producer it does not fully know): not checked, and "
        "not called damage; `jitwarden verify --all` says what was not understood",
        None,
    ),
}
"""Every finding code, once (ARCHITECTURE.md, "How to add a finding code")."""

CODES: dict[str, Severity] = {c: k.severity for c, k in CATALOG.items()}

NEVER_CLEANED = frozenset({"unreadable"})
"""Error-level codes ``clean`` never selects: what cannot be read is unknown, not damage (fix the permission)."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One finding: its code, a message of a line, and where the evidence is long (a rebuild's every ptxas
    and section), ``detail``, shown on request (``--long``, JSON)."""

    code: str
    message: str
    detail: str = ""

    @property
    def severity(self) -> Severity:
        return CODES[self.code]

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "code": self.code,
            "severity": str(self.severity),
            "message": self.message,
        }
        if self.detail:
            doc["detail"] = self.detail
        return doc


def worst(findings: Iterable[Finding]) -> Severity | None:
    """Highest severity among findings, or None when there are none."""
    return max((f.severity for f in findings), default=None)
