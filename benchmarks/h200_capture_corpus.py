"""On a GPU: capture real caches from many real workloads, as test data for the no-false-alarm corpus.

    python benchmarks/h200_capture_corpus.py OUTDIR [--only NAME,...] [--jobs N] [--timeout S]

Each workload runs in its own fresh process with its own ``TORCHINDUCTOR_CACHE_DIR``,
``TRITON_CACHE_DIR``, ``CUDA_CACHE_PATH`` and ``TORCH_EXTENSIONS_DIR`` under
``OUTDIR/work/<name>``; nothing of jitwarden is imported or active, so the caches are exactly
what the stock stack writes. Workloads (transformers models are built from a config with random
weights, nothing is downloaded):

- ``llama_default`` / ``llama_autotune``: a 2-layer Llama, ``torch.compile`` default and
  ``max-autotune-no-cudagraphs`` (``triton_mm`` templates, benchmark kernels);
- ``bert_autotune``: a 2-layer BERT, max-autotune;
- ``mixtral_default``: a 2-layer Mixtral (MoE routing, top-k, scatter);
- ``flex_gpt2``: FlexAttention with a causal block mask, and a GPT-2 with ``dynamic=True``;
- ``triton_plain``: plain ``@triton.jit`` kernels (elementwise, reduction, ``tl.dot`` fp16, fp8);
- ``compute_cache``: the driver's ComputeCache as cuDNN SDPA (runtime fusion), CuPy
  (``RawModule`` from a PTX file), numba-cuda and a PTX-only ``load_inline`` extension write it;
  the extension's ``TORCH_EXTENSIONS_DIR`` too.

Writes ``OUTDIR/<name>.tar.xz`` for each and ``OUTDIR/facts.json`` (driver, versions, the
JIT compiler's and nvJitLink's build stamps, timings, what each workload printed).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tarfile
import time

WORKLOADS = (
    "llama_autotune",
    "bert_autotune",
    "llama_default",
    "mixtral_default",
    "flex_gpt2",
    "triton_plain",
    "compute_cache",
)


def _tiny(cfg_cls, **kw):
    base = {
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 1024,
        "max_position_embeddings": 256,
    }
    base.update(kw)
    return cfg_cls(**base)


def _run_model(model, ids, mode, dynamic=False):
    import torch

    model = model.to("cuda", torch.bfloat16).eval()
    with torch.no_grad():
        ref = model(ids)
        fn = torch.compile(model, mode=mode, dynamic=dynamic)
        out = fn(ids)
    a = (
        ref[0]
        if isinstance(ref, tuple)
        else getattr(ref, "logits", getattr(ref, "last_hidden_state", None))
    )
    b = (
        out[0]
        if isinstance(out, tuple)
        else getattr(out, "logits", getattr(out, "last_hidden_state", None))
    )
    torch.cuda.synchronize()
    return float((a.float() - b.float()).abs().max())


def worker(name: str) -> dict:
    import torch

    torch.manual_seed(0)
    res: dict = {"name": name}
    ids = torch.randint(0, 1024, (2, 64), device="cuda")
    if name in ("llama_default", "llama_autotune"):
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = _tiny(LlamaConfig, num_key_value_heads=2)
        mode = "max-autotune-no-cudagraphs" if name.endswith("autotune") else "default"
        res["max_err"] = _run_model(LlamaForCausalLM(cfg), ids, mode)
    elif name == "bert_autotune":
        from transformers import BertConfig, BertModel

        res["max_err"] = _run_model(BertModel(_tiny(BertConfig)), ids, "max-autotune-no-cudagraphs")
    elif name == "mixtral_default":
        from transformers import MixtralConfig, MixtralForCausalLM

        cfg = _tiny(
            MixtralConfig, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2
        )
        res["max_err"] = _run_model(MixtralForCausalLM(cfg), ids, "default")
    elif name == "flex_gpt2":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        q, k, v = (
            torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3)
        )
        mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, 256, 256)
        out = torch.compile(flex_attention)(q, k, v, block_mask=mask)
        res["flex_sum"] = float(out.float().sum())
        from transformers import GPT2Config, GPT2Model

        cfg = GPT2Config(n_embd=256, n_layer=2, n_head=4, vocab_size=1024, n_positions=256)
        res["max_err"] = _run_model(GPT2Model(cfg), ids, "default", dynamic=True)
    elif name == "triton_plain":
        res.update(_triton_plain())
    elif name == "compute_cache":
        res.update(_compute_cache())
    return res


def _triton_plain() -> dict:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add(x, y, out, n, BLOCK: tl.constexpr):
        o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = o < n
        tl.store(out + o, tl.load(x + o, mask=m) + tl.load(y + o, mask=m), mask=m)

    @triton.jit
    def rowsum(x, out, N: tl.constexpr):
        r = tl.program_id(0)
        tl.store(out + r, tl.sum(tl.load(x + r * N + tl.arange(0, N)), 0))

    @triton.jit
    def mm(a, b, c, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
        rm = tl.arange(0, BM)
        rn = tl.arange(0, BN)
        rk = tl.arange(0, K)
        x = tl.load(a + rm[:, None] * K + rk[None, :])
        y = tl.load(b + rk[:, None] * BN + rn[None, :])
        tl.store(c + rm[:, None] * BN + rn[None, :], tl.dot(x, y))

    @triton.jit
    def fp8_roundtrip(x, out, n, BLOCK: tl.constexpr):
        o = tl.arange(0, BLOCK)
        m = o < n
        v = tl.load(x + o, mask=m).to(tl.float8e4nv)
        tl.store(out + o, v.to(tl.float32), mask=m)

    x = torch.randn(4096, device="cuda")
    y = torch.randn(4096, device="cuda")
    out = torch.empty_like(x)
    add[(32,)](x, y, out, 4096, BLOCK=128)
    add_ok = bool(torch.allclose(out, x + y))
    m = torch.randn(64, 128, device="cuda")
    rs = torch.empty(64, device="cuda")
    rowsum[(64,)](m, rs, N=128)
    a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    c = torch.empty(64, 64, device="cuda", dtype=torch.float32)
    mm[(1,)](a, b, c, K=64, BM=64, BN=64)
    f8 = torch.empty(1024, device="cuda")
    fp8_roundtrip[(1,)](x, f8, 1024, BLOCK=1024)
    torch.cuda.synchronize()
    return {
        "add_ok": add_ok,
        "rowsum_ok": bool(torch.allclose(rs, m.sum(1), atol=1e-3)),
        "mm_err": float((c - a.float() @ b.float()).abs().max()),
    }


CUDA_SRC = r"""
__global__ void axpy_k(const float* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += a * x[i];
}
torch::Tensor axpy(torch::Tensor x, torch::Tensor y, double a) {
  int n = x.numel(); axpy_k<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)a, n);
  return y;
}
"""

PTX = """.version 8.0
.target sm_80
.address_size 64
.visible .entry jw_scale(.param .u64 p, .param .f32 s)
{
    .reg .b64 %rd<5>;
    .reg .b32 %r<5>;
    .reg .f32 %f<4>;
    ld.param.u64 %rd1, [p];
    ld.param.f32 %f1, [s];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f2, [%rd4];
    mul.f32 %f3, %f2, %f1;
    st.global.f32 [%rd4], %f3;
    ret;
}
"""


def _compute_cache() -> dict:
    """Fills CUDA_CACHE_PATH through cuDNN, CuPy, numba-cuda and a PTX-only extension."""
    import torch

    res: dict = {}
    base = os.environ["CUDA_CACHE_PATH"]

    def step(label, fn):
        t = time.time()
        try:
            res[label] = fn()
        except Exception as exc:  # record and go on: each flavour is independent
            res[label] = f"FAILED {type(exc).__name__}: {exc}"[:400]
        res[label + "_s"] = round(time.time() - t, 2)

    def cudnn():
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = (
            torch.randn(2, 8, 128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(3)
        )
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            o.sum().backward()
            o2 = torch.nn.functional.scaled_dot_product_attention(
                q[:, :, :96], k[:, :, :96], v[:, :, :96]
            )
        torch.cuda.synchronize()
        return float(o.float().sum() + o2.float().sum())

    def cupy_ptx():
        import cupy

        path = os.path.join(os.path.dirname(base), "k.ptx")
        with open(path, "w") as f:
            f.write(PTX)
        mod = cupy.RawModule(path=path)
        k = mod.get_function("jw_scale")
        a = cupy.ones(32, dtype=cupy.float32)
        k((1,), (32,), (a, cupy.float32(3.0)))
        el = cupy.ElementwiseKernel("float32 x", "float32 y", "y = x * x + 1", "jw_sq")
        b = el(a)
        cupy.cuda.Device().synchronize()
        return float(a.sum() + b.sum())

    def numba():
        import numpy as np
        from numba import cuda

        @cuda.jit
        def inc(a):
            i = cuda.grid(1)
            if i < a.size:
                a[i] += 1.0

        arr = cuda.to_device(np.zeros(64, dtype=np.float32))
        inc[1, 64](arr)
        return float(arr.copy_to_host().sum())

    def ext():
        from torch.utils.cpp_extension import load_inline

        os.environ["TORCH_CUDA_ARCH_LIST"] = "8.0+PTX"
        m = load_inline(
            name="jw_axpy",
            cpp_sources="torch::Tensor axpy(torch::Tensor x, torch::Tensor y, double a);",
            cuda_sources=CUDA_SRC,
            functions=["axpy"],
            verbose=False,
        )
        x = torch.ones(1000, device="cuda")
        y = torch.zeros(1000, device="cuda")
        return float(m.axpy(x, y, 2.0).sum())

    step("cudnn", cudnn)
    step("cupy", cupy_ptx)
    step("numba", numba)
    step("ext", ext)
    return res


def _stamps() -> dict:
    """The JIT compiler's and nvJitLink's build stamps, as the cuda-compute adapter reads them."""
    out = {}
    pat = re.compile(rb"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-3]\d \d{4}")
    with open("/proc/self/maps") as f:
        loaded = sorted({ln.split()[-1] for ln in f if ".so" in ln})
    cands = [p for p in loaded if "ptxjitcompiler" in p or "nvJitLink" in p or "libcuda.so" in p]
    for root in ("/usr/lib/x86_64-linux-gnu", "/usr/local/nvidia/lib64", "/usr/lib64"):
        if os.path.isdir(root):
            cands += [os.path.join(root, n) for n in os.listdir(root) if "ptxjitcompiler" in n]
    try:
        import nvidia.nvjitlink as nj

        d = os.path.join(os.path.dirname(nj.__file__), "lib")
        cands += [os.path.join(d, n) for n in os.listdir(d)]
    except Exception:
        pass
    for p in sorted(set(cands)):
        try:
            with open(p, "rb") as f:
                data = f.read()
        except OSError as exc:
            out[p] = str(exc)
            continue
        out[p] = sorted({m.group(0).decode() for m in pat.finditer(data)})[:6]
    return out


def facts() -> dict:
    import torch

    d = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(),
        "cc": torch.cuda.get_device_capability(),
        "arch_list": torch.cuda.get_arch_list(),
    }
    for mod in ("triton", "transformers", "cupy", "numba", "numba_cuda"):
        try:
            d[mod] = __import__(mod).__version__
        except Exception as exc:
            d[mod] = f"n/a ({type(exc).__name__})"
    try:
        d["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        pass
    try:
        d["proc_version"] = open("/proc/driver/nvidia/version").read()
    except OSError as exc:
        d["proc_version"] = str(exc)
    d["stamps"] = _stamps()
    return d


def run_one(name: str, out: str, timeout: int) -> dict:
    work = os.path.join(out, "work", name)
    env = dict(os.environ)
    env.update(
        TORCHINDUCTOR_CACHE_DIR=os.path.join(work, "inductor"),
        TRITON_CACHE_DIR=os.path.join(work, "triton"),
        CUDA_CACHE_PATH=os.path.join(work, "ComputeCache"),
        TORCH_EXTENSIONS_DIR=os.path.join(work, "torch_extensions"),
        PYTHONUNBUFFERED="1",
    )
    for k in ("JITWARDEN_DISABLE", "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE"):
        env.pop(k, None)
    os.makedirs(work, exist_ok=True)
    t = time.time()
    try:
        p = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--worker", name],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        rec = {"rc": p.returncode, "stderr_tail": p.stderr[-1500:]}
        try:
            rec.update(json.loads(p.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            rec["stdout_tail"] = p.stdout[-800:]
    except subprocess.TimeoutExpired:
        rec = {"rc": "timeout"}
    rec["seconds"] = round(time.time() - t, 1)
    files = sum(len(f) for _, _, f in os.walk(work))
    size = sum(os.lstat(os.path.join(d, n)).st_size for d, _, fs in os.walk(work) for n in fs)
    rec.update(files=files, bytes=size)
    with tarfile.open(os.path.join(out, f"{name}.tar.xz"), "w:xz") as tar:
        tar.add(work, arcname=name)
    rec["tar_bytes"] = os.path.getsize(os.path.join(out, f"{name}.tar.xz"))
    print(f"{name}: {json.dumps(rec)[:600]}", flush=True)
    return rec


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("--worker")
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--timeout", type=int, default=420)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker)))
        return 0
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    doc: dict = {"facts": facts(), "workloads": {}}
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        futs = {ex.submit(run_one, n, a.out, a.timeout): n for n in a.only.split(",")}
        for f in concurrent.futures.as_completed(futs):
            doc["workloads"][futs[f]] = f.result()
    doc["total_s"] = round(time.time() - t0, 1)
    with open(os.path.join(a.out, "facts.json"), "w") as f:
        json.dump(doc, f, indent=1)
    import shutil

    shutil.rmtree(os.path.join(a.out, "work"), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
