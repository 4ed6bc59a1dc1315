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
still read by the nvJitLink installed. Checksums are computed for entries up to 4 MiB.
"""

from __future__ import annotations

import os
import re
import struct
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
from jitwarden.adapters.surveys import survey
from jitwarden.env import locations
from jitwarden.formats.elf import HEADER_SIZE, ElfHead, parse_head
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
_HEX = re.compile(r"^[0-9a-fA-F]+$")
_STAMP = re.compile(
    rb"((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-3]\d \d{4})(\d\d:\d\d:\d\d)?"
)
_ENTRY_MAGIC = 0x41
_HEADER = struct.Struct("<IIIIIQ")
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
        if len(n) == 1 and t == "d" and _HEX.match(n)
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


FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_M64 = (1 << 64) - 1
CHECKSUM_MAX = 4 << 20
"""Entries up to this size are read whole and both their checksums computed (pure Python: ~0.1-0.3 s/MiB)."""
_PREFIX = re.compile(
    rb"((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-3]\d \d{4})(\d\d:\d\d:\d\d)"
    rb"HOST(32|64)(sm_\d+[af]?)"
)
_BITCODE = b"BC\xc0\xde"
READ_MAX = 64 << 20
"""Larger entry files are read only in part: their first bytes, for the header and key."""


def fnv1a64(data: bytes) -> int:
    """64-bit FNV-1a: the hash the driver names entries by (of the key) and seals their output with."""
    h, p, m = FNV_OFFSET, FNV_PRIME, _M64
    for c in data:
        h = ((h ^ c) * p) & m
    return h


@dataclass(frozen=True, slots=True)
class BuildStamp:
    """The producer's ``__DATE__`` and ``__TIME__`` that open an entry's key (``Apr 29 2026``, ``17:12:06``)."""

    date: str
    time: str


@dataclass(frozen=True, slots=True)
class EntryKey:
    """What an entry's key records: the producer's build stamp, the target (``sm_90a``) after ``HOST64``,
    the input's kind (``ptx``, ``nvvm-ir``; None when neither) and the option string (None when not read)."""

    stamp: BuildStamp
    target: str
    input: str | None = None
    options: str | None = None


@dataclass(frozen=True, slots=True)
class EntryOutput:
    """What follows an entry's key: a ``cubin`` (its ELF header) or ``ptx`` (its ``.target``)."""

    kind: str
    elf: ElfHead | None = None
    ptx_target: str | None = None


@dataclass(frozen=True, slots=True)
class Checksums:
    """An entry's FNV-1a hashes: the output's as the header records it (hex), whether the output hashes to
    it (``output_ok``) and the key to the file's name (``key_ok``); None when not computed."""

    header: str
    output_ok: bool | None = None
    key_ok: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ComputeEntry:
    """One ComputeCache entry file as read (see the module docstring for the layout).

    ``format`` is None when the header is not the driver's (then nothing else is judged);
    ``problem`` names a broken invariant of the container (sizes); ``unknown`` what of a
    known container was not understood (input, output, options). ``key`` is None when the key
    does not open with a build stamp, ``HOST32/64`` and a target; ``output`` when the output is
    neither a cubin nor PTX. ``producer``: ``driver-jit`` (PTX in, cubin out, no options: the
    driver's own PTX JIT) or ``nvjitlink`` (NVVM IR in, nvJitLink's ``-arch=`` options; cuDNN
    runtime fusion, CuPy).
    """

    format: int | None
    size: int
    problem: str | None = None
    unknown: tuple[str, ...] = ()
    key: EntryKey | None = None
    output: EntryOutput | None = None
    producer: str | None = None
    checksums: Checksums | None = None


def _input_kind(body: bytes) -> tuple[str | None, bytes]:
    """(kind, the input's bytes) of the key text after the prefix: PTX up to its NUL, or NVVM IR (LLVM bitcode)."""
    if body.startswith(_BITCODE):
        return "nvvm-ir", body
    nul = body.find(b"\x00")
    ptx = body if nul < 0 else body[:nul]
    if b".version" in ptx[:4096] and b".target" in ptx[:4096]:
        return "ptx", ptx
    return None, body


