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

import os
import warnings
from collections.abc import Callable
from typing import Any

from jitwarden.runtime import flatseal, postimport

CACHE_MODULE = "jax._src.compilation_cache"
COMPILER_MODULE = "jax._src.compiler"
CUPY_MODULE = "cupy.cuda.compiler"
NUMBA_MODULE = "numba.cuda.core.caching"
NUMBA_MAX = (
    256 << 20
)  # a numba-cuda index or data file read at most (its pickles of kernels: KBs to MBs)
SUFFIX = "-cache"
# cache key -> (its dir, the unsealed file's bytes): a proof under way, settled when JAX has compiled the key
_pending: dict[str, tuple[str, bytes]] = {}


def _sha256(data: bytes) -> str:
    import hashlib  # not at import: activation's warm path imports this module and never hashes

    return hashlib.sha256(data).hexdigest()


def _say(line: str) -> None:
    warnings.warn(f"jitwarden: {line}", stacklevel=3)


_failures: list[str] = []


def _failed(exc: Exception) -> None:
    """An error of jitwarden's own inside a hook: the entry is a miss or stays unsealed (never served unchecked),
    the tool goes on; said once per process."""
    if not _failures:
        _say(
            f"load hook error ({type(exc).__name__}: {exc}); entries it could not check are compiled again"
        )
    _failures.append(type(exc).__name__)


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


class GuardedJaxCache:
    """JAX's cache object (an ``LRUCache`` or its ``VerificationCache``) with its reads checked and writes sealed."""

    def __init__(self, base, path: str) -> None:
        self._base = base
        self._dir = str(path)

    def __getattr__(self, attr):
        return getattr(self._base, attr)

    def get(self, key: str) -> bytes | None:
        data = self._base.get(key)
        if data is None or not key:
            return data
        return _or_miss(
            self._checked, key, data
        )  # never into JAX: a miss, JAX compiles (the result right)

    def _checked(self, key: str, data: bytes) -> bytes | None:
        name = f"{key}{SUFFIX}"
        state = check("jax", self._dir, name, data)
        if state == "sealed":
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

    def put(self, key: str, value: bytes) -> None:
        self._base.put(key, value)
        if key:
            try:
                seal_written("jax", self._dir, f"{key}{SUFFIX}", value)
            except Exception as exc:  # left unsealed: proven at its next load
                _failed(exc)

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


def check(kind: str, d: str, name: str, data: bytes) -> str:
    """Whether the file ``name`` of ``d`` whose bytes the tool read are ``data`` is ``sealed`` (these are the sealed
    bytes), ``changed`` (it contradicts its seal: quarantined here, a miss) or ``unsealed``."""
    rec = flatseal.sealed_files(d).get(name)
    if rec is None:
        return "unsealed"
    if len(data) == rec.get("size") and _sha256(data) == rec.get("sha256"):
        return "sealed"
    refuse(kind, d, name, f"{name} does not match its seal: changed since it was written")
    return "changed"


def seal_written(kind: str, d: str, name: str, expect: bytes) -> bool:
    """Seal the file ``name`` of ``d`` that the tool has just written when it holds ``expect`` (the bytes the tool
    compiled and handed over): read back, so a file swapped as it was written is never sealed."""
    from jitwarden.store.fsutil import read_bytes

    try:
        on_disk = read_bytes(
            os.path.join(d, name), max_bytes=len(expect) + 1, size_hint=len(expect)
        )
    except OSError:
        return False  # not written (the tool's size limits, eviction), or no regular file: nothing sealed
    return on_disk == expect and flatseal.seal_file(
        kind, d, name, _sha256(expect), len(expect), "load hook"
    )


def refuse(kind: str, d: str, name: str, why: str, code: str = "corrupt") -> None:
    """Quarantine the file ``name`` of ``d`` (a miss: the tool compiles it again), with one warning line."""
    line = flatseal.quarantine_file(kind, d, name, why, None, by="load", code=code)
    _say(line or f"{kind} cache entry {name} not used ({why}); it could not be quarantined")


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
        flatseal.seal_file("jax", d, name, _sha256(data), len(data), "first-use proof")
        return "proven"
    why = "a fresh compile of its key differs from it beyond debug info; replaced by the fresh one"
    refuse("jax", d, name, why, "not-reproducible")
    return "refuted"


