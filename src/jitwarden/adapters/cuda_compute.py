"""CUDA compute cache adapter: the driver's PTX JIT cache, ``$CUDA_CACHE_PATH`` or ``~/.nv/ComputeCache`` (stdlib only).

The driver JIT-compiles PTX for which an application carries no matching cubin and keeps
the result here (CUDA Programming Guide, "CUDA Environment Variables": ``CUDA_CACHE_PATH``,
default ``~/.nv/ComputeCache`` on Linux; ``CUDA_CACHE_MAXSIZE`` in bytes, default 1 GiB on
desktop/server platforms and 256 MiB on embedded ones, at most 4 GiB; ``CUDA_CACHE_DISABLE=1``
turns it off). The guide also says the cache is invalidated when the driver is upgraded.

Layout, as the H200's driver 580.159.04 (CUDA 13.0) and the nvJitLink of CUDA 13.0 wrote it
(``tests/data/cuda_compute_h200`` and the ComputeCache of every capture in ``tests/data/real``): an
``index`` file and one file per result at ``<h0>/<h1>/<rest of a 16-hex-digit name>``. An entry file is
a 28-byte header (u32 0x41, u32 key length, u32 0, u32 output length, u32 0, u64 FNV-1a of the output),
the key (the producer's ``__DATE__``/``__TIME__`` build stamp, ``HOST64``, the target ``sm_90``/``sm_90a``,
the input, NULs, a space and the option string) and the output. The file's name is the FNV-1a of the key.
Two producers write it:

- the driver's PTX JIT (``cuModuleLoadData`` of PTX: torch extensions built ``+PTX``, CuPy's
  ``RawModule``, cuDNN's own PTX): PTX in, no options, a cubin out, stamped with the build date of
  ``libnvidia-ptxjitcompiler``;
- nvJitLink (cuDNN runtime fusion, CuPy kernels through NVRTC LTO): NVVM IR (LLVM bitcode) in,
  ``-arch=...`` options, PTX (``-nvvm-version=...``) or a cubin out, stamped with nvJitLink's build date.

Anything else is ``unrecognised`` (info), never damage. What jitwarden can tell, and how:

- size against ``CUDA_CACHE_MAXSIZE`` (a root finding: near or over it the driver evicts,
  and JIT work is redone: thrashing), and ``CUDA_CACHE_DISABLE=1`` (nothing here is read);
- an entry's own consistency: sizes in its header against its length (truncated: ``corrupt``),
  both FNV-1a hashes (output against header, key against file name: ``corrupt``), its cubin's ELF
  header, the cubin's SM against the ``sm_XX`` it records (``mismatch``), and against the GPU
  judged for (``foreign-arch``);
- written under another driver, for the driver's own PTX JIT entries only: their stamp against the
  one the installed ``libnvidia-ptxjitcompiler.so.1`` carries (read once per process), else a file
  whose mtime is older than the installed driver's files (``libcuda.so.1``'s mtime, the kernel
  module's build date in ``/proc/driver/nvidia/version``): written by an earlier driver, which the
  driver's invalidation makes dead weight. Mtimes before 2000 (Nix store files carry 1) say nothing.
  nvJitLink's entries are not judged stale: their date is nvJitLink's, which says nothing of the driver.
- unsafe permissions and symlinks, unreadable files.

What it cannot tell: which application an entry belongs to, or whether an nvJitLink entry is
still read by the nvJitLink installed. Checksums are computed for entries up to 4 MiB. An entry file is
parsed by :mod:`~jitwarden.adapters.cuda_compute_entry`; this module finds the roots and judges.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import ClassVar

from jitwarden.adapters.base import (
    cubin_findings,
    entries,
    existing,
    listed,
    read_failure,
    set_vars,
    survey_findings,
)
from jitwarden.adapters.cuda_compute_entry import (
    HEX,
    READ_MAX,
    ComputeEntry,
    norm_date,
    parse_entry,
)
from jitwarden.adapters.surveys import Survey, survey
from jitwarden.env import locations
from jitwarden.formats.elf import ElfHead
from jitwarden.model.entries import CacheRoot, Entry, Judge, KindFacts
from jitwarden.model.findings import Finding
from jitwarden.model.layout import is_reserved
from jitwarden.model.settings import LIBCUDA
from jitwarden.store.reads import read_bytes, read_head

KIND = "cuda-compute"
ROOT_RISK = None
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
_STAMP = re.compile(
    rb"((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-3]\d \d{4})(\d\d:\d\d:\d\d)?"
)
_HEAD_READ = 65536
PLAUSIBLE = 946684800.0  # 2000-01-01: older mtimes are normalised ones (Nix: 1), not build times
_MODULE_DATE = re.compile(r"Kernel Module\s+(\S+)\s+(\w{3} \w{3}\s+\d+ \d\d:\d\d:\d\d \w+ \d{4})")

# ---------------------------------------------------------------- roots


def discover_roots(env=os.environ) -> list[CacheRoot]:
    """``$CUDA_CACHE_PATH`` when set, and ``~/.nv/ComputeCache``; existing dirs only."""
    return existing(
        KIND,
        set_vars(env, "CUDA_CACHE_PATH") + [(locations.home_default(KIND, env), "default")],
    )


def looks_like_root(path: str) -> bool:
    """A dir named ``ComputeCache``, or one holding the driver's ``index`` beside one-hex-digit dirs, or (the
    index gone or damaged: a damaged cache is still a cache, reported as such) the driver's two-level layout
    ``a/3/<file>`` alone."""
    if os.path.basename(os.path.normpath(path)) == "ComputeCache":
        return True
    try:
        tops = _hex_dirs(path)
        return (
            bool(tops) and os.path.lexists(os.path.join(path, "index")) or any(map(_hex_dirs, tops))
        )
    except OSError:
        return False


def _hex_dirs(path: str) -> list[str]:
    """The paths of the one-hex-digit directories in ``path`` (the driver's two levels: ``a/3``), in listing order."""
    ls = listed(path)
    if 1 not in map(len, ls.names):  # a C-level pass: a root of another kind lists 10,000s of names
        return []
    return [
        os.path.join(path, n)
        for n, t in zip(ls.names, ls.types)
        if len(n) == 1 and t == "d" and HEX.match(n)
    ]


def list_entry_names(root: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Every file under the root's subdirectories (``a/3/<hash>``); top-level files (``index``) are the root's own."""
    names, strays = [], []
    for top in entries(root):
        name = top.name
        if top.is_symlink():
            names.append(name)  # judged (unsafe), never followed
        elif top.is_dir(follow_symlinks=False):
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
        out.append(
            Finding(
                "stale",
                f"CUDA_CACHE_DISABLE=1 is set: the driver neither reads nor writes this cache, "
                f"its {_mib(total)} are dead weight here",
            )
        )
        return out
    limit, why = maxsize(env)
    if limit and total >= limit:
        out.append(
            Finding(
                "stale",
                f"thrashing: the cache holds {_mib(total)}, at or over its {_mib(limit)} limit ({why}); "
                "the driver evicts entries and JIT-compiles them again: raise CUDA_CACHE_MAXSIZE "
                "(at most 4 GiB)",
            )
        )
    elif limit and total >= NEAR * limit:
        out.append(
            Finding(
                "stale",
                f"near its limit: the cache holds {_mib(total)} of {_mib(limit)} ({why}); "
                "new JIT output will soon evict older entries",
            )
        )
    return out


def root_size(path: str) -> list[Finding]:
    """The root's size against the limit of the environment jitwarden runs in (:data:`ROOT_CHECKS`)."""
    out = []
    try:
        out += size_findings(_tree_bytes(path), os.environ)
    except OSError:
        pass
    # Read the driver's evidence here, in the scanning process, so forked judging workers inherit it.
    driver_evidence()
    driver_jit_stamp()
    return out


ROOT_CHECKS = (root_size,)


# ---------------------------------------------------------------- the driver


_DRIVER: list = []


def driver_evidence(env=os.environ) -> tuple[float, str] | None:
    """(time, what says so): a moment before which the installed driver did not exist; None when nothing says.

    ``JITWARDEN_LIBCUDA`` names libcuda when it is not in a standard place. Read once per process.
    """
    if _DRIVER:
        return _DRIVER[0]
    found: list[tuple[float, str]] = []
    named = LIBCUDA.raw(env)
    paths = ((named,) if named else ()) + LIBCUDA_PATHS
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        if st.st_mtime >= PLAUSIBLE:
            found.append(
                (
                    st.st_mtime,
                    f"{os.path.realpath(p)} was built {time.strftime('%Y-%m-%d', time.gmtime(st.st_mtime))}",
                )
            )
        break
    if not LIBCUDA.raw(env):
        try:
            m = _MODULE_DATE.search(
                read_bytes(PROC_VERSION, max_bytes=1 << 16).decode("utf-8", "replace")
            )
            if m:
                import calendar

                t = calendar.timegm(
                    time.strptime(" ".join(m.group(2).split()), "%a %b %d %H:%M:%S %Z %Y")
                )
                found.append(
                    (
                        t,
                        f"kernel module {m.group(1)} was built {time.strftime('%Y-%m-%d', time.gmtime(t))}",
                    )
                )
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
    named = LIBCUDA.raw(env)
    dirs = ([os.path.dirname(named)] if named else []) + [os.path.dirname(p) for p in LIBCUDA_PATHS]
    stamp = None
    for d in dirs:
        p = os.path.join(d, "libnvidia-ptxjitcompiler.so.1")
        try:
            data = read_bytes(
                p, follow=True
            )  # a system library's soname link; never a FIFO, bounded
        except OSError:
            continue
        dates = {m.group(1) for m in _STAMP.finditer(data)}
        if len(dates) == 1:
            stamp = (norm_date(dates.pop()), os.path.realpath(p))
        break
    _STAMPS.append(stamp)
    return stamp


def reset_driver_evidence() -> None:
    """Forget what :func:`driver_evidence` and :func:`driver_jit_stamp` read (tests; a process after a driver upgrade)."""
    _DRIVER.clear()
    _STAMPS.clear()


# ---------------------------------------------------------------- judging


def judge_facts(
    e: ComputeEntry, judge: Judge, jit_stamp: tuple[str, str] | None
) -> tuple[list[Finding], int | None]:
    """(findings, cubin SM) of one parsed entry (pure). Each rule names its evidence.

    - ``unrecognised`` (info): a header that is not the driver's 0x41 format, or a known header
      whose key or output is not understood; nothing further is judged.
    - ``corrupt``: the header's sizes do not add up to the file (the driver writes header, key and
      output in one file, seen on every entry of drivers' and nvJitLink's making); the output's
      FNV-1a is not the one the header records; the key's FNV-1a is not the file's name; a cubin
      whose ELF header is broken.
    - ``mismatch``: the cubin's SM is not the target the key records; the output is a host ELF.
    - ``foreign-arch``: the cubin's SM is not the judged GPU.
    - ``stale``: only for the driver's own PTX JIT entries (PTX in, no options, cubin out), whose
      stamp is the JIT compiler's ``__DATE__``: another date than the installed
      ``libnvidia-ptxjitcompiler``'s. nvJitLink's entries carry nvJitLink's date, which says
      nothing about the driver.
    """
    if e.format is None:
        return [
            Finding("unrecognised", f"not judged: {'; '.join(e.unknown) or 'unknown format'}")
        ], None
    if e.problem:
        return [Finding("corrupt", e.problem)], None
    out = _checksum_findings(e)
    if e.unknown:
        out.append(Finding("unrecognised", f"not judged further: {'; '.join(e.unknown)}"))
        return out, None
    key, output = e.key, e.output
    target = key.target if key else None
    head = output.elf if output else None
    sm = None
    if head is not None:
        sm = _cubin_sm_findings(head, target, judge, out)
    elif output and output.kind == "ptx":
        _ptx_target_findings(target, judge, out)
    if e.producer == "driver-jit" and key is not None:  # a driver-jit entry has its key
        _stamp_findings(key.stamp.date, jit_stamp, judge, out)
    return out, sm


def _checksum_findings(e: ComputeEntry) -> list[Finding]:
    """Both FNV-1a hashes of a parsed entry: its output against its header, its key against its file name."""
    sums, output = e.checksums, e.output
    assert sums is not None  # a known format without a problem has its checksums
    out: list[Finding] = []
    if sums.output_ok is False:
        out.append(
            Finding(
                "corrupt",
                f"its {output.kind if output else 'output'} does not hash to the FNV-1a "
                f"{sums.header} its header records: damaged after the driver wrote it",
            )
        )
    if sums.key_ok is False:
        out.append(
            Finding(
                "corrupt",
                "its key (stamp, target, input, options) does not hash to its file name: "
                "damaged, or stored under another entry's name",
            )
        )
    return out


def _cubin_sm_findings(
    head: ElfHead, target: str | None, judge: Judge, out: list[Finding]
) -> int | None:
    """A cached cubin's ELF header, its SM against the target its key records and the judged GPU; its SM,
    None when the header is broken."""
    bad = cubin_findings("cached cubin", head)
    out += bad
    if bad:
        return None
    sm = head.sm
    if target and int(re.sub(r"\D", "", target)) != sm:
        out.append(Finding("mismatch", f"cached cubin is sm_{sm}, the entry records {target}"))
    if judge.target_arch is not None and sm != judge.target_arch:
        out.append(
            Finding(
                "foreign-arch",
                f"JIT-compiled for sm_{sm}, judged against sm_{judge.target_arch}: "
                "unreachable here",
            )
        )
    return sm


def _ptx_target_findings(target: str | None, judge: Judge, out: list[Finding]) -> None:
    """Cached PTX's target, as its key records it, against the judged GPU."""
    if (
        target
        and judge.target_arch is not None
        and int(re.sub(r"\D", "", target)) != judge.target_arch
    ):
        out.append(
            Finding(
                "foreign-arch",
                f"compiled for {target}, judged against sm_{judge.target_arch}: unreachable here",
            )
        )


def _stamp_findings(
    date: str, jit_stamp: tuple[str, str] | None, judge: Judge, out: list[Finding]
) -> None:
    """A driver-JIT entry's stamp against the installed JIT compiler's build date."""
    if jit_stamp is not None and date != jit_stamp[0]:
        drv = f" (driver {judge.driver_version})" if judge.driver_version else ""
        out.append(
            Finding(
                "stale",
                f"JIT-compiled by a driver whose JIT compiler was built {date}; the "
                f"installed one was built {jit_stamp[0]}{drv}: the driver invalidates its cache "
                "on upgrade",
            )
        )


@dataclass(frozen=True, slots=True)
class CudaComputeFacts(KindFacts):
    """What one driver-cache file says (``parsed``; None when unread), the driver's date it was judged
    against when no JIT compiler stamp was found (``driver_since``), and its cubin's SM.

    JSON: ``format: unknown`` when the header is not the driver's; the producer, its build stamp as
    ``jit_date``/``jit_time``, the target, input, output and options (cut at 160 characters); ``driver_since``;
    ``cubin_sm`` at the entry's top level.
    """

    TOP: ClassVar[frozenset[str]] = frozenset({"cubin_sm"})

    parsed: ComputeEntry | None = None
    driver_since: float | None = None
    cubin_sm: int | None = None

    def to_json(self) -> dict:
        out: dict = {}
        p = self.parsed
        if p is not None:
            if p.format is None:
                out["format"] = "unknown"
            key, stamp = p.key, p.key.stamp if p.key else None
            shown: tuple[tuple[str, str | None], ...] = (
                ("producer", p.producer),
                ("jit_date", stamp.date if stamp else None),
                ("jit_time", stamp.time if stamp else None),
                ("target", key.target if key else None),
                ("input", key.input if key else None),
                ("output", p.output.kind if p.output else None),
                ("options", key.options if key else None),
            )
            for name, v in shown:
                if v is not None:
                    out[name] = v[:160] + "…" if len(v) > 160 else v
        if self.driver_since is not None:
            out["driver_since"] = self.driver_since
        return out


def inspect_entry(root: str, name: str, judge: Judge, root_uid: int | None = None) -> Entry:
    """Judge one cached file: what the filesystem says (permissions, links) and what its bytes say."""
    s = survey(root, name)
    out = survey_findings(s, root_uid, "entry")
    if s.is_symlink:
        return _symlinked(root, name, s, out)
    etype = "jit" if s.files else ("empty" if s.is_dir else "other")
    mtime = s.newest
    parsed = _parsed(s, name, out) if s.files and not s.is_dir else None
    sm = None
    if parsed is not None:
        found, sm = judge_facts(
            parsed, judge, driver_jit_stamp() if parsed.producer == "driver-jit" else None
        )
        out += found
    since = _mtime_findings(parsed, mtime, judge, out)
    return Entry(
        KIND,
        root,
        name,
        s.path,
        etype,
        None,
        sm,
        s.bytes,
        mtime,
        findings=tuple(dict.fromkeys(out)),
        facts=CudaComputeFacts(parsed, since, sm),
    )


def _symlinked(root: str, name: str, s: Survey, out: list[Finding]) -> Entry:
    """An entry that is a symlink: never followed, ``unsafe`` unless it leaves the root (the survey says so)."""
    if not s.links[0].leaves:
        out.append(
            Finding("unsafe", f"entry is a symlink (-> {s.symlink_target}); the driver writes none")
        )
    return Entry(
        KIND,
        root,
        name,
        s.path,
        "link",
        None,
        None,
        0,
        0.0,
        findings=tuple(out),
        facts=CudaComputeFacts(),
    )


def _parsed(s: Survey, name: str, out: list[Finding]) -> ComputeEntry | None:
    """The entry file parsed from its bytes (whole up to :data:`READ_MAX`, else its head); None, and the finding
    in ``out``, when it cannot be read."""
    size = s.files[0].size
    try:
        return parse_entry(
            read_head(s.path, min(size, READ_MAX) if size <= READ_MAX else _HEAD_READ),
            size,
            name.replace("/", ""),
        )
    except OSError as exc:
        out.append(read_failure(exc, f"unreadable: {exc.strerror}"))
        return None


def _mtime_findings(
    parsed: ComputeEntry | None, mtime: float, judge: Judge, out: list[Finding]
) -> float | None:
    """With no JIT compiler to read a date from, the mtime of a driver-made entry against the installed
    driver's; returns that driver's date when it was the evidence (None otherwise)."""
    ev = driver_evidence()
    driver_made = parsed is not None and parsed.producer == "driver-jit"
    stamp = driver_jit_stamp() if driver_made else None
    if ev is None or not driver_made or stamp is not None or any(f.code == "stale" for f in out):
        return None
    if mtime < ev[0]:
        drv = f" (driver {judge.driver_version} now)" if judge.driver_version else ""
        out.append(
            Finding(
                "stale",
                f"written {time.strftime('%Y-%m-%d', time.gmtime(mtime))}, before the installed "
                f"driver existed ({ev[1]}){drv}: the driver invalidates its cache on upgrade",
            )
        )
    return ev[0]
