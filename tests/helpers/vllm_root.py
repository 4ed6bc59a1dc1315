"""A vLLM cache root laid out the way vLLM's own source writes it, holding real torch artifacts.

vLLM cannot run here (no GPU), so the root is assembled by the layout of vLLM 0.34.0's source, and every
file torch writes in it is real (made by the CPU torch, ``inductor_real.py``):

- ``vllm/envs.py``: ``VLLM_CACHE_ROOT``, else ``os.path.join(os.getenv("XDG_CACHE_HOME", "~/.cache"), "vllm")``;
- ``vllm/compilation/backends.py`` (``VllmBackend.__call__``): ``torch_compile_cache/<hash[:10]>/rank_<r>_<dp>/<prefix>/``
  with ``cache_key_factors.json`` (``json.dump(..., indent=2, sort_keys=True)`` of env/config/code/compiler factors;
  ``vllm/config/utils.py`` ``normalize_value`` turns mappings into sorted pairs) and ``vllm_compile_cache.py``
  (``pprint.PrettyPrinter(indent=4).pformat`` of ``{(range, graph_index, compiler name): {"graph_handle": (key, path)}}``);
- ``vllm/compilation/compiler_interface.py``: ``initialize_inductor_cache`` (``<rank>/inductor_cache``, ``<rank>/triton_cache``),
  ``InductorStandaloneAdaptor.compile`` (``artifact_compile_range_<a>_<b>_subgraph_<i>``, binary or unpacked);
  ``get_inductor_factors`` (``CacheBase.get_system()``: GPU name, torch's CUDA);
- ``vllm/compilation/decorators.py``: AOT ``torch_compile_cache/torch_aot_compile/<sha256>/{inductor_cache, rank_<r>_<dp>/model}``
  (0.34.0) and ``torch_aot_compile/<sha256>/rank_<r>_<dp>/model`` (vLLM 0.11.1-0.13.0's ``decorators.py``);
- ``vllm/utils/deep_gemm.py`` (``DG_JIT_CACHE_DIR = <root>/deep_gemm``) and
  ``vllm/model_executor/warmup/flashinfer_autotune_cache.py`` (``flashinfer_autotune_cache/<version>/<archs>/<hash>/autotune_configs.json``).

Each release's differences are in docs/supported-versions.md; tests/unit/adapters/test_layouts_by_release.py rewrites
this root into them.
"""

from __future__ import annotations

import json
import os
import pprint
import shutil
import time

from jitwarden.model.entries import Judge
from tests.helpers import inductor_real

H = "3f9c0a1b2d"
RANK = f"torch_compile_cache/{H}/rank_0_0"
PREFIX = f"{RANK}/backbone"
AOT_NEW = "torch_compile_cache/torch_aot_compile/" + "a" * 64
AOT_OLD = "torch_aot_compile/" + "b" * 64
FI = "flashinfer_autotune_cache/0.6.1/90a/c0ffee0123"
ART0 = "artifact_compile_range_1_8192_subgraph_0"
ART1 = "artifact_compile_range_1_8192_subgraph_1"


def factors(vllm_version="0.34.0", gpu="NVIDIA H200", cuda="13.0"):
    system = [
        ["device", [["name", gpu]]],
        ["hash", "9a1b"],
        ["version", [["cuda", cuda], ["triton", "3.6.0" + "f" * 64]]],
    ]
    return {
        "env": {"VLLM_USE_AOT_COMPILE": True},
        "config": {"model": [["model", "Qwen/Qwen3-0.6B"]], "version": vllm_version},
        "code": {"files": []},
        "compiler": {"inductor": [system, "e3b0c442" * 8, [["max_autotune", False]], []]},
        "config_hash": "1" * 64,
        "code_hash": "2" * 64,
        "compiler_hash": "3" * 64,
    }


def make_root(root: str, real: dict, cubin: str) -> str:
    prefix = os.path.join(root, PREFIX)
    os.makedirs(prefix)
    with open(os.path.join(prefix, "cache_key_factors.json"), "w") as f:
        json.dump(factors(), f, indent=2, sort_keys=True)
    shutil.copy(os.path.join(real["artifacts"], "artifact_binary"), os.path.join(prefix, ART0))
    shutil.copytree(
        os.path.join(real["artifacts"], "artifact_unpacked"), os.path.join(prefix, ART1)
    )
    cache = {
        ((1, 8192), i, "inductor_standalone"): {
            "graph_handle": (k, os.path.join(prefix, k)),
            "cache_key": k,
        }
        for i, k in enumerate((ART0, ART1))
    }
    with open(os.path.join(prefix, "vllm_compile_cache.py"), "w") as f:
        f.write(pprint.PrettyPrinter(indent=4).pformat(cache))
    for name in ("computation_graph.py", "transformed_code.py"):
        with open(os.path.join(prefix, name), "w") as f:
            f.write("def forward(self, x):\n    return x\n")
    inductor_real.copy(real["inductor"], os.path.join(root, RANK, "inductor_cache"))
    os.makedirs(os.path.join(root, RANK, "triton_cache"))
    for aot in (AOT_NEW, AOT_OLD):
        os.makedirs(os.path.join(root, aot, "rank_0_0"))
        shutil.copy(
            os.path.join(real["artifacts"], "model"), os.path.join(root, aot, "rank_0_0", "model")
        )
    inductor_real.copy(real["inductor"], os.path.join(root, AOT_NEW, "inductor_cache"))
    os.makedirs(os.path.join(root, FI))
    with open(os.path.join(root, FI, "autotune_configs.json"), "w") as f:
        json.dump({"fp8_gemm": {"(128, 4096)": [0, 3]}}, f)
    dg = os.path.join(root, "deep_gemm", "cache", "kernel.fp8_gemm_nt.0123abcd")
    os.makedirs(dg)
    shutil.copy(cubin, os.path.join(dg, "kernel.cubin"))
    with open(os.path.join(dg, "kernel.cu"), "w") as f:
        f.write("// generated\n")
    return root


def cubin_of(built_cache, arch: int = 90) -> str:
    """A real kernel cubin for ``sm_<arch>`` of the session's Triton cache (conftest ``built_cache``)."""
    src, manifest = built_cache
    job = next(j for j in manifest if j.get("arch") == arch and j.get("type", "kernel") == "kernel")
    return next(
        os.path.join(src, job["id"], f)
        for f in os.listdir(os.path.join(src, job["id"]))
        if f.endswith(".cubin")
    )


def judge(arch=90, **kw):
    base = {
        "target_arch": arch,
        "host_machine": os.uname().machine,
        "now": time.time(),
        "orphan_age": 3600.0,
        "versions": (("torch", "2.13.0"), ("vllm", "0.34.0"), ("flashinfer", "0.6.1")),
        "gpu_names": ("NVIDIA H200",),
        "torch_cuda": "13.0",
        "uid": os.getuid(),
    }
    base.update(kw)
    return Judge(**base)


def codes(e):
    return sorted({f.code for f in e.findings})
