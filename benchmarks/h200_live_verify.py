"""On a GPU: capture fresh caches from real workloads, then judge them against the live GPU and driver.

    PYTHONPATH=src python benchmarks/h200_live_verify.py OUTDIR [--only llama_default,compute_cache,triton_plain]

Runs ``h200_capture_corpus.py`` for the named workloads, unpacks each capture at the very path
it was written to (so group files point where they should), then runs ``jitwarden verify
--format json`` on every cache root with no ``--target``: the live GPU, the installed driver and
its JIT compiler judge. Prints and writes ``live_verify.json``: entries and findings by code and
severity per root. Every warning or error on these fresh, untouched caches is a false alarm.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main(out: str, only: str) -> int:
    cap = os.path.join(out, "capture")
    subprocess.run(
        [
            sys.executable,
            os.path.join(HERE, "h200_capture_corpus.py"),
            cap,
            "--only",
            only,
            "--jobs",
            "3",
        ],
        check=True,
    )
    result = {}
    for name in only.split(","):
        work = os.path.join(cap, "work")
        with tarfile.open(os.path.join(cap, f"{name}.tar.xz")) as t:
            t.extractall(work)
        for sub in ("triton", "inductor", "ComputeCache", "torch_extensions"):
            root = os.path.join(work, name, sub)
            if not os.path.isdir(root):
                continue
            p = subprocess.run(
                [sys.executable, "-m", "jitwarden", "verify", "--format", "json", root],
                capture_output=True,
                text=True,
                timeout=300,
            )
            try:
                doc = json.loads(p.stdout)
            except ValueError:
                result[f"{name}/{sub}"] = {"rc": p.returncode, "stderr": p.stderr[-400:]}
                continue
            c = collections.Counter(
                f"{f['severity']}:{f['code']}" for e in doc["entries"] for f in e["findings"]
            )
            result[f"{name}/{sub}"] = {
                "rc": p.returncode,
                "entries": len(doc["entries"]),
                "findings": dict(c),
                "target": doc.get("target"),
            }
            print(
                f"{name}/{sub}: rc {p.returncode}, {len(doc['entries'])} entries, {dict(c)}",
                flush=True,
            )
    d = subprocess.run(
        [sys.executable, "-m", "jitwarden", "doctor"], capture_output=True, text=True, timeout=300
    )
    result["doctor"] = {"rc": d.returncode, "stdout": d.stdout[-3000:]}
    print(d.stdout[-3000:])
    with open(os.path.join(out, "live_verify.json"), "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(
        main(
            sys.argv[1],
            sys.argv[3]
            if len(sys.argv) > 3 and sys.argv[2] == "--only"
            else "llama_default,compute_cache,triton_plain",
        )
    )
