"""Stable public path ``TRITON_REMOTE_CACHE_BACKEND=jitwarden.remote:GuardedRemoteBackend``.

Users write this string into their environment, so it must keep working wherever the code lives;
the code is in ``jitwarden/runtime/remote.py`` (ARCHITECTURE.md, "Stable public paths").
"""

from jitwarden.runtime.remote import GuardedRemoteBackend

__all__ = ["GuardedRemoteBackend"]
