"""Which ptxas assembles this environment's kernels, and what exactly it is.

Triton's cache key holds ``ptxas --version`` text, not the binary: a wrapper or a
``TRITON_PTXAS_PATH`` swap with the same version text collides.
So we identify each ptxas by the sha256 of its content, and memoise that by stat
so a warm start runs no subprocess and hashes nothing.

Standard library only: this module is on the activation path.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from jitwarden.env import interpreter
from jitwarden.store.reads import open_regular

VERSION_TIMEOUT_S = 10.0

_RELEASE_RE = re.compile(r"release (\d+\.\d+)(?:, (V[\w.]+))?")

# First CUDA (ptxas) release able to target each arch; anything not listed is "unknown".
_FIRST_RELEASE = {
    50: (6, 0),
    52: (6, 5),
    53: (7, 0),
    60: (8, 0),
    61: (8, 0),
    62: (8, 0),
    70: (9, 0),
    72: (10, 0),
    75: (10, 0),
    80: (11, 0),
    86: (11, 1),
    87: (11, 4),
    89: (11, 8),
    90: (11, 8),
    100: (12, 8),
    101: (12, 8),
    120: (12, 8),
    103: (12, 9),
    121: (12, 9),
    110: (13, 0),
}
# CUDA 13.0 renamed sm_101 (Thor) to sm_110 and dropped targets below sm_75.
_LAST_RELEASE = {
    101: (12, 9),
    50: (12, 9),
    52: (12, 9),
    53: (12, 9),
    60: (12, 9),
    61: (12, 9),
    62: (12, 9),
    70: (12, 9),
    72: (12, 9),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class TritonRecipe:
    """How one Triton release picks its ptxas and builds the ptxas command line.

    Read from each release's ``get_ptxas`` and ``CUDABackend.make_cubin``
    (``triton/backends/nvidia/compiler.py``). ``known`` is False when the release asked for
    is not in :data:`RECIPES` and the nearest one stands in: a rebuild by it proves nothing.
    """

    release: str  # "3.6"
    blackwell_from: int | None  # get_ptxas returns ptxas-blackwell from this arch on; None: never
    debug_g: bool  # DISABLE_PTXAS_OPT passes -g (3.5 on) rather than -lineinfo
    reg_alloc: bool  # --regAllocOptLevel=2 after the opt level (3.7 on: a ptxas 13.x workaround)
    sanitizer_opt: (
        str | None
    )  # consan/fpsan add --opt-level 1: None, "substring" (3.8), "names" (3.9)
    known: bool = True

    def binary(self, arch: int) -> tuple[str, str]:
        """(bundled file name, env override) of the ptxas this release runs for ``arch``."""
        if self.blackwell_from is not None and arch >= self.blackwell_from:
            return "ptxas-blackwell", "TRITON_PTXAS_BLACKWELL_PATH"
        return "ptxas", "TRITON_PTXAS_PATH"

    def roles(self) -> tuple[str, ...]:
        """The ptxas roles this release uses (``triton-blackwell`` only where it has that binary)."""
        return ("triton",) if self.blackwell_from is None else ("triton", "triton-blackwell")

    def role(self, arch: int) -> str:
        return "triton-blackwell" if self.binary(arch)[0] == "ptxas-blackwell" else "triton"


#: Every Triton release jitwarden has read, oldest first.
#: 3.4/3.5: one ``ptxas`` (12.8) for every arch; 3.6: ``ptxas-blackwell`` from sm_100;
#: 3.7: adds ``--regAllocOptLevel=2``; 3.8: consan/fpsan add ``--opt-level 1``;
#: 3.9: ``ptxas-blackwell`` (13.x) for every arch from sm_90.
RECIPES = (
    TritonRecipe(
        release="3.4", blackwell_from=None, debug_g=False, reg_alloc=False, sanitizer_opt=None
    ),
    TritonRecipe(
        release="3.5", blackwell_from=None, debug_g=True, reg_alloc=False, sanitizer_opt=None
    ),
    TritonRecipe(
        release="3.6", blackwell_from=100, debug_g=True, reg_alloc=False, sanitizer_opt=None
    ),
    TritonRecipe(
        release="3.7", blackwell_from=100, debug_g=True, reg_alloc=True, sanitizer_opt=None
    ),
    TritonRecipe(
        release="3.8", blackwell_from=100, debug_g=True, reg_alloc=True, sanitizer_opt="substring"
    ),
    TritonRecipe(
        release="3.9", blackwell_from=90, debug_g=True, reg_alloc=True, sanitizer_opt="names"
    ),
)


def _major_minor(version: str | None) -> tuple[int, int] | None:
    m = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def recipe_for(version: str | None) -> TritonRecipe:
    """The recipe of Triton ``version`` ("3.9.0", "3.6.0+git..."); the nearest, ``known=False``, else.

    ``None`` (no version recorded): the installed Triton's recipe.
    """
    if version is None:
        version = installed_triton_version()
    mm = _major_minor(version)
    by = {_major_minor(r.release): r for r in RECIPES}
    if mm in by:
        return by[mm]
    if mm is not None and mm < (
        _major_minor(RECIPES[0].release) or (0, 0)
    ):  # recipes name a release
        near = RECIPES[0]
    else:
        near = RECIPES[-1]
    return TritonRecipe(
        release=near.release,
        blackwell_from=near.blackwell_from,
        debug_g=near.debug_g,
        reg_alloc=near.reg_alloc,
        sanitizer_opt=near.sanitizer_opt,
        known=False,
    )


_INSTALLED: dict[str, str | None] = {}


def installed_triton_version() -> str | None:
    """The installed Triton's version, from its dist-info beside the package (no import, no metadata scan)."""
    d = interpreter.package_dir("triton")
    if d is None:
        return None
    parent = os.path.dirname(d)
    if parent in _INSTALLED:
        return _INSTALLED[parent]
    version = None
    try:
        names = os.listdir(parent)
    except OSError:
        names = []
    for n in sorted(names):
        for prefix in ("triton-", "pytorch_triton-"):
            if n.startswith(prefix) and n.endswith(".dist-info"):
                version = n[len(prefix) : -len(".dist-info")]
                break
        if version:
            break
    _INSTALLED[parent] = version
    return version


