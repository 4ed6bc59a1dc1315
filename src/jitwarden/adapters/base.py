"""What every cache kind shares, written once (stdlib only): finding roots, partitions, the one ownership
rule, and the findings every kind words alike (an unreadable file, an ELF header, a flat dir's seal).

An adapter's own module decides what an entry *means*; what is on disk under an entry is surveyed by
:mod:`jitwarden.adapters.surveys`, the same way for every kind: never following a symlink, never opening
anything but regular files, never executing or unpickling. The adapters use both from there; nothing is
re-exported through them (ARCHITECTURE.md, "How to add … A cache kind"). ``survey`` and ``DENIED_ERRNOS``
are re-exported here for the budget and the scan.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from functools import lru_cache, reduce
from itertools import chain, islice
from operator import attrgetter, methodcaller, or_

from jitwarden.adapters.surveys import DENIED_ERRNOS as DENIED_ERRNOS
from jitwarden.adapters.surveys import MAX_DEPTH, Denied, Survey, why
from jitwarden.adapters.surveys import survey as survey
from jitwarden.env import locations
from jitwarden.formats import elf
from jitwarden.model.entries import CacheRoot, Entry, Judge, KindFacts
from jitwarden.model.findings import Finding
from jitwarden.model.layout import PARTITIONS_DIR, is_reserved
from jitwarden.store import partition

# ---------------------------------------------------------------- roots


def error_finding(message: str, cause: str) -> Finding:
    """The finding for an item that could not be read or listed: ``unreadable`` when ``cause`` is a permission
    refusal (:class:`Denied`), else ``corrupt``."""
    return Finding("unreadable" if isinstance(cause, Denied) else "corrupt", message)


def read_failure(exc: OSError, message: str) -> Finding:
    """The finding for a file whose read failed with ``exc``: ``unreadable`` for a permission refusal, else
    ``corrupt``, worded ``message``."""
    return error_finding(message, why(exc, message))


def distinct(roots: list[CacheRoot]) -> list[CacheRoot]:
    """``roots`` in order, each real path once, existing directories only."""
    out, seen = [], set()
    for r in roots:
        key = os.path.realpath(r.path)
        if key not in seen and os.path.isdir(r.path):
            seen.add(key)
            out.append(r)
    return out


def existing(kind: str, candidates) -> list[CacheRoot]:
    """Roots of ``kind`` from (path, source) candidates in precedence order: existing dirs, each real path once."""
    return distinct(
        [
            CacheRoot(kind=kind, path=os.path.abspath(os.path.expanduser(p)), source=src)
            for p, src in candidates
        ]
    )


def set_vars(env, *names: str) -> list[tuple[str, str]]:
    """(value, name) of each variable of ``names`` that ``env`` sets non-empty, in order: root candidates."""
    return [(env[n], n) for n in names if env.get(n)]


def private_dir(env) -> str | None:
    """Where jitwarden's private roots live (activation goes there when a user's root is unsafe); None when unknown."""
    try:
        from jitwarden.store.paths import memo_dir

        return os.path.join(memo_dir(env), "roots")
    except Exception:
        return None


def private_root(kind: str, env) -> list[tuple[str, str]]:
    """jitwarden's private root of ``kind``, as a candidate (none when its place is unknown)."""
    d = private_dir(env)
    return [(os.path.join(d, kind), "private")] if d else []


class Listing:
    """One directory's items as one ``scandir`` lists them, in its order: ``names``, and ``types``, one letter
    a name from the listing itself (``d`` directory, ``l`` symlink, ``f`` regular file, ``o`` anything else;
    no stat, no link followed). What each adapter's ``looks_like_root`` reads of a path, through
    :func:`listed`: the names and a byte each, never a ``DirEntry`` per item (a root lists 10,000s)."""

    __slots__ = ("names", "types")

    def __init__(self, names: list[str], types: str):
        self.names = names
        self.types = types

    def dirs(self, among=None):
        """The names of the directories (only those in ``among``, when given), in listing order (lazily: a
        caller may stop early)."""
        if among is None:
            return (n for n, t in zip(self.names, self.types) if t == "d")
        return (n for n, t in zip(self.names, self.types) if t == "d" and n in among)

    def has_name_ending(self, suffix: str) -> bool:
        """Whether a name ends with ``suffix``, or with ``suffix`` and a newline (where a regex's ``$`` also
        matches): a necessary condition of a ``^...suffix$`` pattern, in one C-level pass over the names."""
        return any(map(methodcaller("endswith", (suffix, suffix + "\n")), self.names))


_LISTINGS: dict[str, Listing] | None = None  # within listing_once(): each directory listed once


