"""The test suite's sandbox: every location variable pointed into a test's own directory, and a digest of
the real home and default locations to prove the suite wrote nothing there (issue 23, item 2).

The variables come from :data:`jitwarden.env.locations.LOCATION_VARS`, the places watched from the adapters'
own root discovery and jitwarden's memo and config dirs for the caller's environment: a new cache kind or
setting is sandboxed and watched without an edit here.
"""

from __future__ import annotations

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
    from jitwarden.store.paths import memo_dir

    env = dict(env)
    places = [r.path for r in adapters.discover_roots(env)] + [memo_dir(env), keys.config_dir(env)]
    places += [locations.default_base(k.name, env) for k in kinds.partitioned(kinds.DIR)]
    return sorted({os.path.abspath(p) for p in places})


def snapshot(places, shallow=(), limit: int = 200_000) -> dict[str, dict[str, str]]:
    """{place: {path: what it is}} of every item under each place: its type, mode, size and mtime, links not
    followed (at most ``limit`` items a place); ``shallow`` places one level deep, names and types only (a home's
    own top-level names: a shell's history file changes on its own)."""
    out = {}
    for top in list(places) + list(shallow):
        seen: dict[str, str] = {}
        deep = top not in shallow
        todo = [top]
        while todo and len(seen) < limit:
            d = todo.pop()
            try:
                with os.scandir(d) as it:
                    items = sorted(it, key=lambda e: e.name)
            except OSError as exc:
                seen[d] = f"unreadable ({exc.errno})"
                continue
            for e in items:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                is_dir = stat.S_ISDIR(st.st_mode)
                if not deep:
                    seen[e.path] = f"type {stat.S_IFMT(st.st_mode):o}"
                    continue
                seen[e.path] = (
                    f"mode {st.st_mode:o}"
                    if is_dir
                    else f"mode {st.st_mode:o}, {st.st_size} bytes, mtime {st.st_mtime_ns}"
                )
                if is_dir:
                    todo.append(e.path)
        out[top] = seen
    return out


def changes(before: dict, after: dict) -> list[str]:
    """One line per item that differs between two :func:`snapshot` of the same places: its path, and
    ``added``, ``removed`` or ``changed``."""
    out = []
    for top, was in before.items():
        now = after.get(top, {})
        for path in sorted(set(was) | set(now)):
            if path not in now:
                out.append(f"{path} (removed)")
            elif path not in was:
                out.append(f"{path} (added)")
            elif was[path] != now[path]:
                out.append(f"{path} (changed: {was[path]} -> {now[path]})")
    return out
