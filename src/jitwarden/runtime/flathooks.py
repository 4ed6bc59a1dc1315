"""Load hooks for JAX's persistent cache: each entry checked as JAX reads it, sealed as JAX writes it, an unsealed
one proven before it is used (stdlib only; never imports JAX: patched as JAX imports itself, ARCHITECTURE.md,
"The runtime").

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
  compile time; on the CPU it is byte for byte stable): the same, the file is sealed as proven; another, the file
  is quarantined (another computation under this key: two functions named ``f`` share ``jit_f-<key>-cache``) and
  JAX writes the fresh one, sealed as written.

Where the hook is not installed (load hooks off, a JAX of another shape), :mod:`jitwarden.runtime.flatseal` checks
and seals at start-up instead (only a dir named in the environment).
"""

from __future__ import annotations

import os
import warnings

from jitwarden.runtime import flatseal, postimport

CACHE_MODULE = "jax._src.compilation_cache"
COMPILER_MODULE = "jax._src.compiler"
SUFFIX = "-cache"
_pending: dict[
    str, tuple[str, bytes]
] = {}  # cache key -> (its dir, the unsealed file's bytes): proof under way
_proven: dict[
    str, str
] = {}  # cache key -> "proven" | "refuted" (what the last proof of a key found)


def _sha256(data: bytes) -> str:
    import hashlib  # not at import: activation's warm path imports this module and never hashes

    return hashlib.sha256(data).hexdigest()


def _say(line: str) -> None:
    warnings.warn(f"jitwarden: {line}", stacklevel=3)


def _executable(data: bytes) -> bytes | None:
    """The serialized executable in a ``-cache`` file's bytes (after the compile time), inflated within its cap."""
    from jitwarden.formats import jaxexec

    inf = jaxexec.inflate((data,))
    if inf.data is None or inf.cut or len(inf.data) < jaxexec.TIME_BYTES:
        return None
    return inf.data[jaxexec.TIME_BYTES :]


class GuardedJaxCache:
    """JAX's cache object (an ``LRUCache`` or its ``VerificationCache``) with its reads checked and writes sealed."""

    def __init__(self, base, path: str) -> None:
        self._base = base
        self._dir = os.fspath(path)

    def __getattr__(self, attr):
        return getattr(self._base, attr)

    def get(self, key: str) -> bytes | None:
        data = self._base.get(key)
        if data is None or not key:
            return data
        name = f"{key}{SUFFIX}"
        rec = flatseal.sealed_files(self._dir).get(name)
        if rec is not None:
            if len(data) == rec.get("size") and _sha256(data) == rec.get("sha256"):
                return data  # exactly the sealed bytes
            self._refuse(name, f"{name} does not match its seal: changed since it was written")
            return None
        if postimport.status(COMPILER_MODULE) != "guarded":
            return self._first_sight(name, data)
        _pending[key] = (
            self._dir,
            data,
        )  # a miss: JAX compiles the module, _cache_write proves the file
        return None

    def _first_sight(self, name: str, data: bytes) -> bytes | None:
        """Where JAX's compiler could not be wrapped there is no proof: an unsealed file is judged by its adapter
        (another module's executable under this key, a damaged stream) and sealed as it is, as the start-up check
        does (:mod:`jitwarden.runtime.flatseal`)."""
        why = flatseal.unsound("jax", self._dir, name)
        if why is not None:
            self._refuse(name, why)
            return None
        flatseal.seal_file("jax", self._dir, name, _sha256(data), len(data), "first sight")
        return data

    def put(self, key: str, value: bytes) -> None:
        self._base.put(key, value)
        if key:
            self.seal_written(key, value)

    def seal_written(self, key: str, value: bytes) -> None:
        """Seal ``<key>-cache`` when it holds ``value`` (what JAX compiled and handed to ``put``)."""
        from jitwarden.store.fsutil import read_bytes

        name = f"{key}{SUFFIX}"
        try:
            on_disk = read_bytes(
                os.path.join(self._dir, name), max_bytes=len(value) + 1, size_hint=len(value)
            )
        except OSError:
            return  # not written (JAX's size limits, eviction) or no longer a regular file: nothing to seal
        if on_disk == value:
            flatseal.seal_file("jax", self._dir, name, _sha256(value), len(value), "load hook")

    def _refuse(self, name: str, why: str) -> None:
        line = flatseal.quarantine_file("jax", self._dir, name, why, None, by="load")
        _say(line or f"JAX cache entry {name} not used ({why}); it could not be quarantined")


