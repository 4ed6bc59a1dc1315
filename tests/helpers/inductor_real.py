"""A real TorchInductor cache, plus real vLLM-style artifacts, made once per test session by the CPU torch.

``build(base)`` runs, in a subprocess with ``TORCHINDUCTOR_CACHE_DIR=<base>/inductor``:

- ``torch.compile`` of a small function: fxgraph/, aotautograd/, generated C++ kernels and their .so,
  the output code .py, locks/ (what ``torch/_inductor/codecache.py`` writes);
- ``torch._inductor.standalone_compile(...).save(format="binary"|"unpacked")``: what vLLM 0.34's
  ``InductorStandaloneAdaptor.compile`` saves as ``artifact_compile_range_*`` (``vllm/compilation/compiler_interface.py``);
- ``torch.compile(..., fullgraph=True).aot_compile(...).save_compiled_function(path)``: vLLM's AOT
  ``model`` file (``vllm/compilation/decorators.py``, ``save_aot_compiled_function``).

Both test modules share one build through pytest's base temp dir.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

SCRIPT = r"""
import os, sys
import torch
out = sys.argv[1]
x = torch.randn(8, 8); y = torch.randn(8, 8)
def f(x, y):
    return torch.relu(x @ y + 1).sum(dim=-1) * 2
torch.compile(f)(x, y)
arts = []
def backend(gm, inputs):
    a = torch._inductor.standalone_compile(gm, inputs, dynamic_shapes="from_example_inputs")
    arts.append(a)
    return a
def f2(x, y):
    return torch.tanh(x @ y) - 1
torch.compile(f2, backend=backend)(x, y)
arts[0].save(path=os.path.join(out, "artifact_binary"), format="binary")
arts[0].save(path=os.path.join(out, "artifact_unpacked"), format="unpacked")
def g(x, y):
    return (x * y + 3).relu()
with torch._dynamo.config.patch(enable_aot_compile=True):  # off by default before torch 2.12; vLLM turns it on
    torch.compile(g, fullgraph=True).aot_compile(((x, y), {})).save_compiled_function(os.path.join(out, "model"))
"""


def build(base: str) -> dict[str, str]:
    """{"inductor": cache dir, "artifacts": dir of artifact_binary, artifact_unpacked, model}; built once per base."""
    out = {"inductor": os.path.join(base, "inductor"), "artifacts": os.path.join(base, "artifacts")}
    done = os.path.join(base, "done")
    if os.path.exists(done):
        return out
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(out["artifacts"])
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "JITWARDEN_"))
    }
    env.update(
        TORCHINDUCTOR_CACHE_DIR=out["inductor"],
        TORCHINDUCTOR_COMPILE_THREADS="1",
        PYTHONWARNINGS="ignore",
    )
    subprocess.run(
        [sys.executable, "-c", SCRIPT, out["artifacts"]],
        env=env,
        check=True,
        timeout=600,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    open(done, "w").close()
    return out


def shared(tmp_path_factory) -> dict[str, str]:
    """The session's build, shared by every test module (pytest's base temp dir is one per session)."""
    return build(str(tmp_path_factory.getbasetemp() / "inductor_real"))


def copy(src: str, dst: str) -> str:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def triton_kernel_source(
    cc: int = 90, sms: int = 132, name: str = "triton_poi_fused_add_relu_0"
) -> str:
    """A generated Triton kernel file as TorchInductor writes it into ``<xx>/c<hash>.py`` on a GPU.

    Follows torch 2.13 ``torch/_inductor/codegen/triton.py`` (``codegen_kernel``: the imports, then
    ``@triton_heuristics.pointwise(size_hints=..., filename=__file__, triton_meta={...!r},
    inductor_meta={...!r}, min_elem_per_thread=0)`` and ``@triton.jit``), with ``triton_meta['device']``
    the repr of ``torch/_inductor/runtime/hints.py``'s ``DeviceProperties`` for an H200 (cc=90, 132 SMs).
    """
    major = cc // 10
    return f"""
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()

@triton_heuristics.pointwise(
    size_hints={{'x': 1024}},
    filename=__file__,
    triton_meta={{'signature': {{'in_out_ptr0': '*fp32', 'in_ptr0': '*fp32', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count={sms}, cc={cc}, major={major}, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {{}}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]]}}]}},
    inductor_meta={{'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': '{name}', 'mutated_arg_names': ['in_out_ptr0'], 'optimize_mem': True, 'no_x_dim': False, 'num_load': 2, 'num_reduction': 0, 'backend_hash': 'D0E3B4B6A5F0C4D2E8A1B9C7F6E5D4C3B2A1908F7E6D5C4B3A29180706F5E4D3', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'batch_invariant': False}},
    min_elem_per_thread=0
)
@triton.jit
def {name}(in_out_ptr0, in_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 1024
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex
    tmp0 = tl.load(in_out_ptr0 + (x0), xmask)
    tmp1 = tl.load(in_ptr0 + (x0), xmask)
    tmp2 = tmp0 + tmp1
    tmp3 = tl.full([1], 0, tl.int32)
    tmp4 = triton_helpers.maximum(tmp3, tmp2)
    tl.store(in_out_ptr0 + (x0), tmp4, xmask)
"""
