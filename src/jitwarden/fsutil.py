"""Small disk helpers shared by the scanner, the rebuild, seals and partitions (stdlib only).

Reads never follow a symlink; writes are atomic (temp file in the same directory,
then rename) and leave files readable like Triton's own.
"""

from __future__ import annotations

import json
import os

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_UMASK: list[int] = []


def read_nofollow(path: str, limit: int | None = None, size_hint: int = 0) -> bytes:
    """The file's bytes (at most ``limit``); OSError (ELOOP) when ``path`` is a symlink.

    ``size_hint``: the expected size, so a whole file usually takes one read (the guard's hit path).
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | _O_NOFOLLOW)
    try:
        if limit is not None:
            return os.read(fd, limit)
        chunks = []
        if size_hint:
            data = os.read(fd, size_hint + 1)
            if len(data) <= size_hint:
                return data
            chunks.append(data)
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


def umask() -> int:
    """The process umask, read once (reading it means setting it)."""
    if not _UMASK:
        old = os.umask(0o022)
        os.umask(old)
        _UMASK.append(old)
    return _UMASK[0]


def write_json_atomic(path: str, doc, prefix: str) -> str:
    """Write ``doc`` as JSON to ``path`` atomically; a crash leaves the old file or none, never half."""
    import tempfile  # off the warm activation path: only writers need it

    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=os.path.dirname(path))
    try:
        os.fchmod(fd, 0o666 & ~umask())  # readable like Triton's own files, not mkstemp's 0600
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, sort_keys=True)
        os.replace(tmp, path)
        return path
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def package_dir(name: str) -> str | None:
    """Directory of an installed top-level package, found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for loc in spec.submodule_search_locations or ():
        return loc
    return os.path.dirname(spec.origin) if spec.origin else None


def memo_dir(env=None) -> str:
    """Where jitwarden keeps memos and private roots: ``$JITWARDEN_HOME``, else ``${XDG_CACHE_HOME:-~/.cache}/jitwarden``."""
    env = os.environ if env is None else env
    if env.get("JITWARDEN_HOME"):
        return env["JITWARDEN_HOME"]
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jitwarden")
