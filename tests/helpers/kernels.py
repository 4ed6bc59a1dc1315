"""Real Triton kernels compiled on the CPU into real caches, for every test.

``build_cache(dir)`` runs ``triton.compile`` with explicit ``GPUTarget``s in a
subprocess (so TRITON_CACHE_DIR and knobs are fresh) and returns a manifest:
one record per compiled kernel with its entry directory and options.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

ARCHS = (80, 90, 120, 121)

# (label, kernel, constexprs, options)
VARIANTS = (
    ("add", "add_kernel", {"BLOCK": 128}, {}),
    ("add_b256", "add_kernel", {"BLOCK": 256}, {}),
    ("sub", "sub_kernel", {"BLOCK": 128}, {}),
    ("add_debug", "add_kernel", {"BLOCK": 64}, {"debug": True}),
    ("add_nofma", "fma_kernel", {"BLOCK": 128}, {"enable_fp_fusion": False}),
    ("matmul", "matmul_kernel", {"BM": 32, "BN": 32, "BK": 32}, {}),
)

KERNEL_SOURCE = textwrap.dedent(
    """
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)

    @triton.jit
    def sub_kernel(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=m) - tl.load(y + offs, mask=m), mask=m)

    @triton.jit
    def fma_kernel(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        a = tl.load(x + offs, mask=m)
        b = tl.load(y + offs, mask=m)
        tl.store(out + offs, a * b + a, mask=m)

    @triton.jit
    def matmul_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm = tl.program_id(0)
        pn = tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
            y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * N + rn[None, :], acc)
    """
)

SIGNATURES = {
    "add_kernel": {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32"},
    "sub_kernel": {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32"},
    "fma_kernel": {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32"},
    "matmul_kernel": {"a": "*fp16", "b": "*fp16", "c": "*fp32", "M": "i32", "N": "i32", "K": "i32"},
}

DRIVER = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, os.environ["JW_KERNEL_DIR"])
    import triton
    from triton.compiler import ASTSource
    from triton.backends.compiler import GPUTarget
    import jw_test_kernels as K
    jobs = json.loads(os.environ["JW_JOBS"])
    hits = []  # Triton's compilation listener says whether each compile was a cache hit
    if hasattr(triton, "knobs"):
        triton.knobs.compilation.listener = lambda **kw: hits.append(kw.get("cache_hit"))
    out = []
    for job in jobs:
        fn = getattr(K, job["kernel"])
        src = ASTSource(fn=fn, signature=job["signature"], constexprs=job["constexprs"])
        k = triton.compile(src, target=GPUTarget("cuda", job["arch"], 32), options=job["options"])
        job["hash"] = k.metadata.hash
        job["name"] = k.metadata.name
        job["cache_hit"] = hits[-1] if hits else None
        out.append(job)
    print(json.dumps(out))
    """
)


def jobs_for(archs=ARCHS, variants=VARIANTS) -> list[dict]:
    return [
        {
            "label": f"{label}_sm{arch}",
            "variant": label,
            "kernel": kernel,
            "signature": SIGNATURES[kernel],
            "constexprs": constexprs,
            "options": options,
            "arch": arch,
        }
        for arch in archs
        for (label, kernel, constexprs, options) in variants
    ]


def entry_id(hash_hex: str) -> str:
    import base64

    return base64.b32encode(bytes.fromhex(hash_hex)).decode().rstrip("=")


def build_cache(
    cache_dir: str, jobs: list[dict] | None = None, env: dict | None = None
) -> list[dict]:
    """Compile ``jobs`` into ``cache_dir`` in a fresh interpreter; return them with their entry paths."""
    jobs = jobs_for() if jobs is None else jobs
    os.makedirs(cache_dir, exist_ok=True)
    kdir = os.path.join(cache_dir, os.pardir, ".jw-kernels")
    kdir = os.path.abspath(kdir)
    os.makedirs(kdir, exist_ok=True)
    with open(os.path.join(kdir, "jw_test_kernels.py"), "w") as f:
        f.write(KERNEL_SOURCE)
    run_env = dict(os.environ)
    run_env.update(env or {})
    run_env.update(
        {"TRITON_CACHE_DIR": cache_dir, "JW_KERNEL_DIR": kdir, "JW_JOBS": json.dumps(jobs)}
    )
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER], env=run_env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"triton.compile failed:\n{proc.stderr[-4000:]}")
    built = json.loads(proc.stdout.strip().splitlines()[-1])
    for job in built:
        job["id"] = entry_id(job["hash"])
        job["path"] = os.path.join(cache_dir, job["id"])
    return built


def copy_cache(src: str, dst: str) -> str:
    """Copy a cache tree and point its group files at the copy, as if it had been built there."""
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    for name in os.listdir(dst):
        entry = os.path.join(dst, name)
        if not os.path.isdir(entry):
            continue
        for fname in os.listdir(entry):
            if fname.startswith("__grp__"):
                gpath = os.path.join(entry, fname)
                with open(gpath) as f:
                    doc = json.load(f)
                doc["child_paths"] = {
                    c: os.path.join(entry, os.path.basename(p))
                    for c, p in doc["child_paths"].items()
                }
                with open(gpath, "w") as f:
                    json.dump(doc, f)
    return dst
