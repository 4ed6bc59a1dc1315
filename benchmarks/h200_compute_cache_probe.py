"""Make a real CUDA compute cache on a GPU host (stdlib + libcuda through ctypes), and record what it looks like.

The driver JIT-compiles PTX that has no matching cubin and stores the result under
CUDA_CACHE_PATH (default ~/.nv/ComputeCache). This loads a few tiny PTX modules with
cuModuleLoadData into a fresh CUDA_CACHE_PATH and copies the resulting tree, the
driver version text and libcuda's path and mtime to $OUT, so the
cuda-compute adapter's tests can use a cache the real driver wrote.

    python benchmarks/h200_compute_cache_probe.py OUTDIR
"""

import ctypes
import json
import os
import subprocess
import sys
import tempfile

PTX = """.version 7.8
.target sm_{arch}
.address_size 64
.visible .entry jw_probe_{i}(.param .u64 p)
{{
    .reg .b64 %rd<3>;
    .reg .b32 %r<2>;
    ld.param.u64 %rd1, [p];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, {i};
    st.global.u32 [%rd2], %r1;
    ret;
}}
"""


def main(out: str) -> int:
    cache = tempfile.mkdtemp(prefix="jw-cc-")
    os.environ["CUDA_CACHE_PATH"] = os.path.join(cache, "ComputeCache")
    os.environ.pop("CUDA_CACHE_DISABLE", None)
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    dev = ctypes.c_int()
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    major, minor = ctypes.c_int(), ctypes.c_int()
    cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)
    cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
    arch = major.value * 10 + minor.value
    ctx = ctypes.c_void_p()
    assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    drv = ctypes.c_int()
    cuda.cuDriverGetVersion(ctypes.byref(drv))
    loaded = []
    for i in range(6):
        mod = ctypes.c_void_p()
        rc = cuda.cuModuleLoadData(ctypes.byref(mod), PTX.format(arch=arch, i=i).encode() + b"\0")
        loaded.append(rc)
    cuda.cuCtxDestroy_v2(ctx)
    facts = {"arch": arch, "cuda_driver_version": drv.value, "load_rc": loaded}
    try:
        facts["proc_version"] = open("/proc/driver/nvidia/version").read()
    except OSError as exc:
        facts["proc_version"] = str(exc)
    with open("/proc/self/maps") as f:
        maps = sorted({line.split()[-1] for line in f if "libcuda.so" in line})
    if maps:
        st = os.stat(maps[0])
        facts["libcuda_loaded"] = {"path": maps[0], "mtime": st.st_mtime, "ctime": st.st_ctime}
    for p in (
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib64/libcuda.so.1",
        "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
    ):
        if os.path.exists(p):
            facts["libcuda"] = {
                "path": p,
                "realpath": os.path.realpath(p),
                "mtime": os.stat(os.path.realpath(p)).st_mtime,
            }
            break
    try:
        facts["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except OSError as exc:
        facts["nvidia_smi"] = str(exc)
    tree = []
    root = os.environ["CUDA_CACHE_PATH"]
    for d, dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            st = os.stat(p)
            tree.append((os.path.relpath(p, root), st.st_size, oct(st.st_mode & 0o7777)))
    facts["tree"] = sorted(tree)
    os.makedirs(out, exist_ok=True)
    if os.path.isdir(root):
        import tarfile

        with tarfile.open(os.path.join(out, "ComputeCache.tar"), "w") as tar:
            tar.add(root, arcname="ComputeCache")
    with open(os.path.join(out, "facts.json"), "w") as f:
        json.dump(facts, f, indent=1)
    print(json.dumps(facts, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
