"""What differs between two fingerprints, and why each difference matters (pure).

``fingerprint diff`` and ``import``/``pull`` (a bundle's fingerprint against this host's) say
what changed in these words: the GPUs and driver, each ptxas, the packages, then the Python ABI, the
platform and the code-changing variables.
"""

from __future__ import annotations

from dataclasses import dataclass

from jitwarden.env.fingerprint import Fingerprint, Package
from jitwarden.env.ptxas import PtxasInfo
from jitwarden.model.arch import torch_compiled_for


@dataclass(frozen=True)
class Change:
    component: str
    old: str
    new: str
    why: str


def _s(v: object) -> str:
    return "(none)" if v is None or v == "" else str(v)


def _ptxas_label(info: PtxasInfo | None) -> str:
    if info is None:
        return "(none)"
    lines = info.version_text.splitlines()
    return info.build or info.release or (lines[-1] if lines else "(no version)")


def diff(a: Fingerprint, b: Fingerprint) -> list[Change]:
    """What differs from ``a`` (old) to ``b`` (new), and why each difference matters."""
    return [
        *_device_changes(a, b),
        *_ptxas_changes(a, b),
        *_package_changes(a, b),
        *_host_changes(a, b),
    ]


def _gpuset(fp: Fingerprint) -> list[str]:
    return sorted(
        {
            f"{g.name} ({'sm_{}{}'.format(*g.capability) if g.capability else 'capability unknown'})"
            for g in fp.gpus
        }
    )


def _device_changes(a: Fingerprint, b: Fingerprint) -> list[Change]:
    """The GPUs and the driver: what runs the kernels."""
    out: list[Change] = []
    if a.device_archs() != b.device_archs() and (a.device_archs() or b.device_archs()):
        out.append(
            Change(
                "gpu.capability",
                _s(", ".join(f"sm_{x}" for x in a.device_archs())),
                _s(", ".join(f"sm_{x}" for x in b.device_archs())),
                "kernels are assembled for one exact compute capability (Triton emits sm_90a, which "
                "runs only on 9.0): cached cubins of the old GPU cannot run on the new one",
            )
        )
    elif _gpuset(a) != _gpuset(b):
        out.append(
            Change(
                "gpu",
                _s(", ".join(_gpuset(a))),
                _s(", ".join(_gpuset(b))),
                "another GPU model: autotuned configs and vLLM's compile cache (keyed by GPU name) "
                "were chosen for the old one",
            )
        )
    if a.driver_version != b.driver_version:
        out.append(
            Change(
                "driver",
                _s(a.driver_version),
                _s(b.driver_version),
                "the driver JIT-compiles PTX (torch's fallback kernels, the CUDA compute cache) and "
                "decides which PTX versions load at all",
            )
        )

    return out


def _ptxas_changes(a: Fingerprint, b: Fingerprint) -> list[Change]:
    """Each ptxas role: the binary that assembles the kernels."""
    out: list[Change] = []
    pa, pb = dict(a.ptxas), dict(b.ptxas)
    for role in sorted(set(pa) | set(pb)):
        x, y = pa.get(role), pb.get(role)
        comp = f"ptxas[{role}]"
        if x is None or y is None:
            out.append(
                Change(
                    comp,
                    _ptxas_label(x),
                    _ptxas_label(y),
                    "a ptxas appeared or disappeared: kernels are assembled by a different binary",
                )
            )
        elif x.version_text != y.version_text:
            out.append(
                Change(
                    comp,
                    _ptxas_label(x),
                    _ptxas_label(y),
                    "another ptxas release assembles PTX into different machine code; Triton keys "
                    "kernels by this version text, so its old entries become dead weight",
                )
            )
        elif x.sha256 != y.sha256:
            out.append(
                Change(
                    comp + ".sha256",
                    x.sha256[:12],
                    y.sha256[:12],
                    "the ptxas binary differs although it prints the same version: Triton's cache key "
                    "would not notice (a wrapper or a TRITON_PTXAS_PATH swap)",
                )
            )

    return out


