"""Seals for caches of single-file entries, JAX's and CuPy's, checked and extended at start-up (stdlib only).

Where the load hooks are installed (:mod:`jitwarden.runtime.guards`: JAX, CuPy 14 and later) they seal each file
as the tool writes it and prove unsealed ones at first use, through :func:`seal_file` and :func:`sealed_files`
here; the start-up check then leaves those kinds' unsealed files to them. What follows is where they are not.

Without the hooks (``JITWARDEN_LOAD_HOOKS=0``, CuPy 13 and older, a JAX of another shape) the files a guarded
process writes are sealed at the next start-up of a guarded process, and every start-up checks them before the
workload runs (activation calls :func:`startup`; ARCHITECTURE.md, "The flow of activation").

One seal per directory (``<dir>/.jitwarden-seal.json``, :mod:`jitwarden.store.seal`'s format) covers
its entry files by name: JAX's ``-cache`` files (its root) and XLA's autotune results (one seal per
``xla_gpu_per_fusion_autotune_cache_dir/<version hash>/``); CuPy's ``<sha1>.<suffix>`` files. Left out:
``-atime`` files and ``xla_gpu_kernel_cache_file``, which JAX and XLA rewrite in normal use.

At start-up, for each dir:

- a sealed file that changed (size, or its sha256 when its ctime is not older than the seal) is
  quarantined: another function's executable copied over a JAX key, another kernel's file over a
  CuPy key, a flipped bit;
- an unsealed file holding the very bytes of a sealed file of another name is quarantined too: an
  entry moved or copied to another key (for CuPy only a move: one cubin under two keys can be honest);
- an unsealed file its adapter finds unsound at error level is quarantined, never sealed: a JAX file
  holding another module's executable (tampered before any start sealed it), a damaged stream or header;
- any other unsealed file is sealed, unless written in the last :data:`SETTLE_S` seconds (JAX writes
  in place: a file another process is still writing is left for the next start);
- a sealed file that is gone is dropped from the seal (JAX's eviction, a clean).

A quarantine is a miss: the tool compiles again. Never raises: a failure is one warning line.
"""

from __future__ import annotations

import os
import time

SETTLE_S = 5.0
AUTOTUNE_DIR = "xla_gpu_per_fusion_autotune_cache_dir"


def _jax_names(names: list[str]) -> list[str]:
    return [n for n in names if n.endswith("-cache")]


def _cupy_names(names: list[str]) -> list[str]:
    return [
        n for n in names if len(n) > 41 and n[40] == "." and n[41:] in ("cubin", "ltoir", "hsaco")
    ]


def _files(d: str) -> list[str]:
    from jitwarden.model.layout import is_reserved

    with os.scandir(d) as it:
        return [e.name for e in it if e.is_file(follow_symlinks=False) and not is_reserved(e.name)]


def sealed_dirs(kind: str, root: str) -> list[tuple[str, list[str]]]:
    """(dir, entry file names in it) of every dir of ``root`` a seal covers for ``kind`` (``jax`` or ``cupy``)."""
    if kind == "cupy":
        return [(root, _cupy_names(_files(root)))]
    from jitwarden.env.locations import subdirs

    out = [(root, _jax_names(_files(root)))]
    autotune = os.path.join(root, AUTOTUNE_DIR)
    if os.path.islink(
        autotune
    ):  # a link is followed by no one here: its target is nobody's cache to seal
        return out
    for d in subdirs(autotune):
        out.append((d, [n for n in _files(d) if n.endswith(".pb")]))
    return out


