"""On a GPU: TorchInductor under the guard, cold and warm, and one tampered kernel.

Each step runs in a fresh process (as a restarted server would):

1. stock, fresh caches: cold compile time; then warm;
2. ``jitwarden run``, fresh caches: cold; then warm (must quarantine nothing);
3. ``verify --quick`` and ``verify --rebuild`` over the guarded partition;
4. one byte flipped in the code of an Inductor kernel's sealed cubin, then a warm run:
   does the result stay right, and was the entry quarantined? (Inductor may load
   cubins by itself, bypassing Triton's cache manager: this step shows whether it does.)

    PYTHONPATH=src python benchmarks/h200_inductor_guard.py      # writes $OUT/inductor_guard.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, os.pardir, "src"))

WORKLOAD = textwrap.dedent(
    """
    import time, torch
    t0 = time.perf_counter()

    class Block(torch.nn.Module):
        def __init__(self, d=1024):
            super().__init__()
            self.ln = torch.nn.LayerNorm(d)
            self.up = torch.nn.Linear(d, 4 * d)
            self.down = torch.nn.Linear(4 * d, d)

        def forward(self, x):
            h = self.ln(x)
            h = torch.nn.functional.gelu(self.up(h))
            return x + self.down(h) * torch.sigmoid(h[..., :1024])

    torch.manual_seed(0)
    m = Block().cuda().half()
    x = torch.randn(8, 256, 1024, device="cuda", dtype=torch.half)
    ref = m(x)
    y = torch.compile(m)(x)
    torch.cuda.synchronize()
    err = (y - ref).abs().max().item()
    print("RESULT", round(time.perf_counter() - t0, 3), err)
    """
)


def run(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    secs = err = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT"):
            _, secs, err = line.split()
            secs, err = float(secs), float(err)
    return {"rc": p.returncode, "seconds": secs, "max_abs_err": err, "stderr_tail": p.stderr[-600:]}


def main() -> int:
    work = tempfile.mkdtemp(prefix="jw-ind-guard-")
    script = os.path.join(work, "w.py")
    with open(script, "w") as f:
        f.write(WORKLOAD)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "JITWARDEN_"))}
    base["PYTHONPATH"] = SRC + os.pathsep + base.get("PYTHONPATH", "")
    py = [sys.executable, script]
    jw = [sys.executable, "-m", "jitwarden"]
    out: dict = {}

    stock = dict(base, HOME=os.path.join(work, "stock"), TORCHINDUCTOR_CACHE_DIR=os.path.join(work, "stock", "ind"))
    os.makedirs(stock["HOME"])
    out["stock_cold"] = run(py, stock)
    out["stock_warm"] = run(py, stock)

    home = os.path.join(work, "guarded")
    os.makedirs(home)
    guarded = dict(base, HOME=home, TORCHINDUCTOR_CACHE_DIR=os.path.join(home, "ind"),
                   JITWARDEN_HOME=os.path.join(home, "jw"))
    out["guarded_cold"] = run(jw + ["run", "--"] + py, guarded)
    out["guarded_warm"] = run(jw + ["run", "--"] + py, guarded)

    cubins = sorted(os.path.join(d, n) for d, _s, fs in os.walk(home) for n in fs
                    if n.endswith(".cubin") and "jitwarden-quarantine" not in d)
    sealed = [c for c in cubins if os.path.exists(os.path.join(os.path.dirname(c), ".jitwarden-seal.json"))]
    out["cubins"] = {"total": len(cubins), "sealed": len(sealed), "dirs": sorted({os.path.dirname(os.path.dirname(c)) for c in cubins})}
    for label, extra in (("verify_quick", []), ("verify_rebuild", ["--rebuild"])):
        p = subprocess.run(jw + ["verify", *extra, "--format", "json"], env=guarded, capture_output=True, text=True)
        try:
            doc = json.loads(p.stdout)
            out[label] = {"rc": p.returncode, "summary": doc["summary"],
                          "caches": [(c["root"], c["entries"]) for c in doc["caches"]]}
        except ValueError:
            out[label] = {"rc": p.returncode, "stderr": p.stderr[-600:]}

    # Tamper with the largest sealed Inductor kernel: flip one byte inside its code.
    target = max(sealed, key=os.path.getsize) if sealed else None
    if target:
        sys.path.insert(0, SRC)
        from jitwarden import elf

        data = bytearray(open(target, "rb").read())
        e = elf.parse(bytes(data))
        text = next(s for s in e.sections if s.name.startswith(".text."))
        pos = text.offset + text.size // 2
        data[pos] ^= 0xFF
        open(target, "wb").write(bytes(data))
        out["tampered"] = {"cubin": target, "section": text.name, "offset": pos}
        out["guarded_after_tamper"] = run(jw + ["run", "--"] + py, guarded)
        out["quarantined"] = [os.path.join(d, x) for d, sub, _f in os.walk(home) if os.path.basename(d) == "jitwarden-quarantine" for x in sub]
        out["tampered_file_still_in_place"] = os.path.exists(target)
    os.makedirs(os.environ.get("OUT") or work, exist_ok=True)
    with open(os.path.join(os.environ.get("OUT") or work, "inductor_guard.json"), "w") as f:
        json.dump(out, f, indent=2)
    for k, v in out.items():
        print(k, json.dumps(v)[:400])
    return 0


if __name__ == "__main__":
    sys.exit(main())
