"""Activation's fleet hook (stdlib only, a few dict look-ups): wire the guarded remote cache, name what is unguarded.

With ``JITWARDEN_REMOTE=redis://…`` and the guard in effect, Triton's cache manager becomes
:class:`jitwarden.runtime.remote_manager.RemoteGuardedCacheManager` (the guard, then the signed remote
cache on a local miss) and ``TRITON_REMOTE_CACHE_BACKEND`` names the guarded backend, so Triton's
own ``RemoteCacheManager`` would use it too. TorchInductor's Redis caches have no hook to guard
them: when one is switched on, activation and ``doctor`` say so.
"""

from __future__ import annotations

from jitwarden.model.settings import REMOTE, REMOTE_MANAGER
from jitwarden.model.settings import REMOTE_BACKEND as BACKEND

INDUCTOR_REMOTE = (
    "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE",
    "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE",
    "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE",
    "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE",
)


def unguarded(env) -> list[str]:
    """Sentences about TorchInductor remote caches switched on in ``env``; torch offers no way to guard them."""
    from jitwarden.model.flags import parse_flag

    on = [v for v in INDUCTOR_REMOTE if parse_flag(env.get(v)) is True]
    if not on:
        return []
    return [
        f"{', '.join(on)} {'is' if len(on) == 1 else 'are'} on: TorchInductor's Redis caches are unguarded "
        "(values are unsigned and not namespaced by GPU or driver, and torch has no hook to check them); "
        "kernels they bring are loaded without jitwarden's checks in this process"
    ]


def wire(
    env, manager: str | None, guard: str, changes: dict, partitions: dict, warnings: list
) -> str | None:
    """The Triton cache manager in effect after wiring ``JITWARDEN_REMOTE``; adds to ``changes`` and ``warnings``."""
    warnings += unguarded(env)
    url = REMOTE.text(env) or ""
    if not url:
        return manager
    if manager not in (guard, REMOTE_MANAGER):
        warnings.append(
            f"{REMOTE.name} is set but TRITON_CACHE_MANAGER={manager} is kept: the remote cache is off"
        )
        return manager
    if "TRITON_CACHE_DIR" not in partitions:
        warnings.append(
            f"{REMOTE.name} is set but Triton's cache is not partitioned by fingerprint: "
            "the remote cache is off (remote entries are namespaced by the partition's fingerprint)"
        )
        return manager
    if not url.startswith(("redis://", "valkey://")):
        warnings.append(f"{REMOTE.name}={url!r} is not a redis:// URL: the remote cache is off")
        return manager
    if env.get("TRITON_CACHE_MANAGER") != REMOTE_MANAGER:
        changes["TRITON_CACHE_MANAGER"] = REMOTE_MANAGER
    else:
        changes.pop("TRITON_CACHE_MANAGER", None)  # inherited from a parent's activation: keep it
    if env.get("TRITON_REMOTE_CACHE_BACKEND") != BACKEND:
        changes["TRITON_REMOTE_CACHE_BACKEND"] = BACKEND
    return REMOTE_MANAGER
