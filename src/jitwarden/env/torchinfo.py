"""Facts about the installed torch, read from its files without importing it.

Importing torch costs seconds and may touch CUDA; the activation path must do
neither. The compiled arch list (which GPUs torch's own kernels were built for) is
the string ``torch.cuda.get_arch_list()`` returns: ``CUDA_ARCH_FLAGS``, compiled into
``torch/lib/libtorch_python.so`` as a C string (e.g. ``"sm_75 sm_80 sm_86 sm_90 sm_100
sm_120"``), read from that library's ``.rodata`` by seeking over its ELF section table.

Not the fatbinary of ``libtorch_cuda.so``: on the H200 (torch 2.11+cu130) its entries
span sm_75..sm_121 because bundled third-party kernels carry their own archs, while
torch's own kernels cover ``sm_75 sm_80 sm_86 sm_90 sm_100 sm_120`` only; the union
would hide exactly the GB10 (sm_121) case this list exists to catch.

Standard library only: this module is on the activation path.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from jitwarden.env import interpreter
from jitwarden.store.reads import open_regular_file, read_bytes

MAX_RODATA = 256 << 20
_FLAGS = re.compile(
    rb"(?<![\x20-\x7e])((?:sm|compute)_\d+[af]?(?: (?:sm|compute)_\d+[af]?)*)(?=\x00)"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchInfo:
    """An installed torch: version, CUDA it was built with, and its compiled GPU archs."""

    version: str
    cuda: str | None
    git_version: str | None
    arch_list: tuple[str, ...] | None  # e.g. ("compute_90", "sm_80", "sm_90"); None: unknown
    directory: str


def torch_dir() -> str | None:
    """The installed torch package directory (of the environment judged against:
    :mod:`jitwarden.env.interpreter`), found without importing torch."""
    return interpreter.package_dir("torch")


def torch_bin_ptxas() -> str | None:
    """``torch/bin/ptxas`` (shipped by CUDA wheels; Inductor's default ptxas) if present."""
    d = torch_dir()
    if not d:
        return None
    p = os.path.join(d, "bin", "ptxas")
    return p if os.path.isfile(p) else None


def libtorch_python_path(directory: str | None = None) -> str | None:
    d = directory or torch_dir()
    if not d:
        return None
    p = os.path.join(d, "lib", "libtorch_python.so")
    return p if os.path.isfile(p) else None


def parse_version_py(text: str) -> dict[str, str | None]:
    """``cuda`` and ``git_version`` from ``torch/version.py`` text, without exec."""
    out: dict[str, str | None] = {}
    for name in ("cuda", "git_version", "hip", "__version__"):
        m = re.search(
            rf"^{re.escape(name)}\s*(?::[^=\n]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)",
            text,
            re.MULTILINE,
        )
        out[name] = (m.group(1) if m.group(1) is not None else m.group(2)) if m else None
    return out


def info(memo: dict[str, Any] | None = None, version: str | None = None) -> TorchInfo | None:
    """What we know about the installed torch, or None when torch is not installed.

    ``version`` saves a metadata lookup when the caller already read the dist-info.
    The arch list is memoised in ``memo`` by (path, size, mtime_ns) of libtorch_python.so.
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
        vp = parse_version_py(
            read_bytes(os.path.join(d, "version.py"), max_bytes=1 << 20).decode("utf-8", "replace")
        )
    except OSError:
        pass
    version = version or vp.get("__version__") or "unknown"
    return TorchInfo(
        version=version,
        cuda=vp.get("cuda"),
        git_version=vp.get("git_version"),
        arch_list=arch_list(d, memo),
        directory=d,
    )


def normalize_arches(names: Iterable[str]) -> tuple[str, ...]:
    """``["sm_90a", "compute_90"]`` -> ``("compute_90", "sm_90")``: sorted, suffix-free, unique."""
    out = set()
    for n in names:
        m = re.fullmatch(r"(sm|compute)_(\d+)[af]?", str(n).strip())
        if m:
            out.add(f"{m.group(1)}_{m.group(2)}")
    return tuple(sorted(out, key=lambda s: (int(s.split("_")[1]), s)))


def arch_list(
    directory: str | None = None, memo: dict[str, Any] | None = None
) -> tuple[str, ...] | None:
    """torch's compiled arch list, as ``torch.cuda.get_arch_list()`` gives it, without importing torch.

    Read from libtorch_python.so (memoised by its stat), so the answer and the fingerprint
    digest do not depend on whether torch was imported first; a torch already imported is
    asked (``torch._C._cuda_getArchFlags()``, which does not initialise CUDA) only when the
    library holds no such string. None: a CPU build, or unknown.
    """
    lib = libtorch_python_path(directory)
    if lib:
        found = _library_arch_list(lib, memo)
        if found is not None:
            return found
    return _imported_arch_list()


def _library_arch_list(lib: str, memo: dict[str, Any] | None) -> tuple[str, ...] | None:
    """The arch list ``lib`` (libtorch_python.so) holds, memoised by its stat in ``memo`` (a library that
    holds none is remembered as such, so it is not read again at every start); None when it holds none."""
    try:
        st = os.stat(lib)
        key = f"flags|{os.path.realpath(lib)}|{st.st_size}|{st.st_mtime_ns}"
    except OSError:
        key = None
    if memo is None or key is None:
        found = arch_flags(lib)
        return normalize_arches(found) if found is not None else None
    if isinstance(memo.get(key), list):
        return tuple(memo[key])
    found = None if memo.get(key) == "unreadable" else arch_flags(lib)
    if found is None:
        memo[key] = "unreadable"  # do not read the library again at every start
        return None
    result = normalize_arches(found)
    memo[key] = list(result)
    return result


def _imported_arch_list() -> tuple[str, ...] | None:
    """The arch list of this process's torch, when imported (never when judging another environment's,
    ``--python``): asked without initialising CUDA."""
    torch = sys.modules.get("torch") if interpreter.current() is None else None
    if torch is not None:
        try:
            flags = torch._C._cuda_getArchFlags()
            if flags:
                return normalize_arches(str(flags).split())
        except Exception:
            pass
    return None


def arch_flags(path: str) -> tuple[str, ...] | None:
    """The ``CUDA_ARCH_FLAGS`` string compiled into a library's ``.rodata``, split; None if absent.

    The flags are a whole C string of ``sm_XX``/``compute_XX`` tokens separated by single
    spaces; the longest such string wins (a lone token elsewhere is not taken for it).
    """
    from jitwarden.formats.elf import file_sections  # only when the library is read (not memoized)

    try:
        with open_regular_file(path) as f:
            sections = file_sections(f)
            if not sections or ".rodata" not in sections:
                return None
            off, size = sections[".rodata"]
            if size > MAX_RODATA:
                return None
            f.seek(off)
            data = f.read(size) + b"\0"
    except (OSError, ValueError):
        return None
    best = max(
        (m.group(1) for m in _FLAGS.finditer(data)),
        key=lambda b: (b.count(b" "), len(b)),
        default=None,
    )
    return tuple(best.decode("ascii").split()) if best else None
