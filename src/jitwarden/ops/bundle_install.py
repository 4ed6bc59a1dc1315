"""Installing a bundle's entries (``import``, ``pull``): what each entry would become, then staging, judging
and moving in (:mod:`jitwarden.ops.bundle` is the bundle itself: its manifest, its checks, export and opening).

Import never extracts a tar member: it reads regular-file members only, by names it expects
(``entries/<n>/<name>``, one plain path component listed in the manifest), writes each itself
(``O_EXCL | O_NOFOLLOW``) into a staging dir inside the destination partition, checks every digest, judges
each entry as ``verify`` would, and only then moves whole entries in by rename and seals them.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import time
from dataclasses import dataclass, field, replace
from typing import Literal, overload

from jitwarden import adapters
from jitwarden.env import locations
from jitwarden.formats import tarball
from jitwarden.model import kinds
from jitwarden.model.asjson import fields_json
from jitwarden.model.layout import PARTITIONS_DIR
from jitwarden.ops import scan
from jitwarden.ops.bundle import (
    MANIFEST,
    SIGNATURE,
    BundleEntry,
    BundleRefused,
    Manifest,
    files_at,
    loads,
    refusal,
    safe_name,
    with_dependencies,
)
from jitwarden.store import atomic, partition, paths, reads, removal, seal, tempdirs
from jitwarden.store.quarantine import rename_noreplace

ACTIONS = ("installed", "present", "skipped", "refused")
"""What import does with one entry of a bundle (``refused``: verify's judge found an error in it)."""
MAX_GROUP = 1 << 20
STAGE_PREFIX = ".jitwarden-import."
_MEMBER = re.compile(r"entries/(\d{1,9})/([^/]+)\Z")


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


def _present(parent_fd: int, leaf: str, e: BundleEntry) -> str | None:
    """None when nothing is at ``leaf``; "present" when the same files are there; else why it is in the way."""
    taken = "another entry of that name is already there"
    try:
        names = files_at(parent_fd, leaf)
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
