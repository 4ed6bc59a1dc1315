"""Stable public path ``TRITON_CACHE_MANAGER=jitwarden.remote_manager:RemoteGuardedCacheManager``.

Users write this string into their environment, so it must keep working wherever the code lives;
the code is in ``jitwarden/runtime/remote_manager.py`` (ARCHITECTURE.md, "Stable public paths").
"""

from jitwarden.runtime.remote_manager import RemoteGuardedCacheManager

__all__ = ["RemoteGuardedCacheManager"]
