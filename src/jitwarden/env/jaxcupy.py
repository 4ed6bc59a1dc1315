"""What decides JAX's and CuPy's compiled code, as installed distributions (stdlib only, nothing imported).

Read as :mod:`jitwarden.env.fingerprint` reads torch and Triton: each distribution's version and the
sha256 of its ``RECORD`` (which lists a sha256 of every installed file), so a rebuild under the same
version changes the fingerprint too (design.md §1).

- JAX: ``jaxlib`` (XLA is built into it), the CUDA PJRT plugin (``jax-cuda13-plugin`` and
  ``jax-cuda13-pjrt``, or their ``cuda12`` twins) and cuDNN (``nvidia-cudnn-cu13``/``-cu12``), which
  XLA's GPU executables name in their ABI version.
- CuPy: its build (``cupy-cuda13x``, ``cupy-cuda12x``, ``cupy-cuda11x`` or a source build ``cupy``) and
  the CUDA wheels whose versions its kernels depend on: NVRTC (in CuPy's cache key) and the runtime
  (``nvidia-cuda-nvrtc``, ``nvidia-cuda-runtime``: unsuffixed from CUDA 13, ``-cu12`` before). A CUDA
  toolkit installed outside Python has no distribution metadata and is not read here.

The CUDA wheels count only where JAX or CuPy is installed: torch's users keep their digest (and their
warm partitions) when jitwarden learns about these tools. See ARCHITECTURE.md ("The flow of activation").
"""

from __future__ import annotations

from collections.abc import Iterable

PACKAGES = (
    ("jax", ("jax",)),
    ("jaxlib", ("jaxlib",)),
    ("jax-cuda-plugin", ("jax_cuda13_plugin", "jax_cuda12_plugin")),
    ("jax-cuda-pjrt", ("jax_cuda13_pjrt", "jax_cuda12_pjrt")),
    ("cupy", ("cupy_cuda13x", "cupy_cuda12x", "cupy_cuda11x", "cupy")),
    ("cudnn", ("nvidia_cudnn_cu13", "nvidia_cudnn_cu12")),
    ("cuda-nvrtc", ("nvidia_cuda_nvrtc", "nvidia_cuda_nvrtc_cu13", "nvidia_cuda_nvrtc_cu12")),
    (
        "cuda-runtime",
        ("nvidia_cuda_runtime", "nvidia_cuda_runtime_cu13", "nvidia_cuda_runtime_cu12"),
    ),
)
"""(fingerprint name, dist-info name prefixes) in :data:`jitwarden.env.fingerprint.PACKAGES`' shape."""

_TOOLS = frozenset(d for name, ds in PACKAGES if name in ("jaxlib", "cupy") for d in ds)
_SHARED = frozenset({"cudnn", "cuda-nvrtc", "cuda-runtime"})


def counted(name: str, found: Iterable[str]) -> bool:
    """Whether the package ``name`` of the fingerprint counts, given the normalized dist names ``found``:
    the CUDA wheels only where jaxlib or CuPy is installed, everything else always."""
    return name not in _SHARED or not _TOOLS.isdisjoint(found)
