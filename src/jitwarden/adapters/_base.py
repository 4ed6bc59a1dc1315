"""What every adapter needs: partitions, root safety, and a no-follow survey of one entry (stdlib only).

An adapter's own module decides what an entry *means*; this module only reads what
is on disk, the same way for every kind: never following a symlink, never opening
anything but regular files, never executing or unpickling.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from jitwarden.env import locations
from jitwarden.formats import elf
from jitwarden.store import partition
from jitwarden.model.findings import Finding
from jitwarden.model.layout import PARTITIONS_DIR, is_reserved
from jitwarden.model.entries import CacheRoot

MAX_DEPTH = 64
"""A survey stops descending here: a hostile 10,000-deep tree costs a finding, not the stack."""


subdirs = locations.subdirs


def existing(kind: str, candidates) -> list[CacheRoot]:
    """Roots of ``kind`` from (path, source) candidates in precedence order: existing dirs, each real path once."""
    out, seen = [], set()
    for p, src in candidates:
        p = os.path.abspath(os.path.expanduser(p))
        key = os.path.realpath(p)
        if key not in seen and os.path.isdir(p):
            seen.add(key)
            out.append(CacheRoot(kind, p, src))
    return out


def private_root(kind: str, env) -> list[tuple[str, str]]:
    """jitwarden's private root of ``kind`` (where activation goes when the user's root is unsafe), as a candidate."""
    try:
        from jitwarden.env.fingerprint import memo_dir

        return [(os.path.join(memo_dir(env), "roots", kind), "private")]
    except Exception:  # noqa: BLE001 - discovery must not fail on an odd memo location
        return []


def with_partitions(base: str) -> list[tuple[str, str | None]]:
    """``base`` and each ``base/jitwarden-v1/<digest>`` in it, as (dir, digest or None)."""
    out: list[tuple[str, str | None]] = [(base, None)]
    for d in subdirs(os.path.join(base, PARTITIONS_DIR)):
        out.append((d, os.path.basename(d)))
    return out


def expand_partitions(root: CacheRoot) -> list[CacheRoot]:
    """The root itself plus each jitwarden partition inside it (``<root>/jitwarden-v1/<digest>``)."""
    out = [root]
    pdir = os.path.join(root.path, PARTITIONS_DIR)
    if os.path.isdir(pdir) and not os.path.islink(pdir):
        for d in subdirs(pdir):
            out.append(CacheRoot(root.kind, d, "partition", os.path.basename(d), root.path))
    # A root that is itself a partition (set by activation) keeps its label.
    inside = partition.split(root.path)
    if inside and root.partition is None:
        out[0] = CacheRoot(root.kind, root.path, root.source, inside[1], inside[0])
    return out


def root_findings(path: str, uid: int | None = None) -> list[Finding]:
    """Problems of the root directory itself: writable by others, or owned by another user."""
    try:
        return [Finding("unsafe", f"cache root is {p}") for p in locations.root_problems(path, uid)]
    except OSError:
        return []


def inside(path: str, base: str) -> bool:
    base = base.rstrip(os.sep) + os.sep
    return path.startswith(base)


def leaves(base: str, link_path: str, target: str) -> bool:
    """Whether the symlink at ``link_path`` points outside ``base`` (lexically or once resolved)."""
    resolved = os.path.normpath(os.path.join(os.path.dirname(link_path), target))
    real = os.path.realpath(link_path)
    return not (inside(resolved, base) or inside(real, os.path.realpath(base)))


def link_target(path: str) -> str:
    """Where the symlink at ``path`` points, as written; ``?`` when it cannot be read."""
    try:
        return os.readlink(path)
    except OSError:
        return "?"


@dataclass(frozen=True, slots=True)
class Survey:
    """What one entry (a file or a directory tree) holds, read without following anything.

    ``files``: (relative path, size, mtime, mode, uid) of regular files; ``links``:
    (relative path, target, leaves the root); ``errors``: (relative path, why).
    """

    path: str
    is_dir: bool
    is_symlink: bool = False
    symlink_target: str | None = None
    mode: int = 0
    uid: int = -1
    mtime: float = 0.0
    files: tuple[tuple[str, int, float, int, int], ...] = ()
    links: tuple[tuple[str, str, bool], ...] = ()
    dirs: tuple[str, ...] = ()
    errors: tuple[tuple[str, str], ...] = ()
    too_deep: bool = False

    @property
    def bytes(self) -> int:
        return sum(f[1] for f in self.files)

    @property
    def newest(self) -> float:
        return max((f[2] for f in self.files), default=self.mtime)

    def file(self, rel: str):
        return next((f for f in self.files if f[0] == rel), None)


def survey(root: str, rel: str, max_depth: int = MAX_DEPTH) -> Survey:
    """Read the entry ``root/rel`` (file or directory) without following symlinks or writing."""
    path = os.path.join(root, rel)
    try:
        st = os.lstat(path)
    except OSError as exc:
        return Survey(path, False, errors=(("", f"cannot stat: {exc.strerror}"),))
    if stat.S_ISLNK(st.st_mode):
        target = link_target(path)
        return Survey(path, False, True, target, st.st_mode, st.st_uid, st.st_mtime,
                      links=(("", target, leaves(root, path, target)),))
    if not stat.S_ISDIR(st.st_mode):
        files = ((os.path.basename(path), st.st_size, st.st_mtime, st.st_mode, st.st_uid),) if stat.S_ISREG(st.st_mode) else ()
        return Survey(path, False, mode=st.st_mode, uid=st.st_uid, mtime=st.st_mtime, files=files)
    files, links, dirs, errors = [], [], [], []
    too_deep = False
    stack = [("", 0)]
    while stack:
        sub, depth = stack.pop()
        here = os.path.join(path, sub) if sub else path
        try:
            it = os.scandir(here)
        except FileNotFoundError:
            continue  # gone while listing: not damage
        except OSError as exc:
            errors.append((sub, f"cannot list: {exc.strerror}"))
            continue
        with it:
            for e in it:
                relp = os.path.join(sub, e.name) if sub else e.name
                try:
                    est = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone while listing (a writer's temporary file renamed into place): not damage
                except OSError as exc:
                    errors.append((relp, f"cannot stat: {exc.strerror}"))
                    continue
                if stat.S_ISLNK(est.st_mode):
                    target = link_target(e.path)
                    links.append((relp, target, leaves(root, e.path, target)))
                elif stat.S_ISDIR(est.st_mode):
                    if depth + 1 >= max_depth:
                        too_deep = True
                        continue
                    dirs.append(relp)
                    stack.append((relp, depth + 1))
                elif stat.S_ISREG(est.st_mode):
                    files.append((relp, est.st_size, est.st_mtime, est.st_mode, est.st_uid))
    files.sort()
    return Survey(path, True, False, None, st.st_mode, st.st_uid, st.st_mtime, tuple(files), tuple(sorted(links)),
                  tuple(sorted(dirs)), tuple(errors), too_deep)


def survey_findings(s: Survey, root_uid: int | None, what: str = "entry") -> list[Finding]:
    """The findings any kind shares: symlinks out of the root, files others may write or own, unreadable parts."""
    out = []
    for rel, target, leaves_root in s.links:
        if leaves_root:
            out.append(Finding("unsafe", f"{rel or what} is a symlink leaving the cache root (-> {target})"))
    for rel, *_rest, mode, uid in ((f[0], f[1], f[2], f[3], f[4]) for f in s.files):
        if mode & 0o002:
            out.append(Finding("unsafe", f"{rel} is world-writable (mode {mode & 0o7777:o})"))
        elif root_uid is not None and uid != root_uid and root_uid != 0 and uid != 0:
            out.append(Finding("unsafe", f"{rel} is owned by uid {uid}, not by the cache's owner (uid {root_uid})"))
    if s.is_dir and s.mode & 0o002 and not s.mode & 0o1000:
        out.append(Finding("unsafe", f"{what} directory is world-writable (mode {s.mode & 0o7777:o})"))
    for rel, why in s.errors:
        out.append(Finding("corrupt", f"{rel or what}: {why}"))
    if s.too_deep:
        out.append(Finding("corrupt", f"{what} nests directories deeper than {MAX_DEPTH} levels; not read further"))
    return out


def list_children(root: str, skip=()) -> tuple[list[str], list[tuple[str, str]]]:
    """(child names, strays) of ``root``; reserved jitwarden names and ``skip`` left out. OSError propagates."""
    names = []
    with os.scandir(root) as it:
        for e in it:
            if is_reserved(e.name) or e.name in skip:
                continue
            names.append(e.name)
    names.sort()
    return names, []


# ---------------------------------------------------------------- ELF headers (quick checks)


def elf_head(path: str, size: int) -> elf.ElfHead:
    """:func:`jitwarden.formats.elf.parse_head` of the file ``path`` (no symlink followed), reading only its header;
    ``size`` is the file's size from the survey. OSError propagates (reported as unreadable files are)."""
    from jitwarden.store.fsutil import read_head

    return elf.parse_head(read_head(path, elf.HEADER_SIZE), size)


def older_than(mtime: float, judge, age: float | None = None) -> bool:
    """Whether something last written at ``mtime`` is older than ``age`` (default: the judge's orphan age)."""
    return judge.now - mtime >= (judge.orphan_age if age is None else age)


def so_findings(rel: str, head: elf.ElfHead, host: str | None) -> list[Finding]:
    """A host shared object judged by its header: unparseable, not host code at all, or built for another CPU."""

    if head.problem:
        return [Finding("corrupt", f"{rel}: not a valid shared object: {head.problem}")]
    if head.machine == elf.EM_CUDA:
        return [Finding("mismatch", f"{rel} is a CUDA cubin, not a host shared object")]
    if host and head.machine_name != host:
        return [Finding("foreign-arch", f"{rel} is built for {head.machine_name}, this host is {host}: unreachable here")]
    return []
