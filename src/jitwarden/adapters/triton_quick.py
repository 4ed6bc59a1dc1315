"""The Triton scan's quick path (stdlib only): an entry exactly as Triton writes it read and judged by the same
reads and the same rule functions as the general path, without the survey's, reader's and facts' records
between them (ARCHITECTURE.md, "The flow of one command")."""

from __future__ import annotations

import os
from collections.abc import Mapping
from itertools import chain
from operator import attrgetter, itemgetter
from stat import S_IWOTH
from typing import Any, cast

from jitwarden.adapters.triton_groups import group_findings
from jitwarden.adapters.triton_judge import (
    KIND,
    TritonFacts,
    metadata_arch,
    metadata_findings,
    metadata_names,
    ptx_findings,
    seal_findings,
    whole_cubin_findings,
)
from jitwarden.adapters.triton_read import READ_SUFFIXES, READING, read_while_listing, seal_facts
from jitwarden.formats import elf, jsonlimits
from jitwarden.model.entries import Entry, Judge
from jitwarden.model.findings import CODES, Finding
from jitwarden.model.layout import (
    SEAL_FILE,
    TMP_FILE_INFIX,
    is_reserved,
    is_tmp_file,
)
from jitwarden.store.paths import open_dir_at
from jitwarden.store.reads import stat_and_read

_IFMT, _IFREG = 0o170000, 0o100000


def quick_entry(root: str, name: str, judge: Judge, root_uid: int | None = None) -> Entry | None:
    """:func:`quick_entry_stamped`'s entry."""
    got = quick_entry_stamped(root, name, judge, root_uid)
    return got[0] if got is not None else None


def quick_entry_stamped(
    root: str, name: str, judge: Judge, root_uid: int | None = None
) -> tuple[Entry, Stamp] | None:
    """:func:`~jitwarden.adapters.triton_judge.judge_facts` of :func:`~jitwarden.adapters.triton_read.read_entry`,
    for an entry exactly as Triton writes it: a directory of regular files only, none another user could change,
    holding one group file ``__grp__<k>.json``, its metadata ``<k>.json``, ``<k>.cubin`` and ``<k>.ptx`` (and any other file but a launcher, an autotune record,
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


Stamp = tuple[os.stat_result, list[tuple[str, os.stat_result]]]
"""What an entry judged by the quick path was, by stat alone: its dir's stat and each file's (name, stat), as
listed. A file's ctime moves on any change to it and cannot be set back; the dir's on any name added, removed or
renamed in it: the same numbers (:data:`_DIR_NUMBERS`, :data:`_FILE_NUMBERS`) are the same entry."""

_DIR_NUMBERS = attrgetter("st_dev", "st_ino", "st_mtime_ns", "st_ctime_ns", "st_mode", "st_uid")
_FILE_NUMBERS = attrgetter("st_ino", "st_size", "st_mtime_ns", "st_ctime_ns", "st_mode", "st_uid")


def _quick_listing(
    fd: int, root_uid: int | None
) -> tuple[dict[str, int], dict[str, bytes], int, float, Stamp] | None:
    """(size by name, the bytes read by name, total size, newest mtime, its :data:`Stamp`) of the entry listed by ``fd``, the
    files :func:`read_while_listing` names read as listed (:func:`~jitwarden.store.reads.stat_and_read`: one
    open gives the stat and the bytes), the others stat'ed by the fd; None when an item is no regular file,
    is a temporary or jitwarden's (its seal aside), cannot be read whole, or the ownership rule would name it."""
    st = os.fstat(fd)
    modes, owners = st.st_mode, {st.st_uid}
    sizes: dict[str, int] = {}
    read: dict[str, bytes] = {}
    stamps = []
    total, newest = 0, 0.0
    with os.scandir(fd) as it:
        for e in it:
            fname = e.name
            fst = _quick_item(e, fd, read)
            if fst is None:
                return None
            stamps.append((fname, fst))
            sizes[fname] = size = fst.st_size
            total += size
            modes |= fst.st_mode
            owners.add(fst.st_uid)
            if fst.st_mtime > newest:
                newest = fst.st_mtime
    if modes & S_IWOTH or (root_uid is not None and not owners <= {root_uid, 0, -1}):
        return None  # the ownership rule has something to name: the general path names it
    return sizes, read, total, newest, (st, stamps)


