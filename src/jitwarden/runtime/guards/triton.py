"""Triton's guard, its cache manager: seal on write, verify on read, miss + quarantine on mismatch.

Use it as ``TRITON_CACHE_MANAGER=jitwarden.guard:GuardedCacheManager``
(:func:`jitwarden.activate` sets it). This is the only jitwarden module that
imports Triton, and only Triton imports it (what it decides from the bytes it read:
:mod:`~jitwarden.runtime.guards.triton_verdicts`). It relies on nothing but
``FileCacheManager.__init__/get_file/put/get_group/put_group/_make_path/cache_dir``,
which Triton 3.4 to 3.9 all have.

Per entry, two lock files (``.jitwarden-*`` names, which the scanner skips):

- ``.jitwarden-lock``: shared while verifying, exclusive while sealing or quarantining;
- ``.jitwarden-writers``: every writer holds it shared from its first ``put`` to the
  end of its ``put_group`` (never blocking anyone). A reader that sees a checksum
  mismatch quarantines only when it can take this one exclusively without waiting,
  i.e. when no writer is mid-group; otherwise it reports a plain miss, compiles,
  and its own ``put_group`` leaves a consistent, sealed entry.

A writer keeps the bytes it wrote until its ``put_group``; under the exclusive lock
it republishes any file another writer replaced with different bytes, then seals
its own digests, so the entry always ends as one writer's complete, sealed set.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import time
from typing import TYPE_CHECKING

from triton.runtime.cache import FileCacheManager

from jitwarden.adapters import triton as _adapter
from jitwarden.model.layout import ENTRY_LOCK_FILE, ENTRY_WRITERS_FILE
from jitwarden.runtime import hiding as _hiding
from jitwarden.runtime import record as _record
from jitwarden.runtime import setaside as _setaside
from jitwarden.runtime.guards.triton_verdicts import (
    GROUP_MAX,
    STANDALONE,
    Admitted,
    Verdict,
    group_children,
    host,
    parse_json,
    producer,
    read_checked,
    sealed_hit,
    standalone,
)
from jitwarden.runtime.say import log, warn_once
from jitwarden.store import seal as _seal
from jitwarden.store import uselog as _uses
from jitwarden.store.entrylock import LockTimeout
from jitwarden.store.entrylock import lock as _lock
from jitwarden.store.entrylock import unlock as _unlock
from jitwarden.store.partition import digest_of
from jitwarden.store.paths import make_dirs, open_entry_dir
from jitwarden.store.reads import read_bytes
from jitwarden.store.served import Served

_READ_ONLY = (errno.EACCES, errno.EPERM, errno.EROFS)
_FALLBACK_ROOT: str | None = None
"""The private root of this process's kernels once the cache dir proved unwritable (``_put_file``)."""
# A lock file that cannot be opened safely: a symlink (ELOOP, never followed), a FIFO or device
# (EINVAL, from entrylock's regular-file check), a directory (EISDIR), a file as a parent (ENOTDIR).
_UNSAFE_LOCK = (errno.ELOOP, errno.EINVAL, errno.EISDIR, errno.ENOTDIR, errno.ENXIO)


def _unsafe_lock(exc: OSError, path: str) -> bool:
    """Whether ``exc`` (from :func:`~jitwarden.store.entrylock.lock`) says the lock file is no regular file
    jitwarden may open: then that entry is neither served nor sealed (a miss, a write without a seal), one
    warning per process, and the workload goes on as with stock Triton. A lock still held at its deadline
    (:class:`~jitwarden.store.entrylock.LockTimeout`, perhaps another user's) is one too: the caller moves
    the entry to this process's private dir (``_contested``), which says so once."""
    if isinstance(exc, LockTimeout):
        return True
    if exc.errno not in _UNSAFE_LOCK:
        return False
    warn_once(
        "unsafe-lock",
        "jitwarden: cannot lock Triton cache entry %s (%s: a lock file that is no regular "
        "file, never followed); what needs that lock is skipped: a miss, written as stock Triton writes",
        path,
        exc.strerror or exc,
    )
    return True


class _UnsafeLock(Exception):
    """The entry lock file is no regular file jitwarden may open (:func:`_unsafe_lock` has warned): a miss."""


