"""What believing a seal costs on the warm path: the trust rule and the HMAC (issue 32), per seal read.

Seals one entry of 8 files (a Triton kernel's shape), then times, in interleaved rounds of one process:

- plain: the read every check made before seals were authenticated (the file read whole, parsed);
- believed: ``seal.read`` (the entry's and the seal's owner and mode checked, the HMAC verified once per
  process and seal bytes, the parse remembered with it);
- believed, first read: the same with the per-process memo cleared each time (a cold process).

    PYTHONPATH=src python benchmarks/bench_seal_auth.py [--rounds 9] [--reads 3000]

Runs in a temporary HOME (its seal key is made there).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--reads", type=int, default=3000)
    a = ap.parse_args(argv)
    home = tempfile.mkdtemp(prefix="jw-bench-seal-")
    os.environ.update(HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"))
    try:
        return _run(a, home)
    finally:
        import shutil

        shutil.rmtree(home, ignore_errors=True)


def _run(a, home: str) -> int:
    from jitwarden.model.layout import SEAL_FILE
    from jitwarden.store import seal
    from jitwarden.store.reads import read_bytes

    entry = os.path.join(home, "ENTRYKEY")
    os.mkdir(entry)
    names = [f"add_kernel.{x}" for x in ("cubin", "ptx", "json", "ttir", "ttgir", "llir", "source")]
    names.append("__grp__add_kernel.json")
    for n in names:
        with open(os.path.join(entry, n), "wb") as f:
            f.write(os.urandom(4000))
    seal.write(entry, seal.compute(entry, names), seal.newest_ctime(entry, names))
    raw = read_bytes(os.path.join(entry, SEAL_FILE))
    body = raw.rsplit(b', "mac"', 1)[0] + b"}"
    assert seal.read(entry) is not None

    def plain():
        read_bytes(os.path.join(entry, SEAL_FILE), max_bytes=seal.MAX_SEAL, size_hint=4096)
        seal.parse(body)

    def cold():
        seal._MEMO.clear()
        seal.read(entry)

    ways = {"plain": plain, "believed": lambda: seal.read(entry), "believed, first read": cold}
    times: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(a.rounds):
        for k, fn in ways.items():
            t = time.perf_counter()
            for _ in range(a.reads):
                fn()
            times[k].append((time.perf_counter() - t) / a.reads * 1e6)
    base = statistics.median(times["plain"])
    for k in ways:
        m = statistics.median(times[k])
        print(f"{k:22s} {m:7.1f} us per seal read   ratio {m / base:.2f}")
    print(f"(median of {a.rounds} interleaved rounds of {a.reads} reads; an 8-file entry's seal)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
