"""Seals: a checksum of every file of an entry plus its provenance (stdlib only).

A seal is ``<entry>/.jitwarden-seal.json``. It is written last, atomically,
after the entry's group is complete; any later change to a covered file is a
checksum mismatch, which readers treat as a cache miss (ccache's rule).

A seal proves something only when it is authentic and nobody else could have written it: it ends with
an HMAC-SHA256 (``"mac"``) over its content and the entry's name, keyed by this user's (or the team's)
seal key (:mod:`jitwarden.store.sealkey`), and the entry and the seal file pass the trust rule
(:mod:`jitwarden.store.trust`). A seal that fails either is no seal (:func:`read` gives None): its sizes
and times bound nothing, and the entry is unsealed (proven, or judged, and sealed again). Seals of
jitwarden before schema 2 carry no MAC and are unsealed the same way, never damage.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jitwarden.model.asjson import fields_json
from jitwarden.model.errors import JitwardenError
from jitwarden.model.layout import SEAL_FILE, is_reserved
from jitwarden.store import sealkey, trust
from jitwarden.store.reads import digest_file, open_regular, read_fd, too_large

SCHEMA = 2
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
        return {"schema": SCHEMA, **fields_json(self)}


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


def read(
    entry_dir: str, *, dir_fd: int | None = None, max_bytes: int = MAX_SEAL, name: str | None = None
) -> Seal | None:
    """The entry's seal, None when it has none; SealError when it is damaged.

    ``dir_fd``: the entry's directory fd (``entry_dir`` is then only used in messages). ``max_bytes``:
    a seal over a whole directory of files (runtime/flatseal.py) is bounded by that directory's size.
    """
    return read_stamped(entry_dir, dir_fd=dir_fd, max_bytes=max_bytes, name=name)[0]


def read_stamped(
    entry_dir: str, *, dir_fd: int | None = None, max_bytes: int = MAX_SEAL, name: str | None = None
) -> tuple[Seal | None, int | None]:
    """(:func:`read`, :func:`sealed_at_ns`) from one read of the seal: a directory's seal of 50,000 files is
    8 MB, read and parsed once a start. (None, None) when the seal is no seal to this reader: not authentic
    under a key it trusts, or in an entry, or a seal file, that someone else could have written. ``name``: the
    identity its MAC binds, as :func:`write` was given it (default: the entry's name, :func:`_name`)."""
    raw = _trusted_raw(entry_dir, dir_fd, max_bytes)
    return (None, None) if raw is None else _authentic(name or _name(entry_dir), raw)


def _trusted_raw(entry_dir: str, dir_fd: int | None, max_bytes: int) -> bytes | None:
    """The seal file's bytes when nobody else could have written it or its entry (:mod:`jitwarden.store.trust`),
    else None (so is a missing seal); SealError when it cannot be read as a file."""
    try:
        fd, st = open_regular(
            SEAL_FILE if dir_fd is not None else os.path.join(entry_dir, SEAL_FILE), dir_fd=dir_fd
        )
        try:
            where = os.fstat(dir_fd) if dir_fd is not None else os.stat(entry_dir)
            if trust.untrusted(entry_dir, where, st) is not None:
                return None  # another principal could have written it: proves nothing
            raw = read_fd(fd, max_bytes, st.st_size) if st.st_size <= max_bytes else b""
        finally:
            os.close(fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SealError(f"seal unreadable: {exc.strerror or exc}") from None
    if len(raw) > max_bytes or (not raw and st.st_size):
        raise SealError(f"seal unreadable: {too_large(max_bytes, SEAL_FILE).strerror}")
    return raw


_MEMO: dict[tuple[str, bytes], tuple[tuple[bytes, ...], tuple[Seal | None, int | None]]] = {}
_MEMO_BYTES, _MEMO_MAX = 1 << 16, 4096
"""What a seal's bytes authenticate to, by (entry name, bytes): a warm hit reads the seal of its entry more than
once (the group, the metadata, the launcher), and the same bytes under the same keys give the same answer."""


def _authentic(name: str, raw: bytes) -> tuple[Seal | None, int | None]:
    """(seal, recorded time) of an entry's seal bytes when they authenticate (:func:`authenticated`), else (None, None)."""
    keys = sealkey.keys()
    small = len(raw) <= _MEMO_BYTES
    if small:
        hit = _MEMO.get((name, raw))
        if hit is not None and hit[0] is keys:
            return hit[1]
    body = authenticated(name, raw)
    if body is None:
        out: tuple[Seal | None, int | None] = (None, None)
    else:
        s, at = _parse(body)
        out = (s, at if type(at) is int else None)
    if small:
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        _MEMO[(name, raw)] = (keys, out)
    return out


def distrusted(entry_dir: str) -> str | None:
    """Why a seal in ``entry_dir`` would prove nothing to this reader whoever wrote it (the entry directory is
    another principal's to write: :mod:`jitwarden.store.trust`), else None; so is a missing directory."""
    try:
        return trust.untrusted(entry_dir, os.stat(entry_dir))
    except OSError as exc:
        return exc.strerror or str(exc)


_TAG = b', "mac": "'
_TAG_LEN = len(_TAG) + 64 + 2


_FLAT: dict[str, str] = {}


def flat_name(d: str) -> str:
    """The identity a flat seal's MAC binds (one seal over a whole dir of JAX's, CuPy's or numba's files): the dir's
    whole real path, so a seal copied from one ``__pycache__`` or cache dir into another is no seal there."""
    got = _FLAT.get(d)
    if got is None:
        got = _FLAT[d] = "dir:" + os.path.realpath(d)
    return got


def _name(entry_dir: str) -> str:
    """The entry's identity a seal's MAC binds: its name in its root (a Triton key, an Inductor entry, a partition)."""
    return os.path.basename(os.path.normpath(entry_dir))


def authenticated(name: str, raw: bytes) -> bytes | None:
    """The seal's content without its MAC when ``raw`` ends with an HMAC of it for the entry ``name`` under a key
    this reader trusts (:mod:`jitwarden.store.sealkey`), else None: an older seal, a damaged or forged one."""
    if len(raw) <= _TAG_LEN or raw[-_TAG_LEN : -_TAG_LEN + len(_TAG)] != _TAG or raw[-2:] != b'"}':
        return None
    body = raw[:-_TAG_LEN] + b"}"
    try:
        tag = raw[-66:-2].decode("ascii")
    except UnicodeDecodeError:
        return None
    return body if sealkey.authentic(name, body, tag) else None


def signed(name: str, body: bytes) -> bytes:
    """``body`` (a seal's JSON, one object) with its MAC for the entry ``name``, under the key seals are written with."""
    tag = sealkey.mac(sealkey.keys()[0], name, body)
    return body[:-1] + _TAG + tag.encode() + b'"}'


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
    *,
    held: Mapping[str, bytes] | None = None,
    dir_fd: int | None = None,
) -> SealCheck:
    """Every problem between the seal and the files on disk, each with its reason code.

    ``names``: check only these (each must be sealed), else every sealed file; ``present``:
    the files on disk, any not covered by the seal is a problem too. ``held``: whole files the caller
    read already (the scan's survey, by the entry's fd), by name: those bytes are hashed, not read again.
    ``dir_fd``: the entry's directory fd, which the other files are read by (``entry_dir`` is then only
    used in messages).
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
        data = held.get(name) if held is not None else None
        problem = _file_problem(entry_dir, name, seal.files[name], data, dir_fd)
        if problem is not None:
            problems.append(problem)
    if present is not None:
        # jitwarden's own files (seal, lock files, records) are never covered by a seal.
        extra = sorted(n for n in set(present) - set(seal.files) if not is_reserved(n))
        if extra:
            problems.append(
                Problem(tuple(extra), NOT_COVERED, f"not covered by the seal: {', '.join(extra)}")
            )
    return SealCheck(tuple(problems))


def _file_problem(
    entry_dir: str, name: str, rec: Mapping[str, Any], data: bytes | None, dir_fd: int | None
) -> Problem | None:
    """What is wrong with sealed file ``name`` against its record ``rec``: its bytes ``data`` when the caller
    holds them, else read (by ``dir_fd`` when given); None when it matches."""
    if data is not None:
        return _mismatch(name, len(data), lambda: hashlib.sha256(data).hexdigest(), rec)
    try:
        digest, size = (
            file_digest(os.path.join(entry_dir, name), rec["size"])
            if dir_fd is None
            else file_digest(name, rec["size"], dir_fd=dir_fd)
        )
    except FileNotFoundError:
        return Problem((name,), MISSING, f"{name} is sealed but missing")
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return Problem((name,), LINK, f"{name} is a symlink, the seal covers a file")
        return Problem((name,), UNREADABLE, f"{name} unreadable: {exc.strerror}")
    return _mismatch(name, size, lambda: digest, rec)


def _mismatch(
    name: str, size: int, digest_of: Callable[[], str], rec: Mapping[str, Any]
) -> Problem | None:
    """A size that differs from the sealed one, else a sha256 (``digest_of()``, asked only then) that does."""
    if size != rec["size"]:
        return Problem((name,), SIZE, f"{name} is {size} bytes, sealed as {rec['size']}")
    if digest_of() != rec["sha256"]:
        return Problem((name,), DIGEST, f"{name} does not match its sealed sha256")
    return None


def check(
    entry_dir: str,
    seal: Seal,
    present: Iterable[str] | None = None,
    names: Iterable[str] | None = None,
    *,
    held: Mapping[str, bytes] | None = None,
    dir_fd: int | None = None,
) -> list[str]:
    """Problems between the seal and the files on disk, as sentences; empty when it holds (:func:`judge`)."""
    return judge(entry_dir, seal, present=present, names=names, held=held, dir_fd=dir_fd).messages


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
    """(recorded time, fingerprint) of the entry's seal when this reader believes it (:func:`read_stamped`); None
    when there is none to believe: a forged seal's ``fs_time_ns`` of 2**62 makes nothing "unchanged"."""
    try:
        s, at = read_stamped(entry_dir)
    except SealError:
        return None
    return (at, s.fingerprint) if s is not None and at is not None else None


def newest_ctime(entry_dir: str, names: Iterable[str]) -> int:
    """The newest ctime (ns) among ``names`` in the entry, for :func:`write`'s ``after_ns``; -1 when none."""
    newest = -1
    for n in names:
        try:
            newest = max(newest, os.lstat(os.path.join(entry_dir, n)).st_ctime_ns)
        except OSError:
            pass
    return newest


def write(entry_dir: str, seal: Seal, after_ns: int = -1, *, name: str | None = None) -> str:
    """Write the seal atomically (:class:`~jitwarden.store.atomic.AtomicWriter`: a temporary in the entry,
    renamed by the entry's fd), authenticated (:func:`signed`).

    The seal records ``fs_time_ns``: the ctime its temp file got when created, i.e. the file
    system's clock at sealing. Every file sealed is older or of the same tick; any later change
    to one gives it a ctime at least that. ``after_ns``: the newest ctime among the sealed files;
    the recorded time is pushed past it (by touching the temp file for up to a few clock ticks)
    so that an unchanged entry is told apart from one changed in the same tick.
    ``name``: the entry's name the MAC binds, when ``entry_dir`` is not yet where the entry will live (a
    staged import, ``/proc/self/fd/N``); else the last component of ``entry_dir``.
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
            body = json.dumps(doc, sort_keys=True).encode()  # dumps is the C encoder
            w.write(signed(name or _name(entry_dir), body))
    finally:
        os.close(dir_fd)
    return os.path.join(entry_dir, SEAL_FILE)
