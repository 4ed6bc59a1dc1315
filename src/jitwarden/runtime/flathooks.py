"""Load hooks for JAX's persistent cache, CuPy's and numba-cuda's kernel caches: each entry checked as the tool reads
it, sealed as it writes it, an unsealed one proven before it is used (stdlib only; imports none of the tools: each is
patched as it imports itself, ARCHITECTURE.md, "The runtime"). CuPy's part is :class:`GuardedCupyBackend`,
numba-cuda's :func:`_patch_numba`.

JAX (``jax/_src``, the same from 0.4.35 to 0.10: ``compilation_cache.get_file_cache`` makes the cache object whose
``get(key)``/``put(key, bytes)`` read and write ``<key>-cache``; ``compiler._cache_write`` is called after every
compile, before JAX's own thresholds decide whether to write) is wrapped in two places:

- the cache object (:class:`GuardedJaxCache`), whichever way its dir was named (``JAX_COMPILATION_CACHE_DIR``,
  ``jax.config.update("jax_compilation_cache_dir", ...)``, ``set_cache_dir``):
  - ``put``: JAX writes the file in place; it is read back and sealed at once when it holds what JAX compiled
    (:func:`jitwarden.runtime.flatseal.seal_file`), so there is no window in which a swap is sealed as good;
  - ``get``: the bytes read are hashed and handed to JAX only when they are the sealed bytes; a file that
    contradicts its seal is quarantined and is a miss;
  - an unsealed file is a miss that proves it: JAX compiles the module it asked for, and
- ``_cache_write`` compares that fresh executable with the file's (the serialized executable after JAX's 4-byte
  compile time, less XLA's debug info where it reads as XLA's protobufs: :func:`jitwarden.formats.jaxexec.computes`;
  byte for byte otherwise): the same, the file is sealed as proven; another, the file is quarantined as
  ``not-reproducible`` (another computation under this key: two functions named ``f`` share
  ``jit_f-<key>-cache``) and JAX writes the fresh one, sealed as written.

Where the hook is not installed (load hooks off, a JAX or CuPy of another shape: CuPy 13 and older),
:mod:`jitwarden.runtime.flatseal` checks and seals at start-up instead (only a dir named in the environment).
"""

from __future__ import annotations

import errno
import os
import stat
import time
import warnings
from collections.abc import Callable
from typing import Any

from jitwarden.model import kinds
from jitwarden.runtime import flatseal, postimport

CACHE_MODULE = "jax._src.compilation_cache"
COMPILER_MODULE = "jax._src.compiler"
CUPY_MODULE = "cupy.cuda.compiler"
NUMBA_MODULE = "numba.cuda.core.caching"
SUFFIX = "-cache"
# cache key -> (its dir, the unsealed file's bytes): a proof under way, settled when JAX has compiled the key
_pending: dict[str, tuple[str, bytes]] = {}


def _recorder():
    """:mod:`jitwarden.runtime.record` (``run --record``): imported when a tool's hook first runs, not at activation."""
    from jitwarden.runtime import record

    return record


def _served(root: str, name: str) -> None:
    """Log that this process was served ``name`` of ``root`` (``store/uselog``: what ``budget`` evicts by, and
    never while this process lives). Never raises."""
    from jitwarden.store import uselog

    uselog.used(root, name)


def _sha256(data: bytes) -> str:
    import hashlib  # not at import: activation's warm path imports this module and never hashes

    return hashlib.sha256(data).hexdigest()


def _say(line: str) -> None:
    warnings.warn(f"jitwarden: {line}", stacklevel=3)


_failures: list[str] = []
_said: set[str] = set()


def _once(key: str, line: str) -> None:
    """Say ``line`` the first time ``key`` is met in this process: a stale lock or an unsealable dir costs one line a
    run, never one a function."""
    if key not in _said:
        _said.add(key)
        _say(line)


def _failed(exc: Exception, where: str = "load hook") -> None:
    """An error of jitwarden's own inside a hook: the entry is a miss or stays unsealed (never served unchecked),
    the tool goes on; said once per process for each place and type of error."""
    _failures.append(type(exc).__name__)
    _once(
        f"{where}:{type(exc).__name__}",
        f"{where} error ({type(exc).__name__}: {exc}); entries it could not check are compiled again",
    )