def _quick_item(e: os.DirEntry, fd: int, read: dict[str, bytes]) -> os.stat_result | None:
    """The stat of one listed item of the entry ``fd``, the file read into ``read`` when
    :func:`~jitwarden.adapters.triton_read.read_while_listing` names it; None when the quick path does not take
    it: no regular file, a temporary or jitwarden's (its seal aside), or not read whole."""
    fname = e.name
    if fname.endswith(READ_SUFFIXES) and fname != SEAL_FILE and e.is_file(follow_symlinks=False):
        head = read_while_listing(fname)
        if head is None:  # a temporary, one of jitwarden's
            return None
        fst, data = stat_and_read(fname, dir_fd=fd, head=head, max_bytes=READING.whole_max)
        if data is None:
            return None
        read[fname] = data
        return fst
    fst = e.stat(follow_symlinks=False)
    if fst.st_mode & _IFMT != _IFREG or (
        fname != SEAL_FILE
        and ((TMP_FILE_INFIX in fname and is_tmp_file(fname)) or is_reserved(fname))
    ):
        return None
    return fst


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
) -> tuple[Entry, Stamp] | None:
    """:func:`quick_entry_stamped` of the entry opened as ``fd``."""
    listing = _quick_listing(fd, root_uid)
    if listing is None:
        return None
    sizes, read, total, newest, stamp = listing
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
    kname, tv = metadata_names(md)
    out: list[Finding] = []
    add = out.append
    group_findings(name, path, group, doc, sizes, add)
    metadata_findings(name, metadata_file, md, arch, kname, tv, judge, add)
    cubin_sm, producer = whole_cubin_findings(cubin, cubin_file, arch, kname, add)
    ptx_version, ptx_target = ptx_findings(read[ptx_file], ptx_file, arch, kname, add)
    sealed = SEAL_FILE in sizes
    if sealed:
        held = {n: data for n, data in read.items() if len(data) == sizes[n]}
        problems, foreign, unbelieved = seal_facts(
            path, sizes.keys(), judge.check_seals, None, lambda: held, fd
        )
        seal_findings(problems, unbelieved, foreign, add)
    entry = Entry(
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
    return entry, stamp


def _quick_json(data: bytes) -> dict[str, Any] | None:
    """A group or metadata file's JSON object, as :meth:`_Reader.json_object` parses it; None when it is none."""
    try:
        doc = jsonlimits.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


# ---------------------------------------------------------------- the scan's memo of quick entries


def memo_record(entry: Entry, stamp: Stamp) -> tuple[list, int]:
    """(the record :func:`recall` rebuilds ``entry`` from while ``stamp`` holds, as JSON: the entry's file names,
    the digest of its stat numbers and what was judged; the newest ctime (ns) in the stamp): what
    ``ops/scanmemo`` keeps of an entry the quick path judged."""
    dir_st, files = stamp
    files = sorted(files, key=itemgetter(0))
    stats = [st for _, st in files]
    facts = cast(TritonFacts, entry.facts)  # the quick path's entries hold Triton's facts
    judged = [
        entry.type,
        entry.name,
        entry.arch,
        entry.bytes,
        entry.mtime,
        entry.sealed,
        [[f.code, f.message, f.detail] for f in entry.findings],
        [facts.triton_version, facts.cubin_sm, facts.ptx_version, facts.ptx_target, facts.producer],
    ]
    newest = max([dir_st.st_ctime_ns, *(st.st_ctime_ns for st in stats)])
    return [[name for name, _ in files], _digest(dir_st, stats), judged], newest


def _digest(dir_st: os.stat_result, stats: list[os.stat_result]) -> str:
    """The stat numbers of an entry's dir and of its files, in the record's order, hashed: 16 bytes, not ~1 KB."""
    from array import array
    from hashlib import blake2b

    numbers = list(_DIR_NUMBERS(dir_st))
    numbers.extend(chain.from_iterable(map(_FILE_NUMBERS, stats)))
    return blake2b(array("q", numbers).tobytes(), digest_size=16).hexdigest()


def recall(root: str, name: str, record: Any, root_fd: int | None = None) -> Entry | None:
    """The entry ``record`` (:func:`memo_record`) describes when its dir and every file in it have the stat it
    stamped (by the entry's fd, never through a link); None when anything moved, or the record is not one.
    ``root_fd``: the root's, the entry opened in it (else by its path)."""
    try:
        names, digest, (typ, kname, arch, total, mtime, sealed, found, facts) = record
        path = os.path.join(root, name)
        fd = open_dir_at(path) if root_fd is None else open_dir_at(name, dir_fd=root_fd)
        try:
            dir_st = os.fstat(fd)
            stats = [os.stat(n, dir_fd=fd, follow_symlinks=False) for n in names]
        finally:
            os.close(fd)
        if _digest(dir_st, stats) != digest:
            return None
        return Entry(
            KIND,
            root,
            name,
            path,
            typ,
            kname,
            arch,
            total,
            mtime,
            sealed,
            tuple(_finding(*f) for f in found) if found else (),
            TritonFacts(*facts),
        )
    except (
        OSError,
        TypeError,
        ValueError,
        KeyError,
        OverflowError,
    ):  # moved, gone, or not ours: judged again
        return None


def _finding(code: str, message: str, detail: str) -> Finding:
    if code not in CODES or not (type(message) is str and type(detail) is str):
        raise ValueError("not a finding")
    return Finding(code, message, detail)
