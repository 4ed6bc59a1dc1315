"""JAX's guard: its persistent cache checked as JAX reads it, sealed as it writes it, an unsealed entry proven by
the compile its miss makes (stdlib only; imported once JAX imports the module wrapped, never JAX itself).

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

Where the hook is not installed, :mod:`jitwarden.runtime.flatseal` checks and seals at start-up instead.
"""

from __future__ import annotations

import os
import stat
import time
from typing import TYPE_CHECKING

from jitwarden.runtime import flatseal, postimport
from jitwarden.runtime.flathooks import (
    check,
    dir_problem,
    failed,
    not_guarded,
    or_miss,
    read_entry,
    recorder,
    refuse,
    seal_written,
    served,
    sha256,
    shape_why,
    unsealable,
)
from jitwarden.runtime.guards import JAX_CACHE, JAX_COMPILER
from jitwarden.runtime.say import hook_warning

KIND = "jax"
SUFFIX = "-cache"
_pending: dict[str, tuple[GuardedJaxCache, bytes]] = {}
"""cache key -> (its cache, the unsealed file's bytes): a proof under way, settled when JAX has compiled the key."""


def _executable(data: bytes, size: int) -> bytes | None:
    """The serialized executable in a ``-cache`` file's bytes (after the compile time), inflated to at most ``size``
    bytes (the fresh executable's: one that inflates past it is another anyway, and costs no more than it)."""
    from jitwarden.formats import jaxexec

    inf = jaxexec.inflate((data,), cap=size + jaxexec.TIME_BYTES)
    if inf.data is None or inf.cut or len(inf.data) < jaxexec.TIME_BYTES:
        return None
    return inf.data[jaxexec.TIME_BYTES :]


