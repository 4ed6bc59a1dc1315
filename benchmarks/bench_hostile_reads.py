"""What the hostile-input checks cost on the hot paths: reading a cache file (open with
O_NONBLOCK|O_NOCTTY, fstat, bounded read) and parsing cache JSON with a depth limit.

Baselines measured in the same run: a plain ``os.open``/``os.read`` of the same file, and
``json.loads`` of the same bytes. Prints each ratio (checked / plain).

    .venv/bin/python benchmarks/bench_hostile_reads.py [TRITON_CACHE_ENTRY_DIR]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import timeit

from jitwarden.formats import jsonlimits
from jitwarden.store import reads


def plain_read(path: str, size_hint: int) -> bytes:
    """The reader before the checks: O_NOFOLLOW open, one read of the expected size, then to EOF."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        chunks = [os.read(fd, size_hint + 1)]
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


def sample_entry() -> str:
    """A real Triton metadata JSON and cubin-sized file, when no entry dir is given."""
    d = tempfile.mkdtemp()
    meta = {
        "hash": "0" * 64,
        "target": {"backend": "cuda", "arch": 90, "warp_size": 32},
        "num_warps": 4,
        "num_ctas": 1,
        "num_stages": 3,
        "ptx_options": None,
        "enable_fp_fusion": True,
        "name": "add_kernel",
        "triton_version": "3.6.0",
        "shared": 0,
        "tmem_size": 0,
        "global_scratch_size": 0,
        "cluster_dims": [1, 1, 1],
        "instrumentation_mode": "",
        "extern_libs": [["libdevice", "/x/libdevice.10.bc"]],
    }
    with open(os.path.join(d, "add_kernel.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(d, "add_kernel.cubin"), "wb") as f:
        f.write(os.urandom(24_000))
    return d


def main() -> None:
    entry = sys.argv[1] if len(sys.argv) > 1 else sample_entry()
    names = sorted(os.listdir(entry))
    js = next(
        os.path.join(entry, n)
        for n in names
        if n.endswith(".json") and not n.startswith(("__grp__", "."))
    )
    cub = next(os.path.join(entry, n) for n in names if n.endswith(".cubin"))
    n = 20_000
    for label, path in (("metadata json", js), ("cubin", cub)):
        size = os.path.getsize(path)
        base = (
            min(
                timeit.repeat(
                    lambda path=path, size=size: plain_read(path, size), number=n, repeat=5
                )
            )
            / n
        )
        new = (
            min(
                timeit.repeat(
                    lambda path=path, size=size: reads.read_bytes(path, size_hint=size),
                    number=n,
                    repeat=5,
                )
            )
            / n
        )
        print(
            f"read {label} ({size} B): plain {base * 1e6:.2f} us, checked {new * 1e6:.2f} us, ratio {new / base:.2f}"
        )
    data = reads.read_bytes(js)
    base = min(timeit.repeat(lambda: json.loads(data), number=n, repeat=5)) / n
    new = min(timeit.repeat(lambda: jsonlimits.loads(data), number=n, repeat=5)) / n
    print(
        f"parse metadata ({len(data)} B): json.loads {base * 1e6:.2f} us, jsonlimits.loads {new * 1e6:.2f} us, "
        f"ratio {new / base:.2f}"
    )
    wide = json.dumps(
        {"k": [[i, [i, {"a": [i]}]] for i in range(200)]}
    ).encode()  # many brackets: the exact depth scan
    base = min(timeit.repeat(lambda: json.loads(wide), number=2000, repeat=5)) / 2000
    new = min(timeit.repeat(lambda: jsonlimits.loads(wide), number=2000, repeat=5)) / 2000
    print(
        f"parse bracket-heavy JSON ({len(wide)} B): json.loads {base * 1e6:.2f} us, jsonlimits.loads "
        f"{new * 1e6:.2f} us, ratio {new / base:.2f}"
    )


if __name__ == "__main__":
    main()
