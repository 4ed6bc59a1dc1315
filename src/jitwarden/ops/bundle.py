"""Signed cache bundles: one tar file of this environment's verified entries, installable on other nodes.

Layout of a bundle (an uncompressed tar, or gzip when the name ends in ``.gz``):

- ``manifest.json`` (first member): the exporter's full fingerprint and its digest, producer
  versions, and per entry its kind, its path inside the fingerprint partition and every
  file's sha256 and size;
- ``manifest.sig`` (second member, absent when unsigned): an Ed25519 signature over the exact
  bytes of ``manifest.json`` and the signing key's id;
- ``entries/<n>/<file>``: the files of entry number ``n``.

This module is the bundle itself: its manifest and the checks of it (pure), writing one (export, push)
and opening one (its signature judged before anything of it is interpreted), and the rules of which
entries go in (:func:`refusal`, :func:`with_dependencies`). Installing one is
:mod:`jitwarden.ops.bundle_install`. Destinations come from the signed manifest and are checked to be
plain relative paths inside the partition.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field

from jitwarden.formats import jsonlimits, tarball
from jitwarden.model import kinds
from jitwarden.model.asjson import fields_json
from jitwarden.model.errors import ExitStatus, JitwardenError
from jitwarden.model.findings import Severity
from jitwarden.model.layout import is_reserved
from jitwarden.store import atomic, paths, reads, seal

SCHEMA = 1
FORMAT = "jitwarden-bundle"
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
MAX_MANIFEST = 64 << 20
MAX_SIGNATURE = 4096


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
        seen: set[tuple[str, str]] = set()
        for i, e in enumerate(doc["entries"]):
            entries.append(_manifest_entry(i, e, seen))
        _refuse_nested(seen)
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


def _manifest_entry(i: int, e, seen: set[tuple[str, str]]) -> BundleEntry:
    """Entry ``i`` of a manifest, checked (a known bundled kind, a safe path listed once, files with safe
    names, each a sha256 and a size); added to ``seen``. BundleRefused saying what is wrong."""
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
        if not _valid_file_record(rec):
            raise BundleRefused(f"entry {i}: file {name!r} has no valid sha256 and size")
    if "" in files and len(files) != 1:
        raise BundleRefused(f"entry {i}: a single-file entry with other files")
    return BundleEntry(kind, path, {k: dict(v) for k, v in files.items()}, bool(e.get("sealed")))


def _valid_file_record(rec) -> bool:
    """A manifest's record of one file: a 64-character sha256 and a size of at least 0."""
    return (
        isinstance(rec.get("sha256"), str)
        and len(rec["sha256"]) == 64
        and isinstance(rec.get("size"), int)
        and rec["size"] >= 0
    )


def _refuse_nested(seen: set[tuple[str, str]]) -> None:
    """BundleRefused when one entry of the bundle lies inside another of the same kind."""
    nested = seen & {
        (k, "/".join(p.split("/")[:n])) for k, p in seen for n in range(1, p.count("/") + 1)
    }
    if nested:
        k, p = min(nested)
        raise BundleRefused(f"{k} {p} is an entry and holds another entry of the bundle")


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


def files_at(dir_fd: int | None, name: str) -> dict | None:
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


def entry_files(path: str) -> dict | None:
    """``{name: None}`` for a flat directory of regular files, ``{"": None}`` for a regular file, else None."""
    return files_at(None, path)


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
