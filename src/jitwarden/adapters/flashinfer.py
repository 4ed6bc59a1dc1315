"""FlashInfer adapter: ``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer`` (stdlib only).

Followed sources:

- flashinfer-python 0.7.4 ``flashinfer/jit/env.py``: the base is ``$FLASHINFER_WORKSPACE_BASE``
  or ``Path.home()``; the workspace is ``<base>/.cache/flashinfer/<flashinfer version>/<archs>/``,
  ``<archs>`` being the sorted ``<major><minor>`` of every target joined by ``_`` after
  ``CompilationContext._normalize_cuda_arch`` (``flashinfer/compilation_context.py``): ``90a``
  for 9.x, ``100a`` for 10.x, ``120f`` (CUDA >= 12.9) or ``120a`` for 12.0, ``121a`` for 12.1,
  no suffix below 9; from the visible devices or ``FLASHINFER_CUDA_ARCH_LIST``.
  Each op builds in ``<workspace>/cached_ops/<name>/`` (``jit/core.py``: ``build.ninja``,
  objects ``<dir>_<stem>.o``/``.cuda.o`` per ``jit/cpp_ext.py``, ``<name>.so``); locks and the
  batch ninja file live in ``cached_ops/tmp/``; generated sources in ``<workspace>/generated/``.
  Downloaded cubins go to ``<base>/.cache/flashinfer/cubins/`` (``FLASHINFER_CUBIN_DIR``).
- flashinfer-python 0.2.0.post1 / 0.2.5 ``flashinfer/jit/env.py`` (the older, unversioned layout):
  ``<base>/.cache/flashinfer/<archs>/cached_ops/<name>/`` with ``<archs>`` the sorted
  ``compute_XX`` numbers of torch's arch flags (``80_90``, no suffix) or ``noarch``; 0.2.0 used
  ``Path.home()`` only, 0.2.5 added ``FLASHINFER_WORKSPACE_BASE``; locks were
  ``cached_ops/<name>.lock``; modules were built by ``torch.utils.cpp_extension.load``.

Entries: ``<version>/<archs>/cached_ops/<name>`` (or ``<archs>/cached_ops/<name>``), and
``…/generated`` as one entry. Read: names, ELF headers of the ``.so``, ``build.ninja`` text.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from typing import ClassVar

from jitwarden.adapters.base import (
    elf_head,
    existing,
    listed,
    not_a_directory,
    older_than,
    set_vars,
    so_findings,
    survey_findings,
    unreadable,
)
from jitwarden.adapters.surveys import survey
from jitwarden.env import locations
from jitwarden.model.entries import CacheRoot, Entry, Judge, KindFacts
from jitwarden.model.findings import Finding
from jitwarden.model.layout import is_reserved
from jitwarden.store.reads import read_head

KIND = "flashinfer"
ROOT_RISK = None
ROOT_CHECKS = ()
ARCHS = re.compile(r"^(?:noarch|\d+[af]?(?:_\d+[af]?)*)$")
VERSION = re.compile(r"^\d+\.\d+[0-9A-Za-z.+_-]*$")
_ONE_ARCH = re.compile(r"(\d+)([af]?)")
_GENCODE = re.compile(
    r"(?:-gencode[= ]|--generate-code=)arch=compute_(\d+)([af]?),code=\[?(?:sm|compute)_(\d+)([af]?)"
)
_SKIP = frozenset({"tmp"})  # cached_ops/tmp: lock files and the batch ninja file, not an op
_NINJA_MAX = 1 << 20


@dataclass(frozen=True, slots=True)
class FlashInferFacts(KindFacts):
    """Where an op build sits: the FlashInfer version directory (None in the unversioned 0.2.x layout),
    the arch directory, which layout, and the ``-gencode`` targets its ``build.ninja`` compiles for."""

    SHOWN_NONE: ClassVar[frozenset[str]] = frozenset({"version"})

    version: str | None
    archs: str
    layout: str  # versioned, unversioned
    gencode: tuple[str, ...] | None = None


# ---------------------------------------------------------------- roots


def discover_roots(env=os.environ) -> list[CacheRoot]:
    """``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer`` when set, and ``~/.cache/flashinfer``; existing dirs only."""
    bases = set_vars(env, "FLASHINFER_WORKSPACE_BASE") + [(locations.home(env), "default")]
    return existing(KIND, [(locations.flashinfer_cache_dir(env, b), src) for b, src in bases])


def _workspaces(root: str) -> list[tuple[str, str | None, str]]:
    """(relative workspace dir, version or None, archs) for every workspace under ``root``."""
    out: list[tuple[str, str | None, str]] = []
    try:
        ls = listed(root)
    except OSError:
        return out
    # Only names a workspace can have are looked at (C-speed matches: a root of another kind lists 10,000s).
    named = set(filter(ARCHS.match, ls.names)).union(filter(VERSION.match, ls.names))
    tops = sorted(n for n in ls.dirs(named) if not is_reserved(n)) if named else []
    for top in tops:
        if ARCHS.match(top):
            out.append((top, None, top))
        elif VERSION.match(top):
            try:
                with os.scandir(os.path.join(root, top)) as it:
                    subs = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
            except OSError:
                continue
            out += [(f"{top}/{a}", top, a) for a in subs if ARCHS.match(a)]
    return out


def looks_like_root(path: str) -> bool:
    """``.cache/flashinfer``, or a dir whose workspaces hold ``cached_ops``."""
    p = os.path.normpath(path)
    if os.path.basename(p) == "flashinfer" and os.path.basename(os.path.dirname(p)) == ".cache":
        return True
    return any(
        os.path.isdir(os.path.join(path, ws, "cached_ops")) for ws, _v, _a in _workspaces(path)[:32]
    )


def list_entry_names(root: str) -> tuple[list[str], list[tuple[str, str]]]:
    """``<ws>/cached_ops/<name>`` for every op build and ``<ws>/generated`` for generated sources."""
    names, strays = [], []
    os.listdir(root)  # OSError for an unreadable root, as the scanner expects
    for ws, _v, _a in _workspaces(root):
        ops = os.path.join(root, ws, "cached_ops")
        try:
            with os.scandir(ops) as it:
                for e in it:
                    if e.name in _SKIP or is_reserved(e.name):
                        continue
                    if e.is_dir(follow_symlinks=False) or e.is_symlink():
                        names.append(f"{ws}/cached_ops/{e.name}")
                    elif not e.name.endswith(".lock"):
                        strays.append((f"{ws}/cached_ops/{e.name}", "file"))
        except OSError:
            pass
        if os.path.isdir(os.path.join(root, ws, "generated")):
            names.append(f"{ws}/generated")
    names.sort()
    return names, strays


# ---------------------------------------------------------------- judging


def parse_archs(archs: str) -> tuple[tuple[int, str], ...]:
    """``80_90a_120f`` -> ((80, ''), (90, 'a'), (120, 'f')); ``noarch`` -> ()."""
    return tuple((int(n), suf) for n, suf in _ONE_ARCH.findall(archs)) if archs != "noarch" else ()


def arch_runs_on(arch: int, suffix: str, target: int) -> bool:
    """Whether code built for ``sm_<arch><suffix>`` runs on ``target``: ``a`` exact, ``f`` same family, plain same major."""
    if suffix == "a":
        return arch == target
    return arch // 10 == target // 10 and arch <= target


def _named(n: int, suf: str, parsed) -> bool:
    """Whether the arch dir names target ``sm_<n><suf>``: the same number, or an ``f`` family target of a
    directory arch in that family (SM107 builds sm_100f, ``compilation_context.py``)."""
    return any(a == n or (suf == "f" and a // 10 == n // 10 and a >= n) for a, _s in parsed)


def version_matches(dir_version: str, installed: str) -> bool:
    """The directory is named by ``flashinfer.__version__``; dist metadata may add or drop a ``+local`` part."""
    return (
        dir_version == installed
        or dir_version.split("+")[0] == installed.split("+")[0]
        and ("+" not in dir_version or "+" not in installed)
    )


def _split(name: str) -> tuple[str | None, str, str, str | None]:
    """(version, archs, workspace, op name or None for generated) of an entry id."""
    parts = name.split("/")
    if parts[-1] == "generated":
        ws = parts[:-1]
        op = None
    else:
        ws = parts[:-2]
        op = parts[-1]
    if len(ws) == 2:
        return ws[0], ws[1], "/".join(ws), op
    return None, ws[0] if ws else "", "/".join(ws), op


def inspect_entry(root: str, name: str, judge: Judge, root_uid: int | None = None) -> Entry:
    """Read one op build dir (or a workspace's generated sources) and judge it.

    Evidence per rule: ``stale`` when the version directory names another FlashInfer than the
    installed one (FlashInfer reads only its own); ``incomplete`` for a build dir without its
    ``.so`` past the orphan age; ``corrupt`` for a ``.so`` whose ELF header is broken;
    ``mismatch`` when ``build.ninja`` compiles for archs its directory does not name.
    """
    version, archs, ws, op = _split(name)
    s = survey(root, name)
    out = survey_findings(s, root_uid, "op directory" if op else "generated directory")
    facts = FlashInferFacts(version, archs, "versioned" if version else "unversioned")
    if not s.is_dir:
        return not_a_directory(KIND, root, name, s, out, "entry", op, facts)
    files = {f.name: f for f in s.files}
    newest = s.newest
    etype = "op" if op else "generated"
    out += _version_findings(version, judge.version("flashinfer"))
    parsed = parse_archs(archs)
    arch = max((a for a, _s in parsed), default=None)
    out += _arch_findings(archs, parsed, judge)
    if op is not None:
        out += _so_findings(s.path, files, judge)
        if f"{op}.so" not in files:
            etype = _without_so(op, files, newest, judge, out)
        if "build.ninja" in files and parsed:
            facts = _ninja_findings(s.path, archs, parsed, facts, out)
    return Entry(
        KIND,
        root,
        name,
        s.path,
        etype,
        op,
        arch,
        s.bytes,
        newest,
        findings=tuple(dict.fromkeys(out)),
        facts=facts,
    )


def _version_findings(version: str | None, installed: str | None) -> list[Finding]:
    """The version directory against the installed FlashInfer, which reads only ``<its version>/<archs>/``
    (0.2.x read ``<archs>/``)."""
    if not installed:
        return []
    if version is not None and not version_matches(version, installed):
        return [
            Finding(
                "stale",
                f"built by FlashInfer {version}; FlashInfer {installed} is installed and reads "
                f"{installed}/<archs>/ only",
            )
        ]
    if version is None and not installed.startswith("0.2."):
        return [
            Finding(
                "stale",
                f"unversioned layout of FlashInfer 0.2.x; FlashInfer {installed} reads "
                f"{installed}/<archs>/ only",
            )
        ]
    return []


def _arch_findings(archs: str, parsed, judge: Judge) -> list[Finding]:
    """The arch directory against the GPU judged for."""
    if (
        judge.target_arch is not None
        and parsed
        and not any(arch_runs_on(a, suf, judge.target_arch) for a, suf in parsed)
    ):
        return [
            Finding(
                "foreign-arch",
                f"built for {archs}, judged against sm_{judge.target_arch}: unreachable here",
            )
        ]
    return []


def _so_findings(path: str, files: dict, judge: Judge) -> list[Finding]:
    """Each ``.so`` of an op build dir by its ELF header, against this host."""
    out: list[Finding] = []
    for rel in sorted(f for f in files if "/" not in f and f.endswith(".so")):
        try:
            out += so_findings(
                rel, elf_head(os.path.join(path, rel), files[rel].size), judge.host_machine
            )
        except OSError as exc:
            out.append(unreadable(rel, exc))
    return out


def _without_so(op: str, files: dict, newest: float, judge: Judge, out: list[Finding]) -> str:
    """The type of an op build dir without its ``.so``: ``partial`` past the orphan age (an interrupted build,
    ``incomplete``), else ``building``."""
    if not older_than(newest, judge):
        return "building"
    what = "build.ninja but no" if "build.ninja" in files else "no build.ninja and no"
    out.append(
        Finding(
            "incomplete",
            f"op directory has {what} {op}.so: an interrupted build "
            f"({int((judge.now - newest) // 60)} min old)",
        )
    )
    return "partial"


def _ninja_findings(
    path: str, archs: str, parsed, facts: FlashInferFacts, out: list[Finding]
) -> FlashInferFacts:
    """The targets ``build.ninja`` compiles for, against the ones its arch directory names; the facts with
    them recorded."""
    try:
        text = read_head(os.path.join(path, "build.ninja"), _NINJA_MAX).decode("utf-8", "replace")
    except OSError as exc:
        out.append(unreadable("build.ninja", exc))
        return facts
    targets = sorted({(int(n), suf) for _c, _cs, n, suf in _GENCODE.findall(text)})
    if not targets:
        return facts
    # Compare numbers: FlashInfer spells 12.0 as 120f or 120a depending on the CUDA toolkit.
    foreign = [f"sm_{n}{suf}" for n, suf in targets if not _named(n, suf, parsed)]
    if foreign:
        out.append(
            Finding(
                "mismatch",
                f"build.ninja compiles for {', '.join(foreign)}, which the "
                f"arch directory {archs} does not name",
            )
        )
    return replace(facts, gencode=tuple(f"sm_{n}{suf}" for n, suf in targets))
