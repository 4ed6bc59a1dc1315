"""Signed cache bundles: one tar file of this environment's verified entries, installable on other nodes.

Layout of a bundle (an uncompressed tar, or gzip when the name ends in ``.gz``):

- ``manifest.json`` (first member): the exporter's full fingerprint and its digest, producer
  versions, and per entry its kind, its path inside the fingerprint partition and every
  file's sha256 and size;
- ``manifest.sig`` (second member, absent when unsigned): an Ed25519 signature over the exact
  bytes of ``manifest.json`` and the signing key's id;
- ``entries/<n>/<file>``: the files of entry number ``n``.

Import never extracts a tar member: it reads regular-file members only, by names it
expects (``entries/<n>/<name>`` with ``<name>`` one plain path component listed in the
manifest), writes each itself (``O_EXCL | O_NOFOLLOW``) into a staging dir inside the
destination partition, checks every digest, and only then moves whole entries in by
rename and seals them. Destinations come from the signed manifest and are checked to be
plain relative paths inside the partition.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import time
from dataclasses import dataclass, field, replace
from typing import Literal, overload

from jitwarden import adapters
from jitwarden.env import locations
from jitwarden.formats import jsonlimits, tarball
from jitwarden.model import kinds
from jitwarden.model.asjson import fields_json
from jitwarden.model.errors import ExitStatus, JitwardenError
from jitwarden.model.findings import Severity
from jitwarden.model.layout import PARTITIONS_DIR, is_reserved
from jitwarden.ops import scan
from jitwarden.store import atomic, partition, paths, reads, removal, seal, tempdirs
from jitwarden.store.quarantine import rename_noreplace

SCHEMA = 1
FORMAT = "jitwarden-bundle"
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
MAX_MANIFEST = 64 << 20
_MEMBER = re.compile(r"entries/(\d{1,9})/([^/]+)\Z")
ACTIONS = ("installed", "present", "skipped", "refused")
"""What import does with one entry of a bundle (``refused``: verify's judge found an error in it)."""
MAX_SIGNATURE = 4096
MAX_GROUP = 1 << 20
STAGE_PREFIX = ".jitwarden-import."


class BundleRefused(JitwardenError, ValueError):
    """The bundle must not be installed (unsigned, untrusted, tampered, unsafe); the message says why."""

    exit_code = ExitStatus.FINDINGS


class Unsigned(BundleRefused):
    """The bundle carries no signature, and unsigned bundles were not allowed."""


@dataclass(frozen=True)
class BundleEntry:
    """One cache entry of a bundle: ``path`` is relative to its kind's partition (``/``-separated)."""

    kind: str
    path: str
    files: dict  # name -> {"sha256": hex, "size": int}; name "" when the entry is a single file
    sealed: bool = False  # sealed at the source (Triton kernel dirs); import seals these again

    @property
    def bytes(self) -> int:
        return sum(r["size"] for r in self.files.values())

    def to_json(self) -> dict:
        return fields_json(self)


@dataclass(frozen=True)
class Manifest:
    digest: str
    fingerprint: dict
    producer: dict
    created: float
    entries: tuple[BundleEntry, ...]
    workloads: dict = field(default_factory=dict)
    """Workload name -> its kernel list (``ops.workload.summary``): what ``coverage`` reads before an install and
    a node records with one (issue 44); optional, absent from the JSON when empty."""

    def to_json(self) -> dict:
        extra = {"workloads": self.workloads} if self.workloads else {}
        return {
            **extra,
            "schema": SCHEMA,
            "format": FORMAT,
            **fields_json(self, omit=("workloads",), entries=[e.to_json() for e in self.entries]),
        }


# ---------------------------------------------------------------- checks (pure)


def safe_relpath(path: str) -> str | None:
    """None when ``path`` is a plain relative path (no ``..``, no absolute, no empty or reserved part), else why not."""
    if not isinstance(path, str) or not path:
        return "empty path"
    if path.startswith("/") or "\\" in path or "\x00" in path:
        return f"not a plain relative path: {path!r}"
    for part in path.split("/"):
        if part in ("", ".", ".."):
            return f"path has an empty, '.' or '..' part: {path!r}"
        if is_reserved(part):
            return f"path names one of jitwarden's own files: {path!r}"
    return None


def safe_name(name: str) -> bool:
    return (
        bool(name)
        and "/" not in name
        and "\\" not in name
        and "\x00" not in name
        and name not in (".", "..")
        and not is_reserved(name)
    )


def parse_manifest(raw: bytes) -> Manifest:
    """The manifest, checked field by field; BundleRefused saying what is wrong."""
    try:
        doc = jsonlimits.loads(raw, max_bytes=MAX_MANIFEST)
        if not isinstance(doc, dict):
            raise BundleRefused("the manifest is not a JSON object")
        if doc.get("format") != FORMAT or doc.get("schema") != SCHEMA:
            raise BundleRefused(f"not a {FORMAT} of schema {SCHEMA}")
        entries = []
        seen = set()
        for i, e in enumerate(doc["entries"]):
            kind, path, files = e["kind"], e["path"], e["files"]
            if kind not in kinds.NAMES or not kinds.get(kind).bundled:
                raise BundleRefused(f"entry {i}: unknown cache kind {kind!r}")
            why = safe_relpath(path)
            if why:
                raise BundleRefused(f"entry {i}: {why}")
            if (kind, path) in seen:
                raise BundleRefused(f"entry {i}: {kind} {path} is listed twice")
            seen.add((kind, path))
            if not isinstance(files, dict) or not files:
                raise BundleRefused(f"entry {i}: no files")
            for name, rec in files.items():
                if name != "" and not safe_name(name):
                    raise BundleRefused(f"entry {i}: unsafe file name {name!r}")
                if not (
                    isinstance(rec.get("sha256"), str)
                    and len(rec["sha256"]) == 64
                    and isinstance(rec.get("size"), int)
                    and rec["size"] >= 0
                ):
                    raise BundleRefused(f"entry {i}: file {name!r} has no valid sha256 and size")
            if "" in files and len(files) != 1:
                raise BundleRefused(f"entry {i}: a single-file entry with other files")
            entries.append(
                BundleEntry(
                    kind, path, {k: dict(v) for k, v in files.items()}, bool(e.get("sealed"))
                )
            )
        nested = seen & {
            (k, "/".join(p.split("/")[:n])) for k, p in seen for n in range(1, p.count("/") + 1)
        }
        if nested:
            k, p = min(nested)
            raise BundleRefused(f"{k} {p} is an entry and holds another entry of the bundle")
        return Manifest(
            str(doc["digest"]),
            dict(doc["fingerprint"]),
            dict(doc.get("producer") or {}),
            float(doc.get("created") or 0),
            tuple(entries),
            _workloads(doc.get("workloads")),
        )
    except BundleRefused:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BundleRefused(f"the manifest is not valid ({type(exc).__name__}: {exc})") from None


def layer_bound(manifest: Manifest, manifest_bytes: int) -> int:
    """The most bytes a bundle tar of ``manifest`` can take (pure): what a pulled layer's size is held to
    before a byte of it is read, since the layer's descriptor is not signed and its manifest is.

    Per member (``manifest.json``, ``manifest.sig``, each listed file) its data rounded up to the tar
    block (512), its header, and a PAX header of a long name (a header and two blocks of records: a
    name is one path component of at most 255 bytes below ``entries/<n>/``); the end-of-archive blocks
    and tarfile's padding to a 10 KiB record; then 1/256 more and 64 KiB for a gzip stream's framing
    (deflate's stored blocks add 5 bytes per 64 KiB of data that does not compress).
    """
    block, per_member = 512, 4 * 512
    sizes = [
        manifest_bytes,
        MAX_SIGNATURE,
        *(r["size"] for e in manifest.entries for r in e.files.values()),
    ]
    tar = sum(per_member + -(-n // block) * block for n in sizes) + 2 * block + 20 * block
    return tar + tar // 256 + (64 << 10)


def _workloads(doc) -> dict:
    """The optional ``workloads`` of a manifest: name -> list of kernel rows, anything else dropped (each row is
    checked where it is read, ``ops.workload.from_summary``)."""
    if not isinstance(doc, dict):
        return {}
    return {str(k): v for k, v in doc.items() if isinstance(v, list)}


# ---------------------------------------------------------------- export


def entry_files(path: str) -> dict | None:
    """``{name: None}`` for a flat directory of regular files, ``{"": None}`` for a regular file, else None."""
    return _files_at(None, path)


def describe(kind: str, partition_dir: str, entry_path: str, sealed: bool) -> BundleEntry | str:
    """The bundle record of one entry on disk (digests from its seal, checked now), or why it is left out."""
    rel = os.path.relpath(entry_path, partition_dir).replace(os.sep, "/")
    if safe_relpath(rel):
        return f"not inside its partition ({rel})"
    names = entry_files(entry_path)
    if names is None:
        return "not a flat directory of regular files"
    if sealed:
        s = seal.read(entry_path)
        if s is None:
            return "not sealed"
        problems = seal.check(entry_path, s, present=list(names))
        if problems:
            return "seal does not hold: " + "; ".join(problems)
        return BundleEntry(kind, rel, {n: dict(s.files[n]) for n in sorted(names)}, True)
    files = {}
    for n in sorted(names):
        digest, size = seal.file_digest(os.path.join(entry_path, n) if n else entry_path)
        files[n] = {"sha256": digest, "size": size}
    return BundleEntry(kind, rel, files, False)


class _HashingReader:
    """Reads an open file while hashing it, so what goes into the tar is what the manifest says."""

    def __init__(self, fd: int):
        self.fd, self.h, self.n = fd, hashlib.sha256(), 0

    def read(self, size=-1):
        b = os.read(self.fd, size if size >= 0 else 1 << 20)
        self.h.update(b)
        self.n += len(b)
        return b


def manifest_bytes(manifest: Manifest) -> bytes:
    """The exact bytes of ``manifest.json`` (what is signed)."""
    return json.dumps(manifest.to_json(), sort_keys=True, separators=(",", ":")).encode()


def signature_record(mbytes: bytes, signer) -> bytes:
    """The bytes of ``manifest.sig``: an Ed25519 signature over ``mbytes`` and the signing key's id."""
    sig = {
        "schema": SCHEMA,
        "algorithm": "ed25519",
        "key_id": signer.id,
        "signature": signer.sign(mbytes).hex(),
    }
    return json.dumps(sig).encode()


def write(out_path: str, manifest: Manifest, partitions: dict, signer=None) -> int:
    """Write the bundle to ``out_path`` atomically (a random temp file beside it, renamed by fd); its size in bytes.

    ``partitions``: kind -> the partition dir the entries' paths are relative to. A file
    that changed since it was described fails the export (ValueError) and leaves no file.
    OSError EISDIR when ``out_path`` is a directory.
    """
    dir_fd, name = paths.open_parent(out_path)
    try:
        with atomic.AtomicWriter(dir_fd, name, f".{name}.") as w:
            write_to(w, manifest, partitions, signer, out_path.endswith(".gz"))
            return w.pos
    finally:
        os.close(dir_fd)


def write_to(w, manifest: Manifest, partitions: dict, signer=None, gz: bool = False) -> None:
    """Write the bundle as a tar stream into ``w`` (anything with ``write``): what :func:`write` and ``push`` write.

    ValueError when a file changed since it was described.
    """
    mbytes = manifest_bytes(manifest)
    with tarball.open_writer(w, gz) as tar:
        tarball.add_bytes(tar, MANIFEST, mbytes, manifest.created)
        if signer is not None:
            tarball.add_bytes(tar, SIGNATURE, signature_record(mbytes, signer), manifest.created)
        for n, e in enumerate(manifest.entries):
            base = os.path.join(partitions[e.kind], *e.path.split("/"))
            for fname, rec in e.files.items():
                src = os.path.join(base, fname) if fname else base
                fd, _st = reads.open_regular(src)
                try:
                    r = _HashingReader(fd)
                    tarball.add_stream(
                        tar,
                        f"entries/{n}/{fname or os.path.basename(base)}",
                        r,
                        rec["size"],
                        manifest.created,
                    )
                finally:
                    os.close(fd)
                if r.h.hexdigest() != rec["sha256"] or r.n != rec["size"]:
                    raise ValueError(f"{src} changed while exporting; run export again")


# ---------------------------------------------------------------- import


@dataclass(frozen=True)
class Outcome:
    """What import did (or would do) with one entry."""

    kind: str
    path: str
    action: str  # one of ACTIONS
    why: str = ""
    dest: str | None = None
    bytes: int = 0

    def to_json(self) -> dict:
        return fields_json(self)


@dataclass(frozen=True)
class Opened:
    """A bundle whose manifest was read and whose signature was judged."""

    manifest: Manifest
    signed_by: str | None  # the trusted key id that signed it, None when unsigned (and allowed)
    signature_note: str = ""
    manifest_sha256: str = ""  # of the exact manifest.json bytes


def open_bundle(path: str, trusted, allow_unsigned: bool = False):
    """Open ``path``, read its manifest and check its signature against ``trusted`` (keys.TrustedKeys).

    BundleRefused when the bundle is unsigned (unless ``allow_unsigned``), signed by a key
    that is not trusted, its signature does not match, or it is not a bundle at all; OSError
    when ``path`` cannot be opened as a regular file (a directory, a FIFO, missing). Returns
    (the tar reader, :class:`Opened`); closing the reader closes the file.
    """
    f = reads.open_regular_file(
        path, follow=True
    )  # the user named it: their link is followed, a FIFO never blocks
    return open_bundle_file(f, trusted, allow_unsigned)


def open_bundle_file(f, trusted, allow_unsigned: bool = False):
    """:func:`open_bundle` of an open binary file ``f`` (a pulled layer); the reader owns ``f``."""
    try:
        tar = tarball.open_reader(f, owns=True)
    except tarball.NotATar as exc:
        f.close()
        raise BundleRefused(f"not a jitwarden bundle ({exc})") from None
    except BaseException:
        f.close()
        raise
    try:
        try:
            first = tar.next()
            if first is None or first.name != MANIFEST:
                raise BundleRefused(
                    "not a jitwarden bundle (its first member is not manifest.json)"
                )
            mbytes = tarball.read_member(tar, first, MAX_MANIFEST)
            second = tar.next()
            sig = (
                tarball.read_member(tar, second, MAX_SIGNATURE)
                if second is not None and second.name == SIGNATURE
                else None
            )
        except (*tarball.TarError, OSError, ValueError) as exc:
            raise BundleRefused(f"not a readable jitwarden bundle ({exc})") from None
        signed_by, note = judge_signature(mbytes, sig, trusted, allow_unsigned)
        manifest = parse_manifest(
            mbytes
        )  # only after the signature: nothing unsigned is interpreted first
        return tar, Opened(manifest, signed_by, note, hashlib.sha256(mbytes).hexdigest())
    except BaseException:
        tar.close()
        raise


def judge_signature(mbytes: bytes, sig: bytes | None, trusted, allow_unsigned: bool = False):
    """(the trusted key id that signed ``mbytes``, or None; the note saying so) from the ``manifest.sig``
    record ``sig``; BundleRefused (``Unsigned``) unless it verifies or ``allow_unsigned``."""
    if sig is None:
        if not allow_unsigned:
            raise Unsigned("the bundle is unsigned")
        return None, "unsigned (allowed by --allow-unsigned)"
    try:
        doc = jsonlimits.loads(sig, max_bytes=MAX_SIGNATURE)
        kid, raw = str(doc["key_id"]), bytes.fromhex(doc["signature"])
        if doc.get("algorithm") != "ed25519":
            raise ValueError("algorithm")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise BundleRefused("manifest.sig is not a valid signature record") from None
    why = (
        trusted.verify(kid, raw, mbytes)
        if trusted is not None
        else "no trusted keys are configured"
    )
    if why is None:
        return kid, f"signed by trusted key {kid}"
    if not allow_unsigned:
        raise BundleRefused(f"signature rejected: {why}")
    return None, f"signature rejected ({why}), installed anyway by --allow-unsigned"


def destinations(manifest: Manifest, digest: str, env) -> dict:
    """kind -> this environment's partition dir of ``digest`` for every kind the bundle carries."""
    out = {}
    for kind in (k.name for k in kinds.bundled()):
        if any(e.kind == kind for e in manifest.entries):
            out[kind] = partition.path_for(locations.partition_base(kind, env), digest)
    return out


@overload
def _open_partition(part: str, create: Literal[True]) -> int: ...
@overload
def _open_partition(part: str, create: bool) -> int | None: ...
def _open_partition(part: str, create: bool) -> int | None:
    """An fd of the partition ``<base>/jitwarden-v1/<digest>``; None when absent (and not ``create``).

    The base is the root the user named (their own links followed, made like ``mkdir -p``);
    below it every component is opened by fd and never through a symlink: ``UnsafeName``
    naming the path when ``jitwarden-v1`` or the partition is a link or not jitwarden's.
    """
    split = partition.split(part)
    assert split is not None  # every destination is a partition dir
    base, digest = split
    try:
        base_fd = paths.open_dir_path(base, create=create)
    except FileNotFoundError:
        if create:
            raise
        return None
    try:
        v1 = paths.reserved_dir(base_fd, PARTITIONS_DIR, create=create)
        if v1 is None:
            return None
        try:
            return paths.reserved_dir(v1, digest, create=create)
        except paths.UnsafeName as exc:
            raise paths.UnsafeName(
                exc.errno, os.path.join(base, PARTITIONS_DIR, exc.strerror or "")
            ) from None
        finally:
            os.close(v1)
    except paths.UnsafeName as exc:
        if (exc.strerror or "").startswith(base):
            raise
        raise paths.UnsafeName(exc.errno, os.path.join(base, exc.strerror or "")) from None
    finally:
        os.close(base_fd)


@overload
def _parent_of(part_fd: int, part: str, e: BundleEntry, create: Literal[True]) -> int: ...
@overload
def _parent_of(part_fd: int, part: str, e: BundleEntry, create: bool) -> int | None: ...
def _parent_of(part_fd: int, part: str, e: BundleEntry, create: bool) -> int | None:
    """An fd of the directory that holds entry ``e`` inside the partition (walked by fd, never through a
    symlink: ``UnsafeName`` naming the component); None when it is absent (and not ``create``)."""
    parent = "/".join(e.path.split("/")[:-1])
    try:
        return paths.open_beneath(part_fd, parent, create=create)
    except FileNotFoundError:
        if create:
            raise
        return None
    except paths.UnsafeName as exc:
        raise paths.UnsafeName(exc.errno, os.path.join(part, exc.strerror or "")) from None


def _files_at(dir_fd: int | None, name: str) -> dict | None:
    """:func:`entry_files` of ``name`` inside ``dir_fd`` (None: ``name`` is a path), never through a symlink."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISREG(st.st_mode):
        return {"": None}
    if not stat.S_ISDIR(st.st_mode):
        return None
    fd = paths.open_dir_at(name, dir_fd=dir_fd)
    try:
        with os.scandir(fd) as it:
            out: dict[str, None] = {}
            for d in it:
                if is_reserved(d.name):
                    continue
                if not d.is_file(follow_symlinks=False):
                    return None
                out[d.name] = None
        return out or None
    finally:
        os.close(fd)


def _present(parent_fd: int, leaf: str, e: BundleEntry) -> str | None:
    """None when nothing is at ``leaf``; "present" when the same files are there; else why it is in the way."""
    taken = "another entry of that name is already there"
    try:
        names = _files_at(parent_fd, leaf)
    except FileNotFoundError:
        return None
    except OSError:
        return taken
    if names is None or set(names) != set(e.files):
        return taken
    efd = paths.open_dir_at(leaf, dir_fd=parent_fd) if "" not in e.files else None
    try:
        for name, rec in e.files.items():
            try:
                digest, _size = seal.file_digest(
                    name or leaf, dir_fd=parent_fd if efd is None else efd
                )
            except OSError:
                return taken
            if digest != rec["sha256"] and not name.startswith("__grp__"):
                return taken
    finally:
        if efd is not None:
            os.close(efd)
    return "present"


def plan(manifest: Manifest, dests: dict) -> list[Outcome]:
    """What an import would do with each entry, before anything is written.

    Reads by directory fds only; ``UnsafeName`` (an OSError naming the path) when a directory
    on the way (``jitwarden-v1``, the partition, a subdirectory such as Inductor's ``fxgraph``)
    is a symlink or not jitwarden's: nothing is installed through it.
    """
    out = []
    parts = {}
    try:
        for e in manifest.entries:
            if e.kind not in parts:
                parts[e.kind] = _open_partition(dests[e.kind], create=False)
            dest = os.path.join(dests[e.kind], *e.path.split("/"))
            pfd = parts[e.kind]
            parent_fd = _parent_of(pfd, dests[e.kind], e, create=False) if pfd is not None else None
            try:
                state = (
                    _present(parent_fd, e.path.split("/")[-1], e) if parent_fd is not None else None
                )
            finally:
                if parent_fd is not None:
                    os.close(parent_fd)
            if state == "present":
                out.append(Outcome(e.kind, e.path, "present", "already installed", dest, e.bytes))
            elif state:
                out.append(Outcome(e.kind, e.path, "skipped", state, dest, e.bytes))
            else:
                out.append(Outcome(e.kind, e.path, "installed", "", dest, e.bytes))
    finally:
        for fd in parts.values():
            if fd is not None:
                os.close(fd)
    return out


def _write_new(name: str, dir_fd: int, src, size: int) -> str:
    """Copy ``size`` bytes of ``src`` into a new file ``name`` in ``dir_fd`` (never through a link); its sha256."""
    fd = atomic.create_new(name, dir_fd=dir_fd, mode=0o644)
    h = hashlib.sha256()
    left = size
    try:
        while left:
            b = src.read(min(left, 1 << 20))
            if not b:
                break
            h.update(b)
            view = memoryview(b)
            while view:
                view = view[os.write(fd, view) :]
            left -= len(b)
    finally:
        os.close(fd)
    if left:
        raise BundleRefused(f"{name}: truncated in the bundle")
    return h.hexdigest()


def _rewrite_groups(entry_fd: int, final: str) -> None:
    """Point a Triton group file's ``child_paths`` at the entry's new home (they are absolute paths)."""
    for name in os.listdir(entry_fd):
        if not (name.startswith("__grp__") and name.endswith(".json")):
            continue
        try:
            doc = reads.read_json(name, dir_fd=entry_fd, max_bytes=MAX_GROUP)
        except ValueError:
            continue  # not JSON we parse: copied as signed, judged by verify like any other group file
        kids = doc.get("child_paths") if isinstance(doc, dict) else None
        if not isinstance(kids, dict):
            continue
        for k, v in list(kids.items()):
            base = os.path.basename(str(v))
            try:
                is_file = stat.S_ISREG(
                    os.stat(base, dir_fd=entry_fd, follow_symlinks=False).st_mode
                )
            except OSError:
                is_file = False
            if is_file:
                kids[k] = os.path.join(final, base)
        atomic.write_json_atomic(name, doc, ".jitwarden-group.", dir_fd=entry_fd)


class _Staging:
    """The private staging dirs of one import (one per destination partition: same filesystem), by fd.

    Every entry is staged at ``<stage>/<its path inside the partition>``: the staged set is one tree laid
    out as the partition is, so each adapter judges an entry by the same relative name ``verify`` would
    (``fxgraph/ab/<key>``, ``<tag>/<module>``) and beside the entries it loads (an AOTAutograd result and
    the FX graph it names, staged with it). Closing removes every staging dir and closes every fd.
    """

    def __init__(self, manifest: Manifest, dests: dict):
        self.manifest, self.dests = manifest, dests
        self.fds: list[int] = []
        self.parts: dict[str, int] = {}  # kind -> partition fd
        self.stages: dict[str, tuple[int, str, int]] = {}  # kind -> (partition fd, name, fd)
        self.holders: dict[int, int] = {}  # entry -> fd of the staged dir that holds its leaf
        self.dirs: dict[int, int] = {}  # entry -> fd of its staged dir (kernel dirs)

    def keep(self, fd: int) -> int:
        self.fds.append(fd)
        return fd

    def partition(self, kind: str) -> int:
        if kind not in self.parts:
            self.parts[kind] = self.keep(_open_partition(self.dests[kind], create=True))
        return self.parts[kind]

    def _stage(self, kind: str) -> int:
        if kind not in self.stages:
            name, sfd = tempdirs.make_temp_dir(self.partition(kind), STAGE_PREFIX)
            self.stages[kind] = (self.parts[kind], name, self.keep(sfd))
        return self.stages[kind][2]

    def holder(self, i: int) -> int:
        """An fd of ``<stage>/<parent of the entry's path>``, made on first use."""
        if i not in self.holders:
            e = self.manifest.entries[i]
            rel = "/".join(e.path.split("/")[:-1])
            self.holders[i] = self.keep(paths.open_beneath(self._stage(e.kind), rel, create=True))
        return self.holders[i]

    def entry_dir(self, i: int) -> int:
        """An fd of the staged kernel dir of entry ``i`` (a directory entry), made on first use."""
        if i not in self.dirs:
            leaf = self.manifest.entries[i].path.split("/")[-1]
            self.dirs[i] = self.keep(paths.open_beneath(self.holder(i), leaf, create=True))
        return self.dirs[i]

    def root_of(self, i: int) -> str:
        """The path of the staging dir entry ``i``'s path is relative to, for the adapters' judges."""
        return os.path.realpath(paths.fd_path(self.stages[self.manifest.entries[i].kind][2]))

    def close(self) -> None:
        for part_fd, name, _sfd in self.stages.values():
            try:
                removal.rmtree_at(part_fd, name)
            except OSError:
                pass
        for fd in reversed(self.fds):
            os.close(fd)


def _stage_members(tar, manifest: Manifest, todo: set, st: _Staging) -> None:
    """Write every member of the entries in ``todo`` into staging, each checked against the manifest.

    BundleRefused on a member the manifest does not list, one that is no regular file, a size or a
    sha256 that differs, a listed file missing; members of entries not in ``todo`` are only counted.
    """
    got: dict[int, set] = {i: set() for i in range(len(manifest.entries))}
    header: set = set()
    for info in tar:
        if info.name in (MANIFEST, SIGNATURE):  # tarfile yields the members open_bundle read first
            if info.name in header:
                raise BundleRefused(f"{info.name} appears twice")
            header.add(info.name)
            continue
        i, key, rec = _listed(info, manifest, got)
        e = manifest.entries[i]
        if i in todo:
            into, name = (
                (st.holder(i), e.path.split("/")[-1]) if key == "" else (st.entry_dir(i), key)
            )
            if _write_new(name, into, tarball.member_stream(tar, info), info.size) != rec["sha256"]:
                raise BundleRefused(
                    f"{e.kind} {e.path}/{key}: sha256 does not match the manifest (tampered)"
                )
        got[i].add(key)
    for i, e in enumerate(manifest.entries):
        missing = set(e.files) - got[i]
        if missing:
            raise BundleRefused(f"{e.path}: {len(missing)} listed file(s) missing from the bundle")


def _listed(info, manifest: Manifest, got: dict) -> tuple[int, str, dict]:
    """(entry number, file key, its manifest record) of a tar member; BundleRefused when the manifest does
    not list it as a regular file of that size (pure)."""
    m = _MEMBER.match(info.name)
    if m is None:
        raise BundleRefused(f"unexpected member {info.name!r} (outside entries/<n>/<file>)")
    if not info.isreg():
        raise BundleRefused(
            f"member {info.name!r} is not a regular file (links and devices are refused)"
        )
    i, fname = int(m.group(1)), m.group(2)
    if i >= len(manifest.entries):
        raise BundleRefused(f"member {info.name!r} belongs to no entry of the manifest")
    e = manifest.entries[i]
    key = "" if "" in e.files else fname
    if key not in e.files or not safe_name(fname) or key in got[i]:
        raise BundleRefused(
            f"member {info.name!r} is not a file the manifest lists (or appears twice)"
        )
    rec = e.files[key]
    if info.size != rec["size"]:
        raise BundleRefused(
            f"{e.kind} {e.path}/{key}: {info.size} bytes in the bundle, {rec['size']} signed"
        )
    return i, key, rec


def refusal(entry) -> str | None:
    """Why an install refuses an entry ``verify``'s judge judged (its error findings), None when it passes
    (pure): the one rule ``push`` leaves out by and ``import``/``pull`` refuse by."""
    errors = [f for f in entry.findings if f.severity >= Severity.ERROR]
    if not errors:
        return None
    return "verify: " + "; ".join(f"{f.code}: {f.message}" for f in errors[:3])


def loads(entry) -> tuple[str, ...]:
    """The paths, inside its partition, of the entries a judged ``entry`` loads (an AOTAutograd result: the
    FX graphs it names; pure): what must go in with it."""
    from jitwarden.adapters import inductor

    return tuple(inductor.fx_graph_path(k) for k in getattr(entry.facts, "fx_graphs", None) or ())


def with_dependencies(
    entries: tuple[BundleEntry, ...] | list[BundleEntry],
    needs: dict[int, tuple[str, ...]],
    refused: dict[int, str],
    elsewhere: bool,
) -> dict[int, str]:
    """``refused`` with every entry that loads a refused one added, saying which (pure).

    ``needs``: entry -> the paths it loads (:func:`loads`). A path that is no entry of ``entries`` is
    fine when ``elsewhere`` (an install: the judge found it on the node), else the entry is refused
    too (a push: the bundle must carry what its entries load). An entry loaded by a refused one is
    kept: an FX graph is a whole entry without the AOTAutograd result that names it, not the reverse.
    """
    at = {(e.kind, e.path): i for i, e in enumerate(entries)}
    out = dict(refused)
    changed = True
    while changed:
        changed = False
        for i, loaded in sorted(needs.items()):
            if i in out:
                continue
            kind = entries[i].kind
            for p in loaded:
                j = at.get((kind, p))
                if j is None and not elsewhere:
                    out[i] = f"loads {kind} {p}, which the bundle does not carry"
                elif j is not None and j in out:
                    out[i] = f"loads {kind} {p}, which is refused ({out[j]})"
                else:
                    continue
                changed = True
                break
    return out


def _judged(
    manifest: Manifest, todo: set, st: _Staging, judge, dests: dict
) -> tuple[dict[int, str], dict[int, tuple[str, ...]]]:
    """(entry -> why it is refused, entry -> the paths it loads) for every staged entry: an entry the kind's
    adapter (``verify``'s judge) finds an error in is never sealed nor installed.

    Every entry is judged where it lies in the staged tree, beside the other staged entries and with this
    node's partition of its kind (``refs_beside``) for what it loads and the bundle does not carry. A
    Triton group file is pointed at its staged home first; seals are not asked for (import seals after).
    An error of jitwarden's own while judging is the entry's ``unrecognised`` finding (info,
    ``scan._inspected``), never a refusal.
    """
    judge = replace(judge, check_seals=False)
    out, needs = {}, {}
    for i in sorted(todo):
        e = manifest.entries[i]
        root = st.root_of(i)
        if i in st.dirs:
            _rewrite_groups(st.dirs[i], os.path.join(root, *e.path.split("/")))
    for i in sorted(todo):
        e = manifest.entries[i]
        entry = scan._inspected(
            adapters.get(e.kind).inspect_entry,
            e.kind,
            st.root_of(i),
            e.path,
            replace(judge, refs_beside=(dests[e.kind],)),
            os.getuid(),
        )
        why = refusal(entry)
        if why:
            out[i] = why
        needs[i] = loads(entry)
    return out, needs


def install(
    tar,
    manifest: Manifest,
    outcomes: list[Outcome],
    dests: dict,
    digest: str,
    producer_note: dict,
    judge=None,
    all_or_nothing: bool = False,
) -> list[Outcome]:
    """Stage every entry to install, check every digest, judge each, then move each in by rename and seal it.

    Nothing is moved in unless every staged file matches the manifest (BundleRefused
    otherwise, and the staging dirs are removed). ``judge`` (a ``model.entries.Judge``): each
    staged entry is judged by its kind's adapter as ``verify`` judges it, beside the rest of the
    staged set, and one with an error finding is ``refused`` (saying why), nothing of it sealed or
    installed, and so is every entry that loads it (:func:`with_dependencies`); the others go in,
    what they load first (``all_or_nothing``: none goes in, each ``skipped`` saying so). Every directory is
    reached by fd from the root and never through a symlink (``UnsafeName``, nothing moved in);
    every entry is moved by one no-replace rename between directory fds. Returns the outcomes,
    updated.
    """
    todo = {i for i, o in enumerate(outcomes) if o.action == "installed"}
    if not todo:
        return outcomes
    st = _Staging(manifest, dests)
    try:
        try:
            _stage_members(tar, manifest, todo, st)
        except tarball.TarError as exc:
            raise BundleRefused(f"the bundle is damaged ({exc})") from None
        refused: dict[int, str] = {}
        needs: dict[int, tuple[str, ...]] = {}
        if judge is not None:
            refused, needs = _judged(manifest, todo, st, judge, dests)
            refused = with_dependencies(manifest.entries, needs, refused, elsewhere=True)
        out = list(outcomes)
        for i, why in refused.items():
            out[i] = replace(outcomes[i], action="refused", why=why)
        if refused and all_or_nothing:
            held = "not installed: another entry of the bundle was refused"
            return [
                o if i in refused or i not in todo else replace(o, action="skipped", why=held)
                for i, o in enumerate(out)
            ]
        # Every destination directory is opened (made where missing) before anything moves in:
        # a symlinked component refuses the whole import with nothing installed.
        todo -= set(refused)
        parents = {
            i: st.keep(
                _parent_of(
                    st.partition(manifest.entries[i].kind),
                    dests[manifest.entries[i].kind],
                    manifest.entries[i],
                    create=True,
                )
            )
            for i in sorted(todo)
        }
        for i in _loaded_first(todo, needs, manifest):
            out[i] = _move_in(
                manifest.entries[i], outcomes[i], st, i, parents[i], digest, producer_note
            )
        return out
    finally:
        st.close()


def _loaded_first(todo: set, needs: dict, manifest: Manifest) -> list[int]:
    """The entries of ``todo`` in manifest order, each entry another loads before it (pure): a reader never
    finds an AOTAutograd result whose FX graph is not in yet."""
    loaded = {(manifest.entries[i].kind, p) for i in todo for p in needs.get(i, ())}
    return sorted(
        todo,
        key=lambda i: ((manifest.entries[i].kind, manifest.entries[i].path) not in loaded, i),
    )


def _move_in(
    e: BundleEntry, o: Outcome, st: _Staging, i: int, parent_fd: int, digest: str, note: dict
) -> Outcome:
    """Seal staged entry ``i`` (a kernel dir sealed at its source) and rename it into ``parent_fd``; its outcome."""
    leaf = e.path.split("/")[-1]
    efd = st.dirs.get(i)
    if efd is not None:
        assert o.dest is not None  # install() is given plan()'s outcomes, each with its destination
        _rewrite_groups(efd, o.dest)
        if e.sealed:
            where = paths.fd_path(efd)  # exactly the staged dir, whatever is swapped in on the way
            s = seal.compute(where, list(e.files), digest, {**note, "imported_at": time.time()})
            seal.write(where, s, name=leaf)  # the MAC binds its final name
    try:
        rename_noreplace(leaf, leaf, src_dir_fd=st.holder(i), dst_dir_fd=parent_fd)
    except OSError as exc:
        if not isinstance(exc, FileExistsError) and exc.errno not in (
            errno.ENOTEMPTY,
            errno.EEXIST,
        ):
            raise
        return replace(o, action="skipped", why="an entry of that name appeared meanwhile")
    return o


@dataclass(frozen=True)
class ImportReport:
    path: str
    digest_bundle: str
    digest_here: str
    signed_by: str | None
    signature_note: str
    differences: tuple = ()  # fingerprint_diff.Change of bundle -> here
    outcomes: tuple = ()
    refused: str | None = None
    dry_run: bool = False
    extra: dict = field(default_factory=dict)

    def counts(self) -> dict:
        """How many entries were installed, already present, skipped."""
        return {action: sum(o.action == action for o in self.outcomes) for action in ACTIONS}

    def to_json(self) -> dict:
        return {
            "schema": 1,
            "bundle": self.path,
            "digest": {"bundle": self.digest_bundle, "here": self.digest_here},
            "match": self.digest_bundle == self.digest_here,
            "signed_by": self.signed_by,
            "signature": self.signature_note,
            "refused": self.refused,
            "dry_run": self.dry_run,
            "differences": [
                {"component": d.component, "bundle": d.old, "here": d.new, "why": d.why}
                for d in self.differences
            ],
            "counts": self.counts(),
            "entries": [o.to_json() for o in self.outcomes],
        }