def check_dir(
    kind: str,
    root: str,
    d: str,
    names: list[str],
    digest: str | None,
    now: float | None = None,
    seal_new: bool = True,
) -> list[str]:
    """Check ``names`` in ``d`` against its seal, quarantine what contradicts it, seal the rest; the
    warning lines (one per quarantined file). ``root`` is the cache root the quarantine goes to. ``seal_new``
    False: an unsealed file is left unsealed, for the load hook to prove (:mod:`jitwarden.runtime.guards.jax`).

    Under the dir's entry lock, taken without waiting: another start-up checking it is left to do so."""
    import fcntl

    from jitwarden.model.layout import ENTRY_LOCK_FILE
    from jitwarden.store.entrylock import lock, unlock

    fd = lock(d, ENTRY_LOCK_FILE, fcntl.LOCK_EX, block=False)
    if fd is None:
        return []  # another start-up is at it
    try:
        return _check_locked(
            kind, root, d, names, digest, time.time() if now is None else now, seal_new
        )
    finally:
        unlock(fd)


def _check_locked(
    kind: str,
    root: str,
    d: str,
    names: list[str],
    digest: str | None,
    now: float,
    seal_new: bool,
) -> list[str]:
    """:func:`check_dir`'s work once the dir is locked: read the seal once, judge each file (:func:`_judge`),
    quarantine or (re)seal it, drop the files that are gone, and write the seal back when anything moved."""
    from jitwarden.store import seal

    old, at = _dir_seal(d, len(names))
    files = dict(old.files) if old else {}
    by_sha = {rec["sha256"]: n for n, rec in files.items()}
    out, changed = [], False
    for name in sorted(names):
        verdict = _judge(kind, root, d, name, files.get(name), at, now, by_sha, seal_new)
        if verdict is None:
            continue
        line, moved = _apply(kind, root, d, name, verdict, files, digest)
        out += [line] if line is not None else []
        changed = changed or moved
    gone = _forget_gone(d, names, files)
    if changed or gone or (old is None and files):
        seal.write(
            d,
            seal.Seal(files, digest, {"by": "start-up", "kind": kind}, time.time()),
            seal.newest_ctime(d, list(files)),
            name=seal.flat_name(d),
        )
    return out


def _dir_seal(d: str, count: int):
    """(the seal of the dir ``d`` of ``count`` files, its authenticated time ns); (None, None) when absent or
    damaged: a damaged seal vouches for nothing, the dir is sealed again from what is there. One seal covers the
    whole dir: read once, its bound grows with the files in it."""
    from jitwarden.store import seal

    try:
        return seal.read_stamped(d, max_bytes=seal.dir_bound(count), name=seal.flat_name(d))
    except seal.SealError:
        return None, None


def _apply(
    kind: str, root: str, d: str, name: str, verdict: str | dict, files: dict, digest: str | None
) -> tuple[str | None, bool]:
    """Do what :func:`_judge` decided of ``name`` (a record: sealed from now on; a str: quarantined, why);
    (the line said, whether ``files``, the seal's records, changed)."""
    if not isinstance(verdict, str):
        files[name] = verdict
        return None, True
    moved, line = quarantine_file(
        kind, root, os.path.relpath(os.path.join(d, name), root), verdict, digest
    )
    return line, moved and files.pop(name, None) is not None


def _forget_gone(d: str, names: list[str], files: dict) -> list[str]:
    """Drop from ``files`` (the seal's records) the files of ``d`` that are gone (not in ``names`` and not there);
    their names."""
    listed = set(names)  # a list here made this O(files^2): 19 s a start at 50,000 JAX files
    gone = [n for n in files if n not in listed and not os.path.lexists(os.path.join(d, n))]
    for n in gone:
        del files[n]
    return gone


def _judge(
    kind: str,
    root: str,
    d: str,
    name: str,
    rec: dict | None,
    at: int | None,
    now: float,
    by_sha: dict[str, str],
    seal_new: bool,
) -> str | dict | None:
    """What becomes of one entry file of ``d``, whose seal record is ``rec`` (None: unsealed): a str says why
    it is quarantined; a dict is its record in the seal from now on (``rec`` itself for a sealed file touched
    but unchanged: the seal's time moves on); None leaves it as it is (unchanged, gone, still being written,
    left to the load hook)."""
    path = os.path.join(d, name)
    got = _fresh_digest(kind, root, path, rec, at, now)
    if got is None or isinstance(got, str):
        return got
    sha, size = got
    why = _contradiction(kind, root, d, name, rec, sha, size, by_sha)
    if why is not None:
        return why
    if rec is None and not seal_new:
        return None  # proven by the load hook before it is used, then sealed
    return rec if rec is not None else {"sha256": sha, "size": size}


