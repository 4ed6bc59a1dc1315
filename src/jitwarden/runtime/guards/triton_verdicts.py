"""What Triton's guard decides of an entry from the bytes it read (:mod:`jitwarden.runtime.guards.triton`): the
verdict records, a group file's children against the entry, a standalone file against its seal (or, unsealed,
against its kind), and the children's bytes against the seal's digests. Nothing here locks or writes.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os

from jitwarden import __version__
from jitwarden.adapters import triton as _adapter
from jitwarden.formats import elf
from jitwarden.formats import jsonlimits as _jsonlimits
from jitwarden.model.settings import GUARD_HASH_ALL
from jitwarden.store import seal as _seal
from jitwarden.store.reads import read_bytes

STANDALONE = (".so", ".autotune.json")
"""Files Triton reads alone (``get_file``), sealed one by one: launchers and autotune records."""
IR_TEXT = (".source", ".ttir", ".ttgir", ".llir", ".ptx", ".amdgcn")
"""Intermediate texts Triton never executes on a hit: the hit path checks their size only, unless
the ``GUARD_HASH_ALL`` setting (model/settings.py) is on; the group, metadata and binaries are always hashed. ``jitwarden
verify`` and every slow-path decision (quarantine, legacy sealing) hash everything."""
HASH_ALL = GUARD_HASH_ALL.on(os.environ)
GROUP_MAX = 1 << 20


def parse_json(raw: bytes):
    """JSON from bytes (already bounded by their reader), through the depth-limited parser; ValueError for
    anything that is not (too deep included)."""
    return _jsonlimits.loads(raw, max_bytes=max(len(raw), 1))


@functools.cache
def producer() -> dict:
    """Who wrote a seal: this Triton's and this jitwarden's releases."""
    try:
        import triton

        tv = triton.__version__
    except Exception:
        tv = None
    return {"triton": tv, "jitwarden": __version__}


@functools.lru_cache(maxsize=1)
def host() -> str:
    return _adapter.host_machine()


class Verdict:
    """One judgement of an entry or file: ``state`` ``ok`` | ``legacy`` (unsealed) | ``bad`` (``code``,
    ``details``) | ``gone``; ``result``: what was judged (the children, a file's bytes)."""

    __slots__ = ("state", "code", "details", "result")

    def __init__(self, state: str, code: str = "", details=(), result=None):
        self.state, self.code, self.details, self.result = state, code, tuple(details), result


class Admitted:
    """What :meth:`GuardedCacheManager.prove` made of an unsealed entry: one typed result.

    ``state``: ``sealed`` | ``refused`` (``verdict`` says why) | ``unsealed`` (used by ``files``,
    the digests proven, for ``children``; no seal could be written).
    """

    __slots__ = ("state", "verdict", "children", "files")

    def __init__(
        self,
        state: str,
        verdict: Verdict | None = None,
        children: dict | None = None,
        files: dict | None = None,
    ):
        self.state, self.verdict, self.children, self.files = state, verdict, children, files


def group_children(grp_name: str, raw: bytes, cache_dir: str) -> Verdict:
    """The group file ``grp_name``'s bytes ``raw``: ``ok`` with its children (name -> path) when each names a file
    of the entry ``cache_dir`` by its own name, else ``bad``."""
    try:
        doc = parse_json(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return Verdict(
            "bad", "corrupt", [f"{grp_name}: unreadable group file ({type(exc).__name__})"]
        )
    children = doc.get("child_paths") if isinstance(doc, dict) else None
    if not isinstance(children, dict):
        return Verdict("bad", "corrupt", [f"{grp_name}: no child_paths mapping"])
    for c, p in children.items():
        if not isinstance(p, str) or not isinstance(c, str):
            return Verdict("bad", "corrupt", [f"{grp_name}: child {c!r} has no path"])
        d, b = os.path.split(p)
        if b != c:
            return Verdict("bad", "mismatch", [f"{grp_name}: {c} points to a file named {b} ({p})"])
        if d != cache_dir and not _adapter.same_dir(d, cache_dir):
            return Verdict(
                "bad", "foreign-path", [f"{grp_name}: {c} points outside the entry to {p}"]
            )
    return Verdict("ok", result=dict(children))


def standalone(filename: str, raw: bytes, sealed) -> Verdict:
    """A standalone file's bytes ``raw`` against ``sealed`` (the entry's seal, None when unsealed): ``ok`` when the
    seal records them; unsealed, ``legacy`` when they are what their name says (a shared object for this host,
    JSON), else ``bad``. ``result``: the bytes."""
    if sealed is not None:
        rec = sealed.files.get(filename)
        if rec is None:
            return Verdict("bad", "corrupt", [f"not covered by the seal: {filename}"])
        if rec["size"] != len(raw) or rec["sha256"] != hashlib.sha256(raw).hexdigest():
            return Verdict("bad", "corrupt", [f"{filename} does not match its sealed sha256"])
        return Verdict("ok", result=raw)
    why = _unsealed_problem(filename, raw)
    return Verdict("legacy", result=raw) if why is None else Verdict("bad", why[0], [why[1]])


def _unsealed_problem(filename: str, raw: bytes) -> tuple[str, str] | None:
    """(code, why) when an unsealed standalone file is not what its name says, else None."""
    if filename.endswith(".so"):
        try:
            so = elf.parse(raw)
        except elf.ElfError as exc:
            return "corrupt", f"{filename}: not a valid shared object ({exc})"
        if so.machine_name != host():
            return "mismatch", f"{filename} is an ELF for {so.machine_name}, this host is {host()}"
    elif filename.endswith(".json"):
        try:
            parse_json(raw)
        except (ValueError, UnicodeDecodeError):
            return "corrupt", f"{filename}: not valid JSON"
    return None


def read_checked(efd: int, children: dict, files: dict, hash_all: bool = False) -> dict | None:
    """Each child's bytes, read once through the entry fd ``efd``, when they match ``files`` (the seal), else None.

    IR texts Triton never executes are checked by size only unless ``hash_all``.
    """
    sha256 = hashlib.sha256
    out = {}
    for c in children:
        rec = files.get(c)
        if rec is None:
            return None
        try:
            data = read_bytes(c, max_bytes=rec["size"], size_hint=rec["size"], dir_fd=efd)
        except OSError as exc:
            if exc.errno == errno.EFBIG:  # longer than sealed
                return None
            raise
        if len(data) != rec["size"]:
            return None
        if (hash_all or HASH_ALL or not c.endswith(IR_TEXT)) and sha256(data).hexdigest() != rec[
            "sha256"
        ]:
            return None
        out[c] = data
    return out


def sealed_hit(efd: int, grp_name: str, cache_dir: str, digest: str | None) -> dict | None:
    """The hit path, lock-free: the group ``grp_name`` of the entry ``cache_dir`` (its fd ``efd``) and every child
    match the seal, made under ``digest``; name -> the bytes checked.

    Returns None whenever anything is not exactly right; the guard then decides under the entry lock
    (so a writer mid-seal never causes a quarantine).
    """
    grp_raw = read_bytes(grp_name, max_bytes=GROUP_MAX, dir_fd=efd, size_hint=4096)
    children = parse_json(grp_raw)["child_paths"]
    sealed = _seal.read(cache_dir, dir_fd=efd)  # authentic, and nobody else's to write
    if sealed is None:
        return None
    files = sealed.files
    rec = files[grp_name]
    if rec["size"] != len(grp_raw) or rec["sha256"] != hashlib.sha256(grp_raw).hexdigest():
        return None
    prefix = cache_dir + os.sep
    for c, p in children.items():
        if p != prefix + c or os.sep in c:
            return None
    if _seal.foreign(sealed.fingerprint, digest):
        return None
    return read_checked(efd, children, files)
