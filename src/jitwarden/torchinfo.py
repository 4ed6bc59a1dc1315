"""Facts about the installed torch, read from its files without importing it.

Importing torch costs seconds and may touch CUDA; the activation path must do
neither. The compiled arch list (which GPUs torch's own kernels were built for)
comes from the fatbinary in ``torch/lib/libtorch_cuda.so``, read by seeking over
its ELF section table and fatbin headers, never reading the whole ~1 GB file.

Standard library only: this module is on the activation path.
"""

from __future__ import annotations

import importlib.util
import os
import re
import struct
import sys
import time
from dataclasses import dataclass

FATBIN_MAGIC = 0xBA55ED50
FATBIN_KIND_PTX = 1
FATBIN_KIND_ELF = 2
MAX_ENTRIES = 200_000
MAX_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class TorchInfo:
    """An installed torch: version, CUDA it was built with, and its compiled GPU archs."""

    version: str
    cuda: str | None
    git_version: str | None
    arch_list: tuple[str, ...] | None  # e.g. ("compute_90", "sm_80", "sm_90"); None: unknown
    directory: str


def torch_dir() -> str | None:
    """The installed torch package directory, found without importing torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            return loc
    return os.path.dirname(spec.origin) if spec.origin else None


def torch_bin_ptxas() -> str | None:
    """``torch/bin/ptxas`` (shipped by CUDA wheels; Inductor's default ptxas) if present."""
    d = torch_dir()
    if not d:
        return None
    p = os.path.join(d, "bin", "ptxas")
    return p if os.path.isfile(p) else None


def libtorch_cuda_path(directory: str | None = None) -> str | None:
    d = directory or torch_dir()
    if not d:
        return None
    p = os.path.join(d, "lib", "libtorch_cuda.so")
    return p if os.path.isfile(p) else None


def parse_version_py(text: str) -> dict[str, str | None]:
    """``cuda`` and ``git_version`` from ``torch/version.py`` text, without exec."""
    out: dict[str, str | None] = {}
    for name in ("cuda", "git_version", "hip", "__version__"):
        m = re.search(rf"^{re.escape(name)}\s*(?::[^=\n]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)", text, re.MULTILINE)
        out[name] = (m.group(1) if m.group(1) is not None else m.group(2)) if m else None
    return out


def info(memo: dict | None = None, version: str | None = None) -> TorchInfo | None:
    """What we know about the installed torch, or None when torch is not installed.

    ``version`` saves a metadata lookup when the caller already read the dist-info.
    The arch list is memoised in ``memo`` by (path, size, mtime_ns) of libtorch_cuda.so.
    """
    d = torch_dir()
    if not d:
        return None
    if version is None:
        import importlib.metadata

        try:
            version = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            version = None
    vp = {}
    try:
        with open(os.path.join(d, "version.py"), encoding="utf-8", errors="replace") as f:
            vp = parse_version_py(f.read())
    except OSError:
        pass
    version = version or vp.get("__version__") or "unknown"
    return TorchInfo(version=version, cuda=vp.get("cuda"), git_version=vp.get("git_version"),
                     arch_list=arch_list(d, memo), directory=d)


def normalize_arches(names) -> tuple[str, ...]:
    """``["sm_90a", "compute_90"]`` -> ``("compute_90", "sm_90")``: sorted, suffix-free, unique."""
    out = set()
    for n in names:
        m = re.fullmatch(r"(sm|compute)_(\d+)[af]?", str(n).strip())
        if m:
            out.add(f"{m.group(1)}_{m.group(2)}")
    return tuple(sorted(out, key=lambda s: (int(s.split("_")[1]), s)))


def arch_list(directory: str | None = None, memo: dict | None = None) -> tuple[str, ...] | None:
    """torch's compiled arch list: from libtorch_cuda.so's fatbin (memoised), else torch itself.

    The fatbin is preferred even when torch is already imported, so the answer (and the
    fingerprint digest) does not depend on whether torch was imported first;
    ``torch._C._cuda_getArchFlags()`` (which does not initialise CUDA) is the fallback.
    """
    lib = libtorch_cuda_path(directory)
    if lib:
        try:
            st = os.stat(lib)
            key = f"{os.path.realpath(lib)}|{st.st_size}|{st.st_mtime_ns}"
        except OSError:
            key = None
        if key and memo is not None and isinstance(memo.get(key), list):
            return tuple(memo[key])
        unreadable = bool(key and memo is not None and memo.get(key) == "unreadable")
        found = None if unreadable else fatbin_arches(lib)
        if found is not None:
            result = normalize_arches(found)
            if key and memo is not None:
                memo[key] = list(result)
            return result
        if key and memo is not None:
            memo[key] = "unreadable"  # do not pay the capped walk again at every start
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            flags = torch._C._cuda_getArchFlags()
            if flags:
                return normalize_arches(str(flags).split())
        except Exception:  # noqa: BLE001 - a CPU build or an odd torch: unknown
            pass
    return None


# --- seek-based ELF section table ----------------------------------------------------


def elf_sections(f) -> dict[str, tuple[int, int]] | None:
    """name -> (file offset, size) of every section of an open little-endian ELF file."""
    f.seek(0)
    ident = f.read(64)
    if len(ident) < 52 or ident[:4] != b"\x7fELF" or ident[5] != 1:
        return None
    is64 = ident[4] == 2
    if is64:
        shoff, = struct.unpack_from("<Q", ident, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
        fmt, off_i, size_i = "<IIQQQQIIQQ", 4, 5
    else:
        shoff, = struct.unpack_from("<I", ident, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x2E)
        fmt, off_i, size_i = "<IIIIIIIIII", 4, 5
    if shoff == 0 or shentsize < struct.calcsize(fmt):
        return None

    def header(i):
        f.seek(shoff + i * shentsize)
        raw = f.read(struct.calcsize(fmt))
        if len(raw) < struct.calcsize(fmt):
            raise ValueError("truncated section header")
        return struct.unpack(fmt, raw)

    first = header(0)
    if shnum == 0:
        shnum = first[size_i]
    if shstrndx == 0xFFFF:
        shstrndx = first[6]
    if shnum > 100_000 or shstrndx >= shnum:
        return None
    f.seek(shoff)
    table = f.read(shnum * shentsize)
    if len(table) < shnum * shentsize:
        return None
    rows = [struct.unpack_from(fmt, table, i * shentsize) for i in range(shnum)]
    stroff, strsize = rows[shstrndx][off_i], rows[shstrndx][size_i]
    if strsize > 64 << 20:
        return None
    f.seek(stroff)
    strtab = f.read(strsize)
    out = {}
    for r in rows:
        end = strtab.find(b"\0", r[0])
        name = strtab[r[0]:end if end >= 0 else None].decode("ascii", "replace")
        if name and r[1] != 8:  # SHT_NOBITS has no file content
            out[name] = (r[off_i], r[size_i])
    return out


# --- fatbin walk ---------------------------------------------------------------------


def walk_fatbin(f, start: int, size: int, *, max_entries: int = MAX_ENTRIES,
                max_seconds: float = MAX_SECONDS) -> set[str] | None:
    """``sm_XX`` / ``compute_XX`` of every entry in the fatbin containers at ``[start, start+size)``.

    Container header: u32 magic 0xBA55ED50, u16 version, u16 header size, u64 fat size.
    Entry header: u16 kind (1 PTX, 2 ELF), u16, u32 header size, u64 payload size, ...,
    u32 arch at offset 28. Payloads are skipped by seeking. None on anything unexpected
    or when the caps are hit.
    """
    deadline = time.monotonic() + max_seconds
    end = start + size
    pos = start
    arches: set[str] = set()
    entries = 0
    while pos + 16 <= end:
        f.seek(pos)
        head = f.read(16)
        if len(head) < 16:
            return None
        magic, _version, hsize, fat_size = struct.unpack("<IHHQ", head)
        if magic != FATBIN_MAGIC:
            if head == b"\0" * 16 or magic == 0:  # padding between containers
                nxt = _skip_zeros(f, pos, end)
                if nxt is None:
                    break
                pos = nxt
                continue
            return None
        if hsize < 16:
            return None
        epos, cend = pos + hsize, pos + hsize + fat_size
        if cend > end:
            return None
        while epos + 32 <= cend:
            entries += 1
            if entries > max_entries or (entries & 0x3FF == 0 and time.monotonic() > deadline):
                return None
            f.seek(epos)
            e = f.read(32)
            if len(e) < 32:
                return None
            kind, _u, ehsize, payload = struct.unpack_from("<HHIQ", e, 0)
            arch, = struct.unpack_from("<I", e, 28)
            if ehsize < 32:
                return None
            if kind == FATBIN_KIND_ELF:
                arches.add(f"sm_{arch}")
            elif kind == FATBIN_KIND_PTX:
                arches.add(f"compute_{arch}")
            epos += ehsize + payload
        pos = cend
    return arches


def _skip_zeros(f, pos: int, end: int) -> int | None:
    """The offset of the first non-zero byte at or after ``pos``; None at ``end``."""
    while pos < end:
        f.seek(pos)
        chunk = f.read(min(1 << 16, end - pos))
        if not chunk:
            return None
        stripped = chunk.lstrip(b"\0")
        if stripped:
            return pos + len(chunk) - len(stripped)
        pos += len(chunk)
    return None


def fatbin_arches(path: str) -> set[str] | None:
    """Arches in the ``.nv_fatbin`` section of the ELF file at ``path``; None when unreadable."""
    try:
        with open(path, "rb") as f:
            sections = elf_sections(f)
            if not sections or ".nv_fatbin" not in sections:
                return None
            off, size = sections[".nv_fatbin"]
            return walk_fatbin(f, off, size)
    except (OSError, ValueError, struct.error):
        return None