def _fresh_digest(
    kind: str, root: str, path: str, rec: dict | None, at: int | None, now: float
) -> tuple[str, int] | str | None:
    """(sha256, size) of a file that needs hashing; None for one that needs nothing now (unchanged since
    sealed by two lstats, a recent unsealed one, gone, unreadable); a str for a recent unsealed file that
    names another entry than its key: why it is quarantined."""
    from jitwarden.store import seal

    try:
        st = os.lstat(path)
        if rec is not None and at is not None and st.st_ctime_ns < at and st.st_size == rec["size"]:
            return None  # unchanged since sealed: two lstats, no hashing
        if rec is None and now - st.st_mtime < SETTLE_S:
            # Perhaps still being written (JAX writes in place): not sealed yet. But a file that names
            # another entry than its key is refused now: no partial write gives that evidence.
            return unsound(kind, root, os.path.relpath(path, root), codes=("mismatch",))
        return seal.file_digest(path, st.st_size)
    except OSError:
        return None  # gone, not a regular file any more, unreadable: the scanner reports it


def _contradiction(
    kind: str,
    root: str,
    d: str,
    name: str,
    rec: dict | None,
    sha: str,
    size: int,
    by_sha: dict[str, str],
) -> str | None:
    """Why the bytes ``(sha, size)`` of ``name`` must not be kept, else None: a sealed file that changed; an
    unsealed one holding the bytes of another sealed file (:func:`_copy_counts`), or that its adapter finds
    unsound (damaged, or another entry's under this key, before it was ever sealed)."""
    if rec is not None:
        if (sha, size) == (rec["sha256"], rec["size"]):
            return None
        if size != rec["size"]:
            return f"{name} is {size} bytes, sealed as {rec['size']}"
        return f"{name} does not match its sealed sha256"
    if by_sha.get(sha, name) != name and _copy_counts(kind, d, by_sha[sha]):
        return f"{name} holds the very bytes of sealed {by_sha[sha]}: an entry moved or copied to another key"
    return unsound(kind, root, os.path.relpath(os.path.join(d, name), root))


def _copy_counts(kind: str, d: str, original: str) -> bool:
    """Whether a new file with the bytes of the sealed ``original`` is a planted copy: always for JAX (an entry
    starts with its compile time: two keys never hold the same bytes); for CuPy only when the original is gone
    (a move), since two keys can hold one cubin (the same kernel after a CuPy upgrade, without partitions)."""
    return kind != "cupy" or not os.path.lexists(os.path.join(d, original))


def unsound(kind: str, root: str, rel: str, codes: tuple[str, ...] | None = None) -> str | None:
    """Why a file about to be sealed must not be, by its adapter's own checks at error level (a JAX
    executable of another module than its key names, a damaged stream or header), else None: a seal
    vouches only for what was sound when sealed. ``codes``: only findings of these codes count."""
    from jitwarden.adapters import get
    from jitwarden.model.entries import Judge
    from jitwarden.model.findings import Severity

    entry = get(kind).inspect_entry(root, rel, Judge(now=time.time(), check_seals=False))
    bad = [
        f
        for f in entry.findings
        if f.severity >= Severity.ERROR
        and f.code != "unsafe"
        and (codes is None or f.code in codes)
    ]
    return f"{rel}: {bad[0].code}: {bad[0].message}" if bad else None