def _package_changes(a: Fingerprint, b: Fingerprint) -> list[Change]:
    """The packages that generate or launch kernels: versions, files, CUDA, torch's arch list."""
    ka, kb = {p.name: p for p in a.packages}, {p.name: p for p in b.packages}
    out: list[Change] = []
    for name in sorted(set(ka) | set(kb)):
        out += _one_package(name, ka.get(name), kb.get(name), b.device_archs())
    return out


def _one_package(
    name: str, x: Package | None, y: Package | None, archs: tuple[int, ...]
) -> list[Change]:
    """What changed of one package from ``x`` to ``y`` (None: not installed) on GPUs of ``archs``."""
    if x is None or y is None:
        return [
            Change(
                f"package:{name}",
                _s(x and x.version),
                _s(y and y.version),
                f"{name} was {'installed' if x is None else 'removed'}: it generates or launches "
                "compiled kernels",
            )
        ]
    out: list[Change] = []
    if x.version != y.version:
        out.append(
            Change(
                f"package:{name}",
                x.version,
                y.version,
                f"another {name} generates different code and keys its caches differently",
            )
        )
    elif x.identity != y.identity:
        out.append(
            Change(
                f"package:{name}.files",
                _s(x.identity and x.identity[:12]),
                _s(y.identity and y.identity[:12]),
                f"the installed files of {name} changed under the same version (a rebuild, a "
                "reinstall from another index or a local edit)",
            )
        )
    if x.cuda != y.cuda:
        out.append(
            Change(
                f"package:{name}.cuda",
                _s(x.cuda),
                _s(y.cuda),
                f"{name} was built against another CUDA: its bundled kernels and ptxas differ",
            )
        )
    if x.arch_list != y.arch_list:
        out.append(_arch_list_change(name, x, y, archs))
    return out


def _arch_list_change(name: str, x: Package, y: Package, archs: tuple[int, ...]) -> Change:
    """torch's compiled arch list changed: said, with each GPU of ``archs`` the new list lacks."""
    why = "the GPU archs torch's own kernels were compiled for changed"
    for arch in archs:
        if y.arch_list is not None and not torch_compiled_for(y.arch_list, arch):
            why += f"; the new list lacks the GPU's sm_{arch}, so torch's kernels go through driver PTX JIT or fail"
    return Change(
        f"package:{name}.arch_list",
        _s(x.arch_list and " ".join(x.arch_list)),
        _s(y.arch_list and " ".join(y.arch_list)),
        why,
    )


def _host_changes(a: Fingerprint, b: Fingerprint) -> list[Change]:
    """The Python ABI, the platform and the compiler-relevant environment variables."""
    out: list[Change] = []
    ya, yb = dict(a.python), dict(b.python)
    for k in ("implementation", "cache_tag", "soabi", "abiflags", "minor"):
        if ya.get(k) != yb.get(k):
            out.append(
                Change(
                    f"python.{k}",
                    _s(ya.get(k)),
                    _s(yb.get(k)),
                    "another Python ABI: compiled launcher modules (.so) and Inductor's C++ wrappers "
                    "built for the old one cannot be loaded",
                )
            )
    fa, fb = dict(a.platform), dict(b.platform)
    for k in sorted(set(fa) | set(fb)):
        if fa.get(k) != fb.get(k):
            out.append(
                Change(
                    f"platform.{k}",
                    _s(fa.get(k)),
                    _s(fb.get(k)),
                    "compiled host modules depend on the machine, OS and C library",
                )
            )
    ea, eb = dict(a.env), dict(b.env)
    for k in sorted(set(ea) | set(eb)):
        if ea.get(k) != eb.get(k):
            state = "set" if k not in ea else "unset" if k not in eb else "changed"
            out.append(
                Change(
                    f"env:{k}",
                    _s(ea.get(k)),
                    _s(eb.get(k)),
                    f"{k} was {state}; it changes the code compilers generate",
                )
            )
    return out
