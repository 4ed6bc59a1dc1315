"""DeepGEMM adapter: ``$DG_JIT_CACHE_DIR`` or ``~/.deep_gemm`` (stdlib only).

Followed sources (deepseek-ai/DeepGEMM):

- ``csrc/jit/compiler.hpp`` (``Compiler::Compiler``, ``Compiler::build``): the root is
  ``$DG_JIT_CACHE_DIR`` when non-empty, else ``$HOME/.deep_gemm``; a kernel lives in
  ``cache/kernel.<name>.<hex digest of name, compiler signature, flags, code>/`` holding
  ``kernel.cu`` and ``kernel.cubin`` (``kernel.ptx``/``kernel.sass`` with the dump knobs). It is
  compiled into ``tmp/<uuid>/`` and renamed into place as a whole; a loser of the rename race
  removes its ``tmp/<uuid>``, a crash leaves it behind. ``--gpu-architecture=sm_<arch>``
  comes from ``device_runtime.hpp`` ``get_arch``: ``90a``, ``100a``/``100f`` for every 10.x
  but 10.1, ``120f`` for every 12.x.
- ``csrc/jit/kernel_runtime.hpp`` (``check_validity``): a cache dir without both
  ``kernel.cu`` and ``kernel.cubin`` aborts the process ("Corrupted JIT cache directory").
- The 1.0.0 release on PyPI (``deep_gemm/jit/compiler.py``, ``runtime.py``): root
  ``$DG_CACHE_DIR`` or ``~/.deep_gemm``; ``cache/kernel.<name>.<md5[:12]>/`` with
  ``kernel.cu``, ``kernel.args`` and ``kernel.so`` (an nvcc ``-shared`` host library for
  sm_90a), the ``.so`` compiled to ``tmp/nvcc.tmp.<uuid>.<hash>.so`` and renamed; the other
  files written through ``tmp/file.tmp.<uuid>.<hash>``.

What is read: names, sizes, ELF headers (cubin SM, ``.so`` machine), the head of
``kernel.ptx``. ``kernel.args`` is Python source DeepGEMM ``eval``s: never evaluated here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import ClassVar

from jitwarden.adapters.base import (
    cubin_findings,
    elf_head,
    entries,
    existing,
    holds_match,
    not_a_directory,
    older_than,
    set_vars,
    so_findings,
    survey_findings,
    unreadable,
)
from jitwarden.adapters.surveys import File, survey
from jitwarden.env import locations
from jitwarden.formats.ptx import parse_header
from jitwarden.model.entries import CacheRoot, Entry, Judge, KindFacts
from jitwarden.model.findings import Finding
from jitwarden.store.reads import read_head

KIND = "deepgemm"
ROOT_RISK = None
ROOT_CHECKS = ()
ENTRY = re.compile(r"^kernel\.(.+)\.([0-9a-f]{8,64})$")
_FAMILY_MAJORS = (10, 12)  # get_arch: sm_100f / sm_120f, one cubin for the whole family


@dataclass(frozen=True, slots=True)
class DeepGemmFacts(KindFacts):
    """A kernel directory's name parts (``kernel.<kernel>.<hash>``), its cubin's SM, its PTX header and
    files DeepGEMM does not write; or ``tmp``: a leftover under ``tmp/`` of an interrupted compile."""

    TOP: ClassVar[frozenset[str]] = frozenset({"cubin_sm"})

    kernel: str | None = None
    hash: str | None = None
    cubin_sm: int | None = None
    ptx_target: str | None = None
    ptx_version: str | None = None
    other_files: tuple[str, ...] = ()
    tmp: bool = False

    def to_json(self) -> dict:
        if self.tmp:
            return {"tmp": True}
        out: dict = {"kernel": self.kernel, "hash": self.hash}
        if self.ptx_target:  # the PTX header's two facts go together
            out.update(ptx_target=self.ptx_target, ptx_version=self.ptx_version)
        if self.other_files:
            out["other_files"] = list(self.other_files)
        return out


# ---------------------------------------------------------------- roots


def discover_roots(env=os.environ) -> list[CacheRoot]:
    """``DG_JIT_CACHE_DIR`` (DeepGEMM 2.x), ``DG_CACHE_DIR`` (1.0.0), and ``$HOME/.deep_gemm``; existing dirs only."""
    return existing(
        KIND,
        set_vars(env, "DG_JIT_CACHE_DIR", "DG_CACHE_DIR")
        + [(locations.deepgemm_default(env), "default")],
    )


def looks_like_root(path: str) -> bool:
    """A dir with ``cache/kernel.*`` entries (or named ``.deep_gemm`` with a ``cache`` or ``tmp`` dir)."""
    cache = os.path.join(path, "cache")
    if os.path.basename(os.path.normpath(path)) == ".deep_gemm" and (
        os.path.isdir(cache) or os.path.isdir(os.path.join(path, "tmp"))
    ):
        return True
    return holds_match(cache, ENTRY)


def list_entry_names(root: str) -> tuple[list[str], list[tuple[str, str]]]:
    """``cache/kernel.<name>.<hash>`` for every kernel, ``tmp/<item>`` for every temp leftover."""
    names, strays = [], []
    for top in entries(root):
        if top.name in ("cache", "tmp") and top.is_dir(follow_symlinks=False):
            names += [f"{top.name}/{e.name}" for e in entries(top.path)]
        else:
            strays.append((top.name, "not part of DeepGEMM's layout"))
    return names, strays


# ---------------------------------------------------------------- judging


def reachable(sm: int, target: int) -> bool:
    """Whether DeepGEMM's cubin for ``sm`` is the one it loads on a ``target`` GPU (``get_arch``)."""
    if sm == target:
        return True
    return (
        sm // 10 == target // 10 and sm // 10 in _FAMILY_MAJORS and sm % 10 == 0 and target != 101
    )