def _patch_cache(mod) -> None:
    make = mod.get_file_cache

    def get_file_cache(path, *args, **kwargs):
        got = make(path, *args, **kwargs)
        if got is None:
            return got
        cache, where = got
        if not os.path.isdir(
            os.fspath(where)
        ):  # a gs:// or other remote path: not a dir jitwarden can seal
            return got
        return GuardedJaxCache(cache, where), where

    get_file_cache.__wrapped__ = make  # type: ignore[attr-defined]
    mod.get_file_cache = get_file_cache
    cur = getattr(mod, "_cache", None)
    # a cache JAX made before the hook (activate() after import jax): guarded from now, when it is a local dir
    if cur is not None and not isinstance(cur, GuardedJaxCache) and os.path.isdir(str(cur._path)):
        mod._cache = GuardedJaxCache(cur, cur._path)


def _patch_compiler(mod) -> None:
    write = mod._cache_write

    def _cache_write(
        cache_key, compile_time_secs, module_name, backend, executable, host_callbacks, *a, **kw
    ):
        try:
            _prove_compiled(cache_key, backend, executable)
        except Exception as exc:  # the file stays unsealed (and unused): proven at its next load
            _failed(exc)
        return write(
            cache_key, compile_time_secs, module_name, backend, executable, host_callbacks, *a, **kw
        )

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

    ``load`` gets the payload (the file less its SHA-1 header, which CuPy has checked): the file's bytes are that
    header and the payload again. Sealed bytes are handed over; bytes that contradict the seal are quarantined (a
    miss). An unsealed file is a miss that proves it: CuPy compiles the source again, with the same options and
    arch (NVRTC, or nvcc as the entry was built), and ``save`` compares what it made with the file's payload: the
    same, the file is sealed (CuPy rewrites the same bytes); another (a cubin of other code under this key: two
    sources with the name expression ``scale<float>``), it is quarantined first, with a line."""

    def __init__(self, base) -> None:
        self._base = base
        self._dir = os.fspath(base._cache_dir)
        self._pending: dict[str, bytes] = {}  # name -> the unsealed file's payload: proof under way

    def __getattr__(self, attr):
        return getattr(self._base, attr)

    def load(self, name: str) -> bytes | None:
        payload = self._base.load(name)
        if payload is None:
            return None
        return _or_miss(
            self._checked, name, payload
        )  # never into CuPy: a miss, CuPy compiles (the result right)

    def _checked(self, name: str, payload: bytes) -> bytes | None:
        state = check("cupy", self._dir, name, cupy_file(payload))
        if state == "sealed":
            return payload
        if state == "unsealed":
            self._pending[name] = payload
        return None

    def save(self, name: str, cubin: bytes, source: str) -> None:
        old = self._pending.pop(name, None)
        try:
            if old is not None and old != cubin:
                refuse(
                    "cupy",
                    self._dir,
                    name,
                    "CuPy's compile of its source now makes another cubin; replaced by the fresh one",
                    "not-reproducible",
                )
        except Exception as exc:
            _failed(exc)
        self._base.save(name, cubin, source)
        try:
            seal_written("cupy", self._dir, name, cupy_file(cubin))
        except Exception as exc:  # left unsealed: proven at its next load
            _failed(exc)


def cupy_file(payload: bytes) -> bytes:
    """The bytes CuPy writes for ``payload``: its SHA-1 in hex, then the payload (``formats/cupyentry``)."""
    import hashlib

    return hashlib.sha1(payload, usedforsecurity=False).hexdigest().encode("ascii") + payload


def _patch_cupy(mod) -> None:
    backend = mod._kernel_cache_backend
    if not hasattr(backend, "_cache_dir"):
        raise TypeError(f"kernel cache backend {type(backend).__name__} is not CuPy's disk backend")
    if not isinstance(backend, GuardedCupyBackend):
        mod._kernel_cache_backend = GuardedCupyBackend(backend)
    setter = mod._set_kernel_cache_backend

    def _set_kernel_cache_backend(new) -> None:  # a disk backend set later is guarded too
        setter(GuardedCupyBackend(new) if hasattr(new, "_cache_dir") else new)

    _set_kernel_cache_backend.__wrapped__ = setter  # type: ignore[attr-defined]
    mod._set_kernel_cache_backend = _set_kernel_cache_backend


# ---------------------------------------------------------------- numba-cuda


def _numba_read(cache_path: str, name: str) -> bytes | None:
    """The bytes of numba-cuda's ``name`` in ``cache_path`` when they are the sealed bytes; None when absent,
    unsealed (numba then compiles and writes it again, sealed) or changed since sealed (quarantined)."""
    from jitwarden.store.fsutil import read_bytes

    try:
        data = read_bytes(os.path.join(cache_path, name), max_bytes=NUMBA_MAX)
    except FileNotFoundError:
        return None
    return data if check("numba", cache_path, name, data) == "sealed" else None


def _patch_numba(mod) -> None:
    """numba-cuda's ``IndexDataCacheFile`` (0.30: ``<base>.nbi``, a pickled version, source stamp and overload
    index; ``<base>.<n>.nbc``, a pickled kernel), beside each source file in ``__pycache__`` or under
    ``NUMBA_CACHE_DIR``: a file is unpickled only when its bytes are the sealed ones, and each is sealed as numba
    writes it. There is nothing to prove an unsealed kernel from but its compile, so an unsealed index is empty
    and an unsealed data file a miss: numba compiles the kernel again and writes it, sealed (once)."""
    import io

    cls, pickle = mod.IndexDataCacheFile, mod.pickle
    for attr in (
        "_load_index",
        "_load_data",
        "_save_index",
        "_save_data",
        "_dump",
        "_open_for_write",
    ):
        getattr(
            cls, attr
        )  # this numba-cuda's shape, or AttributeError: left unguarded, said by status()

    def _load_index(self):
        data = _or_miss(_numba_read, self._cache_path, self._index_name)
        if data is None:
            return {}
        f = io.BytesIO(data)
        if pickle.load(f) != self._version:
            return {}
        stamp, overloads = pickle.loads(f.read())
        return overloads if stamp == self._source_stamp else {}

    def _load_data(self, name):
        data = _or_miss(_numba_read, self._cache_path, name)
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

    def _save_index(self, overloads):
        head = pickle.dumps(self._version, protocol=-1)
        _write(self, self._index_name, head + self._dump((self._source_stamp, overloads)))

    def _save_data(self, name, data):
        _write(self, name, self._dump(data))

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


def install(env=None) -> dict[str, str]:
    """Guard JAX's persistent cache and CuPy's kernel cache in this process, now or as soon as each imports the
    module wrapped; never raises. Returns {module: state}. Off with ``JITWARDEN_LOAD_HOOKS=0``."""
    from jitwarden.model.settings import LOAD_HOOKS

    mods = (COMPILER_MODULE, CACHE_MODULE, CUPY_MODULE, NUMBA_MODULE)
    if not LOAD_HOOKS.on(os.environ if env is None else env):
        return dict.fromkeys(mods, f"{LOAD_HOOKS.name}=0")
    try:
        # JAX's compiler first: a cache that proves through _cache_write must never be guarded without it
        out = {COMPILER_MODULE: postimport.when_imported(COMPILER_MODULE, _patch_compiler)}
        out[CACHE_MODULE] = postimport.when_imported(CACHE_MODULE, _patch_cache)
        out[CUPY_MODULE] = postimport.when_imported(CUPY_MODULE, _patch_cupy)
        out[NUMBA_MODULE] = postimport.when_imported(NUMBA_MODULE, _patch_numba)
        return out
    except Exception as exc:
        return dict.fromkeys(mods, f"not installed ({type(exc).__name__}: {exc})")
