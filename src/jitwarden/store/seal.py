"""Seals: a checksum of every file of an entry plus its provenance (stdlib only).

A seal is ``<entry>/.jitwarden-seal.json``. It is written last, atomically,
after the entry's group is complete; any later change to a covered file is a
checksum mismatch, which readers treat as a cache miss (ccache's rule).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from jitwarden.model.errors import JitwardenError
from jitwarden.model.layout import SEAL_FILE, is_reserved
from jitwarden.store.fsutil import digest_file, read_bytes

SCHEMA = 1
MAX_FILE = 1 << 31
"""Larger than any kernel binary: a sealed name that reads on past this (a device) is not a kernel file."""
MAX_SEAL = 4 << 20
BYTES_PER_FILE = (
    512  # a seal's line per file: its name (at most 255 bytes), sha256 and size, with room to spare
)


def dir_bound(files: int) -> int:
    """The read bound of a seal that covers a whole directory of ``files`` files (runtime/flatseal.py): it grows
    with the directory, ~175 bytes a JAX file (a fixed 4 MiB stopped at about 24,000 files, and the seal went
    unread: every file rehashed at each start, a swap resealed unseen)."""
    return MAX_SEAL + BYTES_PER_FILE * files


class SealError(JitwardenError, ValueError):
    """The seal file exists but cannot be read as a seal."""


@dataclass(frozen=True)
class Seal:
    files: dict[str, dict[str, Any]]  # name -> {"sha256": hex, "size": int}
    fingerprint: str | None = None
    producer: dict[str, Any] = field(default_factory=dict)
    sealed_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "files": self.files,
            "fingerprint": self.fingerprint,
            "producer": self.producer,
            "sealed_at": self.sealed_at,
        }


def file_digest(path: str, size_hint: int = 0, *, dir_fd: int | None = None) -> tuple[str, int]:
    """(sha256, size) of a regular file, never through a symlink (OSError ELOOP), never blocking
    on a FIFO or device (OSError EINVAL), reading at most :data:`MAX_FILE` bytes (OSError EFBIG), in chunks:
    a kernel file of gigabytes costs its time to hash, never its size in memory."""
    h = hashlib.sha256()
    size = digest_file(path, h, max_bytes=MAX_FILE, dir_fd=dir_fd, size_hint=size_hint)
    return h.hexdigest(), size


def compute(
    entry_dir: str,
    names: Iterable[str],
    fingerprint: str | None = None,
    producer: dict[str, Any] | None = None,
) -> Seal:
    files = {}
    for name in sorted(names):
        digest, size = file_digest(os.path.join(entry_dir, name))
        files[name] = {"sha256": digest, "size": size}
    return Seal(files, fingerprint, dict(producer or {}), time.time())


def read(entry_dir: str, *, dir_fd: int | None = None, max_bytes: int = MAX_SEAL) -> Seal | None:
    """The entry's seal, None when it has none; SealError when it is damaged.

    ``dir_fd``: the entry's directory fd (``entry_dir`` is then only used in messages). ``max_bytes``:
    a seal over a whole directory of files (runtime/flatseal.py) is bounded by that directory's size.
    """
    return read_stamped(entry_dir, dir_fd=dir_fd, max_bytes=max_bytes)[0]


def read_stamped(
    entry_dir: str, *, dir_fd: int | None = None, max_bytes: int = MAX_SEAL
) -> tuple[Seal | None, int | None]:
    """(:func:`read`, :func:`sealed_at_ns`) from one read of the seal: a directory's seal of 50,000 files is
    8 MB, read and parsed once a start."""
    try:
        if dir_fd is None:
            raw = read_bytes(
                os.path.join(entry_dir, SEAL_FILE), max_bytes=max_bytes, size_hint=4096
            )
        else:
            raw = read_bytes(SEAL_FILE, max_bytes=max_bytes, dir_fd=dir_fd, size_hint=4096)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        raise SealError(f"seal unreadable: {exc.strerror or exc}") from None
    s, at = _parse(raw)
    return s, at if type(at) is int else None


def parse(raw: bytes) -> Seal:
    """The seal in ``raw``; SealError unless it is exactly a seal (flat names, sha256 and size each)."""
    return _parse(raw)[0]


def _parse(raw: bytes) -> tuple[Seal, object]:
    """(:func:`parse`, the ``fs_time_ns`` recorded in it, unchecked)."""
    try:
        doc = json.loads(raw)
        files = doc["files"]
        if doc.get("schema") != SCHEMA or not isinstance(files, dict):
            raise ValueError
        for name, rec in files.items():
            if (
                not isinstance(rec, dict)
                or not isinstance(rec.get("sha256"), str)
                or not isinstance(rec.get("size"), int)
            ):
                raise ValueError
            if os.sep in name or name in (".", ".."):
                raise ValueError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError, AttributeError):
        raise SealError("seal is not a valid jitwarden seal") from None
    return Seal(
        files, doc.get("fingerprint"), doc.get("producer") or {}, float(doc.get("sealed_at") or 0)
    ), doc.get("fs_time_ns")


MISSING, UNREADABLE, LINK, SIZE, DIGEST, NOT_COVERED = (
    "missing",
    "unreadable",
    "link",
    "size",
    "digest",
    "not-covered",
)
"""Reason codes of a :class:`Problem`: callers decide from these, never from the sentence."""


@dataclass(frozen=True)
class Problem:
    """One disagreement between a seal and the files on disk.

    ``names``: the files it is about; ``reason``: one of the codes above (:data:`SIZE` and
    :data:`DIGEST` are the changed bytes of a sealed file); ``text``: the sentence a user reads.
    """

    names: tuple[str, ...]
    reason: str
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class SealCheck:
    """What :func:`judge` found: no problem means the seal holds for the files it looked at."""

    problems: tuple[Any, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def messages(self) -> list[str]:
        return [p.text for p in self.problems]


def judge(
    entry_dir: str,
    seal: Seal,
    present: Iterable[str] | None = None,
    names: Iterable[str] | None = None,
) -> SealCheck:
    """Every problem between the seal and the files on disk, each with its reason code.

    ``names``: check only these (each must be sealed), else every sealed file; ``present``:
    the files on disk, any not covered by the seal is a problem too.
    """
    problems = []
    if names is not None:
        missing = sorted(n for n in names if n not in seal.files)
        if missing:
            return SealCheck(
                (
                    Problem(
                        tuple(missing),
                        NOT_COVERED,
                        f"not covered by the seal: {', '.join(missing)}",
                    ),
                )
            )
    for name in seal.files if names is None else names:
        rec = seal.files[name]
        try:
            digest, size = file_digest(os.path.join(entry_dir, name), rec["size"])
        except FileNotFoundError:
            problems.append(Problem((name,), MISSING, f"{name} is sealed but missing"))
            continue
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                problems.append(
                    Problem((name,), LINK, f"{name} is a symlink, the seal covers a file")
                )
            else:
                problems.append(Problem((name,), UNREADABLE, f"{name} unreadable: {exc.strerror}"))
            continue
        if size != rec["size"]:
            problems.append(
                Problem((name,), SIZE, f"{name} is {size} bytes, sealed as {rec['size']}")
            )
        elif digest != rec["sha256"]:
            problems.append(Problem((name,), DIGEST, f"{name} does not match its sealed sha256"))
    if present is not None:
        # jitwarden's own files (seal, lock files, records) are never covered by a seal.
        extra = sorted(n for n in set(present) - set(seal.files) if not is_reserved(n))
        if extra:
            problems.append(
                Problem(tuple(extra), NOT_COVERED, f"not covered by the seal: {', '.join(extra)}")
            )
    return SealCheck(tuple(problems))


def check(
    entry_dir: str,
    seal: Seal,
    present: Iterable[str] | None = None,
    names: Iterable[str] | None = None,
) -> list[str]:
    """Problems between the seal and the files on disk, as sentences; empty when it holds (:func:`judge`)."""
    return judge(entry_dir, seal, present=present, names=names).messages


def unchanged(entry_dir: str, ctimes_ns: Iterable[int], fingerprint: str | None = None) -> bool:
    """THE rule for "unchanged since sealed": every one of ``ctimes_ns`` (the files' ctimes, ns) is older
    than the time recorded inside the entry's seal (:func:`sealed_at_ns`); False when there is none.

    A file's ctime moves forward on any change to it and cannot be set back; the recorded time
    does not move when the seal file's own metadata does (a ``chmod`` or ``touch`` of the seal).
    ``fingerprint``: the partition's; a seal naming another one vouches for nothing here, however
    unchanged (an entry moved in from another environment's partition keeps its files' ctimes).
    Nothing else in jitwarden decides this question.
    """
    stamp = _stamp(entry_dir)
    if stamp is None:
        return False
    at, sealed_under = stamp
    return foreign(sealed_under, fingerprint) is None and all(c < at for c in ctimes_ns)


def foreign(sealed_under: object, mine: str | None) -> str | None:
    """Why a seal made under fingerprint ``sealed_under`` does not vouch for an entry of the partition ``mine``,
    else None. A seal of no fingerprint (an unpartitioned root's) and a root of none are judged by none: two
    environments sharing an unpartitioned root would quarantine each other's entries in turn."""
    if not mine or sealed_under is None or sealed_under == "" or sealed_under == mine:
        return None
    shown = (
        sealed_under
        if isinstance(sealed_under, str) and len(sealed_under) <= 64
        else f"{str(sealed_under)[:64]!r}…"
    )
    return f"sealed under fingerprint {shown}, this partition is {mine}"  # a forged seal's field is not echoed whole


def sealed_at_ns(entry_dir: str) -> int | None:
    """The file-system time recorded inside the entry's seal (ns), None when there is none to read.

    The one reference for "unchanged since sealed" (:func:`unchanged`): a file whose ctime is
    older did not change after sealing. The seal file's own ctime is no such
    reference: a ``chmod`` or ``touch`` of the seal moves it past a tampered file's.
    """
    stamp = _stamp(entry_dir)
    return stamp[0] if stamp else None


def _stamp(entry_dir: str) -> tuple[int, object] | None:
    """(recorded time, fingerprint) of the entry's seal, one small read; None when there is none to read."""
    try:
        doc = json.loads(
            read_bytes(os.path.join(entry_dir, SEAL_FILE), max_bytes=MAX_SEAL, size_hint=4096)
        )
        at = doc["fs_time_ns"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return (at, doc.get("fingerprint")) if type(at) is int else None


def newest_ctime(entry_dir: str, names: Iterable[str]) -> int:
    """The newest ctime (ns) among ``names`` in the entry, for :func:`write`'s ``after_ns``; -1 when none."""
    newest = -1
    for n in names:
        try:
            newest = max(newest, os.lstat(os.path.join(entry_dir, n)).st_ctime_ns)
        except OSError:
            pass
    return newest


def write(entry_dir: str, seal: Seal, after_ns: int = -1) -> str:
    """Write the seal atomically (:class:`~jitwarden.store.atomic.AtomicWriter`: a temporary in the entry,
    renamed by the entry's fd).

    The seal records ``fs_time_ns``: the ctime its temp file got when created, i.e. the file
    system's clock at sealing. Every file sealed is older or of the same tick; any later change
    to one gives it a ctime at least that. ``after_ns``: the newest ctime among the sealed files;
    the recorded time is pushed past it (by touching the temp file for up to a few clock ticks)
    so that an unchanged entry is told apart from one changed in the same tick.
    """
    from jitwarden.store.atomic import AtomicWriter, umask

    dir_fd = os.open(entry_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:  # the one atomic writer: a temporary beside the seal, fsync, renamed by the entry's fd
        with AtomicWriter(dir_fd, SEAL_FILE, ".jitwarden-seal.") as w:
            mode = 0o666 & ~umask()  # readable like Triton's own files
            fs_now = os.fstat(w.fd).st_ctime_ns
            for _ in range(50):
                if fs_now > after_ns:
                    break
                time.sleep(0.001)
                os.fchmod(w.fd, mode)  # a metadata change: ctime moves to the clock's current tick
                fs_now = os.fstat(w.fd).st_ctime_ns
            doc = seal.to_json()
            if fs_now > after_ns:
                doc["fs_time_ns"] = fs_now
            w.write(json.dumps(doc, sort_keys=True).encode())  # dumps is the C encoder
    finally:
        os.close(dir_fd)
    return os.path.join(entry_dir, SEAL_FILE)
