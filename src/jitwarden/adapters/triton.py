"""Triton cache adapter: where the roots are, what an entry holds, and what is wrong with it.

Stdlib only (the guarded cache manager judges entries with the same code).
Reading is split from judging: :func:`read_entry` touches the disk and never
follows a symlink; :func:`judge_facts` is a pure function of the facts read and
a :class:`Judge`, so every command reaches the same verdict.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from operator import attrgetter
from stat import S_IWOTH
from typing import Any, ClassVar

from jitwarden.adapters.base import (
    Dir,
    File,
    Reading,
    Survey,
    cubin_findings,
    distinct,
    error_finding,
    holds,
    listed,
    ownership_findings,
    private_dir,
    surveyed,
    why,
    with_partitions,
)
from jitwarden.env import locations
from jitwarden.formats import elf, jsonlimits
from jitwarden.formats.ptx import parse_header
from jitwarden.model.entries import CacheRoot, Entry, Judge, KindFacts
from jitwarden.model.findings import Finding, Severity
from jitwarden.model.layout import (
    PARTITIONS_DIR,
    QUARANTINE_DIR,
    SEAL_FILE,
    TMP_FILE_INFIX,
    is_reserved,
    is_tmp_dir,
    is_tmp_file,
)
from jitwarden.store import partition
from jitwarden.store.paths import open_dir_at
from jitwarden.store.reads import kind_of, read_bytes, read_head, stat_and_read

KIND = "triton"
ROOT_RISK = None
ROOT_CHECKS = ()
_ENTRY_ID = re.compile(r"^[A-Z2-7]{52}$")
# Kernel dirs staged beside their final name, then renamed onto it: TorchInductor's TritonBundler.read_and_emit
# (torch 2.9-2.15: tmp.<uuid4>, left behind when the rename finds the final dir already filled or the process
# dies) and jitwarden's torch hook (tmp.jitwarden-<hex>). Their group files name the final dir; Triton never reads them.
_STAGING = re.compile(
    r"^tmp\.(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|jitwarden-[0-9a-f]{32})$"
)
_PTX_HEAD = 16384
_JSON_MAX = jsonlimits.MAX_BYTES
"""The most of a group, metadata or autotune file read: what the JSON reader parses at all (Triton writes KiBs)."""
_ELF_WHOLE_MAX = 256 << 20
"""A cubin or launcher larger than this is not read whole, only its ELF header (its machine, a cubin's SM): the
largest Triton writes are a few MiB, and a sparse file of gigabytes then costs a header, not its size."""
# The names Triton writes into an entry and opens by name (group, metadata, code, launchers, its IR dumps).
_TRITON_SUFFIXES = (
    ".json",
    ".cubin",
    ".ptx",
    ".so",
    ".pyd",
    ".source",
    ".ttir",
    ".ttgir",
    ".llir",
    ".hsaco",
    ".amdgcn",
    ".spv",
)

_NAME_SIZE, _SIZE, _MTIME = attrgetter("name", "size"), attrgetter("size"), attrgetter("mtime")
_IFMT, _IFREG = 0o170000, 0o100000
_HOST_MACHINES = {
    "x86_64": "x86_64",
    "amd64": "x86_64",
    "aarch64": "aarch64",
    "arm64": "aarch64",
    "ppc64le": "ppc64le",
}


@dataclass(frozen=True, slots=True)
class TritonFacts(KindFacts):
    """What a Triton entry says of its build: the metadata's Triton version, the cubin's SM, the PTX
    header, the ptxas release in the cubin's notes. JSON shows them at the entry's top level."""

    TOP: ClassVar[frozenset[str]] = frozenset(
        {"triton_version", "cubin_sm", "ptx_version", "ptx_target", "producer"}
    )

    triton_version: str | None = None
    cubin_sm: int | None = None
    ptx_version: str | None = None
    ptx_target: str | None = None
    producer: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EntryFacts:
    """What :func:`read_entry` found on disk, before any judgement.

    ``survey``: the entry's own directory as listed (Triton entries are flat); ``files``: its
    regular files but Triton's temporary ones, which are in ``tmps`` with ``tmp.pid_*`` dirs.
    """

    id: str
    survey: Survey
    files: tuple[File, ...] = ()
    tmps: tuple[File | Dir, ...] = ()
    metadata: dict | None = None
    metadata_file: str | None = None
    groups: tuple[tuple[str, dict | None], ...] = ()
    cubin: elf.Elf | None = None
    cubin_file: str | None = None
    ptx_head: bytes | None = None
    ptx_file: str | None = None
    launchers: tuple[tuple[str, elf.Elf | elf.ElfHead | None], ...] = ()
    read_errors: tuple[tuple[str, str], ...] = ()  # name, why (unparseable / unreadable)
    seal_problems: tuple[str, ...] | None = None  # None: no seal
    seal_foreign: str | None = (
        None  # why the seal does not vouch for an entry of this partition (another fingerprint)
    )
    cubin_head: elf.ElfHead | None = (
        None  # the cubin's header alone, when it is too large to read whole
    )
    unread: tuple[
        tuple[str, int], ...
    ] = ()  # (name, size) of ELF files of which only the header was read
    seal_unbelieved: bool = (
        False  # a seal file this reader does not believe (store/seal.read): no seal
    )

    @property
    def path(self) -> str:
        return self.survey.path


# ---------------------------------------------------------------- roots


def _nested_roots(base: str, source: str, trees) -> list[CacheRoot]:
    """Triton trees that ``trees(dir)`` finds in ``base`` and in each of its partitions: an Inductor cache
    dir's ``triton/<device>`` (:func:`locations.inductor_triton_trees`), vLLM's per-model ones
    (:func:`locations.vllm_triton_trees`)."""
    return [
        CacheRoot(kind=KIND, path=t, source=source, partition=digest, base=base if digest else None)
        for d, digest in with_partitions(base)
        for t in trees(d)
    ]


def discover_roots(env=os.environ) -> list[CacheRoot]:
    """Every Triton cache dir that this environment points at, plus jitwarden's partitions and private roots.

    Triton roots are listed without their partitions (the scanner expands those);
    Inductor and vLLM trees are listed one by one, partitioned or not. Existing dirs only.
    """
    roots: list[CacheRoot] = []
    path, source = locations.triton_cache_dir(env)
    # Under activation TRITON_CACHE_DIR names a partition: list the root it lives in (and so every partition).
    roots.append(CacheRoot(kind=KIND, path=partition.base_of(path), source=source))
    if source != "default":
        roots.append(
            CacheRoot(
                kind=KIND,
                path=locations.triton_default(env),
                source="default",
            )
        )
    roots += _nested_roots(
        partition.base_of(locations.inductor_cache_dir(env)),
        "inductor",
        locations.inductor_triton_trees,
    )
    roots += _nested_roots(
        partition.base_of(locations.vllm_cache_root(env)), "vllm", locations.vllm_triton_trees
    )
    private = private_dir(env)
    if private:
        roots.append(CacheRoot(kind=KIND, path=os.path.join(private, "triton"), source="private"))
        roots += _nested_roots(
            os.path.join(private, "inductor"), "private", locations.inductor_triton_trees
        )
        roots += _nested_roots(
            os.path.join(private, "vllm"), "private", locations.vllm_triton_trees
        )
    return distinct(roots)


_OLD_ENTRY_ID = re.compile(r"^[0-9a-f]{64}$")  # Triton < 3.0 named entries by a sha256 hex digest
_LOOK_AT = 4096  # names read before a directory is judged not to be a Triton root


def looks_like_root(path: str) -> bool:
    """A directory holding Triton's evidence: an entry dir named by a kernel key (52 base32 characters, or
    64 hex before Triton 3.0), or jitwarden's own partitions or quarantine. A Triton cache has no marker
    file, so an empty or unrelated directory is not taken for one (ARCHITECTURE.md, "A cache kind")."""
    return holds(path, _is_evidence, _LOOK_AT, "d")


def _is_evidence(name: str) -> bool:
    return bool(
        name in (PARTITIONS_DIR, QUARANTINE_DIR)
        or _ENTRY_ID.match(name)
        or _OLD_ENTRY_ID.match(name)
    )


def list_entry_names(root: str) -> tuple[list[str], list[tuple[str, str]]]:
    """(entry directory names, stray top-level items as (name, why)) of a root, both sorted; reserved names
    skipped. A directory or a symlink is an entry (the symlink never followed: judged ``unsafe``), a regular
    file a stray, anything else passed over. Read from :func:`~jitwarden.adapters.base.listed`: within
    :func:`~jitwarden.adapters.base.listing_once`, the listing that told the root's kind (a root lists 10,000s)."""
    ls = listed(root)
    names: list[str] = []
    strays: list[tuple[str, str]] = []
    for name, t in zip(ls.names, ls.types):
        if t == "d" or t == "l":
            if not is_reserved(name):
                names.append(name)
        elif t == "f" and not is_reserved(name):
            strays.append((name, "file"))
    names.sort()
    strays.sort()
    return names, strays