def _type_of(e: os.DirEntry) -> bytes:
    if e.is_dir(follow_symlinks=False):  # never a symlink
        return b"d"
    if e.is_symlink():
        return b"l"
    return b"f" if e.is_file(follow_symlinks=False) else b"o"


def listed(path: str) -> Listing:
    """The :class:`Listing` of the directory ``path`` (OSError when it cannot be listed); within
    :func:`listing_once`, listed once however many adapters ask (a root of 10,000 entries costs ~8 ms a listing)."""
    memo = _LISTINGS
    if memo is not None:
        got = memo.get(path)
        if got is not None:
            return got
    names, types = [], bytearray()
    with os.scandir(path) as it:
        for e in it:
            names.append(e.name)
            types += _type_of(e)
    got = Listing(names, types.decode("ascii"))
    if memo is not None:
        memo[path] = got
    return got


@contextmanager
def listing_once():
    """Within it, :func:`listed` lists each directory once: telling what a path named on the command line is
    asks every adapter, and most look at the same directory. The listings are dropped on leaving (a
    root's listing is as large as its names); not for threads (the CLI's discovery runs in one)."""
    global _LISTINGS
    outer = _LISTINGS
    if outer is None:
        _LISTINGS = {}
    try:
        yield
    finally:
        if outer is None:
            _LISTINGS = None


def holds(path: str, test, most: int | None = None, type_: str | None = None) -> bool:
    """Whether the directory ``path`` holds an item whose name passes ``test`` and, given ``type_``, is of that
    type (:class:`Listing`), among the first ``most`` listed (None: all): how a root is told by its entries
    (``looks_like_root``); False when it cannot be listed."""
    try:
        ls = listed(path)
    except OSError:
        return False
    if type_ is None:
        return any(map(test, islice(ls.names, most)))
    return any(t == type_ and test(n) for n, t in zip(islice(ls.names, most), ls.types))


def holds_match(path: str, pattern) -> bool:
    """Whether the directory ``path`` holds an item whose name ``pattern`` (a compiled regex) matches;
    False when it cannot be listed."""
    try:
        names = listed(path).names
    except OSError:
        return False
    return any(map(pattern.match, names))


def entries(path: str) -> list[os.DirEntry]:
    """The items of the directory ``path`` but jitwarden's reserved names, sorted by name: what an adapter's
    ``list_entry_names`` sorts into entries and strays (OSError when it cannot be listed). Their ``is_dir`` and
    ``is_symlink`` answer from the listing, never following a link."""
    with os.scandir(path) as it:
        return sorted((e for e in it if not is_reserved(e.name)), key=attrgetter("name"))


# ---------------------------------------------------------------- partitions


def with_partitions(base: str) -> list[tuple[str, str | None]]:
    """``base`` and each ``base/jitwarden-v1/<digest>`` in it, as (dir, digest or None)."""
    out: list[tuple[str, str | None]] = [(base, None)]
    for d in locations.subdirs(os.path.join(base, PARTITIONS_DIR)):
        out.append((d, os.path.basename(d)))
    return out


def expand_partitions(root: CacheRoot) -> list[CacheRoot]:
    """The root itself plus each jitwarden partition inside it (``<root>/jitwarden-v1/<digest>``); the same for every kind."""
    out = [root]
    pdir = os.path.join(root.path, PARTITIONS_DIR)
    if os.path.isdir(pdir) and not os.path.islink(pdir):
        for d in locations.subdirs(pdir):
            out.append(
                CacheRoot(
                    kind=root.kind,
                    path=d,
                    source="partition",
                    partition=os.path.basename(d),
                    base=root.path,
                )
            )
    # A root that is itself a partition (set by activation) keeps its label.
    inside = partition.split(root.path)
    if inside and root.partition is None:
        out[0] = CacheRoot(
            kind=root.kind, path=root.path, source=root.source, partition=inside[1], base=inside[0]
        )
    return out


# ---------------------------------------------------------------- the ownership rule


def root_safety(path: str, uid: int | None = None, risk: str | None = None) -> list[Finding]:
    """Problems of a root directory itself: writable by others, or owned by another user than ``uid``
    (default: ours); ``risk`` (an adapter's ``ROOT_RISK``) says what that lets others do through its tool."""
    try:
        problems = locations.root_problems(path, uid)
    except OSError:
        return []
    return [
        Finding("unsafe", f"cache root is {p}" + (f"; {risk}" if risk else "")) for p in problems
    ]


_MODE, _UID = attrgetter("mode"), attrgetter("uid")


