"""Seals: a checksum of every file of an entry plus its provenance (stdlib only).

A seal is ``<entry>/.jitwarden-seal.json``. It is written last, atomically,
after the entry's group is complete; any later change to a covered file is a
checksum mismatch, which readers treat as a cache miss (ccache's rule).
"""

from __future__ import annotations

import errno
import hashlib
import os
import time
from dataclasses import dataclass, field

from . import jsonlimits
from .fsutil import read_nofollow, write_json_atomic
from .layout import SEAL_FILE, is_reserved

SCHEMA = 1


class SealError(ValueError):
    """The seal file exists but cannot be read as a seal."""


@dataclass(frozen=True)
class Seal:
    files: dict  # name -> {"sha256": hex, "size": int}
    fingerprint: str | None = None
    producer: dict = field(default_factory=dict)
    sealed_at: float = 0.0

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "files": self.files,
            "fingerprint": self.fingerprint,
            "producer": self.producer,
            "sealed_at": self.sealed_at,
        }


def file_digest(path: str, size_hint: int = 0) -> tuple[str, int]:
    """(sha256, size) of a file, never through a symlink (OSError ELOOP)."""
    data = read_nofollow(path, size_hint=size_hint)
    return hashlib.sha256(data).hexdigest(), len(data)


def compute(entry_dir: str, names, fingerprint: str | None = None, producer: dict | None = None) -> Seal:
    files = {}
    for name in sorted(names):
        digest, size = file_digest(os.path.join(entry_dir, name))
        files[name] = {"sha256": digest, "size": size}
    return Seal(files, fingerprint, dict(producer or {}), time.time())


def read(entry_dir: str) -> Seal | None:
    """The entry's seal, None when it has none; SealError when it is damaged."""
    path = os.path.join(entry_dir, SEAL_FILE)
    try:
        raw = read_nofollow(path, size_hint=4096)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SealError(f"seal unreadable: {exc.strerror}") from None
    try:
        doc = jsonlimits.loads(raw)
        files = doc["files"]
        if doc.get("schema") != SCHEMA or not isinstance(files, dict):
            raise ValueError
        for name, rec in files.items():
            if not isinstance(rec, dict) or not isinstance(rec.get("sha256"), str) or not isinstance(rec.get("size"), int):
                raise ValueError
            if os.sep in name or name in (".", ".."):
                raise ValueError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise SealError("seal is not a valid jitwarden seal") from None
    return Seal(files, doc.get("fingerprint"), doc.get("producer") or {}, float(doc.get("sealed_at") or 0))


def check(entry_dir: str, seal: Seal, present=None, names=None) -> list[str]:
    """Problems between the seal and the files on disk, as sentences; empty when it holds.

    ``names``: check only these (each must be sealed), else every sealed file; ``present``:
    the files on disk, any not covered by the seal is a problem too.
    """
    problems = []
    if names is not None:
        missing = sorted(n for n in names if n not in seal.files)
        if missing:
            return [f"not covered by the seal: {', '.join(missing)}"]
    for name in seal.files if names is None else names:
        rec = seal.files[name]
        try:
            digest, size = file_digest(os.path.join(entry_dir, name), rec["size"])
        except FileNotFoundError:
            problems.append(f"{name} is sealed but missing")
            continue
        except OSError as exc:
            why = "is a symlink, the seal covers a file" if exc.errno == errno.ELOOP else f"unreadable: {exc.strerror}"
            problems.append(f"{name} {why}")
            continue
        if size != rec["size"]:
            problems.append(f"{name} is {size} bytes, sealed as {rec['size']}")
        elif digest != rec["sha256"]:
            problems.append(f"{name} does not match its sealed sha256")
    if present is not None:
        # jitwarden's own files (seal, lock files, records) are never covered by a seal.
        extra = sorted(n for n in set(present) - set(seal.files) if not is_reserved(n))
        if extra:
            problems.append(f"not covered by the seal: {', '.join(extra)}")
    return problems


def write(entry_dir: str, seal: Seal) -> str:
    """Write the seal atomically (temp file in the entry, then rename)."""
    return write_json_atomic(os.path.join(entry_dir, SEAL_FILE), seal.to_json(), ".jitwarden-seal.")
