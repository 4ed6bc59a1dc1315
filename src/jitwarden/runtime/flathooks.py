"""What the load hooks of flat-file caches share (JAX's, CuPy's, numba-cuda's: one file an entry, one seal a dir;
stdlib only): the entry read before the tool could, the check against the dir's seal, the seal of what the tool
wrote, the refusal, the miss an error of jitwarden's own becomes, and the fallback of a hook that does not fit.
The guards themselves are :mod:`jitwarden.runtime.guards.jax`, ``.cupy`` and ``.numba``; where no hook is installed
(load hooks off, a tool of another shape: CuPy 13 and older), :mod:`jitwarden.runtime.flatseal` checks and seals at
start-up instead (only a dir named in the environment).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import Any

from jitwarden.model import kinds
from jitwarden.runtime import flatseal
from jitwarden.runtime.say import hook_warning


def recorder():
    """:mod:`jitwarden.runtime.record` (``run --record``): imported when a tool's hook first runs, not at activation."""
    from jitwarden.runtime import record

    return record


def served(root: str, name: str) -> None:
    """Log that this process was served ``name`` of ``root`` (``store/uselog``: what ``budget`` evicts by, and
    never while this process lives). Never raises."""
    from jitwarden.store import uselog

    uselog.used(root, name)


def sha256(data: bytes) -> str:
    import hashlib  # not at import: activation's warm path imports this module and never hashes

    return hashlib.sha256(data).hexdigest()


_failures: list[str] = []


def failed(exc: Exception, where: str = "load hook") -> None:
    """An error of jitwarden's own inside a hook: the entry is a miss or stays unsealed (never served unchecked),
    the tool goes on; said once per process for each place and type of error."""
    _failures.append(type(exc).__name__)
    hook_warning(
        f"{where} error ({type(exc).__name__}: {exc}); entries it could not check are compiled again",
        f"{where}:{type(exc).__name__}",
    )


def or_miss(read: Callable[..., bytes | None], *args: Any) -> bytes | None:
    """``read(*args)``: the bytes a hook hands the tool, or None (a miss: the tool compiles) where an error of
    jitwarden's own stopped the check (:func:`failed`), never raised into the tool."""
    try:
        return read(*args)
    except Exception as exc:
        failed(exc)
        return None


# ---------------------------------------------------------------- reading before the tool reads


def read_entry(kind: str, d: str, name: str, max_bytes: int) -> tuple[bytes, int] | None:
    """(bytes, ctime ns) of the entry file ``name`` of ``d``, read by the hook before the tool could: opened through
    the disk layer (never following a link, never blocking on a FIFO), a regular file of at most ``max_bytes``.
    None when absent, or when it is anything else: then refused (quarantined, a miss: the tool compiles it) with
    one line saying what was there, so a FIFO or a link to ``/dev/zero`` costs an ``open``, not the workload."""
    from jitwarden.store import reads

    path = os.path.join(d, name)
    try:
        fd, st = reads.open_regular(path)
    except FileNotFoundError:
        return None
    except PermissionError as exc:
        hook_warning(
            f"{kinds.tool(kind)} cache entry {path} cannot be read ({exc.strerror}); it is compiled again",
            key=f"unreadable:{path}",
        )
        return None
    except OSError as exc:  # a symlink (ELOOP), a FIFO, a device or a directory (NotRegularFile)
        what = "a symbolic link" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        refuse(kind, d, name, f"{name} is {what}, not a file {kinds.tool(kind)} wrote", "corrupt")
        return None
    try:
        data = reads.read_fd(fd, max_bytes, st.st_size) if st.st_size <= max_bytes else None
    finally:
        os.close(fd)
    if data is None or len(data) > max_bytes:
        why = f"{name} holds more than the {max_bytes >> 20} MiB jitwarden reads of such a file"
        refuse(kind, d, name, why, "corrupt")
        return None
    return data, st.st_ctime_ns