# ---------------------------------------------------------------- reading


def _read_while_listing(fname: str) -> int | None:
    """What :func:`_read_listed` reads of a file, by its name: the head of a PTX file, the whole of a JSON
    file, a cubin or a launcher (the survey reads them as it lists them: :class:`~jitwarden.adapters.base.Reading`);
    None for the rest, Triton's temporaries and jitwarden's own files (the seal is read by its own reader)."""
    if not fname.endswith(_READ_SUFFIXES):  # most names of an entry: one C-level test
        return None
    if fname.endswith(".ptx"):
        return _PTX_HEAD
    if (TMP_FILE_INFIX in fname and is_tmp_file(fname)) or is_reserved(fname):
        return None
    return Reading.WHOLE


_READ_SUFFIXES = (".json", ".cubin", ".so", ".ptx")
_READING = Reading(_read_while_listing, suffixes=_READ_SUFFIXES)


def read_entry(root: str, name: str, *, check_seal: bool = True) -> EntryFacts:
    """Read one entry directory without following any symlink and without writing anything.

    Its files are opened by the fd of the directory as surveyed (:func:`~jitwarden.adapters.base.surveyed`):
    the ones Triton's reader needs as the survey lists them (one open each gives their stat and bytes), any
    other the survey did not read (too large, too many) with one ``read()`` of the size the survey saw.
    """
    path = os.path.join(root, name)
    with surveyed(root, name, nested=False, links_within=path, reading=_READING) as (sv, dfd):
        if sv.is_symlink or not sv.is_dir:
            return EntryFacts(id=name, survey=sv, read_errors=sv.errors)
        return _read_listed(path, name, sv, dfd, check_seal)


def _read_listed(path: str, name: str, sv: Survey, dfd: int | None, check_seal: bool) -> EntryFacts:
    """:func:`read_entry` of a directory as listed in ``sv``; its files are read by ``dfd``."""
    ls = _sort_names(sv)
    errors = list(sv.errors)
    seal_other = _not_regular(sv, errors)
    r = _Reader(sv, dfd, ls.sizes, errors)
    groups = r.groups(ls.group_files)
    metadata_file = _metadata_file(groups, ls)
    metadata = r.json_object(metadata_file, "metadata") if metadata_file is not None else None
    stem = metadata_file[: -len(".json")] if metadata_file else None
    cubin = cubin_head = cubin_file = ptx_head = ptx_file = None
    if ls.cubins:
        cubin_file = f"{stem}.cubin" if stem and f"{stem}.cubin" in ls.sizes else ls.cubins[0]
        cubin, cubin_head = r.cubin(cubin_file)
    if ls.ptxs:
        ptx_file = f"{stem}.ptx" if stem and f"{stem}.ptx" in ls.sizes else ls.ptxs[0]
        ptx_head = r.ptx_head(ptx_file)
    launchers = r.records(ls.records)
    seal_problems, seal_foreign, unbelieved = _seal_facts(
        path, ls.sizes.keys(), check_seal, seal_other, r.held, dfd
    )
    return EntryFacts(
        id=name,
        survey=sv,
        files=tuple(ls.files),
        tmps=tuple(ls.tmps),
        metadata=metadata,
        metadata_file=metadata_file,
        groups=tuple(groups),
        cubin=cubin,
        cubin_file=cubin_file,
        ptx_head=ptx_head,
        ptx_file=ptx_file,
        launchers=tuple(launchers),
        read_errors=tuple(errors),
        seal_problems=seal_problems,
        seal_foreign=seal_foreign,
        cubin_head=cubin_head,
        unread=tuple(r.unread),
        seal_unbelieved=unbelieved,
    )


