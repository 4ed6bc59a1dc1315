"""After a tampered kernel is refused, do later guarded warm starts stay quiet? (The bundle hook once proved the
bundled copy of a quarantined autotuning candidate at every start, and set it aside again: tests/unit/runtime/
test_torchhooks.py, "a guarded compile's bundle".) On the GPU: one guarded cold compile of the Qwen2-style model
in max-autotune, ``N`` sealed cubins flipped, one guarded warm start (each flipped kernel it loads refused), then
``--again`` more guarded warm starts, each of which must print no jitwarden line and give the right result.

    PYTHONPATH=src python3 benchmarks/h200_tamper_again.py --out $OUT [--tamper 3] [--again 2] [--deadline S]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from h200_warm_modes import MODEL, one, tamper


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT") or "tamper-again-out")
    p.add_argument("--mode", default="max-autotune-no-cudagraphs")
    p.add_argument("--tamper", type=int, default=3)
    p.add_argument("--again", type=int, default=2)
    p.add_argument(
        "--deadline",
        type=float,
        default=0,
        help="seconds: start no warm start that may not end by then",
    )
    a = p.parse_args()
    t0 = time.perf_counter()
    work = os.environ.get("JW_WORK") or os.path.join(a.out, "work")
    os.makedirs(work, exist_ok=True)
    script = os.path.join(work, "model.py")
    with open(script, "w") as f:
        f.write(MODEL)
    root = os.path.join(work, f"{a.mode}-guarded-again")
    out = {"cold": one(script, a.mode, root, True, "on")}
    print("COLD", json.dumps(out["cold"]), flush=True)
    out["tamper"] = tamper(script, a.mode, root, a.tamper)
    print(
        "TAMPER",
        json.dumps({k: out["tamper"][k] for k in ("flipped", "per_entry", "lines")}),
        flush=True,
    )
    out["again"] = []
    for _ in range(a.again):
        last = max(r.get("wall_s", 0) for r in [out["tamper"]["runs"]["fx-on"], *out["again"]])
        if a.deadline and time.perf_counter() - t0 + last * 1.2 > a.deadline:
            print("deadline: no time for another start", flush=True)
            break
        out["again"].append(one(script, a.mode, root, True, "on"))
        r = out["again"][-1]
        print("AGAIN", r["rc"], r["wall_s"], r.get("max_abs_err"), json.dumps(r["jw"]), flush=True)
    quiet = all(
        r["rc"] == 0 and not r["jw"] and isinstance(r.get("max_abs_err"), float)
        for r in out["again"]
    )
    print(f"later guarded starts: {len(out['again'])}, all quiet and right: {quiet}")
    with open(os.path.join(a.out, "tamper_again.json"), "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