class GuardedJaxCache:
    """JAX's file cache (``jax._src.lru_cache.LRUCache``; inside a ``VerificationCache`` where JAX makes one) with
    its reads checked before JAX could read and its writes sealed, never through a link (a :class:`Prover`)."""

    KIND = KIND

    def __init__(self, base, path: str) -> None:
        self._base = base
        self._dir = os.fspath(path)
        self._untrusted = dir_problem(KIND, self._dir)

    def __getattr__(self, attr):
        return getattr(self._base, attr)

    def get(self, key: str) -> bytes | None:
        if not key:
            return self._base.get(key)  # JAX's own ValueError
        return or_miss(
            self.check_read, key
        )  # never into JAX: a miss, JAX compiles (the result right)

    def check_read(self, name: str) -> bytes | None:
        """The bytes of the cache key ``name``'s file when they are the sealed ones; else None (a miss)."""
        from jitwarden.model import (
            bounds,  # here: the warm activation imports this module, not bounds
        )

        file = f"{name}{SUFFIX}"
        got = read_entry(KIND, self._dir, file, bounds.JAX_ENTRY_MAX)
        if got is None:
            return None
        data, ctime = got
        if self._untrusted is not None:
            return None  # proves nothing here: JAX compiles, and its put finds the file there
        state = check(KIND, self._dir, file, data, ctime)
        if state == "sealed":
            self._touch(name)
            served(self._dir, file)
            if (rec := recorder()).ON:
                rec.hit(KIND, name, name.rsplit("-", 1)[0])
            return data  # exactly the sealed bytes
        if state == "changed":
            return None
        if postimport.status(JAX_COMPILER) != "guarded":
            return self._first_sight(file, data)
        _pending[name] = (
            self,
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
                failed(exc, "JAX cache atime")

    def put(self, key: str, value: bytes) -> None:
        if not key or self._untrusted is not None:
            return self._base.put(key, value)
        return self.seal_write(key, value)

    def seal_write(self, name: str, data: bytes) -> None:
        """Write the cache key ``name``'s file as JAX would (never through a link, never over an entry), sealed."""
        file = f"{name}{SUFFIX}"
        path = os.path.join(self._dir, file)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            failed(exc, "JAX cache write")
            return
        if st is not None:
            if stat.S_ISREG(st.st_mode):
                return  # JAX writes nothing over an entry that exists
            if not refuse(KIND, self._dir, file, f"{file} is not a regular file", "corrupt"):
                return  # it could not be moved: nothing is written through it
        if getattr(self._base, "eviction_enabled", False):
            self._base.put(name, data)  # JAX's eviction and atime, under its lock
        else:
            try:  # the one atomic writer: a temporary beside it, renamed by the dir's fd, never through a link
                from jitwarden.store.atomic import write_bytes_atomic

                write_bytes_atomic(path, data)
            except OSError as exc:
                failed(exc, "JAX cache write")
                return
        try:
            seal_written(KIND, self._dir, file, data)
        except Exception as exc:  # left unsealed: proven at its next load
            failed(exc)
        return

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
            refuse(KIND, self._dir, name, why)
            return None
        flatseal.seal_file(KIND, self._dir, name, sha256(data), len(data), "first sight")
        return data

    def prove(self, name: str, data: bytes, fresh: bytes) -> str:
        """After JAX compiled the key ``name`` afresh (its serialized executable ``fresh``): judge the unsealed file
        whose bytes ``data`` were a miss; "proven" (sealed) or "refuted" (quarantined)."""
        from jitwarden.formats import jaxexec

        file = f"{name}{SUFFIX}"
        old = _executable(data, len(fresh))
        if old == fresh or (
            old is not None and jaxexec.computes(old) == jaxexec.computes(fresh) is not None
        ):
            if not flatseal.seal_file(
                KIND, self._dir, file, sha256(data), len(data), "first-use proof"
            ):
                unsealable(KIND, self._dir)
            return "proven"
        why = "a fresh compile of its key differs from it beyond debug info; replaced by the fresh one"
        refuse(KIND, self._dir, file, why, "not-reproducible")
        return "refuted"


if TYPE_CHECKING:  # mypy holds the class to the protocol
    from jitwarden.runtime.guards import Prover

    _: type[Prover] = GuardedJaxCache


def prove(key: str, fresh: bytes) -> str | None:
    """After JAX compiled ``key`` afresh (its serialized executable ``fresh``): judge the unsealed file that was a
    miss; "proven", "refuted", or None when no proof was under way for it."""
    got = _pending.pop(key, None)
    if got is None:
        return None
    cache, data = got
    return cache.prove(key, data, fresh)


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


def patch_cache(mod) -> None:
    from jitwarden.runtime import hookshapes

    make = mod.get_file_cache
    hookshapes.fit(make, hookshapes.target(JAX_CACHE, "get_file_cache"))

    def get_file_cache(*args, **kwargs):
        got = make(*args, **kwargs)
        try:
            return _guarded_pair(got)
        except Exception as exc:  # JAX's cache as it made it, its entries checked at start-up only
            failed(exc, "JAX cache hook")
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
        hook_warning(
            f"JAX's cache object {type(cache).__name__} is not one this version of jitwarden knows; "
            "its entries are checked at start-up only",
            key="jax-cache-class",
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


def patch_compiler(mod) -> None:
    """Wrap JAX's ``_cache_write`` (called after every compile, before JAX's thresholds decide whether to write):
    its arguments found by binding its own signature, whatever the release (0.10 passes ``host_callbacks``, 0.11
    does not), and passed through unchanged."""
    from jitwarden.runtime import hookshapes

    write = mod._cache_write
    sig = hookshapes.fit(write, hookshapes.target(JAX_COMPILER, "_cache_write"))

    def _cache_write(*args, **kwargs):
        try:
            a = hookshapes.bind(sig, args, kwargs)
            if (rec := recorder()).ON:
                key = a["cache_key"]
                rec.compiled(
                    KIND, key, a.get("module_name") or key, a.get("compile_time_secs") or 0.0
                )
            _prove_compiled(a["cache_key"], a.get("backend"), a["executable"])
        except Exception as exc:  # the file stays unsealed (and unused): proven at its next load
            failed(exc, "JAX compile hook")
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


def refused(module: str, exc: Exception) -> str:
    """The state of a JAX hook that did not fit (:func:`~jitwarden.runtime.flathooks.not_guarded`): without the
    compile hook unsealed entries are judged as read; without the cache hook the cache is checked at start-up."""
    tool, why = shape_why(KIND, exc)
    if module == JAX_COMPILER:
        line = (
            f"{tool}'s compile hook is not one this version of jitwarden knows ({why}); its unsealed cache "
            "entries are judged as they are read, not proven by a compile"
        )
    else:
        line = (
            f"{tool}'s cache functions are not ones this version of jitwarden knows ({why}); its cache is "
            "checked at start-up only"
        )
    return not_guarded(KIND, line)
