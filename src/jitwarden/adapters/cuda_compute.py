"""CUDA compute cache adapter: the driver's PTX JIT cache, ``$CUDA_CACHE_PATH`` or ``~/.nv/ComputeCache`` (stdlib only).

The driver JIT-compiles PTX for which an application carries no matching cubin and keeps
the result here (CUDA Programming Guide, "CUDA Environment Variables": ``CUDA_CACHE_PATH``,
default ``~/.nv/ComputeCache`` on Linux; ``CUDA_CACHE_MAXSIZE`` in bytes, default 1 GiB on
desktop/server platforms and 256 MiB on embedded ones, at most 4 GiB; ``CUDA_CACHE_DISABLE=1``
turns it off). The guide also says the cache is invalidated when the driver is upgraded.

The files are the driver's own, opaque format: an ``index`` file and hashed files in
one-hex-digit subdirectories. What jitwarden can tell, and how:

- size against ``CUDA_CACHE_MAXSIZE`` (a root finding: near or over it the driver evicts,
  and JIT work is redone: thrashing), and ``CUDA_CACHE_DISABLE=1`` (nothing here is read);
- written under another driver: a file whose mtime is older than the installed driver's
  own files (``libcuda.so.1``'s mtime, the kernel module's build date in
  ``/proc/driver/nvidia/version``) was certainly written by an earlier driver, which the
  driver's invalidation makes dead weight. A file written after that moment may still be
  from an older driver (a driver installed long after it was built): not flagged;
- unsafe permissions and symlinks, unreadable files.

What it cannot tell: which GPU or PTX an entry belongs to, or whether its bytes are intact
(no checksum is readable without the driver's format).
"""

from __future__ import annotations

import os
import re
import time

from ..findings import Finding
from ..layout import is_reserved
from ..model import CacheRoot, Entry, Judge
from ._base import (
    expand_partitions,  # noqa: F401 - part of this adapter's interface
    survey,
    survey_findings,
)
from ._base import root_findings as _root_findings

KIND = "cuda-compute"
MIB = 1 << 20
DEFAULT_MAXSIZE = 1 << 30
EMBEDDED_MAXSIZE = 256 * MIB
MAX_MAXSIZE = 4 << 30
NEAR = 0.9
LIBCUDA_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "/usr/lib64/libcuda.so.1",
    "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
    "/usr/local/nvidia/lib64/libcuda.so.1",
    "/usr/lib/wsl/lib/libcuda.so.1",
    "/usr/lib/libcuda.so.1",
)
PROC_VERSION = "/proc/driver/nvidia/version"
_HEX = re.compile(r"^[0-9a-fA-F]+$")
_MODULE_DATE = re.compile(r"Kernel Module\s+(\S+)\s+(\w{3} \w{3}\s+\d+ \d\d:\d\d:\d\d \w+ \d{4})")

# ---------------------------------------------------------------- roots


def cache_path(env=os.environ) -> tuple[str, str]:
    from .. import locations

    if env.get("CUDA_CACHE_PATH"):
        return os.path.expanduser(env["CUDA_CACHE_PATH"]), "CUDA_CACHE_PATH"
    return os.path.join(locations.home(env), ".nv", "ComputeCache"), "default"


def discover_roots(env=os.environ) -> list[CacheRoot]:
    """``$CUDA_CACHE_PATH`` when set, and ``~/.nv/ComputeCache``; existing dirs only."""
    from .. import locations

    cands = [cache_path(env)]
    if cands[0][1] != "default":
        cands.append((os.path.join(locations.home(env), ".nv", "ComputeCache"), "default"))
    out, seen = [], set()
    for p, src in cands:
        p = os.path.abspath(p)
        if os.path.isdir(p) and os.path.realpath(p) not in seen:
            seen.add(os.path.realpath(p))
            out.append(CacheRoot(KIND, p, src))
    return out


def looks_like_root(path: str) -> bool:
    """A dir named ``ComputeCache``, or one holding the driver's ``index`` file beside one-hex-digit dirs."""
    if os.path.basename(os.path.normpath(path)) == "ComputeCache":
        return True
    if not os.path.isfile(os.path.join(path, "index")):
        return False
    try:
        with os.scandir(path) as it:
            return any(len(e.name) == 1 and _HEX.match(e.name) and e.is_dir(follow_symlinks=False) for e in it)
    except OSError:
        return False