class _Names:
    """An entry's names sorted by what they hold, in one pass over the survey's (sorted) files (a plain
    slotted class: one is made per entry on the scan's hot path, and a dataclass's seven field factories
    cost more than the pass)."""

    __slots__ = ("files", "tmps", "sizes", "group_files", "cubins", "ptxs", "records", "jsons")

    def __init__(self, tmps: list[File | Dir]) -> None:
        self.files: list[File] = []
        self.tmps = tmps
        self.sizes: dict[str, int] = {}  # one read() per file: the size is known
        self.group_files: list[str] = []
        self.cubins: list[str] = []
        self.ptxs: list[str] = []
        self.records: list[str] = []  # launchers, autotune results
        self.jsons: list[str] = []


def _sort_names(sv: Survey) -> _Names:
    ls = _Names([d for d in sv.dirs if is_tmp_dir(d.name)] if sv.dirs else [])
    for f in sv.files:
        fname = f.name
        if TMP_FILE_INFIX in fname and is_tmp_file(fname):
            ls.tmps.append(f)
            continue
        ls.files.append(f)
        ls.sizes[fname] = f.size
        if fname.endswith(".json"):
            autotune = fname.endswith(".autotune.json")
            if fname.startswith("__grp__"):
                ls.group_files.append(fname)
            elif not autotune and not is_reserved(fname):
                ls.jsons.append(fname)
            if autotune:  # a group file so named is read as both
                ls.records.append(fname)
        elif fname.endswith(".cubin"):
            ls.cubins.append(fname)
        elif fname.endswith(".ptx"):
            ls.ptxs.append(fname)
        elif fname.endswith(".so"):
            ls.records.append(fname)
    return ls


def _not_regular(sv: Survey, errors: list[tuple[str, str]]) -> str | None:
    """Names of Triton's files that are no regular file (never opened: Triton's blocking open() of a FIFO
    under its name hangs the workload) go to ``errors``; returns why the seal is unreadable when it is one."""
    seal_other = None
    for o in sv.others:
        if o.name == SEAL_FILE:
            seal_other = f"seal unreadable: {SEAL_FILE} is {kind_of(o.mode)}, not a regular file"
        elif not is_reserved(o.name) and o.name.endswith(_TRITON_SUFFIXES):
            errors.append(
                (
                    o.name,
                    f"is {kind_of(o.mode)}, not a regular file: Triton's blocking open() would "
                    "hang on it or read endless bytes; not opened",
                )
            )
    return seal_other


def _metadata_file(groups: list[tuple[str, dict[str, Any] | None]], ls: _Names) -> str | None:
    """The metadata is the group's own name without the ``__grp__`` prefix, else the one other JSON."""
    for gname, _doc in groups:
        mname = gname[len("__grp__") :]
        if mname in ls.sizes:
            return mname
    return ls.jsons[0] if len(ls.jsons) == 1 else None


class _Reader:
    """Reads the files of one listed entry through its directory fd, each at most once (the bytes the survey
    read as it listed first); what cannot be read or parsed goes to ``errors`` as (name, why)."""

    def __init__(
        self, sv: Survey, dfd: int | None, sizes: dict[str, int], errors: list[tuple[str, str]]
    ) -> None:
        self.pre = sv.read or {}
        self.dfd, self.sizes, self.errors = dfd, sizes, errors
        self.unread: list[tuple[str, int]] = []  # files too large to read whole: their header only
        self.got: dict[str, bytes] = {}  # files read whole here, beyond the survey's

    def read(self, fname: str, bound: int) -> bytes:
        data = self.pre.get(fname)
        if data is not None:
            return data
        data = read_bytes(fname, max_bytes=bound, size_hint=self.sizes[fname], dir_fd=self.dfd)
        self.got[fname] = data
        return data

    def held(self) -> dict[str, bytes]:
        """The files read whole so far, by name (the survey's and this reader's): those whose bytes are as many
        as the size the listing saw (a PTX head cut at :data:`_PTX_HEAD` is not), for the seal to hash."""
        sizes = self.sizes
        return {
            name: data
            for got in (self.pre, self.got)
            for name, data in got.items()
            if len(data) == sizes.get(name)
        }

    def head(self, fname: str) -> elf.ElfHead:
        """An ELF file too large to read whole: its header says what it is."""
        return elf.parse_head(read_head(fname, elf.HEADER_SIZE, dir_fd=self.dfd), self.sizes[fname])

    def groups(self, group_files: list[str]) -> list[tuple[str, dict[str, Any] | None]]:
        out: list[tuple[str, dict[str, Any] | None]] = []
        for fname in group_files:
            doc = self.json_object(fname, "group file")
            out.append((fname, doc))
        return out

    def json_object(self, fname: str, what: str) -> dict[str, Any] | None:
        try:
            doc = jsonlimits.loads(self.read(fname, _JSON_MAX))
        except OSError as exc:
            self.errors.append((fname, _unreadable(exc, _JSON_MAX)))
            return None
        except (ValueError, UnicodeDecodeError):
            self.errors.append((fname, f"{what} is not valid JSON"))
            return None
        if not isinstance(doc, dict):
            self.errors.append((fname, f"{what} is not a JSON object"))
            return None
        return doc

    def cubin(self, fname: str) -> tuple[elf.Elf | None, elf.ElfHead | None]:
        try:
            if self.sizes[fname] > _ELF_WHOLE_MAX:
                head = self.head(fname)
                self.unread.append((fname, self.sizes[fname]))
                return None, head
            return elf.parse(self.read(fname, _ELF_WHOLE_MAX)), None
        except OSError as exc:
            self.errors.append((fname, _unreadable(exc, _ELF_WHOLE_MAX)))
        except elf.ElfError as exc:
            self.errors.append((fname, f"not a valid cubin: {exc}"))
        return None, None

    def ptx_head(self, fname: str) -> bytes | None:
        head = self.pre.get(fname)
        if head is not None:
            return head
        try:
            return read_head(fname, _PTX_HEAD, dir_fd=self.dfd)
        except OSError as exc:
            self.errors.append((fname, why(exc, f"unreadable: {exc.strerror}")))
            return None

    def records(self, records: list[str]) -> list[tuple[str, elf.Elf | elf.ElfHead | None]]:
        """The launchers (``.so``: their ELF) and autotune results (JSON) of the entry."""
        launchers: list[tuple[str, elf.Elf | elf.ElfHead | None]] = []
        for fname in records:
            if fname.endswith(".so"):
                launchers += self._launcher(fname)
                continue
            try:
                jsonlimits.loads(self.read(fname, _JSON_MAX))
            except OSError as exc:
                self.errors.append((fname, _unreadable(exc, _JSON_MAX)))
            except (ValueError, UnicodeDecodeError):
                self.errors.append((fname, "autotune record is not valid JSON"))
        return launchers

    def _launcher(self, fname: str) -> list[tuple[str, elf.Elf | elf.ElfHead | None]]:
        try:
            if self.sizes[fname] > _ELF_WHOLE_MAX:
                so = self.head(fname)
                if so.problem:
                    raise elf.ElfError(so.problem)
                self.unread.append((fname, self.sizes[fname]))
                return [(fname, so)]
            return [(fname, elf.parse(self.read(fname, _ELF_WHOLE_MAX)))]
        except OSError as exc:
            self.errors.append((fname, _unreadable(exc, _ELF_WHOLE_MAX)))
            return []
        except elf.ElfError as exc:
            self.errors.append((fname, f"not a valid shared object: {exc}"))
            return [(fname, None)]