def prove(key: str, fresh: bytes) -> str | None:
    """After JAX compiled ``key`` afresh (its serialized executable ``fresh``): judge the unsealed file that was a
    miss; "proven", "refuted", or None when no proof was under way for it."""
    got = _pending.pop(key, None)
    if got is None:
        return None
    d, data = got
    name = f"{key}{SUFFIX}"
    from jitwarden.formats import jaxexec

    old = _executable(data)
    if old == fresh or (
        old is not None and jaxexec.computes(old) == jaxexec.computes(fresh) is not None
    ):
        flatseal.seal_file("jax", d, name, _sha256(data), len(data), "first-use proof")
        _proven[key] = "proven"
    else:
        why = "a fresh compile of its key differs from it beyond debug info; replaced by the fresh one"
        line = flatseal.quarantine_file(
            "jax", d, name, why, None, by="load", code="not-reproducible"
        )
        _say(line or f"JAX cache entry {name} refuted ({why}); it could not be quarantined")
        _proven[key] = "refuted"
    return _proven[key]


def _patch_cache(mod) -> None:
    make = mod.get_file_cache

    def get_file_cache(path, *args, **kwargs):
        got = make(path, *args, **kwargs)
        if got is None:
            return got
        cache, where = got
        return GuardedJaxCache(cache, where), where

    get_file_cache.__wrapped__ = make  # type: ignore[attr-defined]
    mod.get_file_cache = get_file_cache
    cur = getattr(mod, "_cache", None)
    if cur is not None and not isinstance(
        cur, GuardedJaxCache
    ):  # made before the hook: guarded from now
        mod._cache = GuardedJaxCache(cur, cur._path)


def _patch_compiler(mod) -> None:
    write = mod._cache_write

    def _cache_write(
        cache_key, compile_time_secs, module_name, backend, executable, host_callbacks, *a, **kw
    ):
        if cache_key in _pending:
            try:
                ser = (
                    executable.serialize()
                    if hasattr(executable, "serialize")
                    else backend.serialize_executable(executable)
                )
            except Exception:
                ser = None
            if ser is not None:
                prove(cache_key, bytes(ser))
        return write(
            cache_key, compile_time_secs, module_name, backend, executable, host_callbacks, *a, **kw
        )

    _cache_write.__wrapped__ = write  # type: ignore[attr-defined]
    mod._cache_write = _cache_write


def wanted(env) -> bool:
    """Whether the hook is on and JAX is installed (found, not imported)."""
    import importlib.util

    from jitwarden.model.settings import LOAD_HOOKS

    if not LOAD_HOOKS.on(env):
        return False
    try:
        return importlib.util.find_spec("jax") is not None
    except (ImportError, ValueError):
        return False


def install(env=None) -> dict[str, str]:
    """Guard JAX's persistent cache in this process, now or as soon as JAX imports it; never raises. Returns
    {module: state}. Off with ``JITWARDEN_LOAD_HOOKS=0``."""
    from jitwarden.model.settings import LOAD_HOOKS

    if not LOAD_HOOKS.on(os.environ if env is None else env):
        return dict.fromkeys((CACHE_MODULE, COMPILER_MODULE), f"{LOAD_HOOKS.name}=0")
    try:
        # the compiler first: a cache that proves through _cache_write must never be installed without it
        out = {COMPILER_MODULE: postimport.when_imported(COMPILER_MODULE, _patch_compiler)}
        out[CACHE_MODULE] = postimport.when_imported(CACHE_MODULE, _patch_cache)
        return out
    except Exception as exc:
        return dict.fromkeys(
            (CACHE_MODULE, COMPILER_MODULE), f"not installed ({type(exc).__name__}: {exc})"
        )
