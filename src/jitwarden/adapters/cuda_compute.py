"""CUDA compute cache adapter: the driver's PTX JIT cache, ``$CUDA_CACHE_PATH`` or ``~/.nv/ComputeCache`` (stdlib only).

The driver JIT-compiles PTX for which an application carries no matching cubin and keeps
the result here (CUDA Programming Guide, "CUDA Environment Variables": ``CUDA_CACHE_PATH``,
default ``~/.nv/ComputeCache`` on Linux; ``CUDA_CACHE_MAXSIZE`` in bytes, default 1 GiB on
desktop/server platforms and 256 MiB on embedded ones, at most 4 GiB; ``CUDA_CACHE_DISABLE=1``
turns it off). The guide also says the cache is invalidated when the driver is upgraded.

Layout, as the H200's driver 580.159.04 (CUDA 13.0) wrote it (``benchmarks/h200_compute_cache_probe.py``,
kept in ``tests/data/cuda_compute_h200``): an ``index`` file (entry hashes and sizes) and one file per JIT
result at ``<h0>/<h1>/<rest of the 16-hex-digit hash>``. An entry file is a 28-byte header (u32 0x41,
u32 text length, u32 0, u32 ELF length, u32 0, u64 hash) followed by text (the JIT compiler's
``__DATE__``/``__TIME__`` stamp, ``HOST64``, the target ``sm_90``, the PTX) and the cubin ELF.
This format is undocumented: an entry whose header is not this one is listed, not judged.
What jitwarden can tell, and how:

- size against ``CUDA_CACHE_MAXSIZE`` (a root finding: near or over it the driver evicts,
  and JIT work is redone: thrashing), and ``CUDA_CACHE_DISABLE=1`` (nothing here is read);
- an entry's own consistency: sizes in its header against its length (truncated: ``corrupt``),
  its cubin's ELF header, the cubin's SM against the ``sm_XX`` it records (``mismatch``), and
  against the GPU judged for (``foreign-arch``);
- written under another driver: the JIT compiler's build date recorded in the entry against the
  one the installed ``libnvidia-ptxjitcompiler.so.1`` carries (read once per process), else a file
  whose mtime is older than the installed driver's files (``libcuda.so.1``'s mtime, the kernel
  module's build date in ``/proc/driver/nvidia/version``): written by an earlier driver, which the
  driver's invalidation makes dead weight. Mtimes before 2000 (Nix store files carry 1) say nothing.
- unsafe permissions and symlinks, unreadable files.

What it cannot tell: which application an entry belongs to, or whether its bytes are intact
(the header's hash is of the driver's own key; no checksum of the content is known).
"""

from __future__ import annotations

import os
import re
import struct
import time

