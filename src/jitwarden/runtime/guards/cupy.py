"""CuPy's guard: its kernel cache (CuPy 14 and later) checked as CuPy loads it, sealed as it saves it, an unsealed
entry proven by the compile its miss makes (stdlib only; imported once CuPy imports its compiler, never CuPy itself).

Where the hook is not installed (load hooks off, CuPy 13 and older), :mod:`jitwarden.runtime.flatseal` checks and
seals at start-up instead.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

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
    shape_why,
)
from jitwarden.runtime.guards import CUPY_COMPILER
from jitwarden.runtime.hookshapes import (
    CUPY_CACHE as BACKEND_MODULE,  # imported by the patch anyway
)

KIND = "cupy"


class GuardedCupyBackend:
    """CuPy's disk kernel-cache backend (``cupy.cuda._compiler_cache.DiskKernelCacheBackend``, CuPy 14: what
    ``compiler._compile_with_cache_cuda`` loads and saves through) with its loads checked and saves sealed.

    ``load(name)`` reads the file itself, before CuPy could (:func:`~jitwarden.runtime.flathooks.read_entry`: never
    through a link, never blocking): sealed bytes are handed over as CuPy's payload (the file less its SHA-1
    header); bytes that contradict the seal are quarantined (a miss). An unsealed file is a miss that proves it:
    CuPy compiles the source again, with the same options and arch (NVRTC, or nvcc as the entry was built), and
    ``save`` compares what it made with the file's payload (:meth:`prove`): the same, the file is sealed (CuPy
    rewrites the same bytes); another (a cubin of other code under this key: two sources with the name expression
    ``scale<float>``), it is quarantined first, with a line. Both bind CuPy's own signatures
    (:mod:`~jitwarden.runtime.hookshapes`) and pass every argument through."""

    KIND = KIND

    def __init__(self, base) -> None:
        from jitwarden.runtime import hookshapes

        self._base = base
        self._dir = os.fspath(base._cache_dir)
        self._pending: dict[str, bytes] = {}  # name -> the unsealed file's payload: proof under way
        self._missed: dict[
            str, float
        ] = {}  # name -> when its load missed: a save's compile time, recorded
        cls = type(base)
        self._load_sig = hookshapes.fit(
            cls.load, hookshapes.target(BACKEND_MODULE, "DiskKernelCacheBackend.load")
        )
        self._save_sig = hookshapes.fit(
            cls.save, hookshapes.target(BACKEND_MODULE, "DiskKernelCacheBackend.save")
        )
        self._untrusted = dir_problem(KIND, self._dir)

    def __getattr__(self, attr):
        return getattr(self._base, attr)

    def load(self, *args, **kwargs) -> bytes | None:
        from jitwarden.runtime import hookshapes

        try:
            name = hookshapes.bind(self._load_sig, (self._base, *args), kwargs)["name"]
        except Exception as exc:  # a call of another shape: a miss, CuPy compiles
            failed(exc, "CuPy load hook")
            return None
        return or_miss(
            self.check_read, name
        )  # never into CuPy: a miss, CuPy compiles (the result right)

    def check_read(self, name: str) -> bytes | None:
        """CuPy's payload of the entry ``name`` when its file holds the sealed bytes; else None (a miss)."""
        from jitwarden.model import bounds

        got = read_entry(KIND, self._dir, name, bounds.CUPY_ENTRY_MAX)
        if got is None or self._untrusted is not None:
            self._missed[name] = time.perf_counter()
            return None
        data, ctime = got
        state = check(KIND, self._dir, name, data, ctime)
        payload = data[bounds.CUPY_HASH_LEN :]
        if state == "sealed":
            served(self._dir, name)
            if (rec := recorder()).ON:
                rec.hit(KIND, name, name)
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
            failed(exc, "CuPy save hook")
            return self._base.save(*args, **kwargs)
        began = self._missed.pop(name, None)
        if (rec := recorder()).ON:
            rec.compiled(KIND, name, name, time.perf_counter() - began if began else 0.0)
        self.prove(name, cubin)
        self._base.save(*args, **kwargs)
        if self._untrusted is not None:
            return None
        self.seal_write(name, cubin)
        return None

    def prove(self, name: str, fresh: bytes) -> None:
        """Before CuPy saves ``fresh`` (its compile of the entry ``name``): an unsealed file this compile proves
        stays for CuPy to rewrite; one holding another cubin is quarantined first, with a line."""
        old = self._pending.pop(name, None)
        try:
            if old is not None and old != fresh and self._untrusted is None:
                refuse(
                    KIND,
                    self._dir,
                    name,
                    "CuPy's compile of its source now makes another cubin; replaced by the fresh one",
                    "not-reproducible",
                )
        except Exception as exc:
            failed(exc)

    def seal_write(self, name: str, data: bytes) -> None:
        """Seal the entry ``name`` CuPy saved when its file holds ``data`` (the cubin) under CuPy's header."""
        try:
            seal_written(KIND, self._dir, name, cupy_file(data))
        except Exception as exc:  # left unsealed: proven at its next load
            failed(exc)


if TYPE_CHECKING:  # mypy holds the class to the protocol
    from jitwarden.runtime.guards import Prover

    _: type[Prover] = GuardedCupyBackend


def cupy_file(payload: bytes) -> bytes:
    """The bytes CuPy writes for ``payload``: its SHA-1 in hex, then the payload (``formats/cupyentry``)."""
    import hashlib

    return hashlib.sha1(payload, usedforsecurity=False).hexdigest().encode("ascii") + payload


def patch(mod) -> None:
    """Guard CuPy's disk backend in ``mod`` (``cupy.cuda.compiler``), and any disk backend set later."""
    from jitwarden.runtime import hookshapes

    backend = mod._kernel_cache_backend
    if not hasattr(backend, "_cache_dir"):
        raise TypeError(f"kernel cache backend {type(backend).__name__} is not CuPy's disk backend")
    setter = mod._set_kernel_cache_backend
    sig = hookshapes.fit(setter, hookshapes.target(CUPY_COMPILER, "_set_kernel_cache_backend"))
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
            failed(exc, "CuPy backend hook")
        return setter(*args, **kwargs)

    _set_kernel_cache_backend.__wrapped__ = setter  # type: ignore[attr-defined]
    mod._set_kernel_cache_backend = _set_kernel_cache_backend


def refused(module: str, exc: Exception) -> str:
    """The state of CuPy's hook that did not fit: its cache checked at start-up only, said once."""
    tool, why = shape_why(KIND, exc)
    return not_guarded(
        KIND,
        f"{tool}'s cache functions are not ones this version of jitwarden knows ({why}); its cache is "
        "checked at start-up only",
    )