def _or_miss(read: Callable[..., bytes | None], *args: Any) -> bytes | None:
    """``read(*args)``: the bytes a hook hands the tool, or None (a miss: the tool compiles) where an error of
    jitwarden's own stopped the check (:func:`_failed`), never raised into the tool."""
    try:
        return read(*args)
    except Exception as exc:
        _failed(exc)
        return None


def _executable(data: bytes, size: int) -> bytes | None:
    """The serialized executable in a ``-cache`` file's bytes (after the compile time), inflated to at most ``size``
    bytes (the fresh executable's: one that inflates past it is another anyway, and costs no more than it)."""
    from jitwarden.formats import jaxexec

    inf = jaxexec.inflate((data,), cap=size + jaxexec.TIME_BYTES)
    if inf.data is None or inf.cut or len(inf.data) < jaxexec.TIME_BYTES:
        return None
    return inf.data[jaxexec.TIME_BYTES :]


# ---------------------------------------------------------------- reading before the tool reads


def read_entry(kind: str, d: str, name: str, max_bytes: int) -> tuple[bytes, int] | None:
    """(bytes, ctime ns) of the entry file ``name`` of ``d``, read by the hook before the tool could: opened through
    the disk layer (never following a link, never blocking on a FIFO), a regular file of at most ``max_bytes``.
    None when absent, or when it is anything else: then refused (quarantined, a miss: the tool compiles it) with
    one line saying what was there, so a FIFO or a link to ``/dev/zero`` costs an ``open``, not the workload."""
    from jitwarden.store import reads

    path = os.path.join(d, name)
    try:
        fd, st = reads.open_regular(path)
    except FileNotFoundError:
        return None
    except PermissionError as exc:
        _once(
            f"unreadable:{path}",
            f"{kinds.tool(kind)} cache entry {path} cannot be read ({exc.strerror}); it is compiled again",
        )
        return None
    except OSError as exc:  # a symlink (ELOOP), a FIFO, a device or a directory (NotRegularFile)
        what = "a symbolic link" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        refuse(kind, d, name, f"{name} is {what}, not a file {kinds.tool(kind)} wrote", "corrupt")
        return None
    try:
        data = reads.read_fd(fd, max_bytes, st.st_size) if st.st_size <= max_bytes else None
    finally:
        os.close(fd)
    if data is None or len(data) > max_bytes:
        why = f"{name} holds more than the {max_bytes >> 20} MiB jitwarden reads of such a file"
        refuse(kind, d, name, why, "corrupt")
        return None
    return data, st.st_ctime_ns


def _dir_problem(kind: str, d: str) -> str | None:
    """Why seals in the cache dir ``d`` prove nothing to this process (another owner, writable by others: the trust
    rule of :mod:`jitwarden.store.trust`), said once; None for a dir of this user's own. In such a dir nothing is
    sealed and no lock is made, and every entry is a miss (the tool compiles it): never silently."""
    from jitwarden.store import trust

    try:
        st = os.lstat(d)
    except OSError as exc:
        return exc.strerror or str(exc)
    why = "a symbolic link" if stat.S_ISLNK(st.st_mode) else trust.untrusted(d, st)
    if why is not None:
        tool = kinds.tool(kind)
        _once(
            f"untrusted:{d}",
            f"{tool} cache dir {d} is {why}: its entries prove nothing to this process (uid {os.geteuid()}) and "
            f"are compiled again, and jitwarden writes nothing there. Fix: a dir of your own (mode 700), or "
            f"`chmod go-w {d}` when it is yours",
        )
    return why


