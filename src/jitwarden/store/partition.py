"""Fingerprint partitions: ``<root>/jitwarden-v1/<digest>/`` inside the roots users persist (stdlib only).

A partition is a complete cache dir of its own (Triton, Inductor or vLLM point
straight at it), so entries built by different fingerprints never share a
directory. ``.jitwarden-partition.json`` inside records which fingerprint it
belongs to and when it was last used, for ``status`` and pruning.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time
from operator import itemgetter

from jitwarden.model.layout import PARTITION_INFO, PARTITIONS_DIR
from jitwarden.store.atomic import write_json_atomic
from jitwarden.store.reads import read_json

TYPE_CHECKING = False  # mypy takes it as true; typing stays off the activation path
if TYPE_CHECKING:
    from typing import Any

    _Row = tuple[Any, ...]
else:
    _Row = tuple

SCHEMA = 1
TOUCH_EVERY_S = 60.0
"""Last use is rewritten at most once a minute: activation stays a read on the warm path."""


class PartitionInfo(_Row):
    """(digest, headline, created, last_used, kinds, python), immutable. ``python``: the interpreter of the
    environment that last wrote it (None in a record made before it was kept), for ``doctor --python``.

    A tuple subclass rather than a frozen dataclass: activation imports this module in
    every process, and building a dataclass costs more than the rest of this module.
    """

    __slots__ = ()

    def __new__(
        cls,
        digest: str,
        headline: str | None,
        created: float,
        last_used: float,
        kinds: tuple[str, ...] = (),
        python: str | None = None,
    ) -> PartitionInfo:
        return tuple.__new__(cls, (digest, headline, created, last_used, tuple(kinds), python))

    digest, headline, created, last_used, kinds, python = (
        property(itemgetter(i)) for i in range(6)
    )

    def __repr__(self) -> str:
        return (
            f"PartitionInfo(digest={self.digest!r}, headline={self.headline!r}, created={self.created!r}, "
            f"last_used={self.last_used!r}, kinds={self.kinds!r}, python={self.python!r})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "digest": self.digest,
            "headline": self.headline,
            "created": self.created,
            "last_used": self.last_used,
            "kinds": list(self.kinds),
            "python": self.python,
        }


def path_for(base: str, digest: str) -> str:
    """The partition of ``digest`` inside the user-visible root ``base``."""
    return os.path.join(base, PARTITIONS_DIR, digest)


def split(path: str) -> tuple[str, str] | None:
    """(base, digest) when ``path`` is itself a partition dir, else None (pure)."""
    p = os.path.normpath(path)
    parent, digest = os.path.split(p)
    if os.path.basename(parent) == PARTITIONS_DIR and digest:
        return os.path.dirname(parent), digest
    return None


@functools.lru_cache(maxsize=256)
def digest_of(path: str) -> str | None:
    """The fingerprint digest entries of ``path`` are sealed under: its name when it is a partition dir, else None
    (pure; cached: the guard, the torch hooks and the scan ask it for every kernel). Unpartitioned roots
    (``JITWARDEN_PARTITION=0``) are never judged by fingerprint: two environments sharing one would
    quarantine each other's entries in turn."""
    s = split(path)
    return s[1] if s else None


def base_of(path: str) -> str:
    """The user-visible root behind ``path``: never nest a partition inside a partition."""
    s = split(path)
    return s[0] if s else path


INFO_MAX_BYTES = 1 << 16


def read_info(partition: str) -> PartitionInfo | None:
    """The partition's info; None when it is missing or is not one (a FIFO, a symlink, garbage, deep nesting)."""
    try:
        doc = read_json(os.path.join(partition, PARTITION_INFO), max_bytes=INFO_MAX_BYTES)
        kinds = doc.get("kinds") or ()
        if not isinstance(kinds, (list, tuple)) or not all(isinstance(k, str) for k in kinds):
            return None
        headline, python = doc.get("headline"), doc.get("python")
        created, last_used = float(doc.get("created") or 0), float(doc.get("last_used") or 0)
        if not (math.isfinite(created) and math.isfinite(last_used)):
            return None  # 1e999999 is infinity: a partition "used forever" would never be touched or pruned
        return PartitionInfo(
            str(doc["digest"]),
            headline if isinstance(headline, str) else None,
            created,
            last_used,
            tuple(kinds),
            python if isinstance(python, str) else None,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError):
        return None


