"""Stable public path ``TRITON_CACHE_MANAGER=jitwarden.guard:GuardedCacheManager``.

Users write this string into their environment, so it must keep working wherever the code lives;
the code is in ``jitwarden/runtime/guards/triton.py`` (ARCHITECTURE.md, "Stable public paths").
"""

from jitwarden.runtime.guards.triton import GuardedCacheManager

__all__ = ["GuardedCacheManager"]
