"""``verify --quick`` entries/s over cuda-compute, FlashInfer, DeepGEMM and torch-ext caches, next to ``du -s``.

Builds four roots holding N entries in all (N/4 per kind, default N = 10,000), copied from real artifacts:
a real ``torch.utils.cpp_extension.load`` build (its ``build.ninja``, ``.o`` and ``.so``), a real sm_90a
cubin from Triton, a g++ shared object, and 4 KiB driver-cache files. Large ELF files are hard-linked
into every entry (each entry keeps its own names; jitwarden reads 64 header bytes of each, ``du``
stats each). Then, in one run with warm page caches: ``du -s`` over the four roots and
``jitwarden verify --quick --format json --target 90`` over the same four, each a fresh process.

    python benchmarks/bench_scan_other_kinds.py [N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir))  # the repo root: tests.helpers

from tests.helpers import kernels

EXT_SRC = """#include <torch/extension.h>
int64_t jw_add(int64_t a, int64_t b) { return a + b; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add", &jw_add); }
"""
FI_NINJA = """ninja_required_version = 1.3
name = {name}
cuda_home = /usr/local/cuda
cxx = c++
nvcc = $cuda_home/bin/nvcc
cuda_cflags = -O3 -std=c++17 $
    -gencode=arch=compute_90a,code=sm_90a
cuda_arch_flags = -gencode=arch=compute_90a,code=sm_90a
ldflags = -shared -L$cuda_home/lib64 -lcudart -lcuda
rule link
  command = $cxx $in $ldflags -o $out
build {name}.so: link norm_norm.cuda.o
default {name}.so
"""


from bench_scan import measure, report


def templates(work: str) -> dict:
    """Real artifacts: a torch extension build dir, an sm_90a cubin, a g++ .so/.o."""
    t = os.path.join(work, "templates")
    os.makedirs(t, exist_ok=True)
    ext = os.path.join(t, "ext", "jwext")
    if not os.path.isfile(os.path.join(ext, "jwext.so")):
        src = os.path.join(t, "jwext.cpp")
        open(src, "w").write(EXT_SRC)
        code = f"from torch.utils.cpp_extension import load\nload(name='jwext', sources=[{src!r}])"
        subprocess.run(
            [sys.executable, "-c", code],
            env=dict(os.environ, TORCH_EXTENSIONS_DIR=os.path.join(t, "ext")),
            check=True,
            capture_output=True,
        )
    cubin_dir = os.path.join(t, "triton")
    if not os.path.isdir(cubin_dir):
        kernels.build_cache(cubin_dir, kernels.jobs_for(archs=(90,), variants=kernels.VARIANTS[:1]))
    cubin = next(
        os.path.join(cubin_dir, d, f)
        for d in os.listdir(cubin_dir)
        if os.path.isdir(os.path.join(cubin_dir, d))
        for f in os.listdir(os.path.join(cubin_dir, d))
        if f.endswith(".cubin")
    )
    so = os.path.join(t, "op.so")
    if not os.path.isfile(so):
        open(os.path.join(t, "op.cpp"), "w").write('extern "C" int jw(int x) { return x + 1; }\n')
        subprocess.run(
            ["g++", "-fPIC", "-c", os.path.join(t, "op.cpp"), "-o", os.path.join(t, "op.o")],
            check=True,
        )
        subprocess.run(["g++", "-shared", os.path.join(t, "op.o"), "-o", so], check=True)
    return {"ext": ext, "cubin": cubin, "so": so, "o": os.path.join(t, "op.o")}


def make_tree(dst: str, n: int, tpl: dict) -> dict[str, str]:
    per = n // 4
    roots = {
        k: os.path.join(dst, k) for k in ("cuda-compute", "flashinfer", "deepgemm", "torch-ext")
    }
    # cuda-compute: <hex>/<hex>/<hash> files, each a real driver JIT entry, and the driver's index
    cc = roots["cuda-compute"]
    os.makedirs(cc)
    real = os.path.join(HERE, os.pardir, "tests", "data", "cuda_compute_h200", "ComputeCache")
    shutil.copy(os.path.join(real, "index"), os.path.join(cc, "index"))
    blob = open(
        os.path.join(real, "2", "4", "aca7d279b8280d"), "rb"
    ).read()  # a real H200 driver JIT entry
    for i in range(per):
        h = f"{i:016x}"
        d = os.path.join(cc, h[-1], h[-2])
        os.makedirs(d, exist_ok=True)
        open(os.path.join(d, f"{i * 2654435761 % (1 << 64):016x}"), "wb").write(blob)
    # flashinfer: 0.7.4/90a/cached_ops/op<i>/{build.ninja, norm_norm.cuda.o, op<i>.so}
    ops = os.path.join(roots["flashinfer"], "0.7.4", "90a", "cached_ops")
    os.makedirs(os.path.join(ops, "tmp"))
    for i in range(per):
        d = os.path.join(ops, f"op{i}")
        os.mkdir(d)
        open(os.path.join(d, "build.ninja"), "w").write(FI_NINJA.format(name=f"op{i}"))
        os.link(tpl["o"], os.path.join(d, "norm_norm.cuda.o"))
        os.link(tpl["so"], os.path.join(d, f"op{i}.so"))
    # deepgemm: cache/kernel.<name>.<hash>/{kernel.cu, kernel.cubin}
    cache = os.path.join(roots["deepgemm"], "cache")
    os.makedirs(cache)
    os.makedirs(os.path.join(roots["deepgemm"], "tmp"))
    cubin = open(tpl["cubin"], "rb").read()
    for i in range(per):
        d = os.path.join(cache, f"kernel.sm90_fp8_gemm_1d2d.{i:016x}")
        os.mkdir(d)
        open(os.path.join(d, "kernel.cu"), "w").write(
            f"// Includes' hash value: {i}\n#include <deep_gemm/x.cuh>\n"
        )
        open(os.path.join(d, "kernel.cubin"), "wb").write(cubin)
    # torch-ext: py311_cpu/ext<i>/{build.ninja, jwext.o, ext<i>.so, .ninja_log, .ninja_deps}
    tag = os.path.join(roots["torch-ext"], f"py{sys.version_info[0]}{sys.version_info[1]}_cpu")
    os.makedirs(tag)
    ninja = open(os.path.join(tpl["ext"], "build.ninja")).read()
    for i in range(n - 3 * per):
        d = os.path.join(tag, f"ext{i}")
        os.mkdir(d)
        open(os.path.join(d, "build.ninja"), "w").write(ninja.replace("jwext", f"ext{i}"))
        os.link(os.path.join(tpl["ext"], "jwext.o"), os.path.join(d, f"ext{i}.o"))
        os.link(os.path.join(tpl["ext"], "jwext.so"), os.path.join(d, f"ext{i}.so"))
        for f in (".ninja_log", ".ninja_deps"):
            shutil.copy(os.path.join(tpl["ext"], f), os.path.join(d, f))
    return roots


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", metavar="DIR", help="build the tree here and keep it")
    ap.add_argument(
        "--against",
        metavar="SRC",
        help="also time this checkout's code (its src/ dir) in the same rounds",
    )
    args = ap.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="jw-bench-other-")
    try:
        tpl = templates(work)
        tree = os.path.join(work, "tree")
        if not os.path.isdir(tree):
            t = time.perf_counter()
            make_tree(tree, args.n, tpl)
            print(f"built {args.n} entries in {time.perf_counter() - t:.1f}s", file=sys.stderr)
        roots = [os.path.join(tree, k) for k in sorted(os.listdir(tree))]
        fig = measure(roots, args.repeat, against=args.against)
        doc = fig.doc
        n = doc["summary"]["entries"]
        files = sum(len(fs) for r in roots for _d, _s, fs in os.walk(r))
        by_kind = {c["kind"]: c["entries"] for c in doc["caches"]}
        print(
            f"tree: {n} entries ({', '.join(f'{k} {v}' for k, v in sorted(by_kind.items()))}), {files} files; "
            f"{os.cpu_count()} cores"
        )
        report(n, fig, args.repeat, goal=10_000)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