def _seal_facts(
    path: str,
    names: Collection[str],
    check_seal: bool,
    seal_other: str | None,
    held: Callable[[], Mapping[str, bytes]] | None = None,
    dfd: int | None = None,
) -> tuple[tuple[str, ...] | None, str | None, bool]:
    """(what the seal says is wrong, None: no seal; why it is another partition's seal; whether a seal file
    is there that this reader does not believe: store/seal.read gave None, so no seal). ``held()``: the files
    read whole already, hashed as they are; the others are read again by ``dfd``, the entry's fd, when given."""
    seal_problems: tuple[str, ...] | None = (seal_other,) if check_seal and seal_other else None
    if not (check_seal and SEAL_FILE in names):
        return seal_problems, None, False
    from jitwarden.store import (
        seal,
    )  # sealed entries only: hashlib and the seal format stay off the scan's start-up

    try:
        s = seal.read(path, dir_fd=dfd)
        if s is None:
            return None, None, True
        present = [f for f in names if not is_reserved(f)]
        # the runtime loads only what this partition sealed
        return (
            tuple(seal.check(path, s, present, held=held() if held else None, dir_fd=dfd)),
            seal.foreign(s.fingerprint, partition.digest_of(os.path.dirname(path))),
            False,
        )
    except seal.SealError as exc:
        return (str(exc),), None, False


def _unreadable(exc: OSError, bound: int) -> str:
    """Why a file could not be read, for a finding: past ``bound`` (more than any such file Triton writes), or the OS's words."""
    if exc.errno == errno.EFBIG:
        return f"larger than the {bound >> 20} MiB jitwarden reads of such a file (Triton writes KiBs to MiBs); not read"
    return why(exc, f"unreadable: {exc.strerror}")


# ---------------------------------------------------------------- judging


def entry_id_for_hash(hash_hex: str) -> str | None:
    import base64  # a message's words only: the scan compares ids by id_matches_hash

    try:
        return base64.b32encode(bytes.fromhex(hash_hex)).decode().rstrip("=")
    except (ValueError, TypeError):
        return None


_B32_DIGITS = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", "0123456789abcdefghijklmnopqrstuv")


def id_matches_hash(entry_id: str, hash_hex: str) -> bool:
    """``entry_id_for_hash(hash_hex) == entry_id`` for an id of Triton's form (52 base32 letters), without
    the pure-Python base32 encoder (the scan asks once per entry): both read as integers (pure).

    32 bytes are 256 bits, written as 52 base32 digits (260 bits, the last 4 zero); no other length of
    hash gives 52 digits, and two equal numbers of 52 digits are the same string."""
    try:
        raw = bytes.fromhex(hash_hex)
    except ValueError:
        return False
    return (
        len(raw) == 32
        and len(entry_id) == 52
        and int.from_bytes(raw, "big") << 4 == int(entry_id.translate(_B32_DIGITS), 32)
    )


def metadata_target(metadata: dict | None) -> tuple[str, object]:
    """(backend, arch as recorded) across Triton's metadata layouts; backend "cuda" when unstated.

    3.x: ``"target": {"backend", "arch", "warp_size"}``; some releases: ``[backend, arch, warp]``;
    older ones: a bare capability, or only the option ``"arch": "sm90"``.
    """
    if not metadata:
        return "cuda", None
    target = metadata.get("target")
    if isinstance(target, dict):
        return str(target.get("backend") or "cuda"), target.get("arch")
    if isinstance(target, (list, tuple)) and len(target) >= 2:
        return str(target[0] or "cuda"), target[1]
    if isinstance(target, int) and not isinstance(target, bool):
        return "cuda", target
    opt = metadata.get("arch")
    if isinstance(opt, str) and re.fullmatch(r"sm_?\d+[af]?", opt):
        return "cuda", int(re.sub(r"\D", "", opt))
    return "cuda", None


def metadata_arch(metadata: dict | None) -> int | None:
    """The CUDA compute capability an entry was built for (90 for sm_90a); None otherwise."""
    backend, arch = metadata_target(metadata)
    if backend != "cuda":
        return None
    if isinstance(arch, int) and not isinstance(arch, bool):
        return arch
    if isinstance(arch, str) and arch.isdigit():
        return int(arch)
    return None


def _ext_suffix_machine(fname: str) -> str | None:
    m = re.search(r"\.cpython-\d+[a-z]*-([a-z0-9_]+)-linux", fname)
    if not m:
        return None
    return _HOST_MACHINES.get(m.group(1), m.group(1))


