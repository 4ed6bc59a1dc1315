"""Per-capture counts of the real H200 corpus (``tests/data/real``): entries and findings by severity.

    python benchmarks/real_corpus_counts.py [--json] [--unrelocated]

Each capture is unpacked into a temporary directory, its Triton group files relocated there
(``tests/real/corpus.py``), and judged twice: ``verify --target 90`` in this environment, and by a
judge standing where the capture was made (torch 2.11+cu130, Python 3.12, the driver's JIT compiler
stamp). Both with a stand-in for the capture machine's driver libraries. Run it with another
jitwarden on ``PYTHONPATH`` (e.g. a ``git archive`` of an older commit) for a before/after table.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
from contextlib import redirect_stdout

sys.path.insert(
    0, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)  # the repo root: tests.real

from tests.real import corpus


def _cli_counts(roots: list[str]) -> dict:
    from jitwarden.cli.main import main

    buf = io.StringIO()
    with redirect_stdout(buf):
        main(["verify", "--format", "json", "--target", "90", *roots])
    doc = json.loads(buf.getvalue())
    out: dict = {"entries": len(doc["entries"]), "error": 0, "warn": 0, "info": 0, "by_code": {}}
    for e in doc["entries"]:
        for f in e["findings"]:
            out[f["severity"]] += 1
            key = f"{e['kind']}:{f['code']}"
            out["by_code"][key] = out["by_code"].get(key, 0) + 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--unrelocated",
        action="store_true",
        help="judge the copies as unpacked (foreign-path is true)",
    )
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["JITWARDEN_LIBCUDA"] = corpus.driver_stand_in(os.path.join(tmp, "driver"))
        os.environ.setdefault("JITWARDEN_HOME", os.path.join(tmp, "home"))
        for name in corpus.names():
            tree = corpus.unpack(name, tmp, relocated=not a.unrelocated)
            row = {"capture": name, "cli_target_90": _cli_counts(corpus.roots(tree))}
            try:
                row["as_capture_machine"] = corpus.counts(
                    corpus.scan_tree(tree, corpus.facts_judge(90))
                )
            except Exception as exc:
                row["as_capture_machine"] = f"n/a ({type(exc).__name__}: {exc})"
            rows.append(row)
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(
        f"{'capture':16} {'entries':>7} {'error':>6} {'warn':>5} {'info':>5}   as capture machine (e/w/i)   by code (cli)"
    )
    for r in rows:
        c, m = r["cli_target_90"], r["as_capture_machine"]
        mm = f"{m['error']}/{m['warn']}/{m['info']}" if isinstance(m, dict) else m
        codes = ", ".join(f"{k} {v}" for k, v in sorted(c["by_code"].items()))
        print(
            f"{r['capture']:16} {c['entries']:>7} {c['error']:>6} {c['warn']:>5} {c['info']:>5}   {mm:28} {codes}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
