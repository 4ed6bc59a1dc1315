"""The guarded Triton cache manager: seal on write, verify on read, miss + quarantine on mismatch.

Use it as ``TRITON_CACHE_MANAGER=jitwarden.guard:GuardedCacheManager``
(:func:`jitwarden.activate` sets it). This is the only jitwarden module that
imports Triton, and only Triton imports it. It relies on nothing but
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
import functools
import hashlib
import json
import logging
import os
import stat
import time

from triton.runtime.cache import FileCacheManager

from . import __version__, elf
from . import quarantine as _quarantine
from . import seal as _seal
from .adapters import triton as _adapter
from .fsutil import read_nofollow
from .layout import SEAL_FILE
from .entrylock import _O_NOFOLLOW, LOCK_FILE, WRITERS_FILE, lock as _lock, unlock as _unlock
from .partition import split

_STANDALONE = (".so", ".autotune.json")
_IR_TEXT = (".source", ".ttir", ".ttgir", ".llir", ".ptx", ".amdgcn")
"""Intermediate texts Triton never executes on a hit: the hit path checks their size only, unless
``JITWARDEN_GUARD_HASH_ALL=1``; the group, metadata and binaries are always hashed. ``jitwarden
verify`` and every slow-path decision (quarantine, legacy sealing) hash everything."""
_HASH_ALL = os.environ.get("JITWARDEN_GUARD_HASH_ALL", "").strip().lower() in ("1", "true", "yes", "on")
_log = logging.getLogger("jitwarden")
_READ_ONLY = (errno.EACCES, errno.EPERM, errno.EROFS)
_loads = json.JSONDecoder().decode


@functools.lru_cache(maxsize=None)
def _producer() -> dict:
    try:
        import triton

        tv = triton.__version__
    except Exception:  # noqa: BLE001
        tv = None
    return {"triton": tv, "jitwarden": __version__}


@functools.lru_cache(maxsize=64)
def _digest_for(root: str) -> str | None:
    """The fingerprint digest entries of ``root`` are sealed under: its partition name, else None.

    Unpartitioned roots (``JITWARDEN_PARTITION=0``) are never judged by fingerprint: two
    environments sharing one would quarantine each other's entries in turn.
    """
    s = split(root)
    return s[1] if s else None


@functools.lru_cache(maxsize=1)
def _host() -> str:
    return _adapter.host_machine()


class _Verdict:
    __slots__ = ("state", "code", "details", "result")

    def __init__(self, state: str, code: str = "", details=(), result=None):
        self.state, self.code, self.details, self.result = state, code, tuple(details), result


class GuardedCacheManager(FileCacheManager):
    """A FileCacheManager that seals what it writes and trusts only what still matches its seal."""

    def __init__(self, key, override=False, dump=False):
        super().__init__(key, override=override, dump=dump)
        self._plain = bool(override or dump or not self.cache_dir)  # override/dump dirs: exactly the parent
        self._pending: dict[str, tuple[bytes, str]] = {}
        self._writers_fd: int | None = None

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
        return _digest_for(os.path.dirname(self.cache_dir.rstrip(os.sep)))

    def _begin_write(self) -> None:
        if self._writers_fd is None:
            self._writers_fd = _lock(self.cache_dir, WRITERS_FILE, fcntl.LOCK_SH)

    def _end_write(self) -> None:
        fd, self._writers_fd = self._writers_fd, None
        _unlock(fd)
        self._pending.clear()

    def _no_writer(self) -> int | None:
        """An fd holding the writers lock exclusively when nobody is mid-group, else None."""
        return _lock(self.cache_dir, WRITERS_FILE, fcntl.LOCK_EX, block=False)

    def _quarantine(self, code: str, details) -> None:
        try:
            rec = _quarantine.move(self.cache_dir, code, details, by="guard", fingerprint=self._digest)
            _log.warning("jitwarden: quarantined Triton cache entry %s (%s: %s); recompiling. Restore with "
                         "`jitwarden quarantine restore %s`", rec.entry_id, code, "; ".join(details) or "-", rec.id)
        except OSError:
            pass  # another process moved it first, or the root's quarantine is not ours: a miss all the same
        os.makedirs(self.cache_dir, exist_ok=True)  # Triton's put writes into self.cache_dir

    def _quarantine_unless_writing(self, v: _Verdict) -> None:
        """Quarantine a bad entry, unless a writer is mid-group: then it is a plain miss,
        and that writer's put_group leaves a consistent, sealed entry."""
        wfd = self._no_writer()
        if wfd is None:
            return
        try:
            self._quarantine(v.code, v.details)
        finally:
            _unlock(wfd)

    def _check_seal(self, names, also_fingerprint: bool = True) -> _Verdict | None:
        """None when ``names`` are sealed and match; else the verdict (legacy or bad)."""
        try:
            sealed = _seal.read(self.cache_dir)
        except _seal.SealError as exc:
            return _Verdict("bad", "corrupt", [str(exc)])
        if sealed is None:
            return _Verdict("legacy")
        problems = _seal.check(self.cache_dir, sealed, names=names)
        if problems:
            return _Verdict("bad", "corrupt", problems)
        fingerprint = sealed.fingerprint
        mine = self._digest
        if also_fingerprint and mine and fingerprint and fingerprint != mine:
            return _Verdict("bad", "mismatch", [f"sealed under fingerprint {fingerprint}, this partition is {mine}"])
        return None

    # ------------------------------------------------------------ groups (kernels)

    def _judge_group(self, grp_name: str) -> _Verdict:
        grp_path = self._make_path(grp_name)
        try:
            doc = json.loads(read_nofollow(grp_path, size_hint=4096))
        except FileNotFoundError:
            return _Verdict("gone")
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            return _Verdict("bad", "corrupt", [f"{grp_name}: unreadable group file ({type(exc).__name__})"])
        children = doc.get("child_paths") if isinstance(doc, dict) else None
        if not isinstance(children, dict):
            return _Verdict("bad", "corrupt", [f"{grp_name}: no child_paths mapping"])
        for c, p in children.items():
            if not isinstance(p, str) or not isinstance(c, str):
                return _Verdict("bad", "corrupt", [f"{grp_name}: child {c!r} has no path"])
            d, b = os.path.split(p)
            if b != c or (d != self.cache_dir and not _adapter.same_dir(d, self.cache_dir)):
                return _Verdict("bad", "foreign-path", [f"{grp_name}: {c} points outside the entry to {p}"])
        v = self._check_seal(list(children) + [grp_name])
        if v is not None:
            return v
        return _Verdict("ok", result=dict(children))

    def _legacy_ok(self) -> _Verdict:
        """Structural checks of an unsealed entry (the scanner's own judgement)."""
        errors, _type = _adapter.structural_errors(self.cache_dir, _host())
        if errors:
            return _Verdict("bad", errors[0].code, [f.message for f in errors])
        return _Verdict("ok")

    def get_group(self, filename: str):
        if self._plain:
            return super().get_group(filename)
        grp_name = f"__grp__{filename}"
        prefix = self.cache_dir + os.sep
        try:
            grp_raw = read_nofollow(prefix + grp_name, size_hint=4096)
        except FileNotFoundError:
            return None  # a plain miss
        except OSError:
            grp_raw = None
        try:
            fast = self._fast_group(prefix, grp_name, grp_raw) if grp_raw is not None else None
        except Exception:  # noqa: BLE001 - anything odd (unsealed, missing, damaged) goes the careful way
            fast = None
        if fast is not None:
            return fast
        try:
            return self._verified_group(grp_name)
        except Exception as exc:  # noqa: BLE001 - a guard failure is a miss, never a crash
            _log.warning("jitwarden: cannot verify Triton cache entry %s (%s: %s); treating it as a miss",
                         self.key, type(exc).__name__, exc)
            return None

    def _fast_group(self, prefix: str, grp_name: str, grp_raw: bytes):
        """The hit path, lock-free: the group and every child match the seal byte for byte.

        Returns None whenever anything is not exactly right; :meth:`_verified_group` then
        decides under the entry lock (so a writer mid-seal never causes a quarantine).
        """
        children = _loads(grp_raw.decode())["child_paths"]
        sealed = _loads(read_nofollow(prefix + SEAL_FILE, size_hint=4096).decode())
        files = sealed["files"]
        if sealed.get("schema") != _seal.SCHEMA:
            return None
        sha256 = hashlib.sha256
        rec = files[grp_name]
        if rec["size"] != len(grp_raw) or rec["sha256"] != sha256(grp_raw).hexdigest():
            return None
        for c, p in children.items():
            if p != prefix + c:
                return None
            rec = files[c]
            if not _HASH_ALL and c.endswith(_IR_TEXT):
                st = os.lstat(p)
                if st.st_size != rec["size"] or not stat.S_ISREG(st.st_mode):
                    return None
                continue
            data = read_nofollow(p, size_hint=rec["size"])
            if len(data) != rec["size"] or sha256(data).hexdigest() != rec["sha256"]:
                return None
        mine = self._digest
        if mine and sealed.get("fingerprint") not in (None, mine):
            return None
        return dict(children)

    def _verified_group(self, grp_name: str):
        try:
            fd = _lock(self.cache_dir, LOCK_FILE, fcntl.LOCK_EX)
        except OSError as exc:  # read-only cache: judge without locks, never write
            if exc.errno not in _READ_ONLY:
                raise
            v = self._judge_group(grp_name)
            return v.result if v.state == "ok" else None
        try:
            v = self._judge_group(grp_name)  # judged under the lock: no writer is sealing meanwhile
            if v.state == "legacy":
                lv = self._legacy_ok()
                if lv.state == "ok":
                    self._seal_legacy(grp_name)
                    v = self._judge_group(grp_name)
                else:
                    v = lv
            if v.state == "ok":
                return v.result
            if v.state == "bad":
                self._quarantine_unless_writing(v)
            return None
        finally:
            _unlock(fd)

    def _seal_legacy(self, grp_name: str) -> None:
        with open(self._make_path(grp_name), "rb") as f:
            children = json.loads(f.read())["child_paths"]
        s = _seal.compute(self.cache_dir, list(children) + [grp_name], self._digest, dict(_producer(), legacy=True))
        _seal.write(self.cache_dir, s)

    def put(self, data, filename, binary=True) -> str:
        if self._plain:
            return super().put(data, filename, binary)
        raw = data if isinstance(data, bytes) else str(data).encode("utf-8")
        standalone = filename.endswith(_STANDALONE)
        if standalone:
            fd = _lock(self.cache_dir, LOCK_FILE, fcntl.LOCK_EX)
            try:
                path = super().put(raw, filename, binary=True)
                self._seal_files({filename: raw}, merge=True)
                return path
            finally:
                _unlock(fd)
        self._begin_write()
        self._pending[filename] = (raw, hashlib.sha256(raw).hexdigest())
        return super().put(raw, filename, binary=True)

    def put_group(self, filename: str, group):
        if self._plain:
            return super().put_group(filename, group)
        grp_name = f"__grp__{filename}"
        self._begin_write()
        fd = _lock(self.cache_dir, LOCK_FILE, fcntl.LOCK_EX)
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
                    super().put(mine[0], name, binary=True)
            path = super().put_group(filename, group)  # calls self.put: recorded in _pending
            files = {}
            for name in list(group) + [grp_name]:
                mine = self._pending.get(name)
                if mine is not None:
                    files[name] = {"sha256": mine[1], "size": len(mine[0])}
                else:
                    d, n = _seal.file_digest(self._make_path(name))
                    files[name] = {"sha256": d, "size": n}
            _seal.write(self.cache_dir, _seal.Seal(files, self._digest, _producer(), time.time()))
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
        _seal.write(self.cache_dir, _seal.Seal(files, self._digest, _producer(), time.time()))

    def _judge_file(self, filename: str) -> _Verdict:
        v = self._check_seal([filename], also_fingerprint=False)
        if v is not None and v.state != "legacy":
            return v
        path = self._make_path(filename)
        try:
            fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW)
            try:
                raw = b"".join(iter(lambda: os.read(fd, 1 << 20), b""))
            finally:
                os.close(fd)
        except FileNotFoundError:
            return _Verdict("gone")
        except OSError as exc:
            return _Verdict("bad", "unsafe" if os.path.islink(path) else "corrupt", [f"{filename}: {exc.strerror}"])
        if filename.endswith(".so"):
            try:
                so = elf.parse(raw)
            except elf.ElfError as exc:
                return _Verdict("bad", "corrupt", [f"{filename}: not a valid shared object ({exc})"])
            if so.machine_name != _host():
                return _Verdict("bad", "mismatch", [f"{filename} is an ELF for {so.machine_name}, this host is {_host()}"])
        elif filename.endswith(".json"):
            try:
                json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                return _Verdict("bad", "corrupt", [f"{filename}: not valid JSON"])
        return _Verdict("legacy", result=raw) if v is not None else _Verdict("ok")

    def get_file(self, filename):
        if self._plain or not filename.endswith(_STANDALONE):
            return super().get_file(filename)
        path = self._make_path(filename)
        if not os.path.exists(path):
            return None
        try:
            return self._verified_file(filename, path)
        except Exception as exc:  # noqa: BLE001 - a guard failure is a miss, never a crash
            _log.warning("jitwarden: cannot verify Triton cache file %s/%s (%s: %s); treating it as a miss",
                         self.key, filename, type(exc).__name__, exc)
            return None

    def _verified_file(self, filename: str, path: str):
        try:
            fd = _lock(self.cache_dir, LOCK_FILE, fcntl.LOCK_SH)
        except OSError as exc:  # read-only cache: judge without locks, never write
            if exc.errno not in _READ_ONLY:
                raise
            return path if self._judge_file(filename).state == "ok" else None
        try:
            v = self._judge_file(filename)
        finally:
            _unlock(fd)
        if v.state == "ok":
            return path
        if v.state == "gone":
            return None
        fd = _lock(self.cache_dir, LOCK_FILE, fcntl.LOCK_EX)
        try:
            v = self._judge_file(filename)
            if v.state == "legacy":
                self._seal_files({filename: v.result}, merge=True)
                return path
            if v.state == "ok":
                return path
            if v.state == "bad":
                self._quarantine_unless_writing(v)
            return None
        finally:
            _unlock(fd)


def _pin_knob() -> None:
    """Resolve ``TRITON_CACHE_MANAGER`` once: Triton re-imports the class on every compile (~9 us a hit).

    Only when the variable names this class, and only through Triton's own knob (a
    Python-level value, which Triton reads before the variable).
    """
    try:
        from triton import knobs

        if os.environ.get("TRITON_CACHE_MANAGER") == f"{__name__}:GuardedCacheManager" \
                and "manager_class" not in vars(knobs.cache):
            vars(knobs.cache)["manager_class"] = GuardedCacheManager
    except Exception:  # noqa: BLE001 - an optimisation only
        pass


_pin_knob()
