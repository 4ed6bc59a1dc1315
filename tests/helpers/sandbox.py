"""The test suite's sandbox: every location variable pointed into a test's own directory, and a digest of
the real home and default locations to prove the suite wrote nothing there (issue 23, item 2).

The variables come from :data:`jitwarden.env.locations.LOCATION_VARS`, the places watched from the adapters'
own root discovery and jitwarden's memo and config dirs for the caller's environment: a new cache kind or
setting is sandboxed and watched without an edit here.
"""

from __future__ import annotations

import hashlib
import os
import stat

from jitwarden import adapters
from jitwarden.env import locations
from jitwarden.model import kinds

CLEARED_PREFIXES = (
    "JITWARDEN_",
    "TRITON_",
    "TORCHINDUCTOR_",
    "VLLM_",
    "CUDA_CACHE_",
    "FLASHINFER_",
    "DG_",
)
"""Settings of jitwarden and of the tools it guards: a caller's ``JITWARDEN_REMOTE`` or ``TRITON_CACHE_MANAGER``
must not reach a test (a test that needs one sets it)."""


def sandbox_env(base: str, env=os.environ, tmpdir: str | None = None) -> dict[str, str]:
    """``env`` with every location variable inside ``base`` (created) and every tool setting cleared: the
    location variables that have a default under HOME, the temp dir or XDG are unset, so each tool falls back
    to its own default, now inside ``base``. ``tmpdir``: the temp dir to use instead of ``<base>/tmp``."""
    home = os.path.join(base, "home")
    placed = {
        "HOME": home,
        "TMPDIR": tmpdir or os.path.join(base, "tmp"),
        "XDG_CACHE_HOME": os.path.join(home, ".cache"),
        "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "XDG_DATA_HOME": os.path.join(home, ".local", "share"),
        "XDG_STATE_HOME": os.path.join(home, ".local", "state"),
        "XDG_RUNTIME_DIR": os.path.join(base, "run"),
    }
    for var, path in placed.items():
        os.makedirs(
            path, mode=0o755 if var == "TMPDIR" else 0o700, exist_ok=True
        )  # TMPDIR: reachable by nobody
    out = {
        k: v
        for k, v in env.items()
        if not k.startswith(CLEARED_PREFIXES) and k not in dict(locations.LOCATION_VARS)
    }
    out.update(placed)
    return out


def watched_places(env) -> list[str]:
    """Where the suite could write for a user with ``env``: every root each adapter finds there, jitwarden's
    memo and config dirs, the guard's shared-memory fallback, and the top of HOME and its ``.cache``."""
    from jitwarden.ops import keys
    from jitwarden.store.fsutil import memo_dir

    env = dict(env)
    places = [r.path for r in adapters.discover_roots(env)] + [memo_dir(env), keys.config_dir(env)]
    places += [locations.default_base(k.name, env) for k in kinds.partitioned(kinds.DIR)]
    return sorted({os.path.abspath(p) for p in places})


def digest(places, shallow=(), limit: int = 200_000) -> dict[str, str]:
    """{place: digest of its tree}: every name, type, size, mode and mtime, links not followed; ``shallow``
    places are digested one level deep, names and types only (a home's own top-level names)."""
    out = {}
    for top in list(places) + list(shallow):
        h, n = hashlib.sha256(), 0
        deep = top not in shallow
        todo = [top]
        while todo and n < limit:
            d = todo.pop()
            try:
                with os.scandir(d) as it:
                    items = sorted(it, key=lambda e: e.name)
            except OSError as exc:
                h.update(f"{d}: {exc.errno}\n".encode())
                continue
            for e in items:
                n += 1
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                is_dir = stat.S_ISDIR(st.st_mode)
                if not deep:  # a home's top: which names there are (a shell's history file changes on its own)
                    h.update(f"{e.path}\0{stat.S_IFMT(st.st_mode)}\n".encode())
                    continue
                h.update(
                    f"{e.path}\0{st.st_mode:o}\0{0 if is_dir else st.st_size}\0"
                    f"{0 if is_dir else st.st_mtime_ns}\n".encode()
                )
                if is_dir and deep:
                    todo.append(e.path)
        out[top] = h.hexdigest()
    return out
