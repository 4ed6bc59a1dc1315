"""Seals: a checksum of every file of an entry plus its provenance (stdlib only).

A seal is ``<entry>/.jitwarden-seal.json``. It is written last, atomically,
after the entry's group is complete; any later change to a covered file is a
checksum mismatch, which readers treat as a cache miss (ccache's rule).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field

from .fsutil import write_json_atomic
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


def file_digest(path: str) -> tuple[str, int]:
    with open(path, "rb") as f:
        data = f.read()
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
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SealError(f"seal unreadable: {exc.strerror}") from None
    try:
        doc = json.loads(raw)
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


def check(entry_dir: str, seal: Seal, present=None) -> list[str]:
    """Problems between the seal and the files on disk, as sentences; empty when it holds."""
    problems = []
    for name, rec in seal.files.items():
        path = os.path.join(entry_dir, name)
        try:
            if os.path.islink(path):
                problems.append(f"{name} is a symlink, the seal covers a file")
                continue
            digest, size = file_digest(path)
        except FileNotFoundError:
            problems.append(f"{name} is sealed but missing")
            continue
        except OSError as exc:
            problems.append(f"{name} unreadable: {exc.strerror}")
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