def _producer(inp: str | None, options: str | None, output: str | None) -> str | None:
    if inp == "ptx" and options == "" and output == "cubin":
        return "driver-jit"
    if inp == "nvvm-ir" and options and options.startswith("-arch=") and output in ("cubin", "ptx"):
        return "nvjitlink"
    return None


def parse_entry(data: bytes, size: int, name: str | None = None) -> ComputeEntry:
    """Facts of one entry file from its bytes (``data``: all of it, or its first bytes when it is large).

    ``name`` is the entry's hash as its path spells it (``a2daf144f9da5951``); checksums are
    computed only when ``data`` is the whole file and at most :data:`CHECKSUM_MAX` bytes.
    """
    if len(data) < _HEADER.size:
        if size < _HEADER.size:
            return ComputeEntry(
                format=None,
                size=size,
                unknown=(f"{size} bytes is shorter than the driver's 28-byte entry header",),
            )
        return ComputeEntry(format=None, size=size, unknown=("header unreadable",))
    magic, text_len, z1, out_len, z2, out_hash = _HEADER.unpack_from(data, 0)
    if magic != _ENTRY_MAGIC or z1 or z2:
        return ComputeEntry(
            format=None,
            size=size,
            unknown=(f"header magic 0x{magic:x} is not the driver's entry format 0x41",),
        )
    out_off = _HEADER.size + text_len
    problem = None
    if out_off + out_len != size:
        problem = (
            f"header says {out_off + out_len} bytes, the file has {size}: truncated or overwritten"
        )
    whole = len(data) == size
    text = data[_HEADER.size : min(out_off, len(data))]
    unknown: list[str] = []
    key = _parse_key(text, whole and out_off <= len(data), unknown)
    out = data[out_off : out_off + out_len] if out_off < len(data) else b""
    output = _parse_output(out, min(out_len, max(size - out_off, 0)), unknown)
    key_ok = sum_ok = None
    if whole and problem is None and size <= CHECKSUM_MAX:
        sum_ok = fnv1a64(out) == out_hash
        if name and len(name) == 16 and _HEX.match(name):
            key_ok = fnv1a64(text) == int(name, 16)
    if not whole:
        unknown.append(
            f"{size} bytes, larger than jitwarden reads ({READ_MAX >> 20} MiB): only its header was read"
        )
    inp, options = (key.input, key.options) if key else (None, None)
    kind = output.kind if output else None
    producer = _producer(inp, options, kind) if not unknown else None
    if producer is None and not unknown:
        unknown.append(
            f"{inp} in, {kind} out with options {options!r}: a producer jitwarden does not know"
        )
    return ComputeEntry(
        format=magic,
        size=size,
        problem=problem,
        unknown=tuple(unknown),
        key=key,
        output=output,
        producer=producer,
        checksums=Checksums(f"{out_hash:016x}", sum_ok, key_ok),
    )


def _parse_key(text: bytes, complete: bool, unknown: list[str]) -> EntryKey | None:
    """The entry's key text: build stamp, target, input (PTX or NVVM IR) and, when the whole key was
    read (``complete``), the option string after the input. What is not understood goes to ``unknown``."""
    m = _PREFIX.match(text)
    if m is None:
        unknown.append("its key does not start with a build stamp, HOST32/64 and an sm_ target")
        return None
    body = text[m.end() :]
    inp, _input = _input_kind(body)
    if inp is None:
        unknown.append("its input is neither PTX nor NVVM IR")
    options = None
    if complete:
        nul = body.rfind(b"\x00")
        tail = body[nul + 1 :] if nul >= 0 else b""
        if nul < 0 or not tail.startswith(b" ") or not tail.isascii():
            unknown.append("no option string after its input")
        else:
            options = tail.decode("ascii").strip()
    return EntryKey(
        BuildStamp(_norm_date(m.group(1)), m.group(2).decode()), m.group(4).decode(), inp, options
    )


