"""The guard plus a guarded remote cache: what activation installs when ``JITWARDEN_REMOTE`` is set.

``TRITON_CACHE_MANAGER=jitwarden.runtime.remote_manager:RemoteGuardedCacheManager``. The local
partition is asked first, through the guard (seal checked on every hit); only on a local
miss is the remote cache asked (:class:`jitwarden.runtime.remote.GuardedRemoteBackend`, every
value checked; a kernel entry is one value: one round trip, one signature, never a mix of two
writers' files), and what it returns is written through the guard's own ``put`` and
``put_group``, so it lands sealed like a local compile. A builder (writer role) stores
what it compiles. Like :mod:`jitwarden.runtime.guards.triton`, only Triton imports this module.
"""

from __future__ import annotations

import json

from jitwarden.formats import jsonlimits
from jitwarden.runtime import remote
from jitwarden.runtime.guards.triton import GuardedCacheManager
from jitwarden.runtime.guards.triton_verdicts import STANDALONE
from jitwarden.runtime.say import log
from jitwarden.store.reads import read_bytes


class RemoteGuardedCacheManager(GuardedCacheManager):
    """Local guarded cache first, then the signed remote cache; remote trouble is a local compile."""

    def __init__(self, key, override=False, dump=False):
        super().__init__(key, override=override, dump=dump)
        self._remote = None
        self._fetching = False
        if not self._plain and self._digest:
            backend = remote.GuardedRemoteBackend(key, self._digest)
            self._remote = backend if backend.enabled else None

    # ------------------------------------------------------------ kernels

    def get_group(self, filename: str):
        found = super().get_group(filename)
        if self._remote is None:
            return found
        st = self._remote._st
        if found is not None:
            st.count("local-hit")
            return found
        st.count("local-miss")
        try:
            if not self._fetch_group(filename):
                return None
        except Exception as exc:
            log.warning(
                "jitwarden: remote cache entry %s not used (%s: %s)",
                self.key,
                type(exc).__name__,
                exc,
            )
            return None
        return super().get_group(filename)

    def _fetch_group(self, filename: str) -> bool:
        grp = f"__grp__{filename}"
        files = self._remote.get_entry(filename)
        if not files or grp not in files:
            return False
        kids = jsonlimits.loads(files[grp]).get("child_paths")
        names = sorted(kids) if isinstance(kids, (list, dict)) else []
        if not names or set(names) | {grp} != set(files):
            return False  # an entry whose group does not list exactly its files: compile instead
        self._fetching = True
        try:
            paths = {n: self.put(files[n], n) for n in names}
            super().put_group(filename, paths)
        finally:
            self._fetching = False
        return True

    def put_group(self, filename: str, group):
        path = super().put_group(filename, group)
        if self._remote is not None and self._remote.writer and not self._fetching:
            try:
                files = {
                    name: read_bytes(p, max_bytes=remote.MAX_VALUE) for name, p in group.items()
                }  # what the server takes
                files[f"__grp__{filename}"] = json.dumps({"child_paths": sorted(group)}).encode()
                self._remote.put_entry(filename, files)
            except OSError as exc:
                log.warning("jitwarden: remote cache: entry %s not stored (%s)", self.key, exc)
        return path

    # ------------------------------------------------------------ launchers, autotune records

    def get_file(self, filename):
        found = super().get_file(filename)
        if found is not None or self._remote is None or not filename.endswith(STANDALONE):
            return found
        got = self._remote.get([filename])
        if filename not in got:
            return None
        self._fetching = True
        try:
            return self.put(got[filename], filename)
        finally:
            self._fetching = False

    def put(self, data, filename, binary=True) -> str:
        path = super().put(data, filename, binary)
        if (
            self._remote is not None
            and self._remote.writer
            and not self._fetching
            and filename.endswith(STANDALONE)
        ):
            self._remote.put(filename, data if isinstance(data, bytes) else str(data).encode())
        return path
