"""The fingerprint: a frozen record of every input that decides compiled GPU code.

Grouped as in ARCHITECTURE.md ("Layers", env/): gpu, driver, toolchain, packages, python, platform, env.
It has a short stable ``digest`` (the cache partition name), a human diff
(:func:`jitwarden.env.fingerprint_diff.diff`) that says what changed and why it matters, and a
persistent memo keyed by cheap stat facts so a warm :func:`of_host` runs no subprocess, hashes
nothing and skips NVML.

Standard library only, never imports torch or triton, never initialises CUDA: this
module is on the activation path.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from jitwarden.env import interpreter, jaxcupy, nvml, ptxas, torchinfo
from jitwarden.env.nvml import Gpu
from jitwarden.env.ptxas import PtxasInfo
from jitwarden.formats import jsonlimits
from jitwarden.model.arch import torch_arch_warning
from jitwarden.store.atomic import write_private_json
from jitwarden.store.paths import memo_dir
from jitwarden.store.reads import read_bytes, read_private

SCHEMA = 1

# Env vars that change generated code. Sources:
#  * Triton 3.6 ``get_cache_invalidating_env_vars()`` (libtriton's CACHE_INVALIDATING_ENV,
#    enumerated by setting every upper-case string of libtriton.so and asking it): Triton
#    already keys kernels by these, we partition by them too so whole caches agree.
#  * Triton knobs that change code but are not in its key by value: the ptxas overrides
#    (knobs.nvidia ptxas / ptxas_blackwell), PTXAS_OPTIONS, TRITON_LIBDEVICE_PATH.
#  * torch / TorchInductor: TORCH_CUDA_ARCH_LIST (extension builds), CUDA_HOME (headers
#    and nvcc of torch extensions), Inductor codegen switches.
#  * vLLM switches that pick different kernels into compiled graphs.
#  * The CUDA driver: TF32 override and PTX JIT policy.
TRITON_CACHE_INVALIDATING_ENV_VARS = (
    "ALLOW_LHS_TMEM_LAYOUT_CONVERSION",
    "AMDGCN_ENABLE_DUMP",
    "AMDGCN_USE_BUFFER_ATOMICS",
    "AMDGCN_USE_BUFFER_OPS",
    "DISABLE_LLVM_OPT",
    "DISABLE_MMA_V3",
    "DISABLE_MMA_V5",
    "DISABLE_PTXAS_OPT",
    "LLVM_ENABLE_TIMING",
    "LLVM_EXTRACT_DI_LOCAL_VARIABLES",
    "LLVM_IR_ENABLE_DUMP",
    "LLVM_PASS_PLUGIN_PATH",
    "MLIR_DISABLE_MULTITHREADING",
    "MLIR_DUMP_PATH",
    "MLIR_ENABLE_DIAGNOSTICS",
    "MLIR_ENABLE_DUMP",
    "MLIR_ENABLE_TIMING",
    "NVPTX_ENABLE_DUMP",
    "TRITON_DEFAULT_FP_FUSION",
    "TRITON_DISABLE_LINE_INFO",
    "TRITON_DUMP_MIR",
    "TRITON_ENABLE_ASAN",
    "TRITON_ENABLE_EXPERIMENTAL_CONSAN",
    "TRITON_ENABLE_LLVM_DEBUG",
    "TRITON_F32_DEFAULT",
    "TRITON_HIP_USE_ASYNC_COPY",
    "TRITON_HIP_USE_BLOCK_PINGPONG",
    "TRITON_HIP_USE_IN_THREAD_TRANSPOSE",
    "TRITON_LLVM_DEBUG_ONLY",
    "TRITON_OVERRIDE_ARCH",
    "USE_IR_LOC",
)
CODEGEN_ENV_VARS = TRITON_CACHE_INVALIDATING_ENV_VARS + (
    "TRITON_PTXAS_PATH",
    "TRITON_PTXAS_BLACKWELL_PATH",
    "PTXAS_OPTIONS",
    "TRITON_LIBDEVICE_PATH",
    "TORCH_CUDA_ARCH_LIST",
    "CUDA_HOME",
    "TORCHINDUCTOR_MAX_AUTOTUNE",
    "TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE",
    "TORCHINDUCTOR_MAX_AUTOTUNE_GEMM",
    "TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS",
    "TORCHINDUCTOR_COORDINATE_DESCENT_TUNING",
    "TORCHINDUCTOR_FREEZING",
    "TORCHINDUCTOR_CPP_WRAPPER",
    "VLLM_USE_TRITON_FLASH_ATTN",
    "VLLM_ATTENTION_BACKEND",
    "VLLM_USE_DEEP_GEMM",
    "VLLM_USE_FLASHINFER_SAMPLER",
    "NVIDIA_TF32_OVERRIDE",
    "CUDA_FORCE_PTX_JIT",
    "CUDA_DISABLE_PTX_JIT",
)
# Represented in the digest by what they resolve to (the ptxas sha256), so that two
# installs of the same binary at different paths agree.
_DIGEST_EXCLUDED_ENV = ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH")

# (display name, dist-info name prefixes) of the packages whose identity decides code.
PACKAGES = (
    ("torch", ("torch",)),
    ("triton", ("triton", "pytorch_triton")),
    ("vllm", ("vllm",)),
    ("flashinfer", ("flashinfer_python", "flashinfer")),
    ("deep_gemm", ("deep_gemm", "deepgemm")),
) + jaxcupy.PACKAGES  # JAX's and CuPy's builds and the CUDA wheels they depend on (env/jaxcupy.py)

_MEMO_CAP = 64
MEMO_MAX_BYTES = 4 << 20
"""The fingerprint memo is read only up to this size (a few sections of at most :data:`_MEMO_CAP` short entries)."""


# --- the record ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Package:
    """An installed distribution. ``identity``: sha256 of its dist-info RECORD (which lists a
    sha256 of every installed file), so a rebuild under the same version is noticed."""

    name: str
    dist: str
    version: str
    identity: str | None
    cuda: str | None = None
    git_version: str | None = None
    arch_list: tuple[str, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class Fingerprint:
    gpu_source: str
    gpus: tuple[Gpu, ...]
    driver_version: str | None
    cuda_driver_version: str | None
    ptxas: tuple[tuple[str, PtxasInfo], ...]
    packages: tuple[Package, ...]
    python: tuple[tuple[str, str], ...]
    platform: tuple[tuple[str, str], ...]
    env: tuple[tuple[str, str], ...]
    gpu_note: str = field(default="", compare=False)

    # -- derived facts --

    def device_archs(self) -> tuple[int, ...]:
        """Sorted distinct archs of the visible GPUs whose capability is known, e.g. (90,)."""
        return tuple(sorted({c[0] * 10 + c[1] for c in (g.capability for g in self.gpus) if c}))

    def package(self, name: str) -> Package | None:
        return next((p for p in self.packages if p.name == name), None)

    def ptxas_for(self, role: str) -> PtxasInfo | None:
        return next((i for r, i in self.ptxas if r == role), None)

    def canonical(self) -> dict[str, Any]:
        """Everything that decides compiled code, and nothing volatile (uuids, paths, order)."""
        py = dict(self.python)
        return {
            "gpu": sorted(
                {
                    f"{g.name}|{'{}.{}'.format(*g.capability) if g.capability else '?'}"
                    for g in self.gpus
                }
            ),
            "driver": self.driver_version,
            "ptxas": sorted([r, i.sha256, i.version_text] for r, i in self.ptxas),
            "packages": sorted(
                [
                    p.name,
                    p.version,
                    p.identity,
                    p.cuda,
                    p.git_version,
                    list(p.arch_list) if p.arch_list is not None else None,
                ]
                for p in self.packages
            ),
            "python": [
                py.get(k) for k in ("implementation", "cache_tag", "soabi", "abiflags", "minor")
            ],
            "platform": sorted(self.platform),
            "env": sorted([k, v] for k, v in self.env if k not in _DIGEST_EXCLUDED_ENV),
        }

    @property
    def digest(self) -> str:
        blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    # -- JSON --

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "digest": self.digest,
            "gpu": {
                "source": self.gpu_source,
                "note": self.gpu_note,
                "devices": [gpu_json(g) for g in self.gpus],
            },
            "driver": {
                "version": self.driver_version,
                "cuda_driver_version": self.cuda_driver_version,
            },
            "toolchain": {"ptxas": [{"role": r, **i.to_json()} for r, i in self.ptxas]},
            "packages": [_package_json(p) for p in self.packages],
            "python": dict(self.python),
            "platform": dict(self.platform),
            "env": dict(self.env),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Fingerprint:
        """Rebuild from :meth:`to_json` output; ValueError saying what is wrong otherwise."""
        if not isinstance(d, dict):
            raise ValueError("not a jitwarden fingerprint (expected a JSON object)")
        if d.get("schema") != SCHEMA:
            raise ValueError(
                f"not a jitwarden fingerprint of schema {SCHEMA} (schema={d.get('schema')!r})"
            )
        try:
            gpu, drv = d["gpu"], d["driver"]
            gpus = tuple(
                Gpu(
                    int(g["index"]),
                    str(g["name"]),
                    cast("tuple[int, int]", tuple(int(x) for x in g["capability"]))
                    if g.get("capability")
                    else None,
                    g.get("uuid"),
                    g.get("pci_bus_id"),
                )
                for g in gpu["devices"]
            )
            pt = []
            for e in d["toolchain"]["ptxas"]:
                e = dict(e)
                role = str(e.pop("role"))
                pt.append((role, PtxasInfo.from_json(e)))
            pkgs = tuple(
                Package(
                    name=str(p["name"]),
                    dist=str(p.get("dist") or p["name"]),
                    version=str(p["version"]),
                    identity=p.get("identity"),
                    cuda=p.get("cuda"),
                    git_version=p.get("git_version"),
                    arch_list=tuple(p["arch_list"]) if p.get("arch_list") is not None else None,
                )
                for p in d["packages"]
            )
            return cls(
                gpu_source=str(gpu["source"]),
                gpus=gpus,
                driver_version=drv.get("version"),
                cuda_driver_version=drv.get("cuda_driver_version"),
                ptxas=tuple(pt),
                packages=pkgs,
                python=tuple(sorted((str(k), str(v)) for k, v in d["python"].items())),
                platform=tuple(sorted((str(k), str(v)) for k, v in d["platform"].items())),
                env=tuple(sorted((str(k), str(v)) for k, v in d["env"].items())),
                gpu_note=str(gpu.get("note") or ""),
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(
                f"not a jitwarden fingerprint: missing or malformed field {exc}"
            ) from None

    # -- display --

    def gpu_str(self) -> str:
        if not self.gpus:
            why = self.gpu_note or f"source: {self.gpu_source}"
            return f"no GPU visible ({why})"
        groups: dict[tuple[Any, ...], int] = {}
        for g in self.gpus:
            groups[(g.name, g.capability)] = groups.get((g.name, g.capability), 0) + 1
        parts = []
        for (name, cap), n in groups.items():
            sm = f"sm_{cap[0]}{cap[1]}" if cap else "sm_?"
            parts.append(f"{n}× {sm} {name}" if n > 1 else f"{sm} {name}")
        return ", ".join(parts)

    def headline(self) -> str:
        """One line: GPU, driver, torch, triton, ptxas, digest."""
        bits = [self.gpu_str()]
        if self.driver_version:
            bits.append(f"driver {self.driver_version}")
        for name in ("torch", "triton", "vllm"):
            p = self.package(name)
            if p:
                bits.append(f"{name} {p.version}")
        rels = []
        for _role, info in self.ptxas:
            if info.release and info.release not in rels:
                rels.append(info.release)
        bits.append(f"ptxas {'/'.join(rels)}" if rels else "no ptxas")
        bits.append(f"fp {self.digest}")
        return " · ".join(bits)

    def warnings(self) -> list[str]:
        """Known-dangerous situations for the live GPU, in words (empty when none or no GPU)."""
        out = []
        torch = self.package("torch")
        triton = self.package("triton")
        recipe = ptxas.recipe_for(triton.version if triton else None)
        for arch in self.device_archs():
            # Inductor hands torch's ptxas to Triton through TRITON_PTXAS_PATH: only for the
            # arches where this Triton runs `ptxas` (all up to 3.5, below sm_100 in 3.6-3.8, below sm_90 in 3.9).
            role = recipe.role(arch)
            roles = (role,) if role == "triton-blackwell" else ("triton", "inductor")
            for role in roles:
                info = self.ptxas_for(role)
                if info is not None and ptxas.can_target(info, arch) is False:
                    out.append(
                        f"the resolved ptxas[{role}] ({info.path}, release {info.release}) "
                        f"cannot target sm_{arch}"
                    )
            if torch and torch.arch_list is not None and torch.cuda:
                w = torch_arch_warning(
                    torch.version, torch.arch_list, arch
                )  # the one rule (model.arch)
                if w:
                    out.append(w)
        return out


def gpu_json(g: Gpu) -> dict[str, Any]:
    """One GPU as JSON: what `doctor` lists and the fingerprint records."""
    return {
        "index": g.index,
        "name": g.name,
        "capability": list(g.capability) if g.capability else None,
        "uuid": g.uuid,
        "pci_bus_id": g.pci_bus_id,
    }


def _package_json(p: Package) -> dict[str, Any]:
    d: dict[str, object] = {
        "name": p.name,
        "dist": p.dist,
        "version": p.version,
        "identity": p.identity,
    }
    if p.name == "torch":
        d.update(
            cuda=p.cuda,
            git_version=p.git_version,
            arch_list=list(p.arch_list) if p.arch_list is not None else None,
        )
    return d


# --- memo ----------------------------------------------------------------------------


def _load_memo(path: str) -> dict[str, Any]:
    """The memo's sections, or {} when it is absent, not ours alone, not a regular file, too big or not JSON.

    Read like the activation memo (``store/reads.read_private``): a FIFO in its place cannot
    block activation, and a memo another user could write does not decide package identity.
    """
    try:
        data = jsonlimits.loads(
            read_private(path, max_bytes=MEMO_MAX_BYTES), max_bytes=MEMO_MAX_BYTES
        )
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def _save_memo(path: str, memo: dict[str, Any]) -> None:
    """Atomic write (temp file + rename); failures are ignored: the memo is an optimisation."""
    data: dict[str, object] = {"schema": SCHEMA}
    for k, v in memo.items():
        if isinstance(v, dict):
            items = list(v.items())[-_MEMO_CAP:]
            data[k] = dict(items)
    try:  # never into a dir another user could write (root with a user's HOME), nor one made there
        write_private_json(path, data, ".fingerprint-memo.")
    except (OSError, TypeError, ValueError):
        pass


class _Section(dict[str, Any]):
    """A memo section that re-inserts touched keys last, so capping keeps the recent ones."""

    def __getitem__(self, key: str) -> Any:
        value = super().pop(key)
        super().__setitem__(key, value)
        return value


# --- the fingerprint of this host ----------------------------------------------------


def _find_dists(prefixes: set[str]) -> dict[str, tuple[str, str]]:
    """normalized dist name -> (dist-info dir, version), first on the search path wins (this process's
    ``sys.path``, or the interpreter judged against: :mod:`jitwarden.env.interpreter`); no imports."""
    found: dict[str, tuple[str, str]] = {}
    for entry in interpreter.search_path():
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for n in names:
            if not n.endswith(".dist-info"):
                continue
            name, _, version = n[:-10].partition("-")
            key = name.lower().replace("-", "_").replace(".", "_")
            if key in prefixes and key not in found:
                found[key] = (os.path.join(entry or ".", n), version)
    return found


_RECORD_MAX = 64 << 20
"""A distribution's RECORD larger than this is not read (torch's, the largest seen, is a few MB)."""


def _record_identity(dist_info: str, memo: dict[str, Any]) -> str | None:
    path = os.path.join(dist_info, "RECORD")
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = ptxas.stat_key(os.path.realpath(path), st)  # ctime too: mtime can be set back
    known = memo.get(key)
    if isinstance(known, str):
        return known
    try:
        digest = hashlib.sha256(read_bytes(path, max_bytes=_RECORD_MAX)).hexdigest()
    except OSError:
        return None
    memo[key] = digest
    return digest


def _packages(memo: dict[str, Any]) -> tuple[Package, ...]:
    dists = _find_dists({d for _, ds in PACKAGES for d in ds})
    out = []
    records, arches = (
        memo.setdefault("records", _Section()),
        memo.setdefault("torch_arch", _Section()),
    )
    for name, candidates in PACKAGES:
        hit = next((d for d in candidates if d in dists), None)
        if hit is None or not jaxcupy.counted(name, dists):
            continue
        dist_info, version = dists[hit]
        identity = _record_identity(dist_info, records)
        if name == "torch":
            ti = torchinfo.info(arches, version=version)
            if ti is None:  # a dist-info without the package: skip, as if not installed
                continue
            out.append(
                Package(
                    name=name,
                    dist=hit,
                    version=version,
                    identity=identity,
                    cuda=ti.cuda,
                    git_version=ti.git_version,
                    arch_list=ti.arch_list,
                )
            )
        else:
            out.append(Package(name=name, dist=hit, version=version, identity=identity))
    return tuple(out)


def _python() -> tuple[tuple[str, str], ...]:
    other = interpreter.current()
    if other is not None:  # --python: the interpreter judged against, as it described itself
        return other.python_facts()
    import sysconfig

    v = sys.version_info
    return tuple(
        sorted(
            {
                "implementation": sys.implementation.name,
                "version": f"{v.major}.{v.minor}.{v.micro}",
                "minor": f"{v.major}.{v.minor}",
                "cache_tag": str(sys.implementation.cache_tag),
                "soabi": str(sysconfig.get_config_var("SOABI")),
                "abiflags": getattr(sys, "abiflags", ""),
            }.items()
        )
    )


def _platform() -> tuple[tuple[str, str], ...]:
    u = os.uname()
    libc = ""
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):
        pass
    if not libc:
        import platform

        lib, ver = platform.libc_ver()
        libc = f"{lib} {ver}".strip()
    return (("libc", libc), ("machine", u.machine), ("system", u.sysname))


def _gpu_key(proc_root: str, cvd: str | None) -> str | None:
    """Cheap identity of the GPU set from /proc/driver/nvidia; None without it (ask NVML)."""
    base = os.path.join(proc_root, "driver", "nvidia")
    h = hashlib.sha256()
    try:
        h.update(read_bytes(os.path.join(base, "version"), max_bytes=nvml.PROC_MAX))
        gpus = os.path.join(base, "gpus")
        for bus in sorted(os.listdir(gpus)):
            h.update(b"\0" + bus.encode())
            try:
                h.update(
                    read_bytes(os.path.join(gpus, bus, "information"), max_bytes=nvml.PROC_MAX)
                )
            except OSError:
                pass
    except OSError:
        return None
    h.update(b"\0cvd=" + (cvd.encode() if cvd is not None else b"<unset>"))
    return h.hexdigest()


def _gpu(memo: dict[str, Any], env: Mapping[str, str], proc_root: str) -> nvml.Probe:
    """NVML's answer memoised by the /proc GPU listing and driver version, else a fresh probe."""
    section = memo.setdefault("gpu", _Section())
    key = _gpu_key(proc_root, env.get("CUDA_VISIBLE_DEVICES"))
    if key and key in section:
        try:
            d = section[key]
            return nvml.Probe(
                d["source"],
                tuple(
                    Gpu(
                        g["index"],
                        g["name"],
                        tuple(g["capability"]) if g["capability"] else None,
                        g["uuid"],
                        g["pci_bus_id"],
                    )
                    for g in d["gpus"]
                ),
                d["driver_version"],
                d["cuda_driver_version"],
                d.get("note", ""),
            )
        except (KeyError, TypeError, ValueError):
            pass
    p = nvml.probe(proc_root, env)
    if key and p.source == "nvml":  # /proc answers are cheap, and NVML may load next time
        section[key] = {
            "source": p.source,
            "gpus": [gpu_json(g) for g in p.gpus],
            "driver_version": p.driver_version,
            "cuda_driver_version": p.cuda_driver_version,
            "note": p.note,
        }
    return p


