"""CuPy adapter: CuPy's kernel cache, ``$CUPY_CACHE_DIR`` or ``~/.cupy/kernel_cache`` (stdlib only).

Followed sources (cupy/cupy, v14.2.0): ``cupy/cuda/_compiler_cache.py`` (``DiskKernelCacheBackend``:
the dir is ``CUPY_CACHE_DIR``, else ``~/.cupy/kernel_cache``; each file is written to a
``tempfile.NamedTemporaryFile`` in the dir, ``tmp`` plus 8 random characters, then ``os.replace``d
into place; with ``CUPY_CACHE_SAVE_CUDA_SOURCE`` the source is saved beside it as ``<name>.cu``) and
``cupy/cuda/compiler.py`` (a file is named ``<sha1 of the key text>.cubin``, ``.ltoir`` for LTO IR,
``.hsaco`` on ROCm; the key text holds the arch, options, NVRTC version, source and CuPy's header
checksum; ``CUPY_CACHE_IN_MEMORY`` keeps NVRTC builds off the disk). The file format is in
:mod:`jitwarden.formats.cupyentry`.

What binds an entry to its key: nothing CuPy stores. The header is a SHA-1 of the file's own payload,
so a file moved to another key passes CuPy's check; the key's hash cannot be recomputed without NVRTC.
Where ``<name>.cu`` was saved, the kernels its source defines must be in the cubin; otherwise a moved
file is caught by the seal (:mod:`jitwarden.runtime.flatseal`). See ARCHITECTURE.md.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, cast

from jitwarden.adapters import base
from jitwarden.adapters.surveys import Survey
from jitwarden.env import locations
from jitwarden.model import bounds
from jitwarden.model.entries import CacheRoot, Entry, Judge, KindFacts
from jitwarden.model.findings import Finding
from jitwarden.store.reads import read_bytes

if TYPE_CHECKING:
    from jitwarden.formats.cupyentry import CupyPayload

KIND = "cupy"
ROOT_RISK = None
ROOT_CHECKS = ()
ENTRY = re.compile(r"^([0-9a-f]{40})(\.cubin|\.ltoir|\.hsaco)(\.cu)?$")
Suffix = Literal[".cubin", ".ltoir", ".hsaco"]  # ENTRY's second group
TMP = re.compile(r"^tmp[a-z0-9_]{8}$")  # tempfile.NamedTemporaryFile's name in the cache dir
MAX_ENTRY = bounds.CUPY_ENTRY_MAX
MAX_SOURCE = 16 << 20
_EXTERN_C_KERNEL = re.compile(
    rb'extern\s+"C"\s+__global__\s+(?:void\s+)?(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:void\s+)?([A-Za-z_]\w*)\s*\('
)


@dataclass(frozen=True, slots=True)
class CupyFacts(KindFacts):
    """A file's key hash and suffix, its payload kind (``cubin``, ``ptx``, ``name-expressions``, ``ltoir``),
    the cubin's SM or the PTX target, its kernels and whether the source was saved beside it."""

    TOP: ClassVar[frozenset[str]] = frozenset({"cubin_sm", "ptx_target"})

    key_hash: str | None = None
    suffix: Suffix | None = None  # as ENTRY names them
    payload: str | None = None
    cubin_sm: int | None = None
    ptx_target: str | None = None
    kernels: tuple[str, ...] = ()
    source_saved: bool = False
    tmp: bool = False


# ---------------------------------------------------------------- roots


def discover_roots(env=os.environ) -> list[CacheRoot]:
    """CuPy's dir (``CUPY_CACHE_DIR``, else ``~/.cupy/kernel_cache``: :func:`jitwarden.env.locations.default_base`),
    the default one too when the variable moved it, and jitwarden's private root; existing dirs only."""
    cands = base.set_vars(env, "CUPY_CACHE_DIR") + [(locations.home_default(KIND, env), "default")]
    return base.existing(KIND, cands + base.private_root(KIND, env))


def looks_like_root(path: str) -> bool:
    """``.cupy/kernel_cache``, or a dir holding ``<sha1>.cubin`` files."""
    p = os.path.normpath(path)
    if os.path.basename(p) == "kernel_cache" and os.path.basename(os.path.dirname(p)) == ".cupy":
        return True
    return base.holds_match(path, ENTRY)