def judge_facts(root: str, f: EntryFacts, judge: Judge, root_uid: int | None = None) -> Entry:
    """Decide the findings of one entry from its facts alone (pure). Each rule and its evidence:

    - ``corrupt``: a file that does not parse as the format Triton writes (JSON, ELF, PTX without
      ``.version``/``.target``), an empty listed child, a seal whose checksum differs;
    - ``incomplete``: a child the group file lists is missing; ``foreign-path``: a group file's
      absolute child path leaves this entry's directory and exists there (Triton opens exactly that path);
      ``moved`` (warning): it leaves the entry and exists nowhere (Triton drops the group and recompiles);
    - ``mismatch``: two facts of the entry disagree (cubin SM vs metadata arch, kernel symbol vs
      metadata name, metadata hash vs entry id, PTX ``.target`` vs metadata);
    - ``stale``: metadata ``triton_version`` differs from the installed Triton, whose key
      (``triton_key``) never yields this entry;
    - ``unrecognised`` (info): whole JSON without the fields Triton 3.4-3.9 write;
    - ``orphan``: an old staging dir of TorchInductor's ``TritonBundler`` (``tmp.<uuid4>``), which Triton never reads.

    One helper per part of the entry, called in the order their findings are listed: the entry's own
    items (:func:`_item_findings`), the group files, the metadata, the cubin, the PTX, the launchers, the seal.
    """
    sv = f.survey
    if sv.is_symlink:
        return _symlinked(root, f)
    out = _item_findings(f, judge, root_uid)
    add = out.append
    size = sum(map(_SIZE, f.files))
    mtime = max(map(_MTIME, f.files), default=0.0)
    if _STAGING.match(f.id):
        # Evidence: none of damage. Triton's keys are base32, so it never opens this dir; its group files
        # name the final dir by design. Old, it is dead weight from a rename that lost or never came.
        if f.files and judge.now - mtime >= judge.orphan_age:
            add(
                Finding(
                    "orphan",
                    f"a kernel dir TorchInductor staged from an FX-graph bundle and never renamed into "
                    f"place, {int((judge.now - mtime) // 60)} min old",
                )
            )
        return Entry(
            KIND,
            root,
            f.id,
            f.path,
            "staging",
            None,
            None,
            size,
            mtime,
            findings=tuple(out),
            facts=TritonFacts(),
        )

    sizes = dict(map(_NAME_SIZE, f.files))
    names = sizes.keys()
    md = f.metadata
    arch = metadata_arch(md)
    kname = md.get("name") if md and isinstance(md.get("name"), str) else None
    tv = md.get("triton_version") if md else None

    for gname, doc in f.groups:
        if doc is not None:
            _group_findings(f.id, f.path, gname, doc, sizes, add)
    etype = _entry_type(f, names)
    if etype == "partial" and (judge.now - mtime if mtime else 0) >= judge.orphan_age:
        add(
            Finding(
                "orphan",
                f"files without a group file ({', '.join(sorted(names)[:4])}): an interrupted compile, never loaded",
            )
        )
    if md is not None:
        _metadata_findings(f.id, f.metadata_file, md, arch, kname, tv, judge, add)
    cubin_file = f.cubin_file or ""  # set whenever a cubin or its head is
    cubin_sm, producer = (
        _cubin_findings(f.cubin, cubin_file, arch, kname, add)
        if f.cubin is not None
        else (None, None)
    )
    if f.cubin_head is not None:
        cubin_sm = _cubin_head_findings(f.cubin_head, cubin_file, arch, add)
    for fname, fsize in f.unread:
        add(
            Finding(
                "unrecognised",
                f"{fname}: {fsize} bytes, larger than any file of its kind Triton writes: only its "
                "ELF header was read (its machine, a cubin's SM), not its symbols or notes",
            )
        )
    ptx_version, ptx_target = (
        _ptx_findings(f.ptx_head, f.ptx_file or "", arch, kname, add)  # set with ptx_head
        if f.ptx_head is not None
        else (None, None)
    )
    if f.launchers:
        _launcher_findings(f.launchers, judge.host_machine, add)
    _seal_findings(f.seal_problems, f.seal_unbelieved, f.seal_foreign, add)

    # One finding per (code, message): repeated groups can say the same thing twice.
    findings = tuple(dict.fromkeys(out))
    return Entry(
        KIND,
        root,
        f.id,
        f.path,
        etype,
        kname if md else _launcher_name(f),
        arch,
        size,
        mtime,
        f.seal_problems is not None or SEAL_FILE in names,
        findings,
        TritonFacts(tv, cubin_sm, ptx_version, ptx_target, producer),
    )


def _seal_findings(
    problems: tuple[str, ...] | None, unbelieved: bool, foreign: str | None, add
) -> None:
    """What the seal's facts (:func:`_seal_facts`) say of the entry: damage it names, a seal not believed, another
    partition's seal."""
    if problems:
        for p in problems:
            add(Finding("corrupt", f"seal: {p}"))
    if (
        unbelieved
    ):  # no evidence of damage: an older jitwarden's seal, another key's, another user's
        add(
            Finding(
                "unrecognised",
                "seal: not one you can believe (from a jitwarden before seal schema 2, made with another "
                "user's key, or in an entry another user could write); judged as unsealed, and proven at "
                "its next use",
            )
        )
    if (
        foreign
    ):  # moved or copied in from another environment's partition: the guard refuses to load it
        add(
            Finding(
                "mismatch",
                f"seal: {foreign}: copied or moved in from another environment's partition",
            )
        )


def _symlinked(root: str, f: EntryFacts) -> Entry:
    """The entry when its directory is a symlink: never followed, ``unsafe`` either way."""
    sv = f.survey
    if sv.links[0].leaves:
        why = f"entry is a symlink leaving the cache root (-> {sv.symlink_target}); not followed"
    else:
        why = f"entry is a symlink (-> {sv.symlink_target}); Triton would follow it, jitwarden does not"
    return Entry(
        KIND,
        root,
        f.id,
        f.path,
        "link",
        None,
        None,
        0,
        0.0,
        findings=(Finding("unsafe", why),),
        facts=TritonFacts(),
    )