def _parse_output(out: bytes, out_size: int, unknown: list[str]) -> EntryOutput | None:
    """The compiled output (its first bytes; ``out_size`` in the file): a cubin's ELF header or PTX's target."""
    if out.startswith(b"\x7fELF"):
        return EntryOutput("cubin", elf=parse_head(out[:HEADER_SIZE], out_size))
    if out.startswith(b"//") or out.lstrip().startswith(b".version"):
        t = re.search(rb"^\.target\s+(sm_\d+[af]?)", out[:8192], re.MULTILINE)
        return EntryOutput("ptx", ptx_target=t.group(1).decode() if t else None)
    if out:
        unknown.append("its output is neither a cubin (ELF) nor PTX")
    return None


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
    out: list[Finding] = []
    if e.format is None:
        return [
            Finding("unrecognised", f"not judged: {'; '.join(e.unknown) or 'unknown format'}")
        ], None
    if e.problem:
        return [Finding("corrupt", e.problem)], None
    sums, key, output = e.checksums, e.key, e.output
    assert sums is not None  # a known format without a problem has its checksums
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
    if e.unknown:
        out.append(Finding("unrecognised", f"not judged further: {'; '.join(e.unknown)}"))
        return out, None
    sm = None
    target = key.target if key else None
    head = output.elf if output else None
    if head is not None:
        bad = cubin_findings("cached cubin", head)
        out += bad
        if not bad:
            sm = head.sm
            if target and int(re.sub(r"\D", "", target)) != sm:
                out.append(
                    Finding("mismatch", f"cached cubin is sm_{sm}, the entry records {target}")
                )
            if judge.target_arch is not None and sm != judge.target_arch:
                out.append(
                    Finding(
                        "foreign-arch",
                        f"JIT-compiled for sm_{sm}, judged against sm_{judge.target_arch}: "
                        "unreachable here",
                    )
                )
    elif (
        output
        and output.kind == "ptx"
        and target
        and judge.target_arch is not None
        and int(re.sub(r"\D", "", target)) != judge.target_arch
    ):
        out.append(
            Finding(
                "foreign-arch",
                f"compiled for {target}, judged against sm_{judge.target_arch}: unreachable here",
            )
        )
    if (
        e.producer == "driver-jit"
        and key is not None  # a driver-jit entry has its key
        and jit_stamp is not None
        and key.stamp.date != jit_stamp[0]
    ):
        drv = f" (driver {judge.driver_version})" if judge.driver_version else ""
        out.append(
            Finding(
                "stale",
                f"JIT-compiled by a driver whose JIT compiler was built {key.stamp.date}; the "
                f"installed one was built {jit_stamp[0]}{drv}: the driver invalidates its cache "
                "on upgrade",
            )
        )
    return out, sm


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
        if not s.links[0].leaves:
            out.append(
                Finding(
                    "unsafe", f"entry is a symlink (-> {s.symlink_target}); the driver writes none"
                )
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
    etype = "jit" if s.files else ("empty" if s.is_dir else "other")
    mtime = s.newest
    parsed: ComputeEntry | None = None
    if s.files and not s.is_dir:
        size = s.files[0].size
        try:
            parsed = parse_entry(
                read_head(s.path, min(size, READ_MAX) if size <= READ_MAX else _HEAD_READ),
                size,
                name.replace("/", ""),
            )
        except OSError as exc:
            out.append(read_failure(exc, f"unreadable: {exc.strerror}"))
    sm = since = None
    if parsed is not None:
        found, sm = judge_facts(
            parsed, judge, driver_jit_stamp() if parsed.producer == "driver-jit" else None
        )
        out += found
    ev = driver_evidence()
    driver_made = parsed is not None and parsed.producer == "driver-jit"
    stamp = driver_jit_stamp() if driver_made else None
    if ev is not None and driver_made and stamp is None and not any(f.code == "stale" for f in out):
        # No JIT compiler to read a date from: the mtime of a driver-made entry against the installed driver's.
        since = ev[0]
        if mtime < ev[0]:
            drv = f" (driver {judge.driver_version} now)" if judge.driver_version else ""
            out.append(
                Finding(
                    "stale",
                    f"written {time.strftime('%Y-%m-%d', time.gmtime(mtime))}, before the installed "
                    f"driver existed ({ev[1]}){drv}: the driver invalidates its cache on upgrade",
                )
            )
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