def _tmp_entry(root: str, name: str, s, judge: Judge, root_uid) -> Entry:
    out = survey_findings(s, root_uid, "temp item")
    mtime = s.newest
    if older_than(mtime, judge):
        out.append(
            Finding(
                "orphan",
                f"leftover of an interrupted compile, {int((judge.now - mtime) // 60)} min old; "
                "DeepGEMM never reads it",
            )
        )
    # "partial" (an interrupted write, never loaded): clean takes the item whole.
    return Entry(
        KIND,
        root,
        name,
        s.path,
        "partial",
        None,
        None,
        s.bytes,
        mtime,
        findings=tuple(out),
        facts=DeepGemmFacts(tmp=True),
    )


def inspect_entry(root: str, name: str, judge: Judge, root_uid: int | None = None) -> Entry:
    """Read one kernel dir (names, ELF headers, PTX head) or temp leftover, and judge it.

    Evidence per rule: ``corrupt`` for an empty ``kernel.cu``, a cubin whose ELF header is broken,
    PTX without ``.target``; ``mismatch`` for a host ELF as cubin, PTX target vs cubin SM;
    ``incomplete`` for files DeepGEMM writes together but are missing; ``unrecognised`` for a
    directory not named as DeepGEMM 1.0 names kernels.
    """
    s = survey(root, name)
    if name.startswith("tmp/"):
        return _tmp_entry(root, name, s, judge, root_uid)
    out = survey_findings(s, root_uid, "kernel directory")
    path = s.path
    base = name.rpartition("/")[2]
    m = ENTRY.match(base)
    kname = m.group(1) if m else None
    khash = m.group(2) if m else None
    if not s.is_dir:
        return not_a_directory(
            KIND, root, name, s, out, "kernel directory", kname, DeepGemmFacts(kname, khash)
        )
    if m is None:
        # A name DeepGEMM 1.0 never writes is a layout we do not know, not evidence of damage.
        out.append(
            Finding(
                "unrecognised",
                f"{base} is not named kernel.<name>.<hash> as DeepGEMM 1.0 names its "
                "kernels: not a layout jitwarden knows",
            )
        )
    files = {f.name: f for f in s.files}
    newest = s.newest
    cubin_sm = ptx_target = ptx_version = None
    if "kernel.so" in files or "kernel.args" in files:
        # DeepGEMM 1.0.0: kernel.cu and kernel.args written in place, kernel.so renamed in last.
        etype = "kernel-so"
        arch = _kernel_so_findings(path, files, newest, judge, out)
    else:
        etype = "cubin"  # not "kernel": that type means a Triton entry to the rebuild
        cubin_sm, ptx_target, ptx_version = _cubin_dir_findings(path, files, judge, out)
        arch = cubin_sm
    others = sorted(
        f
        for f in files
        if f
        not in (
            "kernel.cu",
            "kernel.cubin",
            "kernel.ptx",
            "kernel.sass",
            "kernel.args",
            "kernel.so",
        )
    )
    return Entry(
        KIND,
        root,
        name,
        path,
        etype,
        kname,
        arch,
        s.bytes,
        newest,
        findings=tuple(dict.fromkeys(out)),
        facts=DeepGemmFacts(kname, khash, cubin_sm, ptx_target, ptx_version, tuple(others[:8])),
    )