def _item_findings(f: EntryFacts, judge: Judge, root_uid: int | None) -> list[Finding]:
    """What is wrong with the entry's items as listed, whatever they hold: files that could not be read or
    parsed, the ownership rule, symlinks inside, old leftovers of an interrupted write."""
    out = [error_finding(f"{name}: {why}" if name else why, why) for name, why in f.read_errors]
    sv = f.survey
    out += ownership_findings(sv, root_uid)
    for link in sv.links:
        if link.leaves:
            out.append(
                Finding(
                    "unsafe",
                    f"{link.name} is a symlink leaving the entry (-> {link.target}); not followed",
                )
            )
        else:
            out.append(
                Finding(
                    "unsafe",
                    f"{link.name} is a symlink (-> {link.target}); Triton writes no symlinks",
                )
            )
    for t in f.tmps:
        if judge.now - t.mtime >= judge.orphan_age:
            out.append(
                Finding(
                    "orphan",
                    f"{t.name}: leftover of an interrupted write, {int((judge.now - t.mtime) // 60)} min old",
                )
            )
    return out


def _group_findings(
    entry_id: str, path: str, gname: str, doc: dict, sizes: Mapping[str, int], add
) -> None:
    """One group file's children: each must be a file of this very entry, present and not empty."""
    children = doc.get("child_paths")
    if not isinstance(children, dict):
        # Valid JSON without Triton's (3.4-3.9) layout: a version we do not know, not damage.
        add(
            Finding(
                "unrecognised",
                f"{gname}: no child_paths mapping (a group layout jitwarden does not know)",
            )
        )
        return
    outside: list[str] = []
    prefix = path + os.sep
    for child, cpath in children.items():
        if not isinstance(cpath, str) or not isinstance(child, str):
            add(Finding("corrupt", f"{gname}: child {child!r} has no path"))
            continue
        if (
            cpath != prefix + child
        ):  # the common case, this entry's own file by its own name, needs no more
            cdir, cbase = os.path.split(os.path.normpath(cpath))
            if cbase != child:  # wherever it points: Triton loads that file as this child
                add(
                    Finding(
                        "mismatch", f"{gname}: {child} points to a file named {cbase} ({cpath})"
                    )
                )
            if (
                not os.path.isabs(cpath)
                or os.path.basename(cdir) != entry_id
                or not same_dir(cdir, path)
            ):
                outside.append(cpath)
        csize = sizes.get(child)
        if csize is None:
            add(Finding("incomplete", f"{gname} lists {child}, which is missing"))
        elif csize == 0:
            add(Finding("corrupt", f"{child} is empty"))
    if outside:
        add(_outside_finding(gname, outside, len(children)))


def _outside_finding(gname: str, outside: list[str], total: int) -> Finding:
    """Paths of a group file that leave its entry: ``foreign-path`` (error) when any exists, for Triton opens
    exactly that path and loads the other tree's file; ``moved`` (warning) when none does, for Triton then drops
    the group and recompiles (a moved or copied cache; ``jitwarden relocate`` points it at its own files)."""
    there = [p for p in outside if os.path.lexists(p)]
    dirs = sorted({os.path.dirname(p) for p in outside})
    into = f"{', '.join(dirs[:2])}{' …' if len(dirs) > 2 else ''}"
    if there:
        return Finding(
            "foreign-path",
            f"{gname} points {len(outside)} of {total} files outside the entry, into {into} "
            f"({len(there)} exist there: Triton loads them from that tree)",
        )
    return Finding(
        "moved",
        f"{gname} names {len(outside)} of {total} files in {into}, which no longer exist: a moved or "
        "copied cache; Triton drops the group and recompiles",
    )


def _metadata_findings(
    entry_id: str,
    metadata_file: str | None,
    md: dict,
    arch: int | None,
    kname: str | None,
    tv,
    judge: Judge,
    add,
) -> None:
    """The metadata JSON (whole: a cut one is a read error) against Triton's layout, the entry's id, the
    installed Triton and the target GPU."""
    if kname is None:
        add(
            Finding(
                "unrecognised",
                f"{metadata_file}: metadata has no kernel name (a layout jitwarden does not "
                "know); not judged by name",
            )
        )
    backend, raw_arch = metadata_target(md)
    if backend == "cuda" and arch is None:
        add(
            Finding(
                "unrecognised",
                f"{metadata_file}: metadata has no CUDA target arch jitwarden reads; "
                "not judged by arch",
            )
        )
    h = md.get("hash")
    if isinstance(h, str) and _ENTRY_ID.match(entry_id) and not id_matches_hash(entry_id, h):
        add(
            Finding(
                "mismatch",
                f"{metadata_file}: its hash belongs to entry {entry_id_for_hash(h) or h!r}, not this one",
            )
        )
    if tv and judge.triton_version and tv != judge.triton_version:
        add(
            Finding(
                "stale",
                f"built by Triton {tv}; Triton {judge.triton_version} is installed and never reads it",
            )
        )
    if judge.target_arch is not None and backend != "cuda":
        add(
            Finding(
                "foreign-arch",
                f"built for {backend} {raw_arch}, judged against sm_{judge.target_arch}: unreachable here",
            )
        )
    elif arch is not None and judge.target_arch is not None and arch != judge.target_arch:
        add(
            Finding(
                "foreign-arch",
                f"built for sm_{arch}, judged against sm_{judge.target_arch}: unreachable here",
            )
        )


def _cubin_findings(
    cubin: elf.Elf, cubin_file: str, arch: int | None, kname: str | None, add
) -> tuple[int | None, str | None]:
    """The cubin against the metadata (its SM, its kernel symbol); returns (its SM, the ptxas release in its notes)."""
    if cubin.machine != elf.EM_CUDA:
        add(
            Finding(
                "mismatch", f"{cubin_file} is an ELF for {cubin.machine_name}, not a CUDA cubin"
            )
        )
        return None, None
    cubin_sm = elf.cubin_sm(cubin)
    _sm_findings(cubin_sm, cubin_file, arch, add)
    try:
        syms = cubin.function_symbols()
        if kname and kname not in syms:
            shown = ", ".join(s for s in syms if not s.startswith("__")) or "none"
            add(
                Finding(
                    "mismatch", f"{cubin_file} does not define kernel {kname} (defines: {shown})"
                )
            )
    except elf.ElfError as exc:
        add(Finding("corrupt", f"{cubin_file}: {exc}"))
    producer = None
    try:
        tk = elf.tkinfo(cubin)
        if tk:
            producer = next((s for s in tk if "release" in s), None)
    except Exception:
        producer = None
    return cubin_sm, producer