def dependencies(
    *, env: Mapping[str, str] | None = None, memo_path: str | None = None, proc_root: str = "/proc"
) -> dict[str, Any]:
    """What :func:`of_host` reads, as names to watch, for activation's warm memo (``activation_memo``).

    Whatever changes the digest changes one of these: ``env`` (the code-changing variables
    and ``CUDA_VISIBLE_DEVICES``); ``files``, identified by stat (this layer's own modules,
    ``sys.executable``, every ptxas candidate, torch's version.py / libtorch_python.so /
    bin/ptxas, each found dist-info and its RECORD); ``names`` (in every ``sys.path`` dir, which
    decides which dist-infos and which triton/torch are found, only the entries named for one
    of these matter; the memo records each dir itself); ``proc`` (the /proc/driver/nvidia dir:
    driver version, GPU listing and information files, the GPU memo's key); ``memo`` (the
    fingerprint memo file).
    """
    env = os.environ if env is None else env
    if memo_path is None:
        memo_path = os.path.join(memo_dir(env), "fingerprint-memo.json")
    files = [
        sys.modules[__name__].__file__,
        ptxas.__file__,
        nvml.__file__,
        torchinfo.__file__,
        jaxcupy.__file__,
        sys.executable,
    ]
    tb = ptxas.triton_bin_dir()
    for var, binary in (
        ("TRITON_PTXAS_PATH", "ptxas"),
        ("TRITON_PTXAS_BLACKWELL_PATH", "ptxas-blackwell"),
    ):
        if env.get(var):
            files.append(env[var])
        if tb:
            files.append(os.path.join(tb, binary))
    td = torchinfo.torch_dir()
    if td:
        files += [
            os.path.join(td, "version.py"),
            os.path.join(td, "bin", "ptxas"),
            os.path.join(td, "lib", "libtorch_python.so"),
        ]
    prefixes = {d for _, ds in PACKAGES for d in ds}
    for d, _v in _find_dists(prefixes).values():
        files += [d, os.path.join(d, "RECORD")]  # the dist-info itself: a reinstall replaces it
    return {
        "env": list(CODEGEN_ENV_VARS) + ["CUDA_VISIBLE_DEVICES"],
        "files": files,
        "memo": memo_path,
        "names": sorted(prefixes | {"triton", "torch"}),
        "proc": os.path.join(proc_root, "driver", "nvidia"),
    }