def _kernel_so_findings(
    path: str, files: dict[str, File], newest: float, judge: Judge, out: list[Finding]
) -> int | None:
    """DeepGEMM 1.0.0's layout (kernel.cu, kernel.args, kernel.so): what is missing, the module's ELF
    header, its one arch (sm_90a) against the judged GPU. Returns the arch when the module is there."""
    missing = [f for f in ("kernel.cu", "kernel.args", "kernel.so") if f not in files]
    if missing and older_than(newest, judge):
        out.append(
            Finding(
                "incomplete",
                f"missing {', '.join(missing)}: an interrupted compile; DeepGEMM 1.0.0 "
                "treats the directory as a miss and compiles it again",
            )
        )
    if "kernel.so" not in files:
        return None
    try:
        out += so_findings(
            "kernel.so",
            elf_head(os.path.join(path, "kernel.so"), files["kernel.so"].size),
            judge.host_machine,
        )
    except OSError as exc:
        out.append(unreadable("kernel.so", exc))
    if judge.target_arch is not None and judge.target_arch != 90:
        out.append(
            Finding(
                "foreign-arch",
                f"DeepGEMM 1.0.0 builds sm_90a only, judged against sm_{judge.target_arch}",
            )
        )
    return 90  # compiler.py: -gencode=arch=compute_90a,code=sm_90a, always


def _cubin_dir_findings(
    path: str, files: dict[str, File], judge: Judge, out: list[Finding]
) -> tuple[int | None, str | None, str | None]:
    """The cubin layout (kernel.cu, kernel.cubin, kernel.ptx, renamed into place whole): what is missing,
    the cubin's ELF header, the PTX header against it, the cubin's SM against the judged GPU. Returns
    (cubin SM, PTX target, PTX version)."""
    missing = [f for f in ("kernel.cu", "kernel.cubin") if f not in files]
    if missing:
        out.append(
            Finding(
                "incomplete",
                f"missing {' and '.join(missing)}: DeepGEMM renames a kernel dir into place "
                "whole, so this one was damaged after; loading it aborts the process",
            )
        )
    if "kernel.cu" in files and files["kernel.cu"].size == 0:
        out.append(Finding("corrupt", "kernel.cu is empty"))
    cubin_sm = _cubin_sm(path, files["kernel.cubin"].size, out) if "kernel.cubin" in files else None
    ptx_target = ptx_version = None
    if "kernel.ptx" in files:
        ptx_target, ptx_version = _ptx_header(path, cubin_sm, out)
    if (
        cubin_sm is not None
        and judge.target_arch is not None
        and not reachable(cubin_sm, judge.target_arch)
    ):
        out.append(
            Finding(
                "foreign-arch",
                f"kernel.cubin is sm_{cubin_sm}, judged against sm_{judge.target_arch}: "
                "DeepGEMM builds another target there, this one is unreachable",
            )
        )
    return cubin_sm, ptx_target, ptx_version


def _cubin_sm(path: str, size: int, out: list[Finding]) -> int | None:
    """``kernel.cubin``'s SM, by its ELF header; None when it is unreadable or broken (the finding in ``out``)."""
    try:
        head = elf_head(os.path.join(path, "kernel.cubin"), size)
    except OSError as exc:
        out.append(unreadable("kernel.cubin", exc))
        return None
    bad = cubin_findings("kernel.cubin", head)
    out += bad
    return None if bad else head.sm


def _ptx_header(
    path: str, cubin_sm: int | None, out: list[Finding]
) -> tuple[str | None, str | None]:
    """(target, version) of ``kernel.ptx``'s header, its target against the cubin's SM."""
    try:
        hdr = parse_header(read_head(os.path.join(path, "kernel.ptx"), 16384))
    except OSError as exc:
        out.append(unreadable("kernel.ptx", exc))
        return None, None
    if hdr.target is None:
        out.append(Finding("corrupt", "kernel.ptx: no PTX .target header"))
    elif cubin_sm is not None and hdr.target_arch not in (None, cubin_sm):
        out.append(
            Finding("mismatch", f"kernel.ptx targets {hdr.target}, kernel.cubin is sm_{cubin_sm}")
        )
    return hdr.target, hdr.version