def ownership_findings(s: Survey, root_uid: int | None, what: str = "entry") -> list[Finding]:
    """The one ownership rule, the same for every kind, over every item a survey saw (the entry itself,
    named by ``what``, each file, each directory in it): an item is ``unsafe`` when someone who is
    neither the reader (``root_uid``: ``ops/scan`` passes the uid running jitwarden, root's included, as the
    runtime judges by :mod:`jitwarden.store.trust`; None in a root named in ``JITWARDEN_TRUSTED_ROOTS``)
    nor root can change it.

    - World-writable (``o+w``, sticky or not: a sticky directory still lets anyone add files): anyone can.
    - Owned by another user than the reader: that user can rewrite it, and write its seal. This holds
      for root reading a user's cache too: a file owned by uid 1000 lets uid 1000 rewrite what root loads.
    - Owned by root (uid 0): not flagged. Root can rewrite any cache anyway, so a root-owned file gives
      no one a power they lacked; and sudo-run workloads (or root containers over a user's home) leave
      root-owned files in users' caches every day: flagging them would be an error without evidence.
    - Group-writable: not flagged. With a group per user (the common default) ``g+w`` exposes nothing.
    """
    trusted = None if root_uid is None else (root_uid, 0, -1)
    inside = (*s.files, *s.dirs)
    modes = reduce(or_, map(_MODE, inside), s.mode if s.is_dir else 0)
    owners = {*map(_UID, inside), s.uid} if s.is_dir else {*map(_UID, inside)}
    if not modes & stat.S_IWOTH and (trusted is None or owners <= {*trusted}):
        return []  # the common case, told by C-level passes over the modes and owners: nothing to name
    top = (
        [(what if what.endswith("directory") else f"{what} directory", s.mode, s.uid)]
        if s.is_dir
        else []
    )
    out = []
    for name, mode, uid in chain(
        top,
        ((f.name, f.mode, f.uid) for f in s.files),
        ((f"directory {d.name}", d.mode, d.uid) for d in s.dirs),
    ):
        if mode & stat.S_IWOTH:
            out.append(Finding("unsafe", f"{name} is world-writable (mode {mode & 0o7777:o})"))
        if trusted is not None and uid not in trusted:
            out.append(
                Finding(
                    "unsafe",
                    f"{name} is owned by uid {uid}, not by you (uid {root_uid})",
                )
            )
    return out


# ---------------------------------------------------------------- the survey of one entry


def survey_findings(s: Survey, root_uid: int | None, what: str = "entry") -> list[Finding]:
    """The findings every kind but Triton shares: symlinks out of the root, the ownership rule, unreadable parts."""
    out = [
        Finding(
            "unsafe", f"{link.name or what} is a symlink leaving the cache root (-> {link.target})"
        )
        for link in s.links
        if link.leaves
    ]
    out += ownership_findings(s, root_uid, what)
    for rel, cause in s.errors:
        out.append(error_finding(f"{rel or what}: {cause}", cause))
    if s.too_deep:
        out.append(
            Finding(
                "corrupt",
                f"{what} nests directories deeper than {MAX_DEPTH} levels; not read further",
            )
        )
    return out


# ---------------------------------------------------------------- ELF headers (quick checks)


def elf_head(path: str, size: int) -> elf.ElfHead:
    """:func:`jitwarden.formats.elf.parse_head` of the file ``path`` (no symlink followed), reading only its header;
    ``size`` is the file's size from the survey. OSError propagates (reported as unreadable files are)."""
    from jitwarden.store.reads import read_head

    return elf.parse_head(read_head(path, elf.HEADER_SIZE), size)


def older_than(mtime: float, judge, age: float | None = None) -> bool:
    """Whether something last written at ``mtime`` is older than ``age`` (default: the judge's orphan age)."""
    return judge.now - mtime >= (judge.orphan_age if age is None else age)


def unreadable(what: str, exc: OSError) -> Finding:
    """The finding for a file of an entry that could not be read: ``corrupt`` with the OS's words, except one
    past the bound jitwarden reads of its kind (EFBIG, ``store/reads.too_large``): that says nothing about its
    bytes, so it is ``unrecognised`` (not understood is not damage)."""
    if exc.errno == errno.EFBIG:
        return Finding("unrecognised", f"{what}: {exc.strerror}; not judged")
    if exc.errno in DENIED_ERRNOS:
        return Finding("unreadable", f"{what}: {exc.strerror} (a permission problem, not damage)")
    return Finding("corrupt", f"{what}: unreadable: {exc.strerror}")


def cubin_findings(rel: str, head: elf.ElfHead) -> list[Finding]:
    """A cubin judged by its header: unparseable, or no CUDA code at all; [] when sound (``head.sm`` is its SM)."""
    if head.problem:
        return [Finding("corrupt", f"{rel}: not a valid cubin: {head.problem}")]
    if head.machine != elf.EM_CUDA:
        return [Finding("mismatch", f"{rel} is an ELF for {head.machine_name}, not a CUDA cubin")]
    return []


