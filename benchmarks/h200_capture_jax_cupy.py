"""Capture real JAX, CuPy and numba-cuda kernel caches on the H200, and show the swapped-entry attack under
stock JAX and CuPy (issue 24; docs/gpu_proof.md).

Run on the GPU machine: ``python3 benchmarks/h200_capture_jax_cupy.py OUT``. Each program runs in a fresh
process (so entries are written to disk and read back by the next one); OUT receives one ``.tar.xz`` per
cache, ``results.json`` (what each step printed) and the installed distributions' METADATA/RECORD heads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import textwrap
import time

OUT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "capture-out")
RESULTS: dict = {}

JAX_PRELUDE = textwrap.dedent("""
    import os, sys, json, time
    import jax, jax.numpy as jnp
    jax.config.update("jax_compilation_cache_dir", os.environ["JW_JAX_DIR"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    if os.environ.get("JW_XLA_CACHES"):
        jax.config.update("jax_persistent_cache_enable_xla_caches", os.environ["JW_XLA_CACHES"])
    def out(**kw): print("JW " + json.dumps(kw), flush=True)
""")

JAX_PROGRAMS = {
    "addsub": """
        def f_add(x, y): return x + y
        def f_sub(x, y): return x - y
        x = jnp.arange(1024, dtype=jnp.float32); y = jnp.full((1024,), 2.0, jnp.float32)
        a = jax.jit(f_add)(x, y); s = jax.jit(f_sub)(x, y)
        out(add0=float(a[0]), add5=float(a[5]), sub5=float(s[5]))
    """,
    "mlp": """
        k = jax.random.PRNGKey(0)
        w1 = jax.random.normal(k, (1024, 4096), jnp.bfloat16); w2 = jax.random.normal(k, (4096, 1024), jnp.bfloat16)
        x = jax.random.normal(k, (256, 1024), jnp.bfloat16)
        @jax.jit
        def mlp(x):
            h = x @ w1
            h = jax.nn.gelu(h)
            h = (h - h.mean(-1, keepdims=True)) / (h.std(-1, keepdims=True) + 1e-5)
            return jax.nn.softmax(h @ w2, axis=-1)
        r = mlp(x); out(mlp=float(r.astype(jnp.float32).sum()))
    """,
    "grad": """
        k = jax.random.PRNGKey(1)
        w = jax.random.normal(k, (512, 512), jnp.float32); x = jax.random.normal(k, (128, 512), jnp.float32)
        loss = lambda w, x: jnp.mean(jnp.tanh(x @ w) ** 2)
        g = jax.jit(jax.grad(loss))(w, x); out(grad=float(jnp.abs(g).sum()))
    """,
    "conv_scan": """
        from jax import lax
        k = jax.random.PRNGKey(2)
        img = jax.random.normal(k, (8, 32, 64, 64), jnp.float32); ker = jax.random.normal(k, (64, 32, 3, 3), jnp.float32)
        conv = jax.jit(lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME"))
        c = conv(img, ker)
        def body(carry, x): return carry * 0.9 + x, carry.sum()
        sc = jax.jit(lambda xs: lax.scan(body, jnp.zeros(256), xs))
        fin, ys = sc(jnp.ones((100, 256)))
        red = jax.jit(lambda a: (a.max(axis=1), jnp.argmax(a, axis=0)))(c.reshape(8, -1))
        out(conv=float(c.sum()), scan=float(fin.sum()), red=float(red[0].sum()))
    """,
}

JAX_SWAP = """
    def f_add(x, y): return x + y
    x = jnp.arange(1024, dtype=jnp.float32); y = jnp.full((1024,), 2.0, jnp.float32)
    a = jax.jit(f_add)(x, y)
    out(add5=float(a[5]), expect_add=7.0, expect_sub=3.0)
"""

CUPY_PRELUDE = textwrap.dedent("""
    import os, sys, json
    import cupy as cp
    def out(**kw): print("JW " + json.dumps(kw), flush=True)
""")

ADD_SRC = r"""extern "C" __global__ void k(const float* x, const float* y, float* z, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) z[i] = x[i] + y[i]; }"""
SUB_SRC = r"""extern "C" __global__ void k(const float* x, const float* y, float* z, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) z[i] = x[i] - y[i]; }"""

CUPY_PROGRAMS = {
    "raw": f"""
        x = cp.arange(1024, dtype=cp.float32); y = cp.full(1024, 2.0, cp.float32); z = cp.empty_like(x)
        add = cp.RawKernel(r'''{ADD_SRC}''', "k"); add((4,), (256,), (x, y, z, cp.int32(1024)))
        out(raw_add5=float(z[5]))
        nv = cp.RawKernel(r'''{SUB_SRC}''', "k", backend="nvcc"); nv((4,), (256,), (x, y, z, cp.int32(1024)))
        out(nvcc_sub5=float(z[5]))
    """,
    "module": """
        src = r'''
        template<typename T> __global__ void scale(T* a, T s, int n) { int i = blockIdx.x*blockDim.x+threadIdx.x; if (i<n) a[i]*=s; }
        extern "C" __global__ void fill(float* a, float v, int n) { int i = blockIdx.x*blockDim.x+threadIdx.x; if (i<n) a[i]=v; }
        '''
        m = cp.RawModule(code=src, options=("-std=c++17",), name_expressions=("scale<float>", "scale<double>"))
        a = cp.empty(512, cp.float32); m.get_function("fill")((2,), (256,), (a, cp.float32(3.0), cp.int32(512)))
        m.get_function("scale<float>")((2,), (256,), (a, cp.float32(2.0), cp.int32(512)))
        out(module=float(a.sum()))
    """,
    "elementwise_reduction": """
        ew = cp.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = x * x + y", "jw_sq_add")
        rk = cp.ReductionKernel("float32 x", "float32 y", "x * x", "a + b", "y = sqrt(a)", "0", "jw_l2norm")
        x = cp.arange(4096, dtype=cp.float32) / 4096
        @cp.fuse()
        def f(a, b): return cp.sin(a) * b + 1
        out(ew=float(ew(x, x).sum()), l2=float(rk(x)), fuse=float(f(x, x).sum()),
            ops=float((cp.exp(x) + x * 2).sum()), argmax=int(cp.argmax(x)))
    """,
    "cublas": """
        cp.random.seed(0)  # the same inputs in every run: stock and guarded results compared
        a = cp.random.rand(512, 512, dtype=cp.float32); b = cp.random.rand(512, 512, dtype=cp.float32)
        c = a @ b; out(mm=float(c.sum()), tr=float(cp.trace(c)))
    """,
}

CUPY_SWAP = f"""
    x = cp.arange(1024, dtype=cp.float32); y = cp.full(1024, 2.0, cp.float32); z = cp.empty_like(x)
    k = cp.RawKernel(r'''{ADD_SRC}''', "k"); k((4,), (256,), (x, y, z, cp.int32(1024)))
    out(add5=float(z[5]), expect_add=7.0, expect_sub=3.0)
"""

NUMBA_KERNELS = """
from numba import cuda
@cuda.jit(cache=True)
def add(x, y, z):
    i = cuda.grid(1)
    if i < z.size:
        z[i] = x[i] + y[i]
@cuda.jit(cache=True)
def sub(x, y, z):
    i = cuda.grid(1)
    if i < z.size:
        z[i] = x[i] - y[i]
"""

NUMBA_RUN = """
import json, sys, numpy as np
from numba import cuda
sys.path.insert(0, sys.argv[1])
import jwkern
x = np.arange(1024, dtype=np.float32); y = np.full(1024, 2.0, np.float32); z = np.zeros_like(x)
jwkern.add[4, 256](x, y, z); a5 = float(z[5])
jwkern.sub[4, 256](x, y, z); s5 = float(z[5])
print("JW " + json.dumps({"add5": a5, "sub5": s5, "numpy": np.__version__}), flush=True)
"""


def run(step: str, code: str, env: dict, timeout: int = 240, argv: tuple = ()) -> dict:
    t0 = time.time()
    try:
        p = subprocess.run(
            [sys.executable, "-c", code, *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        rec = {
            "rc": p.returncode,
            "s": round(time.time() - t0, 2),
            "out": [
                json.loads(line[3:]) for line in p.stdout.splitlines() if line.startswith("JW ")
            ],
            "err_tail": p.stderr[-1500:] if p.returncode else "",
        }
    except subprocess.TimeoutExpired:
        rec = {"rc": "timeout", "s": timeout}
    RESULTS[step] = rec
    print(step, json.dumps(rec)[:600], flush=True)
    return rec


def listing(d: str) -> list:
    rows = []
    for base, dirs, files in os.walk(d):
        for n in sorted(files):
            p = os.path.join(base, n)
            rows.append([os.path.relpath(p, d), os.path.getsize(p)])
    return rows


def pack(d: str, name: str) -> None:
    if os.path.isdir(d):
        with tarfile.open(os.path.join(OUT, name + ".tar.xz"), "w:xz") as t:
            t.add(d, arcname=name)
        RESULTS.setdefault("listings", {})[name] = listing(d)


def jax_part(base_env: dict) -> None:
    d = os.path.join(OUT, "work", "jax_cache")
    env = dict(base_env, JW_JAX_DIR=d, JW_XLA_CACHES="all")
    for name, body in JAX_PROGRAMS.items():
        code = JAX_PRELUDE + textwrap.dedent(body)
        run(f"jax_{name}_cold", code, env)
        run(f"jax_{name}_warm", code, env)
    pack(d, "jax_cache")
    # The attack: jit_f_sub's file under jit_f_add's name.
    a = os.path.join(OUT, "work", "jax_swap")
    env = dict(base_env, JW_JAX_DIR=a)
    run("jax_swap_build", JAX_PRELUDE + textwrap.dedent(JAX_PROGRAMS["addsub"]), env)
    names = sorted(os.listdir(a)) if os.path.isdir(a) else []
    add = [n for n in names if n.startswith("jit_f_add") and n.endswith("-cache")]
    sub = [n for n in names if n.startswith("jit_f_sub") and n.endswith("-cache")]
    RESULTS["jax_swap_names"] = names
    if add and sub:
        with open(os.path.join(a, sub[0]), "rb") as f:
            data = f.read()
        with open(os.path.join(a, add[0]), "wb") as f:
            f.write(data)
        run("jax_swap_stock", JAX_PRELUDE + textwrap.dedent(JAX_SWAP), env)
    pack(a, "jax_swapped")


def cupy_part(base_env: dict) -> None:
    d = os.path.join(OUT, "work", "cupy_cache")
    env = dict(base_env, CUPY_CACHE_DIR=d)
    for name, body in CUPY_PROGRAMS.items():
        code = CUPY_PRELUDE + textwrap.dedent(body)
        run(f"cupy_{name}_cold", code, env)
        run(f"cupy_{name}_warm", code, env)
    pack(d, "cupy_cache")
    a = os.path.join(OUT, "work", "cupy_swap")
    env = dict(base_env, CUPY_CACHE_DIR=a)
    build_add = CUPY_PRELUDE + textwrap.dedent(f"""
        x = cp.arange(1024, dtype=cp.float32); y = cp.full(1024, 2.0, cp.float32); z = cp.empty_like(x)
        cp.RawKernel(r'''{ADD_SRC}''', "k")((4,), (256,), (x, y, z, cp.int32(1024))); out(add5=float(z[5]))
    """)
    build_sub = build_add.replace(ADD_SRC, SUB_SRC).replace("add5", "sub5")
    run("cupy_swap_build_add", build_add, env)
    add_files = set(os.listdir(a)) if os.path.isdir(a) else set()
    run("cupy_swap_build_sub", build_sub, env)
    sub_files = (set(os.listdir(a)) - add_files) if os.path.isdir(a) else set()
    RESULTS["cupy_swap_names"] = {"add": sorted(add_files), "sub": sorted(sub_files)}
    # cp.arange and cp.full compile kernels of their own: the add kernel is the one of the sub kernel's size.
    sizes = {n: os.path.getsize(os.path.join(a, n)) for n in add_files | sub_files}
    add = [n for n in add_files if len(sub_files) == 1 and sizes[n] == sizes[next(iter(sub_files))]]
    RESULTS["cupy_swap_target"] = add
    if len(add) == 1:
        with open(os.path.join(a, next(iter(sub_files))), "rb") as f:
            data = f.read()
        with open(os.path.join(a, add[0]), "wb") as f:
            f.write(data)
        run("cupy_swap_stock", CUPY_PRELUDE + textwrap.dedent(CUPY_SWAP), env)
    pack(a, "cupy_swapped")


def numba_part(base_env: dict) -> None:
    src = os.path.join(OUT, "work", "numba_src")
    os.makedirs(src, exist_ok=True)
    with open(os.path.join(src, "jwkern.py"), "w") as f:
        f.write(NUMBA_KERNELS)
    env = dict(base_env, NUMBA_CACHE_DIR=os.path.join(OUT, "work", "numba_cache"))
    site = os.environ.get("JW_NUMBA_SITE")
    if site:
        env["PYTHONPATH"] = site
    run("numba_cold", NUMBA_RUN, env, argv=(src,))
    run("numba_warm", NUMBA_RUN, env, argv=(src,))
    cache = os.path.join(OUT, "work", "numba_cache")
    pack(cache, "numba_cache")
    # The attack: sub's cached code under add's name (index and data file), then a fresh process.
    for base, _dirs, files in os.walk(cache):
        for n in files:
            if n.startswith("jwkern.sub-") and n.endswith(".nbc"):
                with open(os.path.join(base, n), "rb") as f:
                    data = f.read()
                tgt = [
                    m
                    for m in files
                    if m.startswith("jwkern.add-")
                    and m.rsplit(".", 2)[-2:] == n.rsplit(".", 2)[-2:]
                ]
                for m in tgt:
                    with open(os.path.join(base, m), "wb") as f:
                        f.write(data)
    run("numba_swap_stock", NUMBA_RUN, env, argv=(src,))


def dists() -> None:
    import importlib.metadata as md

    keep = {}
    for name in (
        "jax",
        "jaxlib",
        "jax-cuda13-plugin",
        "jax-cuda13-pjrt",
        "cupy-cuda13x",
        "nvidia-cudnn-cu13",
        "numba",
        "numba-cuda",
        "nvidia-cuda-runtime",
        "nvidia-cuda-nvrtc",
        "ml_dtypes",
        "numpy",
    ):
        try:
            d = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        rec = d.read_text("RECORD") or ""
        keep[name] = {
            "version": d.version,
            "dist_dir": str(getattr(d, "_path", "")),
            "metadata_head": (d.read_text("METADATA") or "")[:1500],
            "record_lines": len(rec.splitlines()),
            "record_head": rec.splitlines()[:15],
            "wheel": d.read_text("WHEEL"),
        }
    RESULTS["dists"] = keep


def main() -> None:
    os.makedirs(os.path.join(OUT, "work"), exist_ok=True)
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "CUPY_", "NUMBA_", "XLA_"))
    }
    base.pop("PYTHONPATH", None)
    base["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    dists()
    parts = sys.argv[2].split(",") if len(sys.argv) > 2 else ["jax", "cupy", "numba"]
    for part in parts:
        try:
            {"jax": jax_part, "cupy": cupy_part, "numba": numba_part}[part](base)
        except Exception as exc:  # one part failing must not lose the others' captures
            RESULTS[f"{part}_error"] = repr(exc)
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(RESULTS, f, indent=1)


if __name__ == "__main__":
    main()
