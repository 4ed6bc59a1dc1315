"""What the GPU machine's tools look like where jitwarden hooks them: versions, the signatures of every private
function a hook wraps, and the source files they live in (issue 42: hooks are checked against the real shapes).

    python benchmarks/gpu_facts.py --out $OUT      # facts.json and sources.tgz

Imports each tool (not jitwarden), so it is a diagnostic for the GPU machine, never part of the guard.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import inspect
import json
import os
import tarfile

DISTS = (
    "jax",
    "jaxlib",
    "jax-cuda13-plugin",
    "cupy-cuda13x",
    "cupy-cuda12x",
    "numba",
    "numba-cuda",
    "triton",
    "torch",
    "vllm",
    "numpy",
    "transformers",
    "flashinfer-python",
)
# (module, dotted attribute): every private thing a hook of jitwarden's wraps or reads
TARGETS = (
    ("jax._src.compiler", "_cache_write"),
    ("jax._src.compiler", "_cache_read"),
    ("jax._src.compiler", "compile_or_get_cached"),
    ("jax._src.compiler", "_compile_and_write_cache"),
    ("jax._src.compilation_cache", "get_file_cache"),
    ("jax._src.compilation_cache", "get_executable_and_time"),
    ("jax._src.compilation_cache", "put_executable_and_time"),
    ("jax._src.compilation_cache", "_initialize_cache"),
    ("jax._src.compilation_cache", "set_cache_dir"),
    ("jax._src.lru_cache", "LRUCache.get"),
    ("jax._src.lru_cache", "LRUCache.put"),
    ("jax._src.lru_cache", "LRUCache.__init__"),
    ("cupy.cuda.compiler", "_kernel_cache_backend"),
    ("cupy.cuda.compiler", "_set_kernel_cache_backend"),
    ("cupy.cuda._compiler_cache", "DiskKernelCacheBackend.load"),
    ("cupy.cuda._compiler_cache", "DiskKernelCacheBackend.save"),
    ("cupy.cuda._compiler_cache", "DiskKernelCacheBackend.__init__"),
    ("numba.cuda.core.caching", "IndexDataCacheFile._load_index"),
    ("numba.cuda.core.caching", "IndexDataCacheFile._load_data"),
    ("numba.cuda.core.caching", "IndexDataCacheFile._save_index"),
    ("numba.cuda.core.caching", "IndexDataCacheFile._save_data"),
    ("numba.cuda.core.caching", "IndexDataCacheFile._dump"),
    ("numba.cuda.core.caching", "IndexDataCacheFile._open_for_write"),
    ("triton.runtime.cache", "FileCacheManager.__init__"),
    ("triton.runtime.cache", "FileCacheManager.get_file"),
    ("triton.runtime.cache", "FileCacheManager.put"),
    ("triton.runtime.cache", "FileCacheManager.get_group"),
    ("triton.runtime.cache", "FileCacheManager.put_group"),
    ("triton.runtime.cache", "FileCacheManager._make_path"),
    ("torch._inductor.triton_bundler", "TritonBundler.read_and_emit"),
    ("torch._inductor.codecache", "GuardedCache.iterate_over_candidates"),
    ("torch._inductor.codecache", "FxGraphCache._write_to_local_cache"),
    ("torch._functorch._aot_autograd.autograd_cache", "AOTAutogradCache._write_to_local_cache"),
    ("torch._inductor.runtime.static_cuda_launcher", "StaticallyLaunchedCudaKernel.__init__"),
    ("torch._inductor.async_compile", "StaticAutotunerFuture.result"),
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    facts: dict = {"versions": {}, "signatures": {}, "files": {}}
    for d in DISTS:
        try:
            facts["versions"][d] = md.version(d)
        except md.PackageNotFoundError:
            pass
    files: set[str] = set()
    for mod, attr in TARGETS:
        key = f"{mod}:{attr}"
        try:
            obj = importlib.import_module(mod)
            files.add(obj.__file__)
            for part in attr.split("."):
                obj = getattr(obj, part)
            try:
                facts["signatures"][key] = str(inspect.signature(obj))
            except (TypeError, ValueError):
                facts["signatures"][key] = f"<{type(obj).__name__}: no signature>"
        except Exception as exc:
            facts["signatures"][key] = f"<{type(exc).__name__}: {exc}>"
    for mod in ("jax._src.cache_key", "jax._src.lru_cache", "cupy.cuda._compiler_cache"):
        try:
            files.add(importlib.import_module(mod).__file__)
        except Exception:
            pass
    os.makedirs(a.out, exist_ok=True)
    with tarfile.open(os.path.join(a.out, "sources.tgz"), "w:gz") as t:
        for f in sorted(x for x in files if x and x.endswith(".py")):
            arc = f.split("site-packages/")[-1]
            facts["files"][arc] = os.path.getsize(f)
            t.add(f, arcname=arc)
    with open(os.path.join(a.out, "facts.json"), "w") as f:
        json.dump(facts, f, indent=1)
    print(json.dumps(facts, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