def quarantine_file(
    kind: str,
    root: str,
    rel: str,
    why: str,
    digest: str | None,
    by: str = "start-up",
    code: str = "corrupt",
) -> tuple[bool, str]:
    """Quarantine ``root/rel`` (a miss: the tool compiles it again): (moved, the warning line); where it could not
    be moved the line says why, and the entry is still not used. ``by``: who found it (``start-up``, ``load``)."""
    from jitwarden.model import kinds
    from jitwarden.store import quarantine

    tool = kinds.tool(kind)
    try:
        rec = quarantine.move(
            os.path.join(root, rel),
            code,
            [why],
            root=root,
            entry_id=rel,
            kind=kind,
            by=by,
            fingerprint=digest,
        )
    except (OSError, quarantine.QuarantineError) as exc:
        reason = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
        return False, (
            f"{tool} cache entry {rel} not used ({code}: {why}); it could not be quarantined ({reason}), "
            f"so {tool} compiles it again each time until it is removed"
        )
    when = "at start-up" if by == "start-up" else "as it loaded"
    return True, (
        f"quarantined {tool} cache entry {rel} {when} ({code}: {why}); {tool} compiles it again when next "
        f"used. Restore with `jitwarden quarantine restore {rec.id}`"
    )


def check_root(kind: str, root: str, digest: str | None, hooked: bool = False) -> list[str]:
    """:func:`check_dir` over every sealed dir of ``root``; ``hooked``: the load hook proves ``root``'s unsealed
    entries (JAX's ``-cache`` files, CuPy's files), so they are not sealed here."""
    from jitwarden.model.layout import SEAL_FILE

    out: list[str] = []
    for d, names in sealed_dirs(kind, root):
        if not names and not os.path.lexists(os.path.join(d, SEAL_FILE)):
            continue  # an empty dir (a fresh partition): nothing to lock, read or seal
        out += check_dir(kind, root, d, names, digest, seal_new=not (hooked and d == root))
    return out


def startup(
    in_use: dict, partitions: dict, digest: str, env, hooked: tuple[str, ...] = ()
) -> list[str]:
    """Activation's hook: check and seal the JAX and CuPy dirs in use (``in_use``: variable -> dir); entries of
    one of ``partitions`` are sealed under ``digest``; the kinds in ``hooked`` are proven and sealed by their
    load hook, not sealed here. ``JITWARDEN_SWEEP=0`` turns it off with the sweep."""
    from jitwarden.model import kinds
    from jitwarden.model.settings import SWEEP

    if not SWEEP.on(env):
        return []
    out: list[str] = []
    for row in kinds.partitioned(kinds.FILE):
        kind, var = row.name, row.var
        d = in_use.get(var)
        if not d or not os.path.isdir(d) or os.path.islink(d):
            continue
        try:
            out += check_root(kind, d, digest if var in partitions else None, kind in hooked)
        except Exception as exc:
            out.append(f"start-up check of the {kind} cache skipped ({type(exc).__name__}: {exc})")
    return out


# ---------------------------------------------------------------- one file at a time (the load hooks)

_SEALS: dict[
    str, tuple[tuple[int, int, int], dict, int | None]
] = {}  # dir -> (the seal file's stat, its files, its authenticated time)


def sealed_files(d: str) -> dict:
    """{name: {"sha256", "size"}} of the seal of ``d`` ({} without one or when it does not read as a seal), parsed
    again only when the seal file changed (its inode, size, mtime): a warm hit costs an ``lstat``."""
    return _sealed(d)[0]


def sealed_record(d: str, name: str) -> tuple[dict | None, int | None]:
    """(the seal's record of ``name`` in ``d`` or None, the seal's authenticated file-system time or None)."""
    files, at = _sealed(d)
    return files.get(name), at


def _sealed(d: str) -> tuple[dict, int | None]:
    from jitwarden.model.layout import SEAL_FILE
    from jitwarden.store import seal

    try:
        st = os.lstat(os.path.join(d, SEAL_FILE))
    except OSError:
        return {}, None
    key = (st.st_ino, st.st_size, st.st_mtime_ns)
    got = _SEALS.get(d)
    if got is not None and got[0] == key:
        return got[1], got[2]
    try:
        s, at = seal.read_stamped(
            d, max_bytes=max(seal.MAX_SEAL, st.st_size), name=seal.flat_name(d)
        )
    except seal.SealError:
        s, at = None, None
    files = dict(s.files) if s is not None else {}
    _SEALS[d] = (key, files, at if s is not None else None)
    return files, _SEALS[d][2]


