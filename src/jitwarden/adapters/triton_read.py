"""Reading one Triton entry (stdlib only): its directory surveyed by fd, never following a symlink, the files
Triton's reader opens read as they are listed, into :class:`EntryFacts`, before any judgement
(:mod:`jitwarden.adapters.triton_judge` decides what they mean)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from jitwarden.adapters.surveys import Dir, File, Reading, Survey, surveyed, why
from jitwarden.formats import elf, jsonlimits
from jitwarden.model.layout import (
    SEAL_FILE,
    TMP_FILE_INFIX,
    is_reserved,
    is_tmp_dir,
    is_tmp_file,
)
from jitwarden.store import partition
from jitwarden.store.reads import kind_of, read_bytes, read_head

PTX_HEAD = 16384


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


def read_while_listing(fname: str) -> int | None:
    """What :func:`_read_listed` reads of a file, by its name: the head of a PTX file, the whole of a JSON
    file, a cubin or a launcher (the survey reads them as it lists them: :class:`~jitwarden.adapters.surveys.Reading`);
    None for the rest, Triton's temporaries and jitwarden's own files (the seal is read by its own reader)."""
    if not fname.endswith(READ_SUFFIXES):  # most names of an entry: one C-level test
        return None
    if fname.endswith(".ptx"):
        return PTX_HEAD
    if (TMP_FILE_INFIX in fname and is_tmp_file(fname)) or is_reserved(fname):
        return None
    return Reading.WHOLE


READ_SUFFIXES = (".json", ".cubin", ".so", ".ptx")


READING = Reading(read_while_listing, suffixes=READ_SUFFIXES)


def read_entry(root: str, name: str, *, check_seal: bool = True) -> EntryFacts:
    """Read one entry directory without following any symlink and without writing anything.

    Its files are opened by the fd of the directory as surveyed (:func:`~jitwarden.adapters.surveys.surveyed`):
    the ones Triton's reader needs as the survey lists them (one open each gives their stat and bytes), any
    other the survey did not read (too large, too many) with one ``read()`` of the size the survey saw.
    """
    path = os.path.join(root, name)
    with surveyed(root, name, nested=False, links_within=path, reading=READING) as (sv, dfd):
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
    seal_problems, seal_foreign, unbelieved = seal_facts(
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
        as the size the listing saw (a PTX head cut at :data:`PTX_HEAD` is not), for the seal to hash."""
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
            return read_head(fname, PTX_HEAD, dir_fd=self.dfd)
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


def seal_facts(
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
