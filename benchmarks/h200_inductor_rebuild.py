"""On a GPU: fill fresh Triton + TorchInductor caches, then ``verify --rebuild`` them.

Run (device machine): ``PYTHONPATH=src python benchmarks/h200_inductor_rebuild.py``

1. a plain ``@triton.jit`` kernel, launched before Inductor is imported (Triton's own ptxas);
2. a transformer-ish block (QKV/out/MLP matmuls, layernorm, gelu, softmax) under
   ``torch.compile(mode="max-autotune-no-cudagraphs")`` at several shapes;
3. the scanner + :func:`jitwarden.rebuild.verify_entries` over TRITON_CACHE_DIR and
   ``<inductor>/triton/*``, judged for sm_90, with the environment as it was *before*
   Inductor set TRITON_PTXAS_PATH in this process (as a fresh ``jitwarden`` process sees it);
4. true positives on copies: a flipped code byte and a swapped cubin must be not-reproducible;
5. the CLI (``python -m jitwarden verify --rebuild --format json``) over the same roots.

Prints counts and examples; writes ``$OUT/h200_rebuild_summary.json``.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ORIG_ENV = dict(os.environ)
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, os.pardir, "src")
sys.path.insert(0, SRC)

OUT = os.environ.get("OUT") or tempfile.mkdtemp(prefix="jw-out-")
os.makedirs(OUT, exist_ok=True)
BASE = tempfile.mkdtemp(prefix="jw-h200-")
IND = os.path.join(BASE, "inductor")
TRI = os.path.join(BASE, "triton")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = IND
os.environ["TRITON_CACHE_DIR"] = TRI
ORIG_ENV.update(TORCHINDUCTOR_CACHE_DIR=IND, TRITON_CACHE_DIR=TRI)
summary: dict = {"base": BASE}


def log(*a):
    print(*a, flush=True)


def phase_plain_triton():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def axpy(x, y, out, n, a, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, a * tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)

    n = 1 << 20
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    o = torch.empty_like(x)
    for block in (256, 1024):
        axpy[(triton.cdiv(n, block),)](x, y, o, n, 2.0, BLOCK=block)
    torch.cuda.synchronize()
    assert torch.allclose(o, 2 * x + y)
    summary["plain_triton_ptxas_env"] = os.environ.get("TRITON_PTXAS_PATH")


def phase_inductor():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.h = h
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q = q.view(b, s, self.h, d // self.h).transpose(1, 2)
            k = k.view(b, s, self.h, d // self.h).transpose(1, 2)
            v = v.view(b, s, self.h, d // self.h).transpose(1, 2)
            att = torch.softmax((q @ k.transpose(-1, -2)) * (d // self.h) ** -0.5, dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, s, d)
            x = x + self.proj(y)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    torch.manual_seed(0)
    t0 = time.time()
    shapes = [(8, 128, 512), (4, 256, 512), (2, 512, 1024)]
    for (b, s, d) in shapes:
        m = Block(d, 8).cuda().half()
        f = torch.compile(m, mode="max-autotune-no-cudagraphs", dynamic=False)
        x = torch.randn(b, s, d, device="cuda", dtype=torch.half)
        with torch.no_grad():
            y = f(x)
            ref = m(x)
        torch.cuda.synchronize()
        err = (y - ref).abs().max().item()
        log(f"compiled block {b}x{s}x{d}: max abs err vs eager {err:.3g}")
    summary["inductor_compile_s"] = round(time.time() - t0, 1)
    summary["inductor_set_TRITON_PTXAS_PATH"] = os.environ.get("TRITON_PTXAS_PATH")
    summary["shapes"] = shapes


def roots():
    rs = [TRI] + sorted(glob.glob(os.path.join(IND, "triton", "*")))
    return [r for r in rs if os.path.isdir(r)]


def scan(rs, judge):
    from jitwarden.adapters import triton as tri

    out = []
    for r in rs:
        names, _ = tri.list_entry_names(r)
        out += [tri.inspect_entry(r, n, judge) for n in names]
    return out


def phase_verify():
    import triton

    from jitwarden import ptxas, rebuild
    from jitwarden.adapters import triton as tri

    env = {k: v for k, v in ORIG_ENV.items()}
    judge = tri.Judge(target_arch=90, triton_version=triton.__version__, now=time.time())
    rs = roots()
    t0 = time.time()
    entries = scan(rs, judge)
    scan_s = time.time() - t0
    kernels = [e for e in entries if e.type == "kernel"]
    scan_findings = collections.Counter(f.code for e in entries for f in e.findings)
    log(f"roots: {rs}")
    log(f"entries {len(entries)}, kernels {len(kernels)}, scanner findings {dict(scan_findings)}")
    log(f"environment ptxas (fresh process view): {ptxas.selected(env)}")
    stats: dict = {}
    t0 = time.time()
    res = rebuild.verify_entries(kernels, jobs=os.cpu_count(), extra_ptxas=[], keep_dir=None, env=env, stats=stats)
    wall = time.time() - t0
    counts = rebuild.summarize(res)
    by_ptxas = collections.Counter((r.verdict, r.ptxas) for r in res.values())
    by_root = collections.Counter((os.path.dirname(p) == TRI and "TRITON_CACHE_DIR" or "inductor", r.verdict) for p, r in res.items())
    producers = collections.Counter((e.ptx_version, e.producer) for e in kernels)
    log(f"rebuild: {len(res)} kernels in {wall:.2f} s ({len(res) / max(wall, 1e-9):.1f}/s, {stats}) -> {counts}")
    for (v, p), n in sorted(by_ptxas.items(), key=lambda x: -x[1]):
        log(f"  {n:4d} {v:17s} by {p}")
    log(f"  by root: {dict(by_root)}")
    log(f"  PTX version / cubin producer: {dict(producers)}")
    examples = {}
    for v in rebuild.VERDICTS:
        ex = [(p, r.message) for p, r in res.items() if r.verdict == v][:3]
        if ex:
            examples[v] = ex
            for p, m in ex:
                log(f"  [{v}] {os.path.basename(p)[:12]}: {m[:400]}")
    summary.update(
        roots=rs, entries=len(entries), kernels=len(kernels), scanner_findings=dict(scan_findings),
        environment_ptxas=ptxas.selected(env), rebuild_wall_s=round(wall, 3), rebuild_stats=stats,
        verdicts=counts, by_ptxas=[[v, p, n] for (v, p), n in by_ptxas.items()],
        by_root=[[a, b, n] for (a, b), n in by_root.items()],
        producers=[[a, b, n] for (a, b), n in producers.items()], examples=examples,
    )
    return kernels, env


def phase_tamper(kernels, env):
    """True positives on Inductor-made kernels: they must come out not-reproducible."""
    from jitwarden import elf, rebuild
    from jitwarden.adapters import triton as tri

    # Inductor honours TRITON_CACHE_DIR, so its kernels land there too: pick them by name.
    ind = [e for e in kernels if e.name and e.name.startswith("triton_")][:3]
    if len(ind) < 3:
        return
    troot = os.path.join(BASE, "tamper")
    os.makedirs(troot)
    copies = []
    for e in ind:
        dst = os.path.join(troot, e.id)
        shutil.copytree(e.path, dst)
        copies.append((e, dst))
    (e0, d0), (e1, d1), (e2, d2) = copies
    c0 = os.path.join(d0, f"{e0.name}.cubin")
    data = bytearray(open(c0, "rb").read())
    s = elf.parse(bytes(data)).section(f".text.{e0.name}")
    data[s.offset + s.size // 2] ^= 0x10
    open(c0, "wb").write(data)
    shutil.copyfile(os.path.join(d2, f"{e2.name}.cubin"), os.path.join(d1, f"{e1.name}.cubin"))
    judge = tri.Judge(target_arch=90)
    ents = [tri.inspect_entry(troot, n, judge) for n in tri.list_entry_names(troot)[0]]
    keep = os.path.join(BASE, "keep")
    res = rebuild.verify_entries(ents, jobs=os.cpu_count(), extra_ptxas=[], keep_dir=keep, env=env)
    got = {os.path.basename(p): r for p, r in res.items()}
    out = {"flipped_byte": got[e0.id].verdict, "swapped_cubin": got[e1.id].verdict, "untouched": got[e2.id].verdict,
           "flipped_message": got[e0.id].message[:600], "kept": sorted(os.listdir(keep)) if os.path.isdir(keep) else []}
    log(f"tamper: {json.dumps(out)[:1200]}")
    summary["tamper"] = out


def phase_cli():
    env = dict(ORIG_ENV, PYTHONPATH=os.path.abspath(SRC))
    t0 = time.time()
    p = subprocess.run([sys.executable, "-m", "jitwarden", "verify", "--rebuild", "--format", "json", "--target", "90", *roots()],
                       env=env, capture_output=True, text=True, timeout=300)
    summary["cli"] = {"rc": p.returncode, "wall_s": round(time.time() - t0, 2), "stderr": p.stderr[-2000:]}
    try:
        doc = json.loads(p.stdout)
        with open(os.path.join(OUT, "cli_verify.json"), "w") as f:
            json.dump(doc, f)
        codes = collections.Counter()
        for e in doc.get("entries", []):
            for fd in e.get("findings", []):
                codes[fd.get("code")] += 1
        summary["cli"]["finding_codes"] = dict(codes)
        summary["cli"]["top_keys"] = sorted(doc)[:20]
    except ValueError:
        summary["cli"]["stdout_tail"] = p.stdout[-2000:]
    log(f"cli: {json.dumps(summary['cli'])[:1500]}")


def main():
    t0 = time.time()
    dry = os.environ.get("JW_H200_DRYRUN")  # "TRITON_SRC:INDUCTOR_TRITON_SRC": CPU check of the later phases
    if dry:
        a, b = dry.split(":")
        shutil.copytree(a, TRI)
        shutil.copytree(b, os.path.join(IND, "triton", "0"))
    else:
        phase_plain_triton()
        phase_inductor()
    kernels, env = phase_verify()
    for phase in (lambda: phase_tamper(kernels, env), phase_cli):
        try:
            phase()
        except Exception as exc:  # noqa: BLE001 - report and go on: the main figures are already in
            log(f"phase failed: {type(exc).__name__}: {exc}")
            summary.setdefault("errors", []).append(f"{type(exc).__name__}: {exc}")
    summary["total_s"] = round(time.time() - t0, 1)
    with open(os.path.join(OUT, "h200_rebuild_summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    log(json.dumps({k: summary[k] for k in ("kernels", "verdicts", "rebuild_wall_s", "total_s") if k in summary}))
    if not os.environ.get("JW_H200_KEEP"):
        shutil.rmtree(BASE, ignore_errors=True)


if __name__ == "__main__":
    main()
