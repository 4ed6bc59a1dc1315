"""What ``pull`` installed on this node, per registry tag and fingerprint (``<config dir>/pulled.json``).

A tag put back to an older signed bundle of the same fingerprint is a silent rollback; ``pull`` refuses a
bundle whose signed ``created`` time is older than the one it installed here last for that tag and
fingerprint (``--allow-older`` takes it). One small JSON file, written atomically, private to the user.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jitwarden.model import settings
from jitwarden.model.layout import PULLED_FILE
from jitwarden.store import atomic, reads

MAX_BYTES = 4 << 20


@dataclass(frozen=True, kw_only=True)
class Installed:
    """The newest bundle pulled here for one tag and fingerprint."""

    created: float
    manifest: str


def where(env: Mapping[str, str]) -> str:
    return os.path.join(settings.config_dir(env), PULLED_FILE)


def _read(env: Mapping[str, str]) -> dict[str, Any]:
    """The whole record; {} when there is none. OSError/ValueError for one that cannot be read."""
    try:
        doc = reads.read_json(where(env), max_bytes=MAX_BYTES)
    except FileNotFoundError:
        return {}
    return doc if isinstance(doc, dict) else {}


def installed(env: Mapping[str, str], tag: str, digest: str) -> Installed | None:
    """What was last installed here for ``tag`` (``host/repo:tag``) and fingerprint ``digest``; None when
    nothing was. OSError or ValueError when the record cannot be read (the caller says so)."""
    rec = _read(env).get(tag, {}).get(digest)
    if not isinstance(rec, dict):
        return None
    try:
        return Installed(created=float(rec["created"]), manifest=str(rec["manifest"]))
    except (KeyError, TypeError, ValueError):
        return None


def record(env: Mapping[str, str], tag: str, digest: str, got: Installed) -> None:
    """Remember ``got`` for ``tag`` and ``digest`` unless something newer is recorded; OSError when it cannot
    be written."""
    try:
        doc = _read(env)
    except ValueError:
        doc = {}  # an unreadable record is replaced by one that says what was installed now
    old = installed(env, tag, digest) if doc else None
    if old is not None and old.created > got.created:
        return
    if not isinstance(doc.get(tag), dict):
        doc[tag] = {}
    doc[tag][digest] = {"created": got.created, "manifest": got.manifest}
    path = where(env)
    if not atomic.write_private_json(path, doc, ".pulled."):
        raise PermissionError(
            errno.EPERM,
            "the config dir, or the nearest one there is, could be written by another user; "
            "nothing was written there",
            os.path.dirname(path),
        )