from ..findings import Finding
from ..layout import is_reserved
from ..model import CacheRoot, Entry, Judge
from ..elf import EM_CUDA
from ..fsutil import read_nofollow
from ._base import (
    existing,
    elf_head_bytes,
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
_STAMP = re.compile(rb"((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-3]\d \d{4})(\d\d:\d\d:\d\d)?")
_ENTRY_MAGIC = 0x41
_HEADER = struct.Struct("<IIIIIQ")
_HEAD_READ = 65536
PLAUSIBLE = 946684800.0  # 2000-01-01: older mtimes are normalised ones (Nix: 1), not build times
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
    return existing(KIND, cands)


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
    # Read the driver's evidence here, in the scanning process, so forked judging workers inherit it.
    driver_evidence()
    driver_jit_stamp()
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
        if st.st_mtime >= PLAUSIBLE:
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


_STAMPS: list = []


def driver_jit_stamp(env=os.environ) -> tuple[str, str] | None:
    """(build date, file) of the installed PTX JIT compiler: the one ``__DATE__`` in ``libnvidia-ptxjitcompiler.so.1``.

    It sits beside libcuda (``JITWARDEN_LIBCUDA``'s directory first). None when not found or not unique.
    Read once per process (a 40 MB file; about 0.2 s).
    """
    if _STAMPS:
        return _STAMPS[0]
    dirs = ([os.path.dirname(env["JITWARDEN_LIBCUDA"])] if env.get("JITWARDEN_LIBCUDA") else []) + \
        [os.path.dirname(p) for p in LIBCUDA_PATHS]
    stamp = None
    for d in dirs:
        p = os.path.join(d, "libnvidia-ptxjitcompiler.so.1")
        try:
            with open(p, "rb") as f:
                data = f.read()
        except OSError:
            continue
        dates = {m.group(1) for m in _STAMP.finditer(data)}
        if len(dates) == 1:
            stamp = (_norm_date(dates.pop()), os.path.realpath(p))
        break
    _STAMPS.append(stamp)
    return stamp


def _norm_date(raw: bytes) -> str:
    return " ".join(raw.decode("ascii", "replace").split())


def reset_driver_evidence() -> None:
    """Forget what :func:`driver_evidence` and :func:`driver_jit_stamp` read (tests; a process after a driver upgrade)."""
    _DRIVER.clear()
    _STAMPS.clear()


def parse_entry(head: bytes, size: int) -> dict:
    """Facts of one entry file from its first bytes (see the module docstring); ``format`` is None when unknown."""
    if len(head) < _HEADER.size:
        return {"format": None, "problem": f"{size} bytes is shorter than an entry header"}
    magic, text_len, _z, elf_len, _z2, key = _HEADER.unpack_from(head, 0)
    if magic != _ENTRY_MAGIC:
        return {"format": None}
    out: dict = {"format": magic, "key": f"{key:016x}"}
    elf_off = _HEADER.size + text_len
    if elf_off + elf_len != size:
        out["problem"] = f"header says {elf_off + elf_len} bytes, the file has {size}: truncated or overwritten"
    text = head[_HEADER.size:min(elf_off, len(head))]
    m = _STAMP.search(text[:64])
    if m:
        out["jit_date"] = _norm_date(m.group(1))
        if m.group(2):
            out["jit_time"] = m.group(2).decode()
    t = re.search(rb"HOST(32|64)(sm_\d+[af]?)", text[:128])
    if t:
        out["target"] = t.group(2).decode()
    if elf_off + 64 <= len(head):
        out["elf"] = elf_head_bytes(head[elf_off:elf_off + 64], min(elf_len, max(size - elf_off, 0)))
    elif "problem" not in out:
        out["problem"] = "no cubin after the header"
    return out


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
    facts: dict = {}
    if s.files and not s.is_dir:
        try:
            facts = parse_entry(read_nofollow(s.path, _HEAD_READ), s.files[0][1])
        except OSError as exc:
            out.append(Finding("corrupt", f"unreadable: {exc.strerror}"))
    sm = None
    if facts.get("format"):
        extra.update({k: facts[k] for k in ("jit_date", "jit_time", "target") if k in facts})
        if facts.get("problem"):
            out.append(Finding("corrupt", facts["problem"]))
        head = facts.get("elf")
        if head is not None:
            if head.problem:
                out.append(Finding("corrupt", f"cached cubin: {head.problem}"))
            elif head.machine != EM_CUDA:
                out.append(Finding("mismatch", f"cached code is an ELF for {head.machine_name}, not a cubin"))
            else:
                sm = head.sm
                want = facts.get("target")
                if want and int(re.sub(r"\D", "", want)) != sm:
                    out.append(Finding("mismatch", f"cached cubin is sm_{sm}, the entry records {want}"))
                if j.target_arch is not None and sm != j.target_arch:
                    out.append(Finding("foreign-arch", f"JIT-compiled for sm_{sm}, judged against sm_{j.target_arch}: "
                                                       "unreachable here"))
        stamp = driver_jit_stamp() if facts.get("jit_date") else None
        if stamp is not None and facts["jit_date"] != stamp[0]:
            drv = f" (driver {j.driver_version})" if j.driver_version else ""
            out.append(Finding("stale", f"JIT-compiled by a driver built {facts['jit_date']}; the installed JIT compiler "
                                        f"was built {stamp[0]}{drv}: the driver invalidates its cache on upgrade"))
    elif s.files and not s.is_dir:
        extra["format"] = "unknown"
    ev = driver_evidence()
    if ev is not None and s.files and not any(f.code == "stale" for f in out):
        extra["driver_since"] = ev[0]
        if mtime < ev[0]:
            drv = f" (driver {j.driver_version} now)" if j.driver_version else ""
            out.append(Finding("stale", f"written {time.strftime('%Y-%m-%d', time.gmtime(mtime))}, before the installed "
                                        f"driver existed ({ev[1]}){drv}: the driver invalidates its cache on upgrade"))
    return Entry(KIND, root, name, s.path, etype, None, sm, s.bytes, mtime, cubin_sm=sm,
                 findings=tuple(dict.fromkeys(out)), extra=tuple(extra.items()))