def list_entry_names(root: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Every ``<sha1>.<suffix>`` file (its saved ``.cu`` source goes with it) and every ``tmp*`` leftover."""
    names, strays = [], []
    tops = [e.name for e in base.entries(root)]
    have = set(tops)
    for top in tops:
        m = ENTRY.match(top)
        if m and not m.group(3):
            names.append(top)
        elif m:  # a saved source: part of its entry, or left alone
            if top[:-3] not in have:
                names.append(top)
        elif TMP.match(top):
            names.append(top)
        else:
            strays.append((top, "not part of CuPy's kernel cache layout"))
    return names, strays


# ---------------------------------------------------------------- judging


def source_kernels(src: bytes) -> tuple[str, ...]:
    """Names of the ``extern "C" __global__`` kernels a saved source defines (C++-mangled ones are not read)."""
    return tuple(sorted({m.decode() for m in _EXTERN_C_KERNEL.findall(src)}))


def _source_findings(root: str, name: str, kernels: tuple[str, ...]) -> tuple[bool, list[Finding]]:
    """(source saved, findings): the kernels the saved ``<name>.cu`` defines must be in the cubin."""
    path = os.path.join(root, f"{name}.cu")
    try:
        src = read_bytes(path, max_bytes=MAX_SOURCE)
    except FileNotFoundError:
        return False, []
    except OSError as exc:
        return True, [
            Finding(
                "unrecognised", f"{name}.cu unreadable ({exc.strerror or exc}): source not compared"
            )
        ]
    want = source_kernels(src)
    if not want or not kernels:
        return True, []
    if not set(want) & set(kernels):
        return True, [
            Finding(
                "mismatch",
                f"the source saved for this key defines {', '.join(want[:3])}, the cubin holds "
                f"{', '.join(kernels[:3])}: another kernel's file under this key (CuPy would load it)",
            )
        ]
    return True, []


def inspect_entry(root: str, name: str, judge: Judge, root_uid: int | None = None) -> Entry:
    """Read one file (no symlink followed) and judge it (see the module docstring).

    Evidence per rule: ``corrupt`` for a header SHA-1 that does not match the payload, a cubin that does not
    parse, an empty file, a file that no longer matches the dir's seal (a file moved to another key); ``mismatch`` for a recorded mangled name the cubin lacks, or a saved source whose
    kernels the cubin lacks; ``foreign-arch`` for a cubin of another SM than the target (CuPy keys by arch);
    ``orphan`` for an old ``tmp*`` leftover; ``unrecognised`` for a payload jitwarden does not know.
    """
    s, out, other = base.lone_file(
        KIND,
        root,
        name,
        root_uid,
        CupyFacts(),
        "not a regular file: CuPy writes one file per kernel",
    )
    if other:
        return other
    f = s.files[0]
    if TMP.match(name):
        if base.older_than(f.mtime, judge):
            out.append(
                Finding(
                    "orphan",
                    f"leftover of an interrupted write, {int((judge.now - f.mtime) // 60)} min old; "
                    "CuPy never reads it",
                )
            )
        return _unread(root, name, s, "partial", out, CupyFacts(tmp=True))
    m = ENTRY.match(name)
    assert m is not None  # the kind's names are ENTRY's
    key, suffix, cu = m.groups()
    suffix = cast(Suffix, suffix)
    if cu:
        return _unread(root, name, s, "source", out, CupyFacts(key, suffix, "source"))
    if f.size == 0:
        out.append(Finding("corrupt", "empty file: CuPy's header and payload are missing"))
        return _unread(root, name, s, "kernel", out, CupyFacts(key, suffix))
    try:
        data = read_bytes(s.path, max_bytes=MAX_ENTRY, size_hint=f.size)
    except OSError as exc:
        out.append(base.read_failure(exc, f"unreadable: {exc.strerror or exc}"))
        return _unread(root, name, s, "kernel", out, CupyFacts(key, suffix))
    sealed, out_seal = base.dir_seal_findings(root, name, data, judge)
    out += out_seal
    from jitwarden.formats import cupyentry  # here: telling a root's kind imports every adapter

    p = cupyentry.parse(data, suffix)
    arch = _payload_findings(p, judge, out)
    saved, sfind = (
        _source_findings(root, name, p.kernels)
        if not p.problem
        else (os.path.lexists(s.path + ".cu"), [])
    )
    return Entry(
        KIND,
        root,
        name,
        s.path,
        "kernel",
        p.kernels[0] if len(p.kernels) == 1 else None,
        arch,
        _with_source(s.path, f.size, saved),
        f.mtime,
        sealed,
        findings=tuple(dict.fromkeys(out + sfind)),
        facts=CupyFacts(key, suffix, p.payload, p.cubin_sm, p.ptx_target, p.kernels[:16], saved),
    )


def _unread(
    root: str, name: str, s: Survey, etype: str, out: list[Finding], facts: CupyFacts
) -> Entry:
    """The entry of a file whose payload is not judged (a leftover, a saved source, empty, unreadable)."""
    f = s.files[0]
    return Entry(
        KIND,
        root,
        name,
        s.path,
        etype,
        None,
        None,
        f.size,
        f.mtime,
        findings=tuple(out),
        facts=facts,
    )


def _payload_findings(p: CupyPayload, judge: Judge, out: list[Finding]) -> int | None:
    """What the parsed header and payload say; returns the arch they name (the cubin's SM, else PTX's target)."""
    if p.problem:
        out.append(Finding("mismatch" if p.contradiction else "corrupt", p.problem))
    elif p.unknown:
        out.append(Finding("unrecognised", p.unknown))
    if p.cubin_sm is not None and judge.target_arch is not None and p.cubin_sm != judge.target_arch:
        out.append(
            Finding(
                "foreign-arch",
                f"cubin is sm_{p.cubin_sm}, judged against sm_{judge.target_arch}: CuPy keys by "
                "arch, so this one is unreachable there",
            )
        )
    if p.cubin_sm is None and p.ptx_target:
        m = re.match(r"(?:sm|compute)_(\d{1,9})(?!\d)", p.ptx_target)
        return int(m.group(1)) if m else None
    return p.cubin_sm


def _with_source(path: str, size: int, saved: bool) -> int:
    """The kernel file's ``size``, with its saved ``.cu`` source's when there is one."""
    if saved:
        try:
            size += os.lstat(path + ".cu").st_size
        except OSError:
            pass
    return size
