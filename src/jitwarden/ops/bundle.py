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

import hashlib
import json
import os
import re
import shutil
import tarfile
import time
from dataclasses import dataclass, field

from jitwarden.store import partition, seal
from jitwarden.model.layout import is_reserved
from jitwarden.env.locations import PARTITION_VARS, default_base

SCHEMA = 1
FORMAT = "jitwarden-bundle"
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
MAX_MANIFEST = 64 << 20
_MEMBER = re.compile(r"entries/(\d{1,9})/([^/]+)\Z")
PARTITIONED = tuple(k for k, _v in PARTITION_VARS)
ACTIONS = ("installed", "present", "skipped")
"""What import does with one entry of a bundle."""
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class BundleRefused(ValueError):
    """The bundle must not be installed (unsigned, untrusted, tampered, unsafe); the message says why."""


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
        return {"kind": self.kind, "path": self.path, "files": self.files, "sealed": self.sealed}


@dataclass(frozen=True)
class Manifest:
    digest: str
    fingerprint: dict
    producer: dict
    created: float
    entries: tuple[BundleEntry, ...]

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "format": FORMAT, "digest": self.digest, "fingerprint": self.fingerprint,
                "producer": self.producer, "created": self.created,
                "entries": [e.to_json() for e in self.entries]}


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
    return bool(name) and "/" not in name and "\\" not in name and "\x00" not in name and name not in (".", "..") \
        and not is_reserved(name)


def parse_manifest(raw: bytes) -> Manifest:
    """The manifest, checked field by field; BundleRefused saying what is wrong."""
    try:
        doc = json.loads(raw)
        if doc.get("format") != FORMAT or doc.get("schema") != SCHEMA:
            raise BundleRefused(f"not a {FORMAT} of schema {SCHEMA}")
        entries = []
        seen = set()
        for i, e in enumerate(doc["entries"]):
            kind, path, files = e["kind"], e["path"], e["files"]
            if kind not in PARTITIONED:
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
                if not (isinstance(rec.get("sha256"), str) and len(rec["sha256"]) == 64
                        and isinstance(rec.get("size"), int) and rec["size"] >= 0):
                    raise BundleRefused(f"entry {i}: file {name!r} has no valid sha256 and size")
            if "" in files and len(files) != 1:
                raise BundleRefused(f"entry {i}: a single-file entry with other files")
            entries.append(BundleEntry(kind, path, {k: dict(v) for k, v in files.items()}, bool(e.get("sealed"))))
        return Manifest(str(doc["digest"]), dict(doc["fingerprint"]), dict(doc.get("producer") or {}),
                        float(doc.get("created") or 0), tuple(entries))
    except BundleRefused:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BundleRefused(f"the manifest is not valid ({type(exc).__name__}: {exc})") from None


# ---------------------------------------------------------------- export


def entry_files(path: str) -> dict | None:
    """``{name: None}`` for a flat directory of regular files, ``{"": None}`` for a regular file, else None."""
    import stat as st

    s = os.lstat(path)
    if st.S_ISREG(s.st_mode):
        return {"": None}
    if not st.S_ISDIR(s.st_mode):
        return None
    out = {}
    for d in os.scandir(path):
        if is_reserved(d.name):
            continue
        if not d.is_file(follow_symlinks=False):
            return None
        out[d.name] = None
    return out or None


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


def _tar_add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    import io

    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, int(mtime)
    tar.addfile(info, io.BytesIO(data))


class _HashingReader:
    """Reads a file while hashing it, so what goes into the tar is what the manifest says."""

    def __init__(self, f):
        self.f, self.h, self.n = f, hashlib.sha256(), 0

    def read(self, size=-1):
        b = self.f.read(size)
        self.h.update(b)
        self.n += len(b)
        return b