_PROCESS_MEMO: dict[tuple[Any, ...], Fingerprint] = {}


def _ptxas_infos(env: Mapping[str, str], pmemo: _Section) -> tuple[tuple[str, PtxasInfo], ...]:
    """(role, facts) of each ptxas this environment's compilers select, memoised in ``pmemo``."""
    infos = []
    for role, path in ptxas.selected(env, pmemo):
        info = ptxas.inspect(path, pmemo)
        if info is not None:
            infos.append((role, info))
    return tuple(infos)


def of_host(
    *,
    use_memo: bool = True,
    env: Mapping[str, str] | None = None,
    memo_path: str | None = None,
    proc_root: str = "/proc",
) -> Fingerprint:
    """The fingerprint of this process's environment (``env`` defaults to ``os.environ``).

    With ``use_memo`` the persistent memo (``memo_dir()/fingerprint-memo.json``) lets a
    warm call skip ptxas subprocesses, hashing and NVML; a broken memo is ignored.
    """
    env = dict(os.environ if env is None else env)
    if memo_path is None:
        memo_path = os.path.join(memo_dir(env), "fingerprint-memo.json")
    pkey = (
        memo_path,
        proc_root,
        tuple(interpreter.search_path()),
        tuple((k, env.get(k)) for k in CODEGEN_ENV_VARS + ("CUDA_VISIBLE_DEVICES",)),
    )
    if use_memo and pkey in _PROCESS_MEMO:
        return _PROCESS_MEMO[pkey]
    raw = _load_memo(memo_path) if use_memo else {}
    memo = {k: _Section(v) for k, v in raw.items()}
    before = json.dumps(raw, sort_keys=True)

    probe = _gpu(memo, env, proc_root)
    infos = _ptxas_infos(env, memo.setdefault("ptxas", _Section()))
    fp = Fingerprint(
        gpu_source=probe.source,
        gpus=probe.gpus,
        driver_version=probe.driver_version,
        cuda_driver_version=probe.cuda_driver_version,
        ptxas=infos,
        packages=_packages(memo),
        python=_python(),
        platform=_platform(),
        env=tuple(sorted((k, env[k]) for k in CODEGEN_ENV_VARS if env.get(k) is not None)),
        gpu_note=probe.note,
    )
    if use_memo:
        if json.dumps(
            {k: dict(v) for k, v in memo.items()}, sort_keys=True
        ) != before or not os.path.exists(memo_path):
            _save_memo(memo_path, memo)
        _PROCESS_MEMO[pkey] = fp
    return fp
