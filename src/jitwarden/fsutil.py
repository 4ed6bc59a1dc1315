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


# --- runtime readers (activation, memo, partition info, guard): regular files only, never blocking ---
# Kept apart from the helpers above so the hostile-cache branches merge cleanly; stdlib only.

_O_RUNTIME = os.O_RDONLY | os.O_CLOEXEC | _O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)


def open_regular(path: str, *, dir_fd: int | None = None) -> int:
    """An fd of the regular file at ``path``: never through a symlink, never blocking on a FIFO or device.

    OSError (ELOOP for a symlink, EINVAL for anything that is not a regular file).
    """
    import errno
    import stat

    fd = os.open(path, _O_RUNTIME, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int, limit: int, size_hint: int = 0) -> bytes:
    """At most ``limit`` + 1 bytes of ``fd`` (the extra byte tells the caller it is over the limit)."""
    chunks, left = [], limit + 1
    want = min(left, size_hint + 1) if size_hint else min(left, 1 << 16)
    while left > 0:
        b = os.read(fd, min(left, max(want, 1)))
        if not b:
            break
        chunks.append(b)
        left -= len(b)
        want = 1 << 20
    return b"".join(chunks)


def read_regular(path: str, limit: int, *, dir_fd: int | None = None, size_hint: int = 0) -> bytes:
    """The bytes of the regular file at ``path``; OSError (EFBIG) when it holds more than ``limit``."""
    import errno

    fd = open_regular(path, dir_fd=dir_fd)
    try:
        data = read_fd(fd, limit, size_hint)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"more than {limit} bytes", path)
    return data


def load_json_small(path: str, limit: int = 1 << 20, *, dir_fd: int | None = None):
    """The JSON document in the regular file at ``path``; ValueError for anything unparseable
    (too big, too deep, not UTF-8), OSError when it cannot be read as a regular file."""
    raw = read_regular(path, limit, dir_fd=dir_fd)
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise ValueError(str(exc)) from None