def unusable(path: str, uid: int | None = None) -> str | None:
    """None when ``path`` and its ``jitwarden-v1`` parent are real directories nobody but us (or root) could
    have written (the one rule, :mod:`jitwarden.store.trust`: root's own runs included; a root named in
    ``JITWARDEN_TRUSTED_ROOTS`` is exempt from all but world-writability); else why not. Cheap (two lstats):
    activation checks it on every start."""
    import stat

    from jitwarden.store import trust

    for p in (os.path.dirname(path), path):
        try:
            st = os.lstat(p)
        except OSError as exc:
            return f"{p}: {exc.strerror}"
        if stat.S_ISLNK(st.st_mode):
            return f"{p} is a symlink"
        if not stat.S_ISDIR(st.st_mode):
            return f"{p} is not a directory"
        if st.st_mode & 0o002:
            return f"{p} is world-writable"
        why = trust.other_writer(st, uid)
        if why and not trust.in_trusted_root(p):
            return (
                f"{p} is {why}" if why.startswith("writable") else f"{p} belongs to uid {st.st_uid}"
            )
    return None


def _make(partition: str) -> None:
    """Make the partition dir and its parent where missing, the partition by the parent's fd (never through
    a symlink: ELOOP)."""
    parent, name = os.path.split(partition)
    try:
        os.mkdir(parent, 0o755)
    except FileExistsError:
        pass
    pfd = os.open(
        parent, os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0)
    )  # ELOOP: a symlink
    try:
        os.mkdir(name, 0o755, dir_fd=pfd)
    except FileExistsError:
        pass
    finally:
        os.close(pfd)


def _recorded_lately(
    old: PartitionInfo, digest: str, kind: str, python: str | None, now: float
) -> bool:
    """Whether the record already says this use (digest, kind, Python) and was touched within the last
    :data:`TOUCH_EVERY_S`: then it is not written again."""
    return (
        old.digest == digest
        and kind in old.kinds
        and old.python == python
        and now - old.last_used < TOUCH_EVERY_S
    )


def ensure(
    partition: str,
    digest: str,
    headline: str | None,
    kind: str,
    now: float | None = None,
    python: str | None = None,
) -> PartitionInfo:
    """Create the partition dir if needed and record its last use (at most once a minute) and the Python of
    the environment that uses it (``python``, default this one's).

    OSError when the directory cannot be made or is not safe to use (see :func:`unusable`).
    Recording the last use is bookkeeping: when that write fails (a full disk, a read-only
    file) the partition is still used and the old (or an in-memory) record is returned.
    """
    import errno

    now = time.time() if now is None else now
    _make(partition)
    why = unusable(partition)
    if why is not None:
        raise OSError(errno.EPERM, why, partition)
    python = python or sys.executable or None
    old = read_info(partition)
    if old and _recorded_lately(old, digest, kind, python, now):
        return old
    kinds = tuple(sorted(set(old.kinds if old else ()) | {kind}))
    info = PartitionInfo(
        digest,
        headline or (old.headline if old else None),
        old.created if old else now,
        now,
        kinds,
        python,
    )
    try:
        write_json_atomic(
            os.path.join(partition, PARTITION_INFO), info.to_json(), ".jitwarden-partition."
        )
    except OSError:
        pass  # last use is not protection: a full or read-only disk must not stop the partitioning
    return info


def list_partitions(base: str) -> list[tuple[str, PartitionInfo | None]]:
    """Every partition inside ``base`` with its info (None when the info file is missing or damaged)."""
    pdir = os.path.join(base, PARTITIONS_DIR)
    try:
        names = sorted(e.name for e in os.scandir(pdir) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []
    return [(os.path.join(pdir, n), read_info(os.path.join(pdir, n))) for n in names]