def so_findings(rel: str, head: elf.ElfHead, host: str | None) -> list[Finding]:
    """A host shared object judged by its header: unparseable, not host code at all, or built for another CPU."""
    if head.problem:
        return [Finding("corrupt", f"{rel}: not a valid shared object: {head.problem}")]
    if head.machine == elf.EM_CUDA:
        return [Finding("mismatch", f"{rel} is a CUDA cubin, not a host shared object")]
    if host and head.machine_name != host:
        return [
            Finding(
                "foreign-arch",
                f"{rel} is built for {head.machine_name}, this host is {host}: unreachable here",
            )
        ]
    return []


# ---------------------------------------------------------------- seals of flat dirs (JAX, CuPy)


@lru_cache(maxsize=64)
def _dir_seal(d: str, mtime_ns: int, size: int) -> dict | None:
    """The files a directory's seal covers (name -> {sha256, size}); None when it is damaged. Cached by the
    seal file's mtime and size: every entry of a JAX or CuPy dir shares one seal."""
    from jitwarden.store import seal

    try:
        with os.scandir(d) as it:
            n = sum(1 for _ in it)
        s = seal.read(d, max_bytes=seal.dir_bound(n), name=seal.flat_name(d))
    except (seal.SealError, OSError):
        return None
    return dict(s.files) if s else None


def dir_seal_findings(
    d: str, name: str, data: bytes | tuple[int, str], judge: Judge
) -> tuple[bool, list[Finding]]:
    """(sealed, findings) of the file ``name`` of ``d`` whose bytes are ``data`` (or, for a file too large to hold,
    its (size, sha256 hex), the hex empty when not hashed), against the seal of ``d``
    (:mod:`jitwarden.runtime.flatseal` writes one per JAX or CuPy dir): ``corrupt`` when they differ."""
    import hashlib

    from jitwarden.model.layout import SEAL_FILE

    if not judge.check_seals:
        return False, []
    try:
        st = os.lstat(os.path.join(d, SEAL_FILE))
    except OSError:
        return False, []
    files = _dir_seal(d, st.st_mtime_ns, st.st_size) if stat.S_ISREG(st.st_mode) else None
    rec = files.get(name) if files else None
    if not isinstance(rec, dict):
        return False, []
    if isinstance(data, tuple):
        size, sha = data
        if not sha:  # not hashed: the dir had no seal as the file was read, so it is not checked
            return False, []
    else:
        size, sha = len(data), hashlib.sha256(data).hexdigest()
    if size != rec.get("size") or sha != rec.get("sha256"):
        return True, [
            Finding(
                "corrupt",
                f"{name} does not match its seal: changed since it was sealed (another "
                "entry's file under this key, or damaged)",
            )
        ]
    return True, []


# ---------------------------------------------------------------- the entry of a survey that is no directory


def not_a_directory(
    kind: str,
    root: str,
    name: str,
    s: Survey,
    findings: list[Finding],
    what: str,
    label: str | None,
    facts: KindFacts,
) -> Entry:
    """The entry, for a kind whose entries are directories, when ``root/name`` is none: a symlink (type
    ``link``, never followed; one that leaves the root is already in ``findings``, from
    :func:`survey_findings`) or a lone file (``other``). ``what`` names the entry in a finding."""
    if s.is_symlink:
        if not s.links[0].leaves:
            findings.append(
                Finding("unsafe", f"{what} is a symlink (-> {s.symlink_target}); not followed")
            )
        return Entry(
            kind,
            root,
            name,
            s.path,
            "link",
            label,
            None,
            0,
            0.0,
            findings=tuple(findings),
            facts=facts,
        )
    return Entry(
        kind,
        root,
        name,
        s.path,
        "other",
        label,
        None,
        s.bytes,
        s.mtime,
        findings=tuple(findings),
        facts=facts,
    )


def lone_file(
    kind: str, root: str, name: str, root_uid: int | None, facts: KindFacts, not_file: str
) -> tuple[Survey, list[Finding], Entry | None]:
    """The start of judging an entry of a kind that writes one regular file per entry: (its survey, the
    findings every kind shares, the finished entry when it is no regular file or None). A symlink is never
    followed (:func:`not_a_directory`); a directory, FIFO or device is ``unrecognised``, ``not_file`` saying why."""
    s = survey(root, name)
    out = survey_findings(s, root_uid, "entry")
    if s.is_symlink:
        return s, out, not_a_directory(kind, root, name, s, out, "entry", None, facts)
    if s.is_dir or not s.files:
        out.append(Finding("unrecognised", not_file))
        return (
            s,
            out,
            Entry(
                kind,
                root,
                name,
                s.path,
                "other",
                None,
                None,
                s.bytes,
                s.mtime,
                findings=tuple(out),
                facts=facts,
            ),
        )
    return s, out, None