_STUCK: dict[
    str, str
] = {}  # dir -> why its seal lock could not be had in this process (waited for once)


def stuck(d: str) -> str | None:
    """Why ``d``'s seal lock could not be had in this process, else None: its files stay unsealed (each proven again
    at its next use), and the lock is not waited for again."""
    return _STUCK.get(d)


def _holder(d: str, what: str) -> str:
    """What stands in the way of ``d``'s seal lock, naming the lock file and its owner."""
    from jitwarden.model.layout import ENTRY_LOCK_FILE

    path = os.path.join(d, ENTRY_LOCK_FILE)
    try:
        st = os.lstat(path)
    except OSError:
        return f"its seal lock {path}: {what}"
    owner = f"owned by uid {st.st_uid}, mode {st.st_mode & 0o7777:o}"
    fix = f"; remove it: `sudo rm {path}`" if st.st_uid != os.geteuid() else ""
    return f"its seal lock {path} ({owner}): {what}{fix}"


def seal_file(
    kind: str, d: str, name: str, sha: str, size: int, by: str, wait_s: float = 2.0
) -> bool:
    """Add ``name`` (its sha256 and size, of the bytes the caller holds) to the seal of ``d`` under its lock, waiting
    at most ``wait_s`` for another sealer; False when not sealed (it is then proven at its next load)."""
    import fcntl

    from jitwarden.model.layout import ENTRY_LOCK_FILE
    from jitwarden.store import seal
    from jitwarden.store.entrylock import lock, unlock

    deadline = time.monotonic() + (
        0.0 if d in _STUCK else wait_s
    )  # a stuck lock is waited for once a process
    try:
        while (fd := lock(d, ENTRY_LOCK_FILE, fcntl.LOCK_EX, block=False)) is None:
            if time.monotonic() > deadline:
                _STUCK.setdefault(d, _holder(d, "held by another process"))
                return False
            time.sleep(0.01)
    except (
        OSError
    ) as exc:  # no lock to be had (the dir is gone, not writable, a lock file not ours): not sealed
        if os.path.isdir(d):
            _STUCK.setdefault(d, _holder(d, exc.strerror or str(exc)))
        return False
    try:
        try:
            old, at = seal.read_stamped(
                d, max_bytes=seal.dir_bound(len(sealed_files(d)) + 1), name=seal.flat_name(d)
            )
        except seal.SealError:
            old = at = None  # a damaged seal vouches for nothing: sealed again from this file
        files = dict(old.files) if old else {}
        files[name] = {"sha256": sha, "size": size}
        files, newest = _still_sealed(d, files, at if old else None)
        if name not in files:
            return False  # changed since the caller read it: not sealed, proven at its next load
        fp = old.fingerprint if old else None
        seal.write(
            d,
            seal.Seal(files, fp, {"by": by, "kind": kind}, time.time()),
            newest,
            name=seal.flat_name(d),
        )
        return True
    except OSError:
        return False
    finally:
        unlock(fd)


def _still_sealed(d: str, files: dict, at: int | None) -> tuple[dict, int]:
    """(the records of ``files`` whose file is unchanged since the seal's time ``at``, or changed but still holding
    the sealed bytes; the newest ctime among them). A new seal's time vouches for every file it lists (the
    start-up check's fast path: :func:`check_dir`), so no record is carried into it unchecked: a file swapped
    between two seals would otherwise look unchanged."""
    from jitwarden.store import seal

    kept, newest = {}, -1
    for n, rec in files.items():
        path = os.path.join(d, n)
        try:
            st = os.lstat(path)
            if (at is None or st.st_ctime_ns >= at) and seal.file_digest(path, st.st_size) != (
                rec["sha256"],
                rec["size"],
            ):
                continue
        except OSError:
            continue  # gone (JAX's eviction, a clean) or no regular file: not sealed
        kept[n] = rec
        newest = max(newest, st.st_ctime_ns)
    return kept, newest