def _cubin_head_findings(head: elf.ElfHead, cubin_file: str, arch: int | None, add) -> int | None:
    """A cubin too large to read whole, judged by its ELF header against the metadata; returns its SM."""
    for finding in cubin_findings(cubin_file, head):
        add(finding)
    if head.sm is not None:
        _sm_findings(head.sm, cubin_file, arch, add)
    return head.sm


def _sm_findings(sm: int, cubin_file: str, arch: int | None, add) -> None:
    """The cubin's SM against the metadata's arch, read from the whole file or its header alike."""
    if arch is not None and sm != arch:
        add(Finding("mismatch", f"{cubin_file} is assembled for sm_{sm}, metadata says sm_{arch}"))


def _ptx_findings(
    head: bytes, ptx_file: str, arch: int | None, kname: str | None, add
) -> tuple[str | None, str | None]:
    """The PTX header against the metadata (its target, its entries); returns (its .version, its .target)."""
    hdr = parse_header(head)
    if hdr.target is None or hdr.version is None:
        add(Finding("corrupt", f"{ptx_file}: no PTX .version/.target header"))
    elif arch is not None and hdr.target_arch != arch:
        add(Finding("mismatch", f"{ptx_file} targets {hdr.target}, metadata says sm_{arch}"))
    if kname and hdr.entries and kname not in hdr.entries:
        add(
            Finding(
                "mismatch", f"{ptx_file} defines {', '.join(hdr.entries)}, metadata names {kname}"
            )
        )
    return hdr.version, hdr.target


def _launcher_findings(launchers, host_machine: str | None, add) -> None:
    """Each launcher module's ELF machine against its file name and this host."""
    host = _HOST_MACHINES.get(host_machine or "", host_machine)
    for fname, so in launchers:
        if so is None:
            continue
        so_machine = so.machine_name
        claimed = _ext_suffix_machine(fname)
        if claimed and claimed != so_machine:
            add(
                Finding(
                    "mismatch", f"{fname} is named for {claimed} but is an ELF for {so_machine}"
                )
            )
        elif host and so_machine != host:
            add(
                Finding(
                    "foreign-arch",
                    f"{fname} is built for {so_machine}, this host is {host}: unreachable here",
                )
            )


class ChildMismatch(ValueError):
    """A group file maps a child to a file of another name: pointing it home would prove one file and load
    another (the message names both)."""


def relocated_group(doc, entry_dir: str, present) -> dict | None:
    """A group document with each child path pointed at ``entry_dir``, for each child whose file (by its base
    name) is in ``present``; None when nothing changes or ``doc`` is not Triton's layout (pure). Used where an
    entry moved (``jitwarden relocate``, a bundle installed elsewhere): Triton's group paths are absolute.

    :class:`ChildMismatch` when a child's path ends in another name than the child's own
    (``add_kernel.cubin`` -> ``/gone/<id>/evil.cubin``): nothing is pointed anywhere."""
    kids = doc.get("child_paths") if isinstance(doc, dict) else None
    if not isinstance(kids, dict):
        return None
    new = dict(kids)
    for k, v in kids.items():
        base = os.path.basename(str(v))
        if base != k:
            raise ChildMismatch(f"mismatch: {k} points to a file named {base} ({v})")
    for k, v in kids.items():
        base = os.path.basename(str(v))
        if base in present and v != os.path.join(entry_dir, base):
            new[k] = os.path.join(entry_dir, base)
    return None if new == kids else {**doc, "child_paths": new}


def same_dir(a: str, b: str) -> bool:
    """Whether two spellings name one directory (lexically, else through symlinked parents)."""
    if a == b or os.path.normpath(a) == os.path.normpath(b):
        return True
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False


def _launcher_name(f: EntryFacts) -> str | None:
    if f.launchers:
        return f.launchers[0][0].split(".")[0]
    return None


def _entry_type(f: EntryFacts, names: Collection[str]) -> str:
    if f.groups:
        return "kernel"
    if f.launchers:
        return "launcher"
    real = {n for n in names if not is_reserved(n) and n != "lock"}
    if not real:
        return "empty"
    if all(n.endswith(".autotune.json") for n in real):
        return "autotune"
    if any(
        n.endswith(
            (".cubin", ".ptx", ".source", ".ttir", ".ttgir", ".llir", ".json", ".hsaco", ".amdgcn")
        )
        for n in real
    ):
        return "partial"
    return "other"


def inspect_entry(root: str, name: str, judge: Judge, root_uid: int | None = None) -> Entry:
    """Read and judge one entry: the unit of work of the scanner and the guarded cache manager. An entry as
    Triton writes it takes the quick path (:func:`quick_entry`), anything else the general one."""
    try:
        got = quick_entry(root, name, judge, root_uid)
    except (
        Exception
    ):  # whatever it met, the general path judges the entry from the start, and says so
        got = None
    if got is not None:
        return got
    return judge_facts(root, read_entry(root, name, check_seal=judge.check_seals), judge, root_uid)


# ---------------------------------------------------------------- the quick path


def quick_entry(root: str, name: str, judge: Judge, root_uid: int | None = None) -> Entry | None:
    """:func:`judge_facts` of :func:`read_entry`, for an entry exactly as Triton writes it: a directory of
    regular files only, none another user could change, holding one group file ``__grp__<k>.json``, its
    metadata ``<k>.json``, ``<k>.cubin`` and ``<k>.ptx`` (and any other file but a launcher, an autotune record,
    a temporary or one of jitwarden's, its seal aside). The same reads (by the entry's fd, each file opened once,
    never through a link), the same rules (the same functions, in the same order), the same :class:`Entry`;
    without the survey's, the reader's and the facts' records between them (the scan's hot path: most entries
    of a cache are such). None for any other entry, or whatever could not be read or parsed: the general path
    then reads and judges it from the start, and words what it finds."""
    if name.startswith("tmp."):  # a staging dir (or no kernel dir at all): the general path's
        return None
    path = os.path.join(root, name)
    try:
        fd = open_dir_at(path)
    except OSError:  # a symlink, a lone file, gone, unreadable: the general path says which
        return None
    try:
        return _quick_at(root, name, path, fd, judge, root_uid)
    finally:
        os.close(fd)