@dataclass(frozen=True, slots=True, kw_only=True)
class PtxasInfo:
    """One ptxas binary: where it is, what it says it is, and what it really is."""

    path: str
    realpath: str
    version_text: str
    release: str | None
    build: str | None
    sha256: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PtxasInfo:
        if not isinstance(d, dict):
            raise ValueError("ptxas entry is not an object")
        try:
            return cls(
                path=str(d["path"]),
                realpath=str(d["realpath"]),
                version_text=str(d["version_text"]),
                release=None if d.get("release") is None else str(d["release"]),
                build=None if d.get("build") is None else str(d["build"]),
                sha256=str(d["sha256"]),
                size=int(d["size"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"ptxas entry lacks or mangles {exc}") from None


def parse_version(text: str) -> tuple[str | None, str | None]:
    """``"... release 12.8, V12.8.93"`` -> ``("12.8", "V12.8.93")``."""
    m = _RELEASE_RE.search(text)
    if not m:
        return None, None
    return m.group(1), m.group(2)


def stat_key(realpath: str, st: os.stat_result) -> str:
    """The file's identity for the memo: ctime too, which no one can set back (a rewrite in place that
    restores size and mtime still moves it)."""
    return f"{realpath}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}|{st.st_ctime_ns}"


_MEMO: dict[str, PtxasInfo] = {}


def inspect(path: str, memo: dict[str, Any] | None = None) -> PtxasInfo | None:
    """Identify the ptxas at ``path``; None if missing, not executable or ``--version`` fails.

    ``memo`` (a persistent dict owned by the caller) maps a stat key to a dict form of
    PtxasInfo: when stat is unchanged, neither the hash nor the subprocess runs.
    """
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except (OSError, ValueError):
        return None
    if not os.path.isfile(real) or not os.access(real, os.X_OK):
        return None
    key = stat_key(real, st)
    hit = _MEMO.get(key)
    if hit is None and memo is not None and key in memo:
        try:
            hit = PtxasInfo.from_json(memo[key])
        except ValueError:
            hit = None
    if hit is not None:
        _MEMO[key] = hit
        if memo is not None:
            memo[key] = hit.to_json()
        return hit if hit.path == path else _with_path(hit, path)
    import subprocess  # lazily: a memoised start never pays for it

    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, timeout=VERSION_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if out.returncode != 0:
        return None
    text = (out.stdout + out.stderr).decode("utf-8", "replace").strip()
    release, build = parse_version(text)
    try:
        digest = _sha256_file(real)
    except OSError:
        return None
    info = PtxasInfo(
        path=path,
        realpath=real,
        version_text=text,
        release=release,
        build=build,
        sha256=digest,
        size=st.st_size,
    )
    _MEMO[key] = info
    if memo is not None:
        memo[key] = info.to_json()
    return info


def _with_path(info: PtxasInfo, path: str) -> PtxasInfo:
    return PtxasInfo(
        path=path,
        realpath=info.realpath,
        version_text=info.version_text,
        release=info.release,
        build=info.build,
        sha256=info.sha256,
        size=info.size,
    )


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    fd, _st = open_regular(path)
    try:
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


def triton_bin_dir() -> str | None:
    """``<triton>/backends/nvidia/bin``, where Triton keeps its bundled ptxas (of the environment judged
    against: :mod:`jitwarden.env.interpreter`)."""
    d = interpreter.package_dir("triton")
    return os.path.join(d, "backends", "nvidia", "bin") if d else None


def torch_bin_ptxas() -> str | None:
    """``<torch>/bin/ptxas`` when this torch wheel ships one (CUDA wheels do)."""
    from jitwarden.env.torchinfo import torch_bin_ptxas as _tbp

    return _tbp()


def _runs(path: str, memo: dict[str, Any] | None = None) -> bool:
    """Triton's ``NvidiaTool.from_path`` test: ``--version`` succeeds and names a release."""
    info = inspect(path, memo)
    return info is not None and info.release is not None


def for_arch(
    arch: int,
    env: Mapping[str, str] | None = None,
    memo: dict[str, Any] | None = None,
    recipe: TritonRecipe | None = None,
) -> str | None:
    """The ptxas path the installed Triton (or ``recipe``'s) picks for ``arch`` (knobs.env_nvidia_tool + get_ptxas)."""
    env = os.environ if env is None else env
    recipe = recipe_for(None) if recipe is None else recipe
    binary, var = recipe.binary(arch)
    d = triton_bin_dir()
    default = os.path.join(d, binary) if d else None
    override = env.get(var)
    for cand in (override, default):
        if cand and _runs(cand, memo):
            return cand
    return None


def selected(
    env: Mapping[str, str] | None = None,
    memo: dict[str, Any] | None = None,
    recipe: TritonRecipe | None = None,
) -> list[tuple[str, str]]:
    """(role, path) of every ptxas this environment's compilers would use.

    ``triton``: Triton's ``ptxas`` (every arch up to 3.5; below sm_100 in 3.6-3.8; below
    sm_90 in 3.9); ``triton-blackwell``: ``ptxas-blackwell`` for the other arches (3.6 on);
    ``inductor``: torch's own ``torch/bin/ptxas``, which TorchInductor's codecache sets as
    ``TRITON_PTXAS_PATH`` when unset (so, in a process that compiles through Inductor, it
    replaces ``triton`` wherever Triton runs ``ptxas``; ``TRITON_PTXAS_BLACKWELL_PATH`` is
    left alone).
    """
    env = os.environ if env is None else env
    recipe = recipe_for(None) if recipe is None else recipe
    out: list[tuple[str, str]] = []
    for role, arch in (("triton", 80), ("triton-blackwell", 100)):
        if role in recipe.roles():
            p = for_arch(arch, env, memo, recipe)
            if p:
                out.append((role, p))
    if not env.get("TRITON_PTXAS_PATH"):
        tp = torch_bin_ptxas()
        if tp and _runs(tp, memo):
            out.append(("inductor", tp))
    return out


def machine_candidates(env: Mapping[str, str] | None = None) -> list[str]:
    """Every other ptxas findable on this machine, deduplicated by realpath."""
    import glob
    import shutil

    env = os.environ if env is None else env
    cands: list[str] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            cands.append(os.path.join(env[var], "bin", "ptxas"))
    which = shutil.which("ptxas", path=env.get("PATH"))
    if which:
        cands.append(which)
    cands.extend(sorted(glob.glob("/usr/local/cuda*/bin/ptxas")))
    for entry in interpreter.search_path():
        if not entry or not os.path.isdir(os.path.join(entry, "nvidia")):
            continue
        cands.append(os.path.join(entry, "nvidia", "cuda_nvcc", "bin", "ptxas"))
        cands.extend(sorted(glob.glob(os.path.join(entry, "nvidia", "cu*", "bin", "ptxas"))))
    tp = torch_bin_ptxas()
    if tp:
        cands.append(tp)
    d = triton_bin_dir()
    if d:
        cands += [os.path.join(d, "ptxas"), os.path.join(d, "ptxas-blackwell")]
    seen: set[str] = set()
    out: list[str] = []
    for c in cands:
        if not os.path.isfile(c):
            continue
        real = os.path.realpath(c)
        if real in seen:
            continue
        seen.add(real)
        out.append(c)
    return out


def can_target(info: PtxasInfo, arch: int) -> bool | None:
    """Whether this ptxas release can assemble for ``sm_<arch>``; None when we do not know."""
    if not info.release or arch not in _FIRST_RELEASE:
        return None
    try:
        rel = tuple(int(x) for x in info.release.split("."))
    except ValueError:
        return None
    if rel < _FIRST_RELEASE[arch]:
        return False
    last = _LAST_RELEASE.get(arch)
    return not (last is not None and rel > last)