def dir_problem(kind: str, d: str) -> str | None:
    """Why seals in the cache dir ``d`` prove nothing to this process (another owner, writable by others: the trust
    rule of :mod:`jitwarden.store.trust`), said once; None for a dir of this user's own. In such a dir nothing is
    sealed and no lock is made, and every entry is a miss (the tool compiles it): never silently."""
    from jitwarden.store import trust

    try:
        st = os.lstat(d)
    except OSError as exc:
        return exc.strerror or str(exc)
    why = "a symbolic link" if stat.S_ISLNK(st.st_mode) else trust.untrusted(d, st)
    if why is not None:
        tool = kinds.tool(kind)
        hook_warning(
            f"{tool} cache dir {d} is {why}: its entries prove nothing to this process (uid {os.geteuid()}) and "
            f"are compiled again, and jitwarden writes nothing there. Fix: a dir of your own (mode 700), or "
            f"`chmod go-w {d}` when it is yours",
            key=f"untrusted:{d}",
        )
    return why


def check(kind: str, d: str, name: str, data: bytes, ctime_ns: int | None = None) -> str:
    """Whether the file ``name`` of ``d`` whose bytes the hook read are ``data`` is ``sealed`` (these are the sealed
    bytes), ``changed`` (it contradicts its seal: quarantined here, a miss) or ``unsealed``.

    ``ctime_ns``: the file's ctime as opened. A file of the sealed size not changed since the seal was written (its
    ctime older than the seal's authenticated time: nobody but root can set a ctime back) holds the sealed bytes,
    so a warm hit costs no hash; any other is hashed."""
    rec, at = flatseal.sealed_record(d, name)
    if rec is None:
        return "unsealed"
    if len(data) == rec.get("size") and (
        (ctime_ns is not None and at is not None and ctime_ns < at)
        or sha256(data) == rec.get("sha256")
    ):
        return "sealed"
    refuse(kind, d, name, f"{name} does not match its seal: changed since it was written")
    return "changed"


def seal_written(kind: str, d: str, name: str, expect: bytes) -> bool:
    """Seal the file ``name`` of ``d`` that the tool has just written when it holds ``expect`` (the bytes the tool
    compiled and handed over): read back, so a file swapped as it was written is never sealed."""
    from jitwarden.store.reads import read_bytes

    try:
        on_disk = read_bytes(
            os.path.join(d, name), max_bytes=len(expect) + 1, size_hint=len(expect)
        )
    except OSError:
        return False  # not written (the tool's size limits, eviction), or no regular file: nothing sealed
    if on_disk != expect:
        return False
    if flatseal.seal_file(kind, d, name, sha256(expect), len(expect), "load hook"):
        return True
    unsealable(kind, d)
    return False


def unsealable(kind: str, d: str) -> None:
    """Say once a run why the cache dir ``d`` cannot be sealed now: its entries are proven again at their next use."""
    why = flatseal.stuck(d)
    if why is not None:
        hook_warning(
            f"{kinds.tool(kind)} cache dir {d} cannot be sealed in this run, {why}; what this run writes "
            "there is proven again at its next use",
            key=f"stuck:{d}",
        )


def refuse(kind: str, d: str, name: str, why: str, code: str = "corrupt") -> bool:
    """Quarantine the file ``name`` of ``d`` (a miss: the tool compiles it again), with one warning line; whether
    it was moved (where it cannot be, the line says why)."""
    moved, line = flatseal.quarantine_file(kind, d, name, why, None, by="load", code=code)
    hook_warning(line)
    return moved


# ---------------------------------------------------------------- a hook that does not fit


def shape_why(kind: str, exc: Exception) -> tuple[str, str]:
    """(the tool and its release, why its hook did not fit): the words of a guard's ``refused`` line."""
    from jitwarden.runtime import hookshapes

    return f"{kinds.tool(kind)} {hookshapes.version_of(kind)}", f"{type(exc).__name__}: {exc}"


def not_guarded(kind: str, line: str) -> str:
    """``postimport``'s state for a hook that did not fit the tool as installed (:class:`hookshapes.ShapeError`, a
    missing attribute): the tool runs as it is, ``line`` says so, and what the start-up check would have done at
    activation (which left the kind to its hook) is done now, before the tool reads its cache."""
    hook_warning(line)
    if kinds.get(kind).partition == "file":  # the kinds flatseal checks at start-up: JAX's, CuPy's
        _check_now(kind)
    return f"not guarded: {line}"


def _check_now(kind: str) -> None:
    var = kinds.get(kind).var
    d = os.environ.get(var) if var else None
    if not d or not os.path.isdir(d) or os.path.islink(d):
        return
    try:
        for line in flatseal.check_root(kind, d, None):
            hook_warning(line)
    except Exception as exc:
        failed(exc, f"start-up check of the {kinds.tool(kind)} cache")