def _quick_listing(
    fd: int, root_uid: int | None
) -> tuple[dict[str, int], dict[str, bytes], int, float] | None:
    """(size by name, the bytes read by name, total size, newest mtime) of the entry listed by ``fd``, the
    files :func:`_read_while_listing` names read as listed (:func:`~jitwarden.store.reads.stat_and_read`: one
    open gives the stat and the bytes), the others stat'ed by the fd; None when an item is no regular file,
    is a temporary or jitwarden's (its seal aside), cannot be read whole, or the ownership rule would name it."""
    st = os.fstat(fd)
    modes, owners = st.st_mode, {st.st_uid}
    sizes: dict[str, int] = {}
    read: dict[str, bytes] = {}
    total, newest = 0, 0.0
    with os.scandir(fd) as it:
        for e in it:
            fname = e.name
            if (
                fname.endswith(_READ_SUFFIXES)
                and fname != SEAL_FILE
                and e.is_file(follow_symlinks=False)
            ):
                head = _read_while_listing(fname)
                if head is None:  # a temporary, one of jitwarden's
                    return None
                fst, data = stat_and_read(fname, dir_fd=fd, head=head, max_bytes=_READING.whole_max)
                if data is None:
                    return None
                read[fname] = data
            else:
                fst = e.stat(follow_symlinks=False)
                if fst.st_mode & _IFMT != _IFREG or (
                    fname != SEAL_FILE
                    and ((TMP_FILE_INFIX in fname and is_tmp_file(fname)) or is_reserved(fname))
                ):
                    return None
            sizes[fname] = size = fst.st_size
            total += size
            modes |= fst.st_mode
            owners.add(fst.st_uid)
            if fst.st_mtime > newest:
                newest = fst.st_mtime
    if modes & S_IWOTH or (root_uid is not None and not owners <= {root_uid, 0, -1}):
        return None  # the ownership rule has something to name: the general path names it
    return sizes, read, total, newest


def _quick_layout(read: Mapping[str, bytes]) -> str | None:
    """The stem ``k`` of an entry whose files read as listed are exactly ``__grp__<k>.json``, ``<k>.json``,
    ``<k>.cubin`` and ``<k>.ptx``; None otherwise."""
    if len(read) != 4:
        return None
    group = next((n for n in read if n.startswith("__grp__")), None)
    if group is None or group.endswith(".autotune.json"):
        return None
    stem = group[len("__grp__") : -len(".json")]
    if stem.startswith("__grp__") or stem.endswith(".autotune"):
        return None
    return stem if all(stem + x in read for x in (".json", ".cubin", ".ptx")) else None


def _quick_at(
    root: str, name: str, path: str, fd: int, judge: Judge, root_uid: int | None
) -> Entry | None:
    """:func:`quick_entry` of the entry opened as ``fd``."""
    listing = _quick_listing(fd, root_uid)
    if listing is None:
        return None
    sizes, read, total, newest = listing
    stem = _quick_layout(read)
    if stem is None:
        return None
    group, metadata_file = f"__grp__{stem}.json", f"{stem}.json"
    doc, md = _quick_json(read[group]), _quick_json(read[metadata_file])
    if doc is None or md is None:
        return None
    cubin_file, ptx_file = f"{stem}.cubin", f"{stem}.ptx"
    try:
        cubin = elf.parse(read[cubin_file])
    except elf.ElfError:
        return None
    arch = metadata_arch(md)
    kname = md.get("name") if md and isinstance(md.get("name"), str) else None
    tv = md.get("triton_version") if md else None
    out: list[Finding] = []
    add = out.append
    _group_findings(name, path, group, doc, sizes, add)
    _metadata_findings(name, metadata_file, md, arch, kname, tv, judge, add)
    cubin_sm, producer = _cubin_findings(cubin, cubin_file, arch, kname, add)
    ptx_version, ptx_target = _ptx_findings(read[ptx_file], ptx_file, arch, kname, add)
    sealed = SEAL_FILE in sizes
    if sealed:
        held = {n: data for n, data in read.items() if len(data) == sizes[n]}
        problems, foreign, unbelieved = _seal_facts(
            path, sizes.keys(), judge.check_seals, None, lambda: held, fd
        )
        _seal_findings(problems, unbelieved, foreign, add)
    return Entry(
        KIND,
        root,
        name,
        path,
        "kernel",
        kname if md else None,
        arch,
        total,
        newest,
        sealed,
        tuple(dict.fromkeys(out)),
        TritonFacts(tv, cubin_sm, ptx_version, ptx_target, producer),
    )


def _quick_json(data: bytes) -> dict[str, Any] | None:
    """A group or metadata file's JSON object, as :meth:`_Reader.json_object` parses it; None when it is none."""
    try:
        doc = jsonlimits.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def structural_errors(path: str, host: str | None = None) -> tuple[list[Finding], str]:
    """(error-level findings, entry type) of one entry by the scanner's own checks, seals aside.

    What the guard and the start-up sweep require of an entry nobody sealed before sealing it.
    """
    import time

    root, name = os.path.split(os.path.normpath(path))
    judge = Judge(host_machine=host or host_machine(), now=time.time(), check_seals=False)
    entry = inspect_entry(root, name, judge)
    return [f for f in entry.findings if f.severity >= Severity.ERROR], entry.type


def host_machine() -> str:
    """This host's CPU as an ELF names it (``x86_64``, ``aarch64``): ``platform.machine()``, read from
    ``os.uname()`` where there is one (importing platform costs the scan's start-up ~2 ms)."""
    if hasattr(os, "uname"):
        machine = os.uname().machine
    else:  # pragma: no cover - Windows
        import platform

        machine = platform.machine()
    return _HOST_MACHINES.get(machine, machine)