class GuardedJaxCache:
    """JAX's file cache (``jax._src.lru_cache.LRUCache``; inside a ``VerificationCache`` where JAX makes one) with
    its reads checked before JAX could read and its writes sealed, never through a link."""

    def __init__(self, base, path: str) -> None:
        self._base = base
        self._dir = os.fspath(path)
        self._untrusted = _dir_problem("jax", self._dir)

    def __getattr__(self, attr):
        return getattr(self._base, attr)

    def get(self, key: str) -> bytes | None:
        if not key:
            return self._base.get(key)  # JAX's own ValueError
        return _or_miss(self._get, key)  # never into JAX: a miss, JAX compiles (the result right)

    def _get(self, key: str) -> bytes | None:
        from jitwarden.model import (
            bounds,  # here: the warm activation imports this module, not bounds
        )

        name = f"{key}{SUFFIX}"
        got = read_entry("jax", self._dir, name, bounds.JAX_ENTRY_MAX)
        if got is None:
            return None
        data, ctime = got
        if self._untrusted is not None:
            return None  # proves nothing here: JAX compiles, and its put finds the file there
        state = check("jax", self._dir, name, data, ctime)
        if state == "sealed":
            self._touch(key)
            _served(self._dir, name)
            if (rec := _recorder()).ON:
                rec.hit("jax", key, key.rsplit("-", 1)[0])
            return data  # exactly the sealed bytes
        if state == "changed":
            return None
        if postimport.status(COMPILER_MODULE) != "guarded":
            return self._first_sight(name, data)
        _pending[key] = (
            self._dir,
            data,
        )  # a miss: JAX compiles the module, _cache_write proves the file
        return None

    def _touch(self, key: str) -> None:
        """What JAX's own ``get`` does on a hit beside reading: its LRU eviction's ``<key>-atime`` (8 bytes, ns,
        little-endian), where eviction is on (``jax_compilation_cache_max_size``); written atomically by fd."""
        if getattr(self._base, "eviction_enabled", False):
            from jitwarden.store.atomic import write_bytes_atomic

            try:
                write_bytes_atomic(
                    os.path.join(self._dir, f"{key}-atime"), time.time_ns().to_bytes(8, "little")
                )
            except OSError as exc:
                _failed(exc, "JAX cache atime")

    def put(self, key: str, value: bytes) -> None:
        if not key or self._untrusted is not None:
            return self._base.put(key, value)
        name = f"{key}{SUFFIX}"
        path = os.path.join(self._dir, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            _failed(exc, "JAX cache write")
            return None
        if st is not None:
            if stat.S_ISREG(st.st_mode):
                return None  # JAX writes nothing over an entry that exists
            if not refuse("jax", self._dir, name, f"{name} is not a regular file", "corrupt"):
                return None  # it could not be moved: nothing is written through it
        if getattr(self._base, "eviction_enabled", False):
            self._base.put(key, value)  # JAX's eviction and atime, under its lock
        else:
            try:  # the one atomic writer: a temporary beside it, renamed by the dir's fd, never through a link
                from jitwarden.store.atomic import write_bytes_atomic

                write_bytes_atomic(path, value)
            except OSError as exc:
                _failed(exc, "JAX cache write")
                return None
        try:
            seal_written("jax", self._dir, name, value)
        except Exception as exc:  # left unsealed: proven at its next load
            _failed(exc)
        return None

    def _first_sight(self, name: str, data: bytes) -> bytes | None:
        """Where JAX's compiler could not be wrapped there is no proof: the unsealed bytes JAX read are judged as
        ``verify`` judges them (a damaged stream, another module's executable under this key) and sealed as they
        are, as the start-up check does (:mod:`jitwarden.runtime.flatseal`)."""
        from jitwarden.adapters.jax import ENTRY, same_module
        from jitwarden.formats import jaxexec

        p, m = jaxexec.parse(data), ENTRY.match(name)
        why = p.problem
        if why is None and p.module and m and not same_module(m.group(1), p.module):
            why = f"the key names module {m.group(1)}, the executable in the file is {p.module}"
        if why is not None:
            refuse("jax", self._dir, name, why)
            return None
        flatseal.seal_file("jax", self._dir, name, _sha256(data), len(data), "first sight")
        return data


def check(kind: str, d: str, name: str, data: bytes, ctime_ns: int | None = None) -> str:
    """Whether the file ``name`` of ``d`` whose bytes the hook read are ``data`` is ``sealed`` (these are the sealed
    bytes), ``changed`` (it contradicts its seal: quarantined here, a miss) or ``unsealed``.

    ``ctime_ns``: the file's ctime as opened. A file of the sealed size not changed since the seal was written (its
    ctime older than the seal's authenticated time: nobody but root can set a ctime back) holds the sealed bytes,
    so a warm hit costs no hash; any other is hashed."""
    rec, at = flatseal.sealed_record(d, name)
    if rec is None:
        return "unsealed"
    if len(data) == rec.get("size") and (
        (ctime_ns is not None and at is not None and ctime_ns < at)
        or _sha256(data) == rec.get("sha256")
    ):
        return "sealed"
    refuse(kind, d, name, f"{name} does not match its seal: changed since it was written")
    return "changed"


def seal_written(kind: str, d: str, name: str, expect: bytes) -> bool:
    """Seal the file ``name`` of ``d`` that the tool has just written when it holds ``expect`` (the bytes the tool
    compiled and handed over): read back, so a file swapped as it was written is never sealed."""
    from jitwarden.store.reads import read_bytes

    try:
        on_disk = read_bytes(
            os.path.join(d, name), max_bytes=len(expect) + 1, size_hint=len(expect)
        )
    except OSError:
        return False  # not written (the tool's size limits, eviction), or no regular file: nothing sealed
    if on_disk != expect:
        return False
    if flatseal.seal_file(kind, d, name, _sha256(expect), len(expect), "load hook"):
        return True
    _unsealable(kind, d)
    return False


def _unsealable(kind: str, d: str) -> None:
    """Say once a run why the cache dir ``d`` cannot be sealed now: its entries are proven again at their next use."""
    why = flatseal.stuck(d)
    if why is not None:
        _once(
            f"stuck:{d}",
            f"{kinds.tool(kind)} cache dir {d} cannot be sealed in this run, {why}; what this run writes "
            "there is proven again at its next use",
        )


def refuse(kind: str, d: str, name: str, why: str, code: str = "corrupt") -> bool:
    """Quarantine the file ``name`` of ``d`` (a miss: the tool compiles it again), with one warning line; whether
    it was moved (where it cannot be, the line says why)."""
    moved, line = flatseal.quarantine_file(kind, d, name, why, None, by="load", code=code)
    _say(line)
    return moved


def prove(key: str, fresh: bytes) -> str | None:
    """After JAX compiled ``key`` afresh (its serialized executable ``fresh``): judge the unsealed file that was a
    miss; "proven", "refuted", or None when no proof was under way for it."""
    got = _pending.pop(key, None)
    if got is None:
        return None
    d, data = got
    name = f"{key}{SUFFIX}"
    from jitwarden.formats import jaxexec

    old = _executable(data, len(fresh))
    if old == fresh or (
        old is not None and jaxexec.computes(old) == jaxexec.computes(fresh) is not None
    ):
        if not flatseal.seal_file("jax", d, name, _sha256(data), len(data), "first-use proof"):
            _unsealable("jax", d)
        return "proven"
    why = "a fresh compile of its key differs from it beyond debug info; replaced by the fresh one"
    refuse("jax", d, name, why, "not-reproducible")
    return "refuted"


def _file_cache(got):
    """The object whose ``get``/``put`` read and write ``<key>-cache`` files in what ``get_file_cache`` returned:
    JAX's ``LRUCache``, or the one a ``VerificationCache`` wraps (JAX 0.11, ``jax_compilation_cache_check_contents``);
    None for anything else (a remote cache, a class of another shape): left as it is."""
    cache = got
    for _ in range(3):
        if type(cache).__name__ == "LRUCache" and callable(getattr(cache, "get", None)):
            return cache
        cache = getattr(cache, "_base_cache", None)
    return None


def _patch_cache(mod) -> None:
    from jitwarden.runtime import hookshapes

    make = mod.get_file_cache
    hookshapes.fit(make, hookshapes.target(CACHE_MODULE, "get_file_cache"))

    def get_file_cache(*args, **kwargs):
        got = make(*args, **kwargs)
        try:
            return _guarded_pair(got)
        except Exception as exc:  # JAX's cache as it made it, its entries checked at start-up only
            _failed(exc, "JAX cache hook")
            return got

    get_file_cache.__wrapped__ = make  # type: ignore[attr-defined]
    mod.get_file_cache = get_file_cache
    cur = getattr(mod, "_cache", None)
    # a cache JAX made before the hook (activate() after import jax): guarded from now, when it is a local dir
    inner = _file_cache(cur) if cur is not None else None
    if inner is not None and os.path.isdir(str(inner._path)):
        _guard_inside(mod, cur, inner, str(inner._path))


def _guarded_pair(got):
    """``get_file_cache``'s (cache, path) with the file cache inside guarded, when it is a local dir."""
    if not isinstance(got, tuple) or len(got) != 2:
        return got
    cache, where = got
    if not os.path.isdir(
        os.fspath(where)
    ):  # a gs:// or other remote path: not a dir jitwarden can seal
        return got
    inner = _file_cache(cache)
    if inner is None:
        _once(
            "jax-cache-class",
            f"JAX's cache object {type(cache).__name__} is not one this version of jitwarden knows; "
            "its entries are checked at start-up only",
        )
        return got
    return _guard_inside(None, cache, inner, os.fspath(where)), where


def _guard_inside(mod, outer, inner, d: str):
    """Guard ``inner`` (JAX's ``LRUCache``) in place inside ``outer`` (itself, or the ``VerificationCache`` that
    holds it); the object JAX keeps. With ``mod``, JAX's module-level ``_cache`` is set to it."""
    guarded = GuardedJaxCache(inner, d)
    if outer is inner:
        if mod is not None:
            mod._cache = guarded
        return guarded
    outer._base_cache = guarded
    return outer


def _patch_compiler(mod) -> None:
    """Wrap JAX's ``_cache_write`` (called after every compile, before JAX's thresholds decide whether to write):
    its arguments found by binding its own signature, whatever the release (0.10 passes ``host_callbacks``, 0.11
    does not), and passed through unchanged."""
    from jitwarden.runtime import hookshapes

    write = mod._cache_write
    sig = hookshapes.fit(write, hookshapes.target(COMPILER_MODULE, "_cache_write"))

    def _cache_write(*args, **kwargs):
        try:
            a = hookshapes.bind(sig, args, kwargs)
            if (rec := _recorder()).ON:
                key = a["cache_key"]
                rec.compiled(
                    "jax", key, a.get("module_name") or key, a.get("compile_time_secs") or 0.0
                )
            _prove_compiled(a["cache_key"], a.get("backend"), a["executable"])
        except Exception as exc:  # the file stays unsealed (and unused): proven at its next load
            _failed(exc, "JAX compile hook")
        return write(*args, **kwargs)

    _cache_write.__wrapped__ = write  # type: ignore[attr-defined]
    mod._cache_write = _cache_write


def _prove_compiled(cache_key: str, backend, executable) -> None:
    """Hand :func:`prove` the executable JAX has just compiled for ``cache_key`` when a proof is under way (serialized
    as JAX serializes it for its cache)."""
    if cache_key not in _pending:
        return
    if hasattr(executable, "serialize"):
        ser = executable.serialize()
    else:  # older jaxlib
        ser = backend.serialize_executable(executable)
    prove(cache_key, bytes(ser))


# ---------------------------------------------------------------- CuPy


class GuardedCupyBackend:
    """CuPy's disk kernel-cache backend (``cupy.cuda._compiler_cache.DiskKernelCacheBackend``, CuPy 14: what
    ``compiler._compile_with_cache_cuda`` loads and saves through) with its loads checked and saves sealed.

    ``load(name)`` reads the file itself, before CuPy could (:func:`read_entry`: never through a link, never
    blocking): sealed bytes are handed over as CuPy's payload (the file less its SHA-1 header); bytes that
    contradict the seal are quarantined (a miss). An unsealed file is a miss that proves it: CuPy compiles the
    source again, with the same options and arch (NVRTC, or nvcc as the entry was built), and ``save`` compares
    what it made with the file's payload: the same, the file is sealed (CuPy rewrites the same bytes); another (a
    cubin of other code under this key: two sources with the name expression ``scale<float>``), it is quarantined
    first, with a line. Both bind CuPy's own signatures (:mod:`~jitwarden.runtime.hookshapes`) and pass every
    argument through."""

    def __init__(self, base) -> None:
        from jitwarden.runtime import hookshapes

        self._base = base
        self._dir = os.fspath(base._cache_dir)
        self._pending: dict[str, bytes] = {}  # name -> the unsealed file's payload: proof under way
        self._missed: dict[
            str, float
        ] = {}  # name -> when its load missed: a save's compile time, recorded
        cls, mod = type(base), "cupy.cuda._compiler_cache"
        self._load_sig = hookshapes.fit(
            cls.load, hookshapes.target(mod, "DiskKernelCacheBackend.load")
        )
        self._save_sig = hookshapes.fit(
            cls.save, hookshapes.target(mod, "DiskKernelCacheBackend.save")
        )
        self._untrusted = _dir_problem("cupy", self._dir)

    def __getattr__(self, attr):
        return getattr(self._base, attr)

    def load(self, *args, **kwargs) -> bytes | None:
        from jitwarden.runtime import hookshapes

        try:
            name = hookshapes.bind(self._load_sig, (self._base, *args), kwargs)["name"]
        except Exception as exc:  # a call of another shape: a miss, CuPy compiles
            _failed(exc, "CuPy load hook")
            return None
        return _or_miss(
            self._checked, name
        )  # never into CuPy: a miss, CuPy compiles (the result right)

    def _checked(self, name: str) -> bytes | None:
        from jitwarden.model import bounds

        got = read_entry("cupy", self._dir, name, bounds.CUPY_ENTRY_MAX)
        if got is None or self._untrusted is not None:
            self._missed[name] = time.perf_counter()
            return None
        data, ctime = got
        state = check("cupy", self._dir, name, data, ctime)
        payload = data[bounds.CUPY_HASH_LEN :]
        if state == "sealed":
            _served(self._dir, name)
            if (rec := _recorder()).ON:
                rec.hit("cupy", name, name)
            return payload
        if (
            state == "unsealed" and cupy_file(payload) == data
        ):  # CuPy's own header check, else damage: a miss
            self._pending[name] = payload
        self._missed[name] = time.perf_counter()
        return None

    def save(self, *args, **kwargs) -> None:
        from jitwarden.runtime import hookshapes

        try:
            a = hookshapes.bind(self._save_sig, (self._base, *args), kwargs)
            name, cubin = a["name"], a["cubin"]
        except Exception as exc:  # CuPy's write goes through, unsealed
            _failed(exc, "CuPy save hook")
            return self._base.save(*args, **kwargs)
        old = self._pending.pop(name, None)
        began = self._missed.pop(name, None)
        if (rec := _recorder()).ON:
            rec.compiled("cupy", name, name, time.perf_counter() - began if began else 0.0)
        try:
            if old is not None and old != cubin and self._untrusted is None:
                refuse(
                    "cupy",
                    self._dir,
                    name,
                    "CuPy's compile of its source now makes another cubin; replaced by the fresh one",
                    "not-reproducible",
                )
        except Exception as exc:
            _failed(exc)
        self._base.save(*args, **kwargs)
        if self._untrusted is not None:
            return None
        try:
            seal_written("cupy", self._dir, name, cupy_file(cubin))
        except Exception as exc:  # left unsealed: proven at its next load
            _failed(exc)
        return None


def cupy_file(payload: bytes) -> bytes:
    """The bytes CuPy writes for ``payload``: its SHA-1 in hex, then the payload (``formats/cupyentry``)."""
    import hashlib

    return hashlib.sha1(payload, usedforsecurity=False).hexdigest().encode("ascii") + payload


def _patch_cupy(mod) -> None:
    from jitwarden.runtime import hookshapes

    backend = mod._kernel_cache_backend
    if not hasattr(backend, "_cache_dir"):
        raise TypeError(f"kernel cache backend {type(backend).__name__} is not CuPy's disk backend")
    setter = mod._set_kernel_cache_backend
    sig = hookshapes.fit(setter, hookshapes.target(CUPY_MODULE, "_set_kernel_cache_backend"))
    if not isinstance(backend, GuardedCupyBackend):
        mod._kernel_cache_backend = GuardedCupyBackend(backend)

    def _set_kernel_cache_backend(
        *args, **kwargs
    ) -> None:  # a disk backend set later is guarded too
        try:
            new = hookshapes.bind(sig, args, kwargs)["backend"]
            if hasattr(new, "_cache_dir") and not isinstance(new, GuardedCupyBackend):
                args, kwargs = hookshapes.rebind(sig, args, kwargs, backend=GuardedCupyBackend(new))
        except Exception as exc:  # CuPy's own backend as it was given: checked at start-up only
            _failed(exc, "CuPy backend hook")
        return setter(*args, **kwargs)

    _set_kernel_cache_backend.__wrapped__ = setter  # type: ignore[attr-defined]
    mod._set_kernel_cache_backend = _set_kernel_cache_backend


# ---------------------------------------------------------------- numba-cuda


def _numba_read(cache_path: str, name: str) -> bytes | None:
    """The bytes of numba-cuda's ``name`` in ``cache_path`` when they are the sealed bytes; None when absent,
    unsealed (numba then compiles and writes it again, sealed) or changed since sealed (quarantined)."""
    from jitwarden.model import bounds
    from jitwarden.store.reads import read_bytes

    try:
        data = read_bytes(os.path.join(cache_path, name), max_bytes=bounds.NUMBA_FILE_MAX)
    except FileNotFoundError:
        return None
    return data if check("numba", cache_path, name, data) == "sealed" else None


def _patch_numba(mod) -> None:
    """numba-cuda's ``IndexDataCacheFile`` (0.30: ``<base>.nbi``, a pickled version, source stamp and overload
    index; ``<base>.<n>.nbc``, a pickled kernel), beside each source file in ``__pycache__`` or under
    ``NUMBA_CACHE_DIR``: a file is unpickled only when its bytes are the sealed ones, and each is sealed as numba
    writes it. There is nothing to prove an unsealed kernel from but its compile, so an unsealed index is empty
    and an unsealed data file a miss: numba compiles the kernel again and writes it, sealed (once). Each method is
    replaced by one that binds numba's own signature (:mod:`~jitwarden.runtime.hookshapes`); a save that fails
    here is numba's own save, unsealed."""
    import io

    from jitwarden.runtime import hookshapes

    cls, pickle = mod.IndexDataCacheFile, mod.pickle
    sigs = {
        attr: hookshapes.fit(
            getattr(cls, attr), hookshapes.target(NUMBA_MODULE, f"IndexDataCacheFile.{attr}")
        )
        for attr in ("_load_index", "_load_data", "_save_index", "_save_data")
    }
    for attr in ("_dump", "_open_for_write"):
        getattr(
            cls, attr
        )  # this numba-cuda's shape, or AttributeError: left unguarded, said by status()
    orig = {attr: getattr(cls, attr) for attr in sigs}

    def _load_index(self, *args, **kwargs):
        try:
            data = _numba_read(self._cache_path, self._index_name)
        except Exception as exc:
            _failed(exc)
            data = None
        if data is None:
            return {}
        f = io.BytesIO(data)
        if pickle.load(f) != self._version:
            return {}
        stamp, overloads = pickle.loads(f.read())
        return overloads if stamp == self._source_stamp else {}

    def _load_data(self, *args, **kwargs):
        name = "?"
        try:
            name = hookshapes.bind(sigs["_load_data"], (self, *args), kwargs)["name"]
            data = _numba_read(self._cache_path, name)
        except Exception as exc:
            _failed(exc)
            data = None
        if data is None:
            raise FileNotFoundError(name)  # numba's load() takes it for a file gone: a miss
        return pickle.loads(data)

    def _write(self, name: str, data: bytes) -> None:
        with self._open_for_write(os.path.join(self._cache_path, name)) as f:
            f.write(data)
        try:
            seal_written("numba", self._cache_path, name, data)
        except Exception as exc:  # left unsealed: compiled again at its next load
            _failed(exc)

    def _save_index(self, *args, **kwargs):
        try:
            overloads = hookshapes.bind(sigs["_save_index"], (self, *args), kwargs)["overloads"]
            head = pickle.dumps(self._version, protocol=-1)
            body = self._dump((self._source_stamp, overloads))
        except Exception as exc:
            _failed(exc, "numba-cuda save hook")
            return orig["_save_index"](self, *args, **kwargs)
        _write(self, self._index_name, head + body)
        return None

    def _save_data(self, *args, **kwargs):
        try:
            a = hookshapes.bind(sigs["_save_data"], (self, *args), kwargs)
            name, body = a["name"], self._dump(a["data"])
        except Exception as exc:
            _failed(exc, "numba-cuda save hook")
            return orig["_save_data"](self, *args, **kwargs)
        _write(self, name, body)
        return None

    cls._load_index, cls._load_data = _load_index, _load_data
    cls._save_index, cls._save_data = _save_index, _save_data


# ---------------------------------------------------------------- installing


def _origin(top: str) -> str | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec(top)  # a top-level name: found, not imported
    except (ImportError, ValueError):
        return None
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else None


def hooked(env) -> tuple[str, ...]:
    """The kinds whose loads the hooks will check in a Python started with ``env``: ``jax`` where JAX is installed,
    ``cupy`` where CuPy has its kernel-cache backend (14 and later: ``cuda/_compiler_cache.py``); () with
    ``JITWARDEN_LOAD_HOOKS=0``. Found without importing either."""
    from jitwarden.model.settings import LOAD_HOOKS

    if not LOAD_HOOKS.on(env):
        return ()
    out: tuple[str, ...] = ("jax",) if _origin("jax") else ()
    cupy = _origin("cupy")
    if cupy and os.path.isfile(os.path.join(cupy, "cuda", "_compiler_cache.py")):
        out += ("cupy",)
    return out


KIND_OF = {COMPILER_MODULE: "jax", CACHE_MODULE: "jax", CUPY_MODULE: "cupy", NUMBA_MODULE: "numba"}


def _refused(module: str, exc: Exception) -> str:
    """``postimport``'s state for a hook that did not fit the tool as installed (:class:`hookshapes.ShapeError`, a
    missing attribute): the tool runs as it is, one line says so, and what the start-up check would have done at
    activation (which left the kind to its hook) is done now, before the tool reads its cache."""
    from jitwarden.runtime import hookshapes

    kind = KIND_OF[module]
    tool = f"{kinds.tool(kind)} {hookshapes.version_of(kind)}"
    why = f"{type(exc).__name__}: {exc}"
    if module == COMPILER_MODULE:
        line = (
            f"{tool}'s compile hook is not one this version of jitwarden knows ({why}); its unsealed cache "
            "entries are judged as they are read, not proven by a compile"
        )
    elif kind == "numba":
        line = f"{tool}'s cache functions are not ones this version of jitwarden knows ({why}); its cache is not checked"
    else:
        line = (
            f"{tool}'s cache functions are not ones this version of jitwarden knows ({why}); its cache is "
            "checked at start-up only"
        )
    _say(line)
    if kinds.get(kind).partition == "file":  # the kinds flatseal checks at start-up: JAX's, CuPy's
        _check_now(kind)
    return f"not guarded: {line}"


def _check_now(kind: str) -> None:
    var = kinds.get(kind).var
    d = os.environ.get(var) if var else None
    if not d or not os.path.isdir(d) or os.path.islink(d):
        return
    try:
        for line in flatseal.check_root(kind, d, None):
            _say(line)
    except Exception as exc:
        _failed(exc, f"start-up check of the {kinds.tool(kind)} cache")


def install(env=None) -> dict[str, str]:
    """Guard JAX's persistent cache and CuPy's kernel cache in this process, now or as soon as each imports the
    module wrapped; never raises. Returns {module: state}. Off with ``JITWARDEN_LOAD_HOOKS=0``."""
    from jitwarden.model.settings import LOAD_HOOKS

    mods = (COMPILER_MODULE, CACHE_MODULE, CUPY_MODULE, NUMBA_MODULE)
    if not LOAD_HOOKS.on(os.environ if env is None else env):
        return dict.fromkeys(mods, f"{LOAD_HOOKS.name}=0")
    try:
        # JAX's compiler first: a cache that proves through _cache_write must never be guarded without it
        patches = (
            (COMPILER_MODULE, _patch_compiler),
            (CACHE_MODULE, _patch_cache),
            (CUPY_MODULE, _patch_cupy),
            (NUMBA_MODULE, _patch_numba),
        )
        return {m: postimport.when_imported(m, p, on_error=_refused) for m, p in patches}
    except Exception as exc:
        return dict.fromkeys(mods, f"not installed ({type(exc).__name__}: {exc})")
