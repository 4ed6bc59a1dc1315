"""``verify --quick`` over TorchInductor and vLLM caches: entries per second, next to ``du -s`` on the same tree.

Builds, from a real Inductor cache made by the CPU torch (``tests/helpers/inductor_real.py``: fxgraph and
aotautograd pickles, C++ kernels and their .so, output code, standalone-compile artifacts, an AOT
model) plus GPU-layout Triton kernel sources and ``.best_config`` files:

- an Inductor cache dir of about N/2 entries (each real file copied under its own new key);
- a vLLM root of about N/2 entries: ``torch_compile_cache/<hash>/rank_0_0/{backbone, inductor_cache}``
  per hash (vLLM 0.34's layout), each with the real artifacts and a copy of the real Inductor cache.

Then, in one run with a warm page cache for both: ``du -s`` (stats every file) and
``jitwarden verify --quick --format json --target 90 <inductor dir> <vllm root>`` in a fresh process.

    python benchmarks/bench_scan_kinds.py [N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pprint
import shutil
import sys
import tempfile
import time

sys.path.insert(
    0, os.path.join(os.path.dirname(__file__), os.pardir)
)  # the repo root: tests.helpers

from bench_scan import measure, report
from tests.helpers import inductor_real


def _key(prefix: str, i: int) -> str:
    return prefix + hashlib.sha256(f"{prefix}-{i}".encode()).hexdigest()[:51]


def _files(d: str) -> dict[str, bytes]:
    out = {}
    for base, _dirs, files in os.walk(d):
        for f in files:
            p = os.path.join(base, f)
            out[os.path.relpath(p, d)] = open(p, "rb").read()
    return out


def make_inductor(dst: str, n: int, real: str) -> None:
    shutil.copytree(real, dst)  # the originals, so AOTAutograd results find their FX graphs
    files = _files(real)
    fx = [(r, b) for r, b in files.items() if r.startswith("fxgraph/")]
    aot = [(r, b) for r, b in files.items() if r.startswith("aotautograd/")]
    shard = [
        (r, b) for r, b in files.items() if len(r.split("/")[0]) == 2 and not r.startswith("locks")
    ]
    kernel = inductor_real.triton_kernel_source(90).encode()
    best = json.dumps(
        {
            "XBLOCK": 1024,
            "num_warps": 4,
            "num_stages": 1,
            "configs_hash": "c0",
            "found_by_coordesc": False,
            "time_taken_ms": 3,
            "triton_cache_hash": None,
        }
    ).encode()
    made = len(os.listdir(dst))
    i = 0
    while made < n:
        i += 1
        k = _key("c", i)
        sd = os.path.join(dst, k[1:3])
        os.makedirs(sd, exist_ok=True)
        kind = i % 10
        if kind < 4:
            open(os.path.join(sd, f"{k}.py"), "wb").write(kernel)
            open(os.path.join(sd, f"{k}.best_config"), "wb").write(best)
            made += 2
        elif kind < 7:
            rel, data = shard[i % len(shard)]
            open(os.path.join(sd, k + "." + rel.split(".", 1)[1]), "wb").write(data)
            made += 1
        elif kind < 9:
            rel, data = fx[i % len(fx)]
            fk = _key("f", i)
            os.makedirs(os.path.join(dst, "fxgraph", fk[1:3], fk))
            open(os.path.join(dst, "fxgraph", fk[1:3], fk, rel.split("/")[-1]), "wb").write(data)
            made += 1
        else:
            rel, data = aot[i % len(aot)]
            ak = _key("a", i)
            os.makedirs(os.path.join(dst, "aotautograd", ak))
            open(os.path.join(dst, "aotautograd", ak, rel.split("/")[-1]), "wb").write(data)
            made += 1


def make_vllm(dst: str, n: int, real: dict) -> None:
    per = len(inductor_real_entries(real["inductor"])) + 1
    for i in range(max(1, n // per)):
        h = hashlib.sha256(f"vllm-{i}".encode()).hexdigest()[:10]
        rank = os.path.join(dst, "torch_compile_cache", h, "rank_0_0")
        prefix = os.path.join(rank, "backbone")
        os.makedirs(prefix)
        shutil.copy(
            os.path.join(real["artifacts"], "artifact_binary"),
            os.path.join(prefix, "artifact_compile_range_1_8192_subgraph_0"),
        )
        k = "artifact_compile_range_1_8192_subgraph_0"
        open(os.path.join(prefix, "vllm_compile_cache.py"), "w").write(
            pprint.PrettyPrinter(indent=4).pformat(
                {
                    ((1, 8192), 0, "inductor_standalone"): {
                        "graph_handle": (k, os.path.join(prefix, k)),
                        "cache_key": k,
                    }
                }
            )
        )
        json.dump(
            {
                "config": {"version": "0.34.0"},
                "compiler": {"inductor": [[["device", [["name", "NVIDIA H200"]]]]]},
            },
            open(os.path.join(prefix, "cache_key_factors.json"), "w"),
            indent=2,
            sort_keys=True,
        )
        shutil.copytree(real["inductor"], os.path.join(rank, "inductor_cache"))


def inductor_real_entries(d: str) -> list[str]:
    from jitwarden.adapters import inductor

    return inductor.list_entry_names(d)[0]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", metavar="DIR", help="build the trees here and keep them")
    ap.add_argument(
        "--against",
        metavar="SRC",
        help="also time this checkout's code (its src/ dir) in the same rounds",
    )
    args = ap.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="jw-bench-kinds-")
    try:
        real = inductor_real.build(os.path.join(work, "real"))
        ind, vll = os.path.join(work, "inductor"), os.path.join(work, "vllm")
        if not os.path.isdir(ind):
            t = time.perf_counter()
            make_inductor(ind, args.n // 2, real["inductor"])
            make_vllm(vll, args.n // 2, real)
            print(f"built in {time.perf_counter() - t:.1f}s", file=sys.stderr)
        fig = measure([ind, vll], args.repeat, against=args.against)
        doc = fig.doc
        n = doc["summary"]["entries"]
        by_kind: dict[str, int] = {}
        for e in doc["entries"]:
            by_kind[f"{e['kind']}:{e['type']}"] = by_kind.get(f"{e['kind']}:{e['type']}", 0) + 1
        files = sum(len(fs) for d in (ind, vll) for _b, _d, fs in os.walk(d))
        print(f"tree: {n} entries, {files} files; {os.cpu_count()} cores")
        print("entries by kind:type: " + ", ".join(f"{k} {v}" for k, v in sorted(by_kind.items())))
        report(n, fig, args.repeat, goal=10_000)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
