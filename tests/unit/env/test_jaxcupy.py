"""JAX's and CuPy's builds in the fingerprint, read from distribution metadata without importing them.

The dist-info names and versions are those installed on the H200 the captures came from
(``tests/data/real/jax_cupy/JAX_CUPY.md``): JAX 0.11.2 with the CUDA 13 plugin, CuPy 14.2.0, cuDNN 9.19.0.56,
NVRTC 13.0.88 and the CUDA runtime 13.0.96 as wheels.
"""

from __future__ import annotations

import os
import sys

import pytest

from jitwarden.env import fingerprint

H200 = {
    "jax": "0.11.2",
    "jaxlib": "0.11.2",
    "jax_cuda13_plugin": "0.11.2",
    "jax_cuda13_pjrt": "0.11.2",
    "cupy_cuda13x": "14.2.0",
    "nvidia_cudnn_cu13": "9.19.0.56",
    "nvidia_cuda_nvrtc": "13.0.88",
    "nvidia_cuda_runtime": "13.0.96",
}


def site(tmp_path, dists: dict, record: str = "x.py,sha256=abc,1\n") -> str:
    d = tmp_path / "site"
    d.mkdir(parents=True, exist_ok=True)
    for name, version in dists.items():
        di = d / f"{name}-{version}.dist-info"
        di.mkdir(exist_ok=True)
        (di / "RECORD").write_text(f"{name}/{record}")
    return str(d)


def packages(monkeypatch, path: str) -> dict:
    monkeypatch.setattr(sys, "path", [path])
    return {p.name: (p.dist, p.version, p.identity) for p in fingerprint._packages({})}


def test_jax_and_cupy_builds_are_read(tmp_path, monkeypatch):
    got = packages(monkeypatch, site(tmp_path, H200))
    assert {k: v[:2] for k, v in got.items()} == {
        "jax": ("jax", "0.11.2"),
        "jaxlib": ("jaxlib", "0.11.2"),
        "jax-cuda-plugin": ("jax_cuda13_plugin", "0.11.2"),
        "jax-cuda-pjrt": ("jax_cuda13_pjrt", "0.11.2"),
        "cupy": ("cupy_cuda13x", "14.2.0"),
        "cudnn": ("nvidia_cudnn_cu13", "9.19.0.56"),
        "cuda-nvrtc": ("nvidia_cuda_nvrtc", "13.0.88"),
        "cuda-runtime": ("nvidia_cuda_runtime", "13.0.96"),
    }
    assert all(len(v[2]) == 64 for v in got.values())  # the RECORD's sha256: a rebuild is seen too


def test_cuda_wheels_count_only_with_jax_or_cupy(tmp_path, monkeypatch):
    """torch installs the same NVIDIA wheels: without JAX or CuPy they stay out, and torch users' digest with them."""
    got = packages(
        monkeypatch,
        site(tmp_path, {"nvidia_cudnn_cu13": "9.19.0.56", "nvidia_cuda_nvrtc": "13.0.88"}),
    )
    assert got == {}


@pytest.mark.parametrize("dist", ["cupy_cuda13x", "jaxlib"])
def test_a_rebuild_under_the_same_version_is_another_package(tmp_path, monkeypatch, dist):
    a = packages(monkeypatch, site(tmp_path / "a", H200))
    b = packages(monkeypatch, site(tmp_path / "b", {**H200}))
    assert a == b
    rebuilt = tmp_path / "b" / "site" / f"{dist}-{H200[dist]}.dist-info" / "RECORD"
    rebuilt.write_text(f"{dist}/core.so,sha256=def,2\n")
    c = packages(monkeypatch, str(tmp_path / "b" / "site"))
    name = "cupy" if dist.startswith("cupy") else "jaxlib"
    assert c[name][2] != a[name][2] and {k: v for k, v in c.items() if k != name} == {
        k: v for k, v in a.items() if k != name
    }


def test_a_warm_activation_notices_jax_or_cupy_arriving(tmp_path):
    """Activation's memo watches what the fingerprint read: the dist names it looks for and this module."""
    deps = fingerprint.dependencies(
        env={"HOME": str(tmp_path)}, memo_path=str(tmp_path / "memo.json")
    )
    assert {"jaxlib", "cupy_cuda13x", "nvidia_cudnn_cu13", "nvidia_cuda_nvrtc"} <= set(
        deps["names"]
    )
    assert any(f.endswith(os.path.join("env", "jaxcupy.py")) for f in deps["files"])
