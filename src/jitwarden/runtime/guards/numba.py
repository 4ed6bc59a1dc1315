"""numba-cuda's guard: its kernel cache unpickled only when its bytes are the sealed ones, sealed as numba writes
it (stdlib only; imported once numba-cuda imports its caching module, never numba itself).

numba-cuda's ``IndexDataCacheFile`` (0.30: ``<base>.nbi``, a pickled version, source stamp and overload index;
``<base>.<n>.nbc``, a pickled kernel) lies beside each source file in ``__pycache__`` or under ``NUMBA_CACHE_DIR``.
There is nothing to prove an unsealed kernel from but its compile, so an unsealed index is empty and an unsealed
data file a miss: numba compiles the kernel again and writes it, sealed (once). With no hook (a numba-cuda of
another shape) its cache is not checked, said in one line.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from jitwarden.runtime.flathooks import check, failed, not_guarded, seal_written, shape_why
from jitwarden.runtime.guards import NUMBA_CACHING

KIND = "numba"


class NumbaCacheDir:
    """One of numba-cuda's cache dirs (an ``IndexDataCacheFile``'s ``_cache_path``), guarded."""

    KIND = KIND

    def __init__(self, path: str) -> None:
        self._dir = path

    def check_read(self, name: str) -> bytes | None:
        """The bytes of numba-cuda's ``name`` when they are the sealed bytes; None when absent, unsealed (numba
        then compiles and writes it again, sealed) or changed since sealed (quarantined)."""
        from jitwarden.model import bounds
        from jitwarden.store.reads import read_bytes

        try:
            data = read_bytes(os.path.join(self._dir, name), max_bytes=bounds.NUMBA_FILE_MAX)
        except FileNotFoundError:
            return None
        return data if check(KIND, self._dir, name, data) == "sealed" else None

    def seal_write(self, name: str, data: bytes) -> None:
        """Seal ``name``, which numba has just written, when it holds ``data``."""
        try:
            seal_written(KIND, self._dir, name, data)
        except Exception as exc:  # left unsealed: compiled again at its next load
            failed(exc)


if TYPE_CHECKING:  # mypy holds the class to the protocol
    from jitwarden.runtime.guards import Guard

    _: type[Guard] = NumbaCacheDir


def patch(mod) -> None:
    """Replace the reads and writes of ``mod.IndexDataCacheFile`` (``numba.cuda.core.caching``): a file is unpickled
    only when its bytes are the sealed ones, and each is sealed as numba writes it. Each method is replaced by one
    that binds numba's own signature (:mod:`~jitwarden.runtime.hookshapes`); a save that fails here is numba's own
    save, unsealed."""
    import io

    from jitwarden.runtime import hookshapes

    cls, pickle = mod.IndexDataCacheFile, mod.pickle
    sigs = {
        attr: hookshapes.fit(
            getattr(cls, attr), hookshapes.target(NUMBA_CACHING, f"IndexDataCacheFile.{attr}")
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
            data = NumbaCacheDir(self._cache_path).check_read(self._index_name)
        except Exception as exc:
            failed(exc)
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
            data = NumbaCacheDir(self._cache_path).check_read(name)
        except Exception as exc:
            failed(exc)
            data = None
        if data is None:
            raise FileNotFoundError(name)  # numba's load() takes it for a file gone: a miss
        return pickle.loads(data)

    def _write(self, name: str, data: bytes) -> None:
        with self._open_for_write(os.path.join(self._cache_path, name)) as f:
            f.write(data)
        NumbaCacheDir(self._cache_path).seal_write(name, data)

    def _save_index(self, *args, **kwargs):
        try:
            overloads = hookshapes.bind(sigs["_save_index"], (self, *args), kwargs)["overloads"]
            head = pickle.dumps(self._version, protocol=-1)
            body = self._dump((self._source_stamp, overloads))
        except Exception as exc:
            failed(exc, "numba-cuda save hook")
            return orig["_save_index"](self, *args, **kwargs)
        _write(self, self._index_name, head + body)
        return None

    def _save_data(self, *args, **kwargs):
        try:
            a = hookshapes.bind(sigs["_save_data"], (self, *args), kwargs)
            name, body = a["name"], self._dump(a["data"])
        except Exception as exc:
            failed(exc, "numba-cuda save hook")
            return orig["_save_data"](self, *args, **kwargs)
        _write(self, name, body)
        return None

    cls._load_index, cls._load_data = _load_index, _load_data
    cls._save_index, cls._save_data = _save_index, _save_data


def refused(module: str, exc: Exception) -> str:
    """The state of numba-cuda's hook that did not fit: its cache is not checked, said once."""
    tool, why = shape_why(KIND, exc)
    return not_guarded(
        KIND,
        f"{tool}'s cache functions are not ones this version of jitwarden knows ({why}); its cache is not checked",
    )