def list_entry_names(root: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Every file under the root's subdirectories (``a/3/<hash>``); top-level files (``index``) are the root's own."""
    names, strays = [], []
    with os.scandir(root) as it:
        tops = sorted((e.name, e.is_dir(follow_symlinks=False), e.is_symlink()) for e in it if not is_reserved(e.name))
    for name, is_dir, is_link in tops:
        if is_link:
            names.append(name)  # judged (unsafe), never followed
        elif is_dir:
            stack = [name]
            while stack:
                rel = stack.pop()
                try:
                    with os.scandir(os.path.join(root, rel)) as it:
                        for e in it:
                            sub = f"{rel}/{e.name}"
                            if e.is_dir(follow_symlinks=False) and sub.count("/") < 8:
                                stack.append(sub)
                            else:
                                names.append(sub)
                except OSError as exc:
                    strays.append((rel, f"cannot list: {exc.strerror}"))
        else:
            strays.append((name, "driver index"))
    names.sort()
    return names, strays


def _tree_bytes(path: str) -> int:
    total, stack = 0, [path]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                for e in it:
                    if d == path and is_reserved(e.name):
                        continue  # jitwarden's own quarantine and partitions are not the driver's
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.is_file(follow_symlinks=False):
                        total += e.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total


def is_embedded() -> bool:
    return os.path.exists("/etc/nv_tegra_release")


def maxsize(env=os.environ) -> tuple[int, str]:
    """(bytes, where it came from) of the cache limit the driver applies in ``env``."""
    raw = env.get("CUDA_CACHE_MAXSIZE")
    if raw:
        try:
            val = int(raw)
            if val > MAX_MAXSIZE:
                return MAX_MAXSIZE, f"CUDA_CACHE_MAXSIZE={raw}, capped at the 4 GiB maximum"
            if val >= 0:
                return val, f"CUDA_CACHE_MAXSIZE={raw}"
        except ValueError:
            pass
    if is_embedded():
        return EMBEDDED_MAXSIZE, "default for embedded platforms"
    return DEFAULT_MAXSIZE, "default for desktop/server platforms"


def _mib(n: int) -> str:
    return f"{n / MIB:.1f} MiB"


def size_findings(total: int, env=os.environ) -> list[Finding]:
    """Root findings about the driver's settings: disabled, or size at or near its limit."""
    out = []
    if env.get("CUDA_CACHE_DISABLE") == "1":
        out.append(Finding("stale", f"CUDA_CACHE_DISABLE=1 is set: the driver neither reads nor writes this cache, "
                                    f"its {_mib(total)} are dead weight here"))
        return out
    limit, why = maxsize(env)
    if limit and total >= limit:
        out.append(Finding("stale", f"thrashing: the cache holds {_mib(total)}, at or over its {_mib(limit)} limit ({why}); "
                                    "the driver evicts entries and JIT-compiles them again: raise CUDA_CACHE_MAXSIZE "
                                    "(at most 4 GiB)"))
    elif limit and total >= NEAR * limit:
        out.append(Finding("stale", f"near its limit: the cache holds {_mib(total)} of {_mib(limit)} ({why}); "
                                    "new JIT output will soon evict older entries"))
    return out


def root_findings(path: str, uid: int | None = None) -> list[Finding]:
    """Ownership and permissions of the root, then its size against the limit of the environment jitwarden runs in."""
    out = _root_findings(path, uid)
    try:
        out += size_findings(_tree_bytes(path), os.environ)
    except OSError:
        pass
    return out


# ---------------------------------------------------------------- the driver


_DRIVER: list = []


def driver_evidence(env=os.environ) -> tuple[float, str] | None:
    """(time, what says so): a moment before which the installed driver did not exist; None when nothing says.

    ``JITWARDEN_LIBCUDA`` names libcuda when it is not in a standard place. Read once per process.
    """
    if _DRIVER:
        return _DRIVER[0]
    found: list[tuple[float, str]] = []
    paths = ((env["JITWARDEN_LIBCUDA"],) if env.get("JITWARDEN_LIBCUDA") else ()) + LIBCUDA_PATHS
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        found.append((st.st_mtime, f"{os.path.realpath(p)} was built {time.strftime('%Y-%m-%d', time.gmtime(st.st_mtime))}"))
        break
    if not env.get("JITWARDEN_LIBCUDA"):
        try:
            with open(PROC_VERSION, encoding="utf-8", errors="replace") as f:
                m = _MODULE_DATE.search(f.read())
            if m:
                import calendar

                t = calendar.timegm(time.strptime(" ".join(m.group(2).split()), "%a %b %d %H:%M:%S %Z %Y"))
                found.append((t, f"kernel module {m.group(1)} was built {time.strftime('%Y-%m-%d', time.gmtime(t))}"))
        except (OSError, ValueError):
            pass
    _DRIVER.append(max(found) if found else None)
    return _DRIVER[0]


def reset_driver_evidence() -> None:
    """Forget what :func:`driver_evidence` read (tests, or a long-lived process after a driver upgrade)."""
    _DRIVER.clear()


# ---------------------------------------------------------------- judging


def inspect_entry(root: str, name: str, j: Judge, root_uid: int | None = None) -> Entry:
    """Judge one cached file by what the filesystem says about it: permissions, links, age against the driver."""
    s = survey(root, name)
    out = survey_findings(s, root_uid, "entry")
    extra: dict = {}
    if s.is_symlink:
        if not s.links or not s.links[0][2]:
            out.append(Finding("unsafe", f"entry is a symlink (-> {s.symlink_target}); the driver writes none"))
        return Entry(KIND, root, name, s.path, "link", None, None, 0, 0.0, findings=tuple(out))
    etype = "jit" if s.files else ("empty" if s.is_dir else "other")
    mtime = s.newest
    ev = driver_evidence()
    if ev is not None and s.files:
        extra["driver_since"] = ev[0]
        if mtime < ev[0]:
            drv = f" (driver {j.driver_version} now)" if j.driver_version else ""
            out.append(Finding("stale", f"written {time.strftime('%Y-%m-%d', time.gmtime(mtime))}, before the installed "
                                        f"driver existed ({ev[1]}){drv}: the driver invalidates its cache on upgrade"))
    return Entry(KIND, root, name, s.path, etype, None, None, s.bytes, mtime, findings=tuple(dict.fromkeys(out)),
                 extra=tuple(extra.items()))