def write(out_path: str, manifest: Manifest, partitions: dict, signer=None) -> int:
    """Write the bundle to ``out_path`` atomically (temp file, rename); its size in bytes.

    ``partitions``: kind -> the partition dir the entries' paths are relative to. A file
    that changed since it was described fails the export (ValueError) and leaves no file.
    """
    mbytes = json.dumps(manifest.to_json(), sort_keys=True, separators=(",", ":")).encode()
    tmp = f"{out_path}.tmp.{os.getpid()}"
    mode = "w:gz" if out_path.endswith(".gz") else "w"
    try:
        with tarfile.open(tmp, mode, format=tarfile.PAX_FORMAT) as tar:
            _tar_add_bytes(tar, MANIFEST, mbytes, manifest.created)
            if signer is not None:
                sig = {"schema": SCHEMA, "algorithm": "ed25519", "key_id": signer.id,
                       "signature": signer.sign(mbytes).hex()}
                _tar_add_bytes(tar, SIGNATURE, json.dumps(sig).encode(), manifest.created)
            for n, e in enumerate(manifest.entries):
                base = os.path.join(partitions[e.kind], *e.path.split("/"))
                for name, rec in e.files.items():
                    src = os.path.join(base, name) if name else base
                    fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC | _O_NOFOLLOW)
                    with os.fdopen(fd, "rb") as f:
                        info = tarfile.TarInfo(f"entries/{n}/{name or os.path.basename(base)}")
                        info.size, info.mode, info.mtime = rec["size"], 0o644, int(manifest.created)
                        r = _HashingReader(f)
                        tar.addfile(info, r)
                        if r.h.hexdigest() != rec["sha256"] or r.n != rec["size"]:
                            raise ValueError(f"{src} changed while exporting; run export again")
        os.replace(tmp, out_path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return os.path.getsize(out_path)


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
        return {"kind": self.kind, "path": self.path, "action": self.action, "why": self.why, "dest": self.dest,
                "bytes": self.bytes}


@dataclass(frozen=True)
class Opened:
    """A bundle whose manifest was read and whose signature was judged."""

    manifest: Manifest
    signed_by: str | None  # the trusted key id that signed it, None when unsigned (and allowed)
    signature_note: str = ""


def _read_member(tar: tarfile.TarFile, info: tarfile.TarInfo, limit: int) -> bytes:
    if not info.isreg() or info.size > limit:
        raise BundleRefused(f"{info.name}: not a regular file of at most {limit} bytes")
    f = tar.extractfile(info)
    data = f.read(limit + 1) if f is not None else b""
    if len(data) != info.size:
        raise BundleRefused(f"{info.name}: truncated")
    return data


def open_bundle(path: str, trusted, allow_unsigned: bool = False) -> tuple[tarfile.TarFile, Opened]:
    """Open ``path``, read its manifest and check its signature against ``trusted`` (keys.TrustedKeys).

    BundleRefused when the bundle is unsigned (unless ``allow_unsigned``), signed by a key
    that is not trusted, its signature does not match, or it is not a bundle at all.
    """
    try:
        tar = tarfile.open(path, "r:*")
    except (tarfile.TarError, EOFError, OSError) as exc:
        if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
            raise
        raise BundleRefused(f"not a jitwarden bundle ({exc})") from None
    try:
        try:
            first = tar.next()
            if first is None or first.name != MANIFEST:
                raise BundleRefused("not a jitwarden bundle (its first member is not manifest.json)")
            mbytes = _read_member(tar, first, MAX_MANIFEST)
            second = tar.next()
            sig = _read_member(tar, second, 4096) if second is not None and second.name == SIGNATURE else None
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise BundleRefused(f"not a readable jitwarden bundle ({exc})") from None
        signed_by, note = None, ""
        if sig is None:
            if not allow_unsigned:
                raise Unsigned("the bundle is unsigned")
            note = "unsigned (allowed by --allow-unsigned)"
        else:
            try:
                doc = json.loads(sig)
                kid, raw = str(doc["key_id"]), bytes.fromhex(doc["signature"])
                if doc.get("algorithm") != "ed25519":
                    raise ValueError("algorithm")
            except (ValueError, KeyError, TypeError):
                raise BundleRefused("manifest.sig is not a valid signature record") from None
            why = trusted.verify(kid, raw, mbytes) if trusted is not None else "no trusted keys are configured"
            if why is not None:
                if not allow_unsigned:
                    raise BundleRefused(f"signature rejected: {why}")
                note = f"signature rejected ({why}), installed anyway by --allow-unsigned"
            else:
                signed_by, note = kid, f"signed by trusted key {kid}"
        manifest = parse_manifest(mbytes)  # only after the signature: nothing unsigned is interpreted first
        return tar, Opened(manifest, signed_by, note)
    except BaseException:
        tar.close()
        raise


def destinations(manifest: Manifest, digest: str, env) -> dict:
    """kind -> this environment's partition dir of ``digest`` for every kind the bundle carries."""
    out = {}
    for kind, var in PARTITION_VARS:
        if any(e.kind == kind for e in manifest.entries):
            cur = env.get(var)
            base = partition.base_of(cur) if cur else default_base(kind, env)
            out[kind] = partition.path_for(base, digest)
    return out


def _present(dest: str, e: BundleEntry) -> str | None:
    """None when nothing is at ``dest``; "present" when the same files are there; else why it is in the way."""
    try:
        os.lstat(dest)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        names = entry_files(dest)
    except OSError:
        names = None
    if names is None or set(names) != set(e.files):
        return "another entry of that name is already there"
    for name, rec in e.files.items():
        p = os.path.join(dest, name) if name else dest
        try:
            digest, size = seal.file_digest(p)
        except OSError:
            return "another entry of that name is already there"
        if digest != rec["sha256"] and not name.startswith("__grp__"):
            return "another entry of that name is already there"
    return "present"


def plan(manifest: Manifest, dests: dict) -> list[Outcome]:
    """What an import would do with each entry, before anything is written."""
    out = []
    for e in manifest.entries:
        dest = os.path.join(dests[e.kind], *e.path.split("/"))
        state = _present(dest, e)
        if state == "present":
            out.append(Outcome(e.kind, e.path, "present", "already installed", dest, e.bytes))
        elif state:
            out.append(Outcome(e.kind, e.path, "skipped", state, dest, e.bytes))
        else:
            out.append(Outcome(e.kind, e.path, "installed", "", dest, e.bytes))
    return out


def _write_new(path: str, src, size: int) -> str:
    """Copy ``size`` bytes of ``src`` into a new file ``path`` (never through a link); its sha256."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | _O_NOFOLLOW, 0o644)
    h = hashlib.sha256()
    left = size
    with os.fdopen(fd, "wb") as f:
        while left:
            b = src.read(min(left, 1 << 20))
            if not b:
                break
            h.update(b)
            f.write(b)
            left -= len(b)
    if left:
        raise BundleRefused(f"{os.path.basename(path)}: truncated in the bundle")
    return h.hexdigest()


def _rewrite_groups(entry_dir: str, final: str) -> None:
    """Point a Triton group file's ``child_paths`` at the entry's new home (they are absolute paths)."""
    for name in os.listdir(entry_dir):
        if not (name.startswith("__grp__") and name.endswith(".json")):
            continue
        p = os.path.join(entry_dir, name)
        with open(p, "rb") as f:
            doc = json.loads(f.read())
        kids = doc.get("child_paths")
        if not isinstance(kids, dict):
            continue
        for k, v in list(kids.items()):
            base = os.path.basename(str(v))
            if os.path.isfile(os.path.join(entry_dir, base)):
                kids[k] = os.path.join(final, base)
        tmp = p + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, p)


def install(tar: tarfile.TarFile, manifest: Manifest, outcomes: list[Outcome], dests: dict, digest: str,
            producer_note: dict) -> list[Outcome]:
    """Stage every entry to install, check every digest, then move each in by rename and seal it.

    Nothing is moved in unless every staged file matches the manifest (BundleRefused
    otherwise, and the staging dirs are removed). Returns the outcomes, updated.
    """
    todo = {i for i, o in enumerate(outcomes) if o.action == "installed"}
    if not todo:
        return outcomes
    stages: dict[str, str] = {}  # partition dir -> staging dir inside it (same filesystem: rename is atomic)
    staged: dict[int, str] = {}
    got: dict[int, set] = {i: set() for i in range(len(manifest.entries))}
    header: set = set()

    def stage_of(kind: str) -> str:
        part = dests[kind]
        if part not in stages:
            import tempfile

            os.makedirs(part, exist_ok=True)
            stages[part] = tempfile.mkdtemp(prefix=".jitwarden-import.", dir=part)
        return stages[part]

    try:
        for info in tar:
            if info.name in (MANIFEST, SIGNATURE):  # tarfile yields the members open_bundle read first
                if info.name in header:
                    raise BundleRefused(f"{info.name} appears twice")
                header.add(info.name)
                continue
            m = _MEMBER.match(info.name)
            if m is None:
                raise BundleRefused(f"unexpected member {info.name!r} (outside entries/<n>/<file>)")
            if not info.isreg():
                raise BundleRefused(f"member {info.name!r} is not a regular file (links and devices are refused)")
            i, fname = int(m.group(1)), m.group(2)
            if i >= len(manifest.entries):
                raise BundleRefused(f"member {info.name!r} belongs to no entry of the manifest")
            e = manifest.entries[i]
            key = "" if "" in e.files else fname
            if key not in e.files or not safe_name(fname) or key in got[i]:
                raise BundleRefused(f"member {info.name!r} is not a file the manifest lists (or appears twice)")
            rec = e.files[key]
            if info.size != rec["size"]:
                raise BundleRefused(f"{e.kind} {e.path}/{key}: {info.size} bytes in the bundle, {rec['size']} signed")
            if i not in todo:
                got[i].add(key)
                continue
            if i not in staged:
                staged[i] = os.path.join(stage_of(e.kind), str(i))
                if key != "":
                    os.mkdir(staged[i], 0o755)
            target = staged[i] if key == "" else os.path.join(staged[i], key)
            if _write_new(target, tar.extractfile(info), info.size) != rec["sha256"]:
                raise BundleRefused(f"{e.kind} {e.path}/{key}: sha256 does not match the manifest (tampered)")
            got[i].add(key)
        for i in range(len(manifest.entries)):
            missing = set(manifest.entries[i].files) - got[i]
            if missing:
                raise BundleRefused(f"{manifest.entries[i].path}: {len(missing)} listed file(s) missing from the bundle")
        out = list(outcomes)
        for i in sorted(todo):
            e, o = manifest.entries[i], outcomes[i]
            src = staged[i]
            if "" not in e.files:
                _rewrite_groups(src, o.dest)
                if e.sealed:
                    s = seal.compute(src, list(e.files), digest, {**producer_note, "imported_at": time.time()})
                    seal.write(src, s)
            os.makedirs(os.path.dirname(o.dest), exist_ok=True)
            try:
                if os.path.lexists(o.dest):
                    raise FileExistsError
                os.rename(src, o.dest)
            except OSError:
                out[i] = Outcome(e.kind, e.path, "skipped", "an entry of that name appeared meanwhile", o.dest, e.bytes)
        return out
    except (tarfile.TarError, EOFError) as exc:
        raise BundleRefused(f"the bundle is damaged ({exc})") from None
    finally:
        for st in stages.values():
            shutil.rmtree(st, ignore_errors=True)


@dataclass(frozen=True)
class ImportReport:
    path: str
    digest_bundle: str
    digest_here: str
    signed_by: str | None
    signature_note: str
    differences: tuple = ()  # fingerprint.Change of bundle -> here
    outcomes: tuple = ()
    refused: str | None = None
    dry_run: bool = False
    extra: dict = field(default_factory=dict)

    def counts(self) -> dict:
        """How many entries were installed, already present, skipped."""
        return {action: sum(o.action == action for o in self.outcomes) for action in ACTIONS}

    def to_json(self) -> dict:
        return {"schema": 1, "bundle": self.path, "digest": {"bundle": self.digest_bundle, "here": self.digest_here},
                "match": self.digest_bundle == self.digest_here, "signed_by": self.signed_by,
                "signature": self.signature_note, "refused": self.refused, "dry_run": self.dry_run,
                "differences": [{"component": d.component, "bundle": d.old, "here": d.new, "why": d.why}
                                for d in self.differences],
                "counts": self.counts(), "entries": [o.to_json() for o in self.outcomes]}