def _entry_lock(cache_dir: str, how: int, read_only_ok: bool = True) -> int | None:
    """An fd holding the entry lock of ``cache_dir`` (``how``: ``fcntl.LOCK_SH`` or ``LOCK_EX``); with ``read_only_ok``,
    None where the cache cannot be written (read-only, no permission, full): judged without locks, nothing written.
    :class:`_UnsafeLock` when the lock file is no regular file; any other OSError is raised."""
    try:
        return _lock(cache_dir, ENTRY_LOCK_FILE, how)
    except OSError as exc:
        if _unsafe_lock(exc, cache_dir):
            raise _UnsafeLock(exc) from None
        if not read_only_ok or exc.errno not in _READ_ONLY and exc.errno != errno.ENOSPC:
            raise
        return None


_SERVED = Served()  # the private copies Triton is given (jitwarden.store.served)


class GuardedCacheManager(FileCacheManager):
    """A FileCacheManager that seals what it writes and trusts only what still matches its seal: Triton's
    :class:`~jitwarden.runtime.guards.Prover`, one entry (``cache_dir``) each."""

    KIND = "triton"

    def __init__(self, key, override=False, dump=False):
        for attempt in range(3):
            try:
                super().__init__(key, override=override, dump=dump)
                break
            except (
                FileExistsError
            ):  # the entry was moved away (``clean``) between makedirs' mkdir and its check
                if attempt == 2:
                    raise
        self._plain = bool(
            override or dump or not self.cache_dir
        )  # override/dump dirs: exactly the parent
        self._pending: dict[str, tuple[bytes, str]] = {}
        self._writers_fd: int | None = None
        self._put_dir: tuple[str, str] | None = None
        self._missed_at = 0.0  # when get_group missed: put_group's record of what the compile cost

    def __del__(self):
        fd, self._writers_fd = getattr(self, "_writers_fd", None), None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    # ------------------------------------------------------------ helpers

    @property
    def _digest(self) -> str | None:
        return digest_of(os.path.dirname(self.cache_dir.rstrip(os.sep)))

    def _begin_write(self) -> None:
        if self._writers_fd is None:
            try:
                self._writers_fd = _lock(self.cache_dir, ENTRY_WRITERS_FILE, fcntl.LOCK_SH)
            except OSError as exc:
                if not _unsafe_lock(exc, self.cache_dir):
                    raise
                self._contested(exc)

    def _contested(self, exc: OSError) -> None:
        """After a lock wait ran out (:class:`LockTimeout`): this entry's files go to this process's private
        dir (one warning there, ``_fallback_dir``), never waited on again nor published where the lock's
        holder could be mid-swap; a miss compiles privately."""
        if isinstance(exc, LockTimeout):
            self.cache_dir = self._fallback_dir(exc)

    def _end_write(self) -> None:
        fd, self._writers_fd = self._writers_fd, None
        _unlock(fd)
        self._pending.clear()

    def _quarantine(self, code: str, details, make: bool = True) -> None:
        """Set the entry aside (:func:`jitwarden.runtime.setaside.set_aside`: not while a writer is mid-group,
        then it is a plain miss and that writer's put_group leaves a consistent, sealed entry)."""
        rec = _setaside.set_aside(
            self.cache_dir, code, details, by="guard", fingerprint=self._digest
        )
        if rec is not None:
            log.warning(
                "jitwarden: %s",
                _setaside.line(rec, "Triton cache entry", code, details, "recompiling"),
            )
        if make:
            make_dirs(self.cache_dir)  # Triton's put writes into self.cache_dir

    def _check_seal(self, names, also_fingerprint: bool = True) -> Verdict | None:
        """None when ``names`` are sealed and match; else the verdict (legacy or bad)."""
        try:
            sealed = _seal.read(self.cache_dir)
        except _seal.SealError as exc:
            return Verdict("bad", "corrupt", [str(exc)])
        if sealed is None:
            return Verdict("legacy")
        problems = _seal.check(self.cache_dir, sealed, names=names)
        if problems:
            return Verdict("bad", "corrupt", problems)
        why = _seal.foreign(sealed.fingerprint, self._digest) if also_fingerprint else None
        return Verdict("bad", "mismatch", [why]) if why else None

    # ------------------------------------------------------------ groups (kernels)

    def _judge_group(self, grp_name: str) -> Verdict:
        try:
            raw = read_bytes(self._make_path(grp_name), max_bytes=GROUP_MAX, size_hint=4096)
        except FileNotFoundError:
            return Verdict("gone")
        except OSError as exc:
            return Verdict(
                "bad", "corrupt", [f"{grp_name}: unreadable group file ({type(exc).__name__})"]
            )
        v = group_children(grp_name, raw, self.cache_dir)
        if v.state != "ok":
            return v
        return self._check_seal(list(v.result) + [grp_name]) or v

    def _legacy_ok(self) -> Verdict:
        """Structural checks of an unsealed entry (the scanner's own judgement)."""
        errors, _type = _adapter.structural_errors(self.cache_dir, host())
        if errors:
            return Verdict("bad", errors[0].code, [f.message for f in errors])
        return Verdict("ok")

    def _open_entry(self) -> int:
        """The entry's directory fd, opened relative to its root without following a symlink.

        FileNotFoundError when there is no entry; OSError (ELOOP, ENOTDIR) when the entry is a
        symlink or not a directory.
        """
        return open_entry_dir(self.cache_dir)

    def get_group(self, filename: str):
        if self._plain:
            return super().get_group(filename)
        got = self.check_read(filename)
        if _record.ON:  # ``jitwarden run --record``: one buffered tuple, nothing else
            if got is None:
                self._missed_at = time.perf_counter()
            else:
                _record.hit("triton", self.key, filename.removesuffix(".json"))
        return got

    def check_read(self, name: str):
        """Before Triton reads ``name`` of this entry: the paths of private copies of its checked bytes (a group
        file: each child's, by name; a launcher or autotune record: its own), or None, a miss (it compiles)."""
        return self._get_file(name) if name.endswith(STANDALONE) else self._get_group(name)

    def seal_write(self, name: str, data):
        """Write ``name`` of this entry sealed: a launcher or autotune record (``data``, its bytes) on its own, a
        group (``data``, its children) with the children this writer put; the path Triton reads back."""
        return (
            self._put_alone(name, data)
            if name.endswith(STANDALONE)
            else self._put_group(name, data)
        )

    def _get_group(self, filename: str):
        grp_name = f"__grp__{filename}"
        root, key = os.path.split(self.cache_dir.rstrip(os.sep))
        if _hiding.hidden(
            root, key
        ):  # unsealed, being proven in the background: wait for it, not a recompile
            _hiding.wait_for(root, key)
        try:
            efd = self._open_entry()
        except FileNotFoundError:
            return None  # a plain miss (or an entry `clean` just moved away)
        except OSError as exc:
            return self._not_an_entry(exc)
        try:
            try:
                blobs = sealed_hit(efd, grp_name, self.cache_dir, self._digest)
            except Exception:
                blobs = None
            if blobs is None:
                try:
                    files = self._verified_group(grp_name)
                    blobs = (
                        None
                        if files is None
                        else read_checked(efd, files[0], files[1], hash_all=True)
                    )
                except Exception as exc:
                    log.warning(
                        "jitwarden: cannot verify Triton cache entry %s (%s: %s); treating it as a miss",
                        self.key,
                        type(exc).__name__,
                        exc,
                    )
                    return None
            if blobs is None:
                return None
            try:
                served = _SERVED.serve(blobs, os.path.dirname(self.cache_dir.rstrip(os.sep)))
            except OSError as exc:
                warn_once(
                    "serve",
                    "jitwarden: cannot write private copies of verified kernels (%s); Triton cache "
                    "hits are recompiled in this process",
                    exc.strerror or exc,
                )
                return None
            _uses.used(
                root, key
            )  # the use log budget evicts by (store/uselog: one append per entry)
            return served
        finally:
            os.close(efd)

    def _not_an_entry(self, exc: OSError):
        """The entry is a symlink or not a directory: never read or write through it; move it aside."""
        what = "a symlink" if exc.errno == errno.ELOOP else "not a directory"
        try:
            self._quarantine(
                "unsafe", [f"the entry is {what}: a cache entry is a real directory"], make=False
            )
        except Exception as qexc:
            log.warning(
                "jitwarden: Triton cache entry %s is %s and cannot be moved aside (%s)",
                self.key,
                what,
                qexc,
            )
        return

    def _verified_group(self, grp_name: str) -> tuple[dict, dict] | None:
        """(children, the digests they were judged by) when the entry is sound, else None (a miss).

        Judged under the entry lock; an unsealed entry that passes the structural checks is
        sealed, or, when the seal cannot be written (read-only or full disk), judged by the
        digests taken for that judgement.
        """
        try:
            fd = _entry_lock(self.cache_dir, fcntl.LOCK_EX)  # None: read-only, judged without locks
        except _UnsafeLock as exc:
            self._contested(exc.args[0])
            return None
        try:
            v = self._judge_group(grp_name)  # judged under the lock: no writer is sealing meanwhile
            if v.state == "legacy":
                lv = self._legacy_ok()
                if lv.state != "ok":
                    v = lv
                else:
                    admitted = self.prove(
                        grp_name, write=fd is not None and not _seal.distrusted(self.cache_dir)
                    )  # proven first, or refused; where no seal would be believed, served by its proof
                    if admitted.state == "sealed":
                        v = self._judge_group(grp_name)
                    elif admitted.state == "refused":
                        assert admitted.verdict is not None  # a refusal says why
                        v = admitted.verdict
                    else:
                        assert (
                            admitted.children is not None and admitted.files is not None
                        )  # unsealed
                        return dict(admitted.children), admitted.files
            if v.state == "ok":
                sealed = _seal.read(self.cache_dir)
                return (v.result, sealed.files) if sealed is not None else None
            if v.state == "bad" and fd is not None:
                self._quarantine(v.code, v.details)
            return None
        finally:
            _unlock(fd)

    def prove(self, grp_name: str, write: bool = True) -> Admitted:
        """Prove an unsealed entry by rebuilding its PTX (jitwarden.runtime.proof), then seal it.

        ``sealed``: it is sealed now; ``refused``: the proof refuses it (its verdict; Triton
        recompiles); ``unsealed``: no seal can be written (read-only or full disk), the entry is
        used by the digests proven (its children and files) and proven again at its next use.
        """
        from jitwarden.runtime import proof

        children = parse_json(read_bytes(self._make_path(grp_name), max_bytes=GROUP_MAX))[
            "child_paths"
        ]
        names = list(children) + [grp_name]
        if write:
            try:
                why = proof.admit(self.cache_dir, names, self._digest, producer())
                return (
                    Admitted("sealed")
                    if why is None
                    else Admitted("refused", Verdict("bad", why[0], why[1]))
                )
            except OSError as exc:
                self._unsealed(exc)
        s = _seal.compute(self.cache_dir, names, self._digest, dict(producer(), legacy=True))
        if not proof.enabled() and _seal.distrusted(self.cache_dir):
            return Admitted("refused", Verdict("legacy"))  # another's entry, no proof: a plain miss
        if proof.enabled():
            pr = proof.prove(self.cache_dir)
            if not pr.proven:
                return Admitted(
                    "refused",
                    Verdict("bad", pr.code, [f"first use of an unsealed entry: {pr.reason}"]),
                )
            if any(pr.digests.get(n) != rec["sha256"] for n, rec in s.files.items()):
                return Admitted(
                    "refused",
                    Verdict("bad", "unverifiable", ["the entry changed while it was being proven"]),
                )
        return Admitted("unsealed", children=children, files=s.files)

    def _unsealed(self, exc: OSError) -> None:
        warn_once(
            f"seal-{exc.errno}",
            "jitwarden: cannot seal Triton cache entry %s (%s); the kernel is used, "
            "the entry stays unsealed and is judged again when next used",
            self.key,
            exc.strerror or exc,
        )

    def put(self, data, filename, binary=True) -> str:
        if self._plain:
            return super().put(data, filename, binary)
        raw = data if isinstance(data, bytes) else str(data).encode("utf-8")
        if filename.endswith(STANDALONE):
            return self.seal_write(filename, raw)
        self._begin_write()
        self._pending[filename] = (raw, hashlib.sha256(raw).hexdigest())
        path = self._put_file(raw, filename)
        return path if filename.startswith("__grp__") else self._private(filename, raw, path)

    def _put_alone(self, filename: str, raw: bytes) -> str:
        """A launcher or autotune record written and sealed under the entry lock (written unsealed without it)."""
        try:
            fd = _lock(self.cache_dir, ENTRY_LOCK_FILE, fcntl.LOCK_EX)
        except OSError as exc:
            if not _unsafe_lock(exc, self.cache_dir):
                raise
            self._contested(exc)
            return self._private(
                filename, raw, self._put_file(raw, filename)
            )  # written, never sealed
        try:
            path = self._put_file(raw, filename)
            self._seal_files({filename: raw}, merge=True)
        finally:
            _unlock(fd)
        return self._private(filename, raw, path)

    def _put_file(self, raw: bytes, filename: str) -> str:
        """Triton's own put, again when the entry was moved away (``clean``) while it wrote; on a read-only
        or full cache, into a fresh private dir of this process instead (one warning): the workload goes on
        and its kernels are simply not cached (ARCHITECTURE.md, "the runtime ... falls back to a safe state")."""
        for attempt in range(3):
            try:
                return super().put(raw, filename, binary=True)
            except FileNotFoundError:
                if attempt == 2:
                    raise
            except OSError as exc:
                if exc.errno not in _READ_ONLY + (errno.ENOSPC, errno.EDQUOT) or attempt == 2:
                    raise
                self.cache_dir = self._fallback_dir(exc)
        raise AssertionError("unreachable")

    def _fallback_dir(self, exc: OSError) -> str:
        """This entry's dir in a private root of this process, for a cache dir that cannot be written."""
        global _FALLBACK_ROOT
        from jitwarden.store.tempdirs import private_dir

        if _FALLBACK_ROOT is None:
            _FALLBACK_ROOT = private_dir("jitwarden-triton-")
            warn_once(
                "fallback-put",
                "jitwarden: cannot write the Triton cache (%s); this process caches its "
                "kernels in the private dir %s instead",
                exc.strerror or exc,
                _FALLBACK_ROOT,
            )
        d = os.path.join(_FALLBACK_ROOT, os.path.basename(self.cache_dir.rstrip(os.sep)))
        make_dirs(d)
        return d

    def _private(self, filename: str, raw: bytes, path: str) -> str:
        """A private copy of bytes just written: Triton reads back what ``put`` returns (a compile's result,
        a launcher it imports), and the cache file may be replaced by then."""
        try:
            if self._put_dir is None:
                self._put_dir = _SERVED.begin(os.path.dirname(self.cache_dir.rstrip(os.sep)))
            return _SERVED.write(self._put_dir, filename, raw)
        except OSError as exc:
            warn_once(
                "serve-put",
                "jitwarden: cannot write private copies of compiled kernels (%s); Triton reads "
                "them back from the cache dir",
                exc.strerror or exc,
            )
            return path

    def put_group(self, filename: str, group):
        if self._plain:
            return super().put_group(filename, group)
        if _record.ON:
            took = time.perf_counter() - self._missed_at if self._missed_at else 0.0
            _record.compiled("triton", self.key, filename.removesuffix(".json"), took)
        return self.seal_write(filename, group)

    def _put_group(self, filename: str, group):
        """Triton's ``put_group``, under the entry lock: what another writer replaced put back, then sealed."""
        grp_name = f"__grp__{filename}"
        group = {
            name: self._make_path(name) for name in group
        }  # the cache's own paths, not private copies
        self._begin_write()
        try:
            fd = _lock(self.cache_dir, ENTRY_LOCK_FILE, fcntl.LOCK_EX)
        except OSError as exc:
            try:
                if not _unsafe_lock(exc, self.cache_dir):
                    raise
                path = super().put_group(
                    filename, group
                )  # published as stock Triton does, never sealed
                self._contested(exc)  # what this manager writes next goes private
                return path
            finally:
                self._end_write()
        try:
            # Republish what another writer replaced with different bytes: one writer's set, never a mix.
            for name in group:
                mine = self._pending.get(name)
                if mine is None:
                    continue
                try:
                    same = _seal.file_digest(self._make_path(name))[0] == mine[1]
                except OSError:
                    same = False
                if not same:
                    self._put_file(mine[0], name)
            path = super().put_group(filename, group)  # calls self.put: recorded in _pending
            try:  # the kernel is compiled and published: failing to seal it must not fail the compile
                files = {}
                for name in list(group) + [grp_name]:
                    mine = self._pending.get(name)
                    if mine is not None:
                        files[name] = {"sha256": mine[1], "size": len(mine[0])}
                    else:
                        d, n = _seal.file_digest(self._make_path(name))
                        files[name] = {"sha256": d, "size": n}
                _seal.write(
                    self.cache_dir, _seal.Seal(files, self._digest, producer(), time.time())
                )
            except OSError as exc:
                self._unsealed(exc)
            return path
        finally:
            _unlock(fd)
            self._end_write()

    # ------------------------------------------------------------ single files (launchers, autotune records)

    def _seal_files(self, data: dict, merge: bool) -> None:
        files = {}
        if merge:
            try:
                old = _seal.read(self.cache_dir)
            except _seal.SealError:
                old = None
            if old is not None:
                files.update(old.files)
        for name, raw in data.items():
            files[name] = {"sha256": hashlib.sha256(raw).hexdigest(), "size": len(raw)}
        try:
            _seal.write(self.cache_dir, _seal.Seal(files, self._digest, producer(), time.time()))
        except OSError as exc:
            self._unsealed(exc)

    def _judge_file(self, filename: str, efd: int) -> Verdict:
        """The verdict on one standalone file, read once through the entry fd; ``result``: its bytes."""
        try:
            sealed = _seal.read(self.cache_dir, dir_fd=efd)
        except _seal.SealError as exc:
            return Verdict("bad", "corrupt", [str(exc)])
        try:
            raw = read_bytes(filename, max_bytes=_seal.MAX_FILE, dir_fd=efd)
        except FileNotFoundError:
            return Verdict("gone")
        except OSError as exc:
            code = "unsafe" if exc.errno == errno.ELOOP else "corrupt"
            return Verdict("bad", code, [f"{filename}: {exc.strerror or exc}"])
        return standalone(filename, raw, sealed)

    def get_file(self, filename):
        if self._plain or not filename.endswith(STANDALONE):
            return super().get_file(filename)
        return self.check_read(filename)

    def _get_file(self, filename: str):
        try:
            efd = self._open_entry()
        except FileNotFoundError:
            return None
        except OSError as exc:
            return self._not_an_entry(exc)
        try:
            raw = self._verified_file(filename, efd)
            if raw is None:
                return None
            return _SERVED.serve({filename: raw}, os.path.dirname(self.cache_dir.rstrip(os.sep)))[
                filename
            ]
        except Exception as exc:
            log.warning(
                "jitwarden: cannot verify Triton cache file %s/%s (%s: %s); treating it as a miss",
                self.key,
                filename,
                type(exc).__name__,
                exc,
            )
            return None
        finally:
            os.close(efd)

    def _verified_file(self, filename: str, efd: int) -> bytes | None:
        """The file's bytes when it is sound (sealing an unsealed one that passes), else None."""
        try:
            fd = _entry_lock(self.cache_dir, fcntl.LOCK_SH)
        except _UnsafeLock as exc:
            self._contested(exc.args[0])
            return None
        if fd is None:  # read-only cache: judge without locks, never write
            v = self._judge_file(filename, efd)
            return v.result if v.state in ("ok", "legacy") else None
        try:
            v = self._judge_file(filename, efd)
        finally:
            _unlock(fd)
        if v.state == "ok":
            return v.result
        if v.state == "gone":
            return None
        try:
            fd = _entry_lock(self.cache_dir, fcntl.LOCK_EX, read_only_ok=False)
        except _UnsafeLock as exc:
            self._contested(exc.args[0])
            return None
        try:
            v = self._judge_file(filename, efd)
            if v.state == "legacy":
                self._seal_files({filename: v.result}, merge=True)
                return v.result
            if v.state == "ok":
                return v.result
            if v.state == "bad":
                self._quarantine(v.code, v.details)
            return None
        finally:
            _unlock(fd)


if TYPE_CHECKING:  # mypy holds the class to the protocol
    from jitwarden.runtime.guards import Prover

    _: type[Prover] = GuardedCacheManager


def _pin_knob() -> None:
    """Resolve ``TRITON_CACHE_MANAGER`` once: Triton re-imports the class on every compile (~9 us a hit).

    Only when the variable names this class, and only through Triton's own knob (a
    Python-level value, which Triton reads before the variable).
    """
    try:
        from triton import knobs

        if os.environ.get(
            "TRITON_CACHE_MANAGER"
        ) == f"{__name__}:GuardedCacheManager" and "manager_class" not in vars(knobs.cache):
            vars(knobs.cache)["manager_class"] = GuardedCacheManager
    except Exception:
        pass


_pin_knob()
