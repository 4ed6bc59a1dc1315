"""On a GPU: fill fresh Triton + TorchInductor caches, then ``verify --rebuild`` them, and
settle any ``not-reproducible`` verdict on an Inductor-made kernel (issue 3).

Run (device machine, < 6 min): ``PYTHONPATH=src python benchmarks/h200_inductor_rebuild.py``

1. a plain ``@triton.jit`` kernel, launched before Inductor is imported (Triton's own ptxas);
   the in-process toolchain state (Triton's lru-cached ``get_ptxas_version`` vs the path
   ``get_ptxas(90)`` resolves to now) is recorded before and after Inductor runs;
2. a transformer-ish block under ``torch.compile(mode="max-autotune-no-cudagraphs")``, shape
   after shape until ~60 s have gone (``JW_H200_SHAPES="b,s,d;b,s,d"`` overrides the shapes);
3. ``run0``: :func:`jitwarden.ops.rebuild.verify_entries` at once, with Inductor's compile workers
   still alive (what the first H200 run did), between two snapshots (mtime_ns, size, sha256 of
   every .cubin/.ptx/.json) of the caches;
4. the compile workers are shut down (``shutdown_compile_workers``), then ``run1..run3`` with a
   snapshot after each: a file that changes between snapshots was still being written;
5. for every ``not-reproducible`` entry (any run, at most 5): metadata, ptxas flags, PTX header,
   cubin ELF stamp/tkinfo, each run's message, every ptxas on the machine re-assembling the PTX
   5 times (determinism + which one, if any, reproduces it), and an ``nvdisasm`` diff;
6. a census of mixed-toolchain entries (PTX ``.version`` of one CUDA release, cubin stamped by
   another): hypothesis (c);
7. true positives on copies (flipped code byte, swapped cubin) and the CLI over the same roots.

Writes ``$OUT/h200_rebuild_summary.json`` (after every phase, so a timeout still leaves data)
and ``$OUT/keep.tgz`` (cached/rebuilt cubins + PTX of at most 5 suspicious entries).
CPU check of phases 3-7: ``JW_H200_DRYRUN=TRITON_SRC:INDUCTOR_TRITON_SRC`` (two cache dirs);
``JW_H200_DRYRUN_TAMPER=1`` flips a code byte in one copied entry to exercise step 5.
"""

from __future__ import annotations

import collections
import difflib
import glob
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

T_START = time.time()
BUDGET_S = float(os.environ.get("JW_H200_BUDGET_S", "330"))  # the lead's limit is 360 s
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
MAX_DIAG = 5
summary: dict = {"base": BASE, "budget_s": BUDGET_S}


def log(*a):
    print(*a, flush=True)


def elapsed() -> float:
    return time.time() - T_START


def left() -> float:
    return BUDGET_S - elapsed()


def save():
    summary["elapsed_s"] = round(elapsed(), 1)
    p = os.path.join(OUT, "h200_rebuild_summary.json")
    with open(p + ".tmp", "w") as f:
        json.dump(summary, f, indent=1, default=str)
    os.replace(p + ".tmp", p)


# ---------------------------------------------------------------- compile


def toolchain_state(tag: str):
    """Triton's lru-cached ptxas version (what goes into keys and the PTX .version) vs the ptxas it runs now."""
    try:
        from triton.backends.nvidia import compiler as nvc

        info = nvc.get_ptxas_version.cache_info()
        st = {
            "get_ptxas_version_cache_entries": info.currsize,
            "TRITON_PTXAS_PATH": os.environ.get("TRITON_PTXAS_PATH"),
        }
        if info.currsize:
            st["lru_cached_ptxas_version_90"] = nvc.get_ptxas_version(90)
        tool = nvc.get_ptxas(90)
        st["get_ptxas_90_path_now"] = tool.path
        st["get_ptxas_90_version_now"] = tool.version
        st["mixed"] = bool(info.currsize) and st.get("lru_cached_ptxas_version_90") != tool.version
    except Exception as exc:
        st = {"error": f"{type(exc).__name__}: {exc}"}
    summary.setdefault("toolchain_state", {})[tag] = st
    log(f"toolchain state {tag}: {st}")


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
    toolchain_state("after_plain_triton")


def _shapes():
    spec = os.environ.get("JW_H200_SHAPES")
    if spec:
        return [tuple(int(x) for x in s.split(",")) for s in spec.split(";") if s.strip()]
    return [(8, 128, 512), (2, 512, 1024), (4, 256, 512)]


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
    done = []
    stop_after = float(os.environ.get("JW_H200_COMPILE_START_LIMIT_S", "60"))
    for b, s, d in _shapes():
        if done and time.time() - t0 > stop_after:
            log(f"compile: {time.time() - t0:.0f} s gone; not starting shape {(b, s, d)}")
            break
        m = Block(d, 8).cuda().half()
        f = torch.compile(m, mode="max-autotune-no-cudagraphs", dynamic=False)
        x = torch.randn(b, s, d, device="cuda", dtype=torch.half)
        with torch.no_grad():
            y = f(x)
            ref = m(x)
        torch.cuda.synchronize()
        err = (y - ref).abs().max().item()
        done.append((b, s, d))
        log(
            f"compiled block {b}x{s}x{d}: max abs err vs eager {err:.3g} ({time.time() - t0:.0f} s)"
        )
    summary["inductor_compile_s"] = round(time.time() - t0, 1)
    summary["inductor_set_TRITON_PTXAS_PATH"] = os.environ.get("TRITON_PTXAS_PATH")
    summary["shapes"] = done
    toolchain_state("after_inductor")


def child_processes() -> list[dict]:
    out = []
    pids = set()
    for p in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        try:
            pids.update(int(x) for x in open(p).read().split())
        except (OSError, ValueError):
            pass
    for pid in sorted(pids):
        try:
            cmd = (
                open(f"/proc/{pid}/cmdline", "rb")
                .read()
                .replace(b"\0", b" ")
                .decode(errors="replace")[:160]
            )
        except OSError:
            cmd = "?"
        out.append({"pid": pid, "cmd": cmd})
    return out


def phase_shutdown_workers():
    """Stop Inductor's async compile pool so nothing writes into the caches any more."""
    rec: dict = {
        "children_before": child_processes(),
        "threads_before": sorted(t.name for t in threading.enumerate()),
    }
    t0 = time.time()
    try:
        from torch._inductor.async_compile import shutdown_compile_workers

        shutdown_compile_workers()
        rec["shutdown"] = "shutdown_compile_workers() returned"
    except Exception as exc:
        rec["shutdown"] = f"{type(exc).__name__}: {exc}"
    try:
        from torch._inductor.async_compile import AsyncCompile

        for attr in ("process_pool", "pool"):
            fn = getattr(AsyncCompile, attr, None)
            ci = getattr(fn, "cache_info", None)
            if ci is not None:
                rec[f"AsyncCompile.{attr}_cached"] = ci().currsize
    except Exception as exc:
        rec["async_compile_probe"] = f"{type(exc).__name__}: {exc}"
    time.sleep(1.0)
    rec["shutdown_s"] = round(time.time() - t0, 2)
    rec["children_after"] = child_processes()
    rec["threads_after"] = sorted(t.name for t in threading.enumerate())
    summary["workers"] = rec
    log(
        f"workers: before {len(rec['children_before'])} children, after {len(rec['children_after'])}: {rec['shutdown']}"
    )


# ---------------------------------------------------------------- caches


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


def snapshot() -> dict[str, tuple]:
    """{path: (mtime_ns, size, sha256)} of every .cubin/.ptx/.json in the caches."""
    snap = {}
    for r in roots():
        for dirpath, _dirs, files in os.walk(r):
            for fn in files:
                if not fn.endswith((".cubin", ".ptx", ".json")):
                    continue
                p = os.path.join(dirpath, fn)
                try:
                    st = os.stat(p)
                    with open(p, "rb") as f:
                        h = hashlib.sha256(f.read()).hexdigest()
                except OSError:
                    continue
                snap[p] = (st.st_mtime_ns, st.st_size, h)
    return snap


def snap_diff(a: dict, b: dict) -> dict:
    changed = sorted(p for p in a.keys() & b.keys() if a[p] != b[p])
    content = [p for p in changed if a[p][2] != b[p][2]]
    return {
        "files_before": len(a),
        "files_after": len(b),
        "added": sorted(b.keys() - a.keys())[:20],
        "n_added": len(b.keys() - a.keys()),
        "removed": sorted(a.keys() - b.keys())[:20],
        "n_removed": len(a.keys() - b.keys()),
        "n_changed": len(changed),
        "n_content_changed": len(content),
        "changed": [{"path": p, "before": a[p], "after": b[p]} for p in changed[:20]],
    }


def newest_mtime(snap: dict) -> int:
    return max((v[0] for v in snap.values()), default=0)


def verify_run(tag: str, env: dict, judge) -> tuple[dict, dict]:
    from jitwarden.ops import rebuild

    entries = scan(roots(), judge)
    kernels = [e for e in entries if e.type == "kernel"]
    keep = os.path.join(BASE, "keep", tag)
    stats: dict = {}
    t0 = time.time()
    res = rebuild.verify_entries(
        kernels, rebuild.RebuildOptions(jobs=os.cpu_count(), keep_dir=keep), env=env, stats=stats
    )
    wall = time.time() - t0
    counts = rebuild.summarize(res)
    rec = {
        "tag": tag,
        "started_s": round(t0 - T_START, 1),
        "wall_s": round(wall, 2),
        "kernels": len(kernels),
        "verdicts": counts,
        "stats": stats,
        "by_ptxas": sorted(
            [
                [v, p, n]
                for (v, p), n in collections.Counter(
                    (r.verdict, r.ptxas) for r in res.values()
                ).items()
            ],
            key=lambda x: -x[2],
        ),
        "not_reproducible": {
            p: r.message for p, r in res.items() if r.verdict == "not-reproducible"
        },
        "stale": {p: r.message for p, r in list(res.items()) if r.verdict == "stale"},
        "unverifiable_examples": {
            p: r.message for p, r in res.items() if r.verdict == "unverifiable"
        },
    }
    rec["stale"] = dict(list(rec["stale"].items())[:5])
    rec["unverifiable_examples"] = dict(list(rec["unverifiable_examples"].items())[:5])
    log(
        f"{tag}: {len(kernels)} kernels in {wall:.1f} s -> {counts}; not-reproducible: "
        f"{[os.path.basename(p)[:12] for p in rec['not_reproducible']]}"
    )
    return rec, res


def phase_overview(env, judge):
    """One scan's counts (scanner findings, producers), as before."""
    import triton

    from jitwarden.env import ptxas

    entries = scan(roots(), judge)
    kernels = [e for e in entries if e.type == "kernel"]
    summary.update(
        roots=roots(),
        entries=len(entries),
        kernels=len(kernels),
        triton_version=triton.__version__,
        scanner_findings=dict(collections.Counter(f.code for e in entries for f in e.findings)),
        environment_ptxas=ptxas.selected(env),
        producers=[
            [a, b, n]
            for (a, b), n in collections.Counter(
                (e.facts.ptx_version, e.facts.producer) for e in kernels
            ).items()
        ],
        kernel_name_prefixes=dict(
            collections.Counter(
                re.sub(r"_\d+$", "", (e.name or "?"))[:40] for e in kernels
            ).most_common(15)
        ),
    )
    log(
        f"roots {summary['roots']}: entries {len(entries)}, kernels {len(kernels)}, producers {summary['producers']}"
    )
    return kernels


# ---------------------------------------------------------------- diagnosis


def _read(p):
    with open(p, "rb") as f:
        return f.read()


def _elf_facts(data: bytes) -> dict:
    from jitwarden.formats import elf
    from jitwarden.ops import rebuild

    d = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if len(data) >= 64 and data[:4] == b"\x7fELF":
        d["EI_ABIVERSION"] = data[8]
        d["e_version"] = int.from_bytes(data[20:24], "little")
        d["e_flags"] = hex(int.from_bytes(data[48:52], "little"))
    try:
        d["tkinfo"] = elf.tkinfo(elf.parse(data))
    except Exception as exc:
        d["tkinfo_error"] = str(exc)
    d["producer"] = rebuild.cubin_producer(data)
    return d


def _nvdisasm(path: str) -> list[str] | str:
    from jitwarden.env import ptxas

    nvd = os.path.join(ptxas.triton_bin_dir() or "", "nvdisasm")
    for args in (["-c", "-hex"], ["-c"]):
        try:
            p = subprocess.run([nvd, *args, path], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"nvdisasm failed: {exc}"
        if p.returncode == 0:
            return p.stdout.splitlines()
    return f"nvdisasm exit {p.returncode}: {p.stderr[-300:]}"


def _disasm_diff(a_path: str, b_path: str) -> dict:
    a, b = _nvdisasm(a_path), _nvdisasm(b_path)
    if isinstance(a, str) or isinstance(b, str):
        return {"error": a if isinstance(a, str) else b}
    diff = list(difflib.unified_diff(a, b, "cached", "rebuilt", n=1, lineterm=""))
    changed = sum(
        1 for ln in diff if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---"))
    )
    return {
        "lines_cached": len(a),
        "lines_rebuilt": len(b),
        "changed_lines": changed,
        "first_diff": diff[:40],
    }


def _text_words(cached: bytes, rebuilt: bytes, limit: int = 8) -> list[dict]:
    """The first differing 16-byte SASS words of each code section (works where nvdisasm refuses)."""
    from jitwarden.formats import cubin_compare

    a, b = cubin_compare._parse(cached), cubin_compare._parse(rebuilt)
    bmap = {s.name: s for s in b.sections}
    out = []
    for sa in a.sections:
        sb = bmap.get(sa.name)
        if not sa.name.startswith(".text.") or sb is None:
            continue
        ca, cb = a.content(sa), b.content(sb)
        for off in range(0, max(len(ca), len(cb)), 16):
            wa, wb = ca[off : off + 16], cb[off : off + 16]
            if wa != wb:
                diff_bits = [
                    i
                    for i in range(min(len(wa), len(wb)) * 8)
                    if (wa[i // 8] >> (i % 8) ^ wb[i // 8] >> (i % 8)) & 1
                ]
                out.append(
                    {
                        "section": sa.name,
                        "insn": off // 16,
                        "offset": hex(off),
                        "cached": wa.hex(),
                        "rebuilt": wb.hex(),
                        "differing_bits": diff_bits[:16],
                    }
                )
                if len(out) >= limit:
                    return out
    return out


def _candidates(env) -> list[tuple[str, str]]:
    from jitwarden.env import ptxas

    out, seen = [], set()
    for role, p in ptxas.selected(env) + [("machine", p) for p in ptxas.machine_candidates(env)]:
        real = os.path.realpath(p)
        if real in seen or not os.path.isfile(p):
            continue
        seen.add(real)
        out.append((role, p))
    return out


def _assemble(
    ptxas_path: str, flags: list[str], ptx_path: str, out_path: str
) -> tuple[bytes | None, str]:
    p = subprocess.run(
        [ptxas_path, *flags, ptx_path, "-o", out_path],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=os.path.dirname(ptx_path),
    )
    if p.returncode != 0:
        return None, (p.stdout + p.stderr)[-300:]
    data = _read(out_path)
    os.unlink(out_path)
    return data, ""


def diagnose(path: str, env: dict, runs: list[dict], snaps: dict, work: str) -> dict:
    from jitwarden.env import ptxas
    from jitwarden.formats import cubin_compare
    from jitwarden.formats.ptx import parse_header
    from jitwarden.ops import rebuild

    eid = os.path.basename(path)
    d: dict = {"path": path, "id": eid}
    files = sorted(os.listdir(path))
    d["files"] = files
    mdf = [f for f in files if f.endswith(".json") and not f.startswith("__grp__")]
    md = json.load(open(os.path.join(path, mdf[0]))) if mdf else {}
    name = md.get("name")
    d["metadata"] = {
        k: md.get(k)
        for k in (
            "name",
            "hash",
            "target",
            "ptx_options",
            "enable_fp_fusion",
            "debug",
            "ptx_version",
            "num_warps",
            "num_stages",
            "num_ctas",
            "maxnreg",
            "triton_version",
            "launch_cooperative_grid",
            "arch",
        )
    }
    d["metadata_env_keys"] = {k: md[k] for k in md if k.isupper()}
    try:
        arch, flags = rebuild.ptxas_flags(md)
    except ValueError as exc:
        d["error"] = f"ptxas_flags: {exc}"
        return d
    d["ptxas_flags"] = flags
    ptx_p, cub_p = os.path.join(path, f"{name}.ptx"), os.path.join(path, f"{name}.cubin")
    ptx, cached = _read(ptx_p), _read(cub_p)
    hdr = parse_header(ptx[:16384])
    d["ptx"] = {
        "version": hdr.version,
        "target": hdr.target,
        "pairs_with_cuda": sorted(rebuild.releases_for_ptx(hdr.version)),
        "sha256": hashlib.sha256(ptx).hexdigest(),
        "size": len(ptx),
    }
    d["cubin"] = _elf_facts(cached)
    d["messages"] = {
        r["tag"]: r["not_reproducible"].get(path) or "not not-reproducible in this run"
        for r in runs
    }
    d["snapshots"] = {
        tag: {os.path.basename(p): v for p, v in s.items() if os.path.dirname(p) == path}
        for tag, s in snaps.items()
    }
    d["file_mtimes_vs_compile_end_s"] = {
        f: round((os.stat(os.path.join(path, f)).st_mtime - summary.get("compile_end_epoch", 0)), 3)
        for f in files
    }
    # Every ptxas on the machine, 5 assemblies each, same flags, Triton-shaped temp name.
    wdir = os.path.join(work, eid)
    os.makedirs(wdir, exist_ok=True)
    tmp_ptx = os.path.join(wdir, "tmpjwdiag0.ptx")
    shutil.copyfile(ptx_p, tmp_ptx)
    cands = []
    best = None
    for role, cp in _candidates(env):
        info = ptxas.inspect(cp)
        c = {
            "role": role,
            "path": cp,
            "release": info.release if info else None,
            "build": info.build if info else None,
        }
        outs, err = [], ""
        t0 = time.time()
        for i in range(5):
            data, err = _assemble(cp, flags, tmp_ptx, os.path.join(wdir, f"out{i}.o"))
            if data is None:
                break
            outs.append(data)
        c["seconds"] = round(time.time() - t0, 2)
        if not outs:
            c["error"] = err.strip()[-300:]
            cands.append(c)
            continue
        c["distinct_outputs_of_5"] = len({hashlib.sha256(o).hexdigest() for o in outs})
        if c["distinct_outputs_of_5"] > 1:
            c["determinism_diffs"] = [
                cubin_compare.compare(outs[0], o).summary() for o in outs[1:] if o != outs[0]
            ][:3]
        cmp = cubin_compare.compare(cached, outs[0])
        c["identical_to_cached"] = cmp.identical
        c["equal_to_cached"] = cmp.equal
        c["any_of_5_equal"] = any(cubin_compare.compare(cached, o).equal for o in outs)
        c["differences"] = list(cmp.differences[:6])
        c["ignored_sections_differing"] = list(cmp.ignored)
        c["first_section"], c["first_offset"] = cmp.first_section, cmp.first_offset
        c["rebuilt_elf"] = _elf_facts(outs[0])
        rb = os.path.join(wdir, f"rebuilt.{role}.{c['release']}.cubin")
        with open(rb, "wb") as f:
            f.write(outs[0])
        c["rebuilt_file"] = rb
        cands.append(c)
        rel_match = c["release"] in (d["cubin"]["producer"][0], *d["ptx"]["pairs_with_cuda"])
        if best is None or (rel_match and not best[0]):
            best = (rel_match, c, rb)
    d["candidates"] = cands
    d["reproduced_by"] = [
        f"{c['role']} {c['path']} ({c['release']})" for c in cands if c.get("equal_to_cached")
    ]
    shutil.copyfile(cub_p, os.path.join(wdir, "cached.cubin"))
    shutil.copyfile(ptx_p, os.path.join(wdir, f"{name}.ptx"))
    if best is not None:
        _, c, rb = best
        dd = _disasm_diff(os.path.join(wdir, "cached.cubin"), rb)
        dd["against"] = f"{c['role']} {c['path']} ({c['release']})"
        try:
            dd["text_words"] = _text_words(cached, _read(rb))
        except Exception as exc:
            dd["text_words"] = f"{type(exc).__name__}: {exc}"
        d["nvdisasm_diff"] = dd
    return d


def phase_census(env, judge, res: dict) -> None:
    """Hypothesis (c): entries whose PTX names one CUDA release and whose cubin another."""
    from jitwarden.ops import rebuild

    mixed = collections.Counter()
    examples = []
    total = collections.Counter()
    for e in [e for e in scan(roots(), judge) if e.type == "kernel"]:
        try:
            data = _read(os.path.join(e.path, f"{e.name}.cubin"))
        except OSError:
            continue
        rel, build = rebuild.cubin_producer(data)
        rels = rebuild.releases_for_ptx(e.facts.ptx_version)
        r = res.get(e.path)
        verdict = (r.verdict, r.ptxas) if r else (None, None)
        total[(e.facts.ptx_version, rel)] += 1
        if rel and rels and rel not in rels:
            mixed[(e.facts.ptx_version, rel, verdict)] += 1
            if len(examples) < 5:
                examples.append(
                    {
                        "path": e.path,
                        "name": e.name,
                        "ptx_version": e.facts.ptx_version,
                        "cubin_release": rel,
                        "cubin_build": build,
                        "verdict": verdict,
                    }
                )
    summary["mixed_toolchain"] = {
        "by_ptx_version_and_cubin_release": [[a, b, n] for (a, b), n in total.items()],
        "mixed": [[a, b, list(v), n] for (a, b, v), n in mixed.items()],
        "n_mixed": sum(mixed.values()),
        "examples": examples,
    }
    log(
        f"mixed-toolchain entries (PTX release != cubin release): {sum(mixed.values())}: {summary['mixed_toolchain']['mixed']}"
    )


def write_keep_tgz(diag_dirs: list[str], runs_keep: str) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for d in diag_dirs:
            if os.path.isdir(d):
                for fn in sorted(os.listdir(d)):
                    if fn.endswith((".cubin", ".ptx")) and not fn.startswith("tmp"):
                        tar.add(os.path.join(d, fn), arcname=f"diag/{os.path.basename(d)}/{fn}")
        ids = {os.path.basename(d) for d in diag_dirs}
        if os.path.isdir(runs_keep):
            for tag in sorted(os.listdir(runs_keep)):
                for fn in sorted(os.listdir(os.path.join(runs_keep, tag))):
                    if fn.split(".")[0] in ids:
                        tar.add(os.path.join(runs_keep, tag, fn), arcname=f"runs/{tag}/{fn}")
    if buf.tell() > 15 << 20:
        summary["keep_tgz"] = f"not written: {buf.tell()} bytes"
        return
    with open(os.path.join(OUT, "keep.tgz"), "wb") as f:
        f.write(buf.getvalue())
    summary["keep_tgz"] = f"{buf.tell()} bytes"


# ---------------------------------------------------------------- true positives, CLI


def phase_tamper(kernels, env, exclude=()):
    """True positives on Inductor-made kernels: they must come out not-reproducible."""
    from jitwarden.adapters import triton as tri
    from jitwarden.formats import elf
    from jitwarden.model.entries import Judge
    from jitwarden.ops import rebuild

    kernels = [e for e in kernels if e.path not in exclude]
    ind = [e for e in kernels if e.name and e.name.startswith("triton_")][:3]
    if len(ind) < 3:
        ind = kernels[:3]
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
    data = bytearray(_read(c0))
    s = elf.parse(bytes(data)).section(f".text.{e0.name}")
    data[s.offset + s.size // 2] ^= 0x10
    open(c0, "wb").write(data)
    shutil.copyfile(os.path.join(d2, f"{e2.name}.cubin"), os.path.join(d1, f"{e1.name}.cubin"))
    judge = Judge(target_arch=90)
    ents = [tri.inspect_entry(troot, n, judge) for n in tri.list_entry_names(troot)[0]]
    res = rebuild.verify_entries(
        ents,
        rebuild.RebuildOptions(jobs=os.cpu_count(), keep_dir=os.path.join(BASE, "keep_tamper")),
        env=env,
    )
    got = {os.path.basename(p): r for p, r in res.items()}
    out = {
        "flipped_byte": got[e0.id].verdict,
        "swapped_cubin": got[e1.id].verdict,
        "untouched": got[e2.id].verdict,
        "flipped_message": got[e0.id].message[:600],
        "swapped_message": got[e1.id].message[:400],
    }
    out["ok"] = out["flipped_byte"] == out["swapped_cubin"] == "not-reproducible" and out[
        "untouched"
    ] in ("verified", "stale")
    log(f"tamper: {json.dumps(out)[:800]}")
    summary["tamper"] = out


def phase_cli():
    env = dict(ORIG_ENV, PYTHONPATH=os.path.abspath(SRC))
    t0 = time.time()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "jitwarden",
            "verify",
            "--rebuild",
            "--format",
            "json",
            "--target",
            "90",
            *roots(),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=max(30, int(left())),
    )
    rec = {
        "started_s": round(t0 - T_START, 1),
        "rc": p.returncode,
        "wall_s": round(time.time() - t0, 2),
        "stderr": p.stderr[-1500:],
    }
    try:
        doc = json.loads(p.stdout)
        codes = collections.Counter()
        flagged = {}
        for e in doc.get("entries", []):
            for fd in e.get("findings", []):
                codes[fd.get("code")] += 1
                if (
                    fd.get("code") in ("not-reproducible", "unverifiable", "stale")
                    and len(flagged) < 10
                ):
                    flagged[e.get("path") or e.get("id")] = (
                        f"{fd.get('code')}: {str(fd.get('message'))[:400]}"
                    )
        rec.update(
            finding_codes=dict(codes),
            entries=len(doc.get("entries", [])),
            flagged=flagged,
            summary=doc.get("summary"),
            top_keys=sorted(doc)[:20],
        )
    except ValueError:
        rec["stdout_tail"] = p.stdout[-1500:]
    summary["cli"] = rec
    log(f"cli: rc {rec['rc']} in {rec['wall_s']} s, finding codes {rec.get('finding_codes')}")


# ---------------------------------------------------------------- main


def _phase(name, fn, need_s=0.0):
    if left() < need_s:
        summary.setdefault("skipped", []).append(f"{name}: {left():.0f} s left < {need_s:.0f} s")
        log(f"skipping {name}: {left():.0f} s left")
        return None
    try:
        return fn()
    except Exception as exc:
        import traceback

        log(f"phase {name} failed: {type(exc).__name__}: {exc}")
        summary.setdefault("errors", []).append(
            f"{name}: {type(exc).__name__}: {exc}: {traceback.format_exc()[-800:]}"
        )
        return None
    finally:
        save()


def main():
    import triton

    from jitwarden.model.entries import Judge

    dry = os.environ.get(
        "JW_H200_DRYRUN"
    )  # "TRITON_SRC:INDUCTOR_TRITON_SRC": CPU check of the later phases
    if dry:
        a, b = dry.split(":")
        shutil.copytree(a, TRI)
        shutil.copytree(b, os.path.join(IND, "triton", "0"))
        if os.environ.get("JW_H200_DRYRUN_TAMPER"):
            from jitwarden.formats import elf

            e = min(glob.glob(os.path.join(TRI, "*", "*.cubin")))
            data = bytearray(_read(e))
            nm = os.path.basename(e)[:-6]
            s = elf.parse(bytes(data)).section(f".text.{nm}")
            data[s.offset + s.size // 2] ^= 0x10
            open(e, "wb").write(data)
        summary["dryrun"] = dry
    else:
        _phase("plain_triton", phase_plain_triton)
        _phase("inductor", phase_inductor)
    summary["compile_end_epoch"] = time.time()
    summary["compile_end_s"] = round(elapsed(), 1)
    env = dict(ORIG_ENV)  # a fresh jitwarden process's view: no TRITON_PTXAS_PATH from Inductor
    judge = Judge(target_arch=90, triton_version=triton.__version__, now=time.time())

    runs: list[dict] = []
    snaps: dict[str, dict] = {}
    last_res: dict = {}

    snaps["s0_after_compile"] = snapshot()
    kernels = _phase("overview", lambda: phase_overview(env, judge)) or []

    def one(tag, snap_tag):
        nonlocal last_res
        rec, res = verify_run(tag, env, judge)
        snaps[snap_tag] = snapshot()
        prev = list(snaps)[-2]
        rec["files_changed_since_" + prev] = snap_diff(snaps[prev], snaps[snap_tag])
        runs.append(rec)
        summary["runs"] = runs
        last_res = res

    _phase("run0_workers_alive", lambda: one("run0", "s1_after_run0"), 60)
    _phase("shutdown_workers", phase_shutdown_workers)
    snaps["s2_after_shutdown"] = snapshot()
    summary["files_changed_run0_to_shutdown"] = (
        snap_diff(snaps["s1_after_run0"], snaps["s2_after_shutdown"])
        if "s1_after_run0" in snaps
        else None
    )
    for i in (1, 2, 3):
        _phase(
            f"run{i}", lambda i=i: one(f"run{i}", f"s{i + 2}_after_run{i}"), 90 if i < 3 else 120
        )
    first, last = list(snaps)[0], list(snaps)[-1]
    summary["files_changed_first_to_last_snapshot"] = snap_diff(snaps[first], snaps[last])
    summary["newest_file_mtime_after_compile_end_s"] = round(
        newest_mtime(snaps[last]) / 1e9 - summary["compile_end_epoch"], 3
    )
    summary["per_run"] = [
        {
            "tag": r["tag"],
            "verdicts": r["verdicts"],
            "wall_s": r["wall_s"],
            "not_reproducible": sorted(os.path.basename(p) for p in r["not_reproducible"]),
        }
        for r in runs
    ]
    save()

    nr_all = []
    for r in runs:
        for p in r["not_reproducible"]:
            if p not in nr_all:
                nr_all.append(p)
    summary["not_reproducible_union"] = nr_all
    work = os.path.join(BASE, "diag")
    diags = []

    def do_diag():
        for p in nr_all[:MAX_DIAG]:
            if left() < 40:
                summary.setdefault("skipped", []).append(f"diagnose {p}: out of time")
                break
            d = diagnose(p, env, runs, snaps, work)
            diags.append(d)
            summary["diagnoses"] = diags
            log(
                f"diagnosed {os.path.basename(p)[:12]} ({d['metadata'].get('name')}): reproduced by {d.get('reproduced_by')}; "
                f"determinism {[(c['role'], c.get('distinct_outputs_of_5')) for c in d.get('candidates', [])]}"
            )
            save()

    _phase("diagnose", do_diag, 30)
    _phase("census", lambda: phase_census(env, judge, last_res), 15)
    _phase("tamper", lambda: phase_tamper(kernels, env, set(nr_all)), 25)
    _phase("cli", phase_cli, 40)
    _phase(
        "keep_tgz",
        lambda: write_keep_tgz(
            [os.path.join(work, os.path.basename(p)) for p in nr_all[:MAX_DIAG]],
            os.path.join(BASE, "keep"),
        ),
    )
    summary["total_s"] = round(elapsed(), 1)
    save()
    human()
    if not os.environ.get("JW_H200_KEEP"):
        shutil.rmtree(BASE, ignore_errors=True)


def human():
    log("=" * 72)
    log(
        f"kernels {summary.get('kernels')}, compile {summary.get('inductor_compile_s')} s, shapes {summary.get('shapes')}, "
        f"total {summary.get('total_s')} s"
    )
    ts = summary.get("toolchain_state", {}).get("after_inductor")
    if ts:
        log(
            f"in-process toolchain after Inductor: mixed={ts.get('mixed')} (cached version "
            f"{str(ts.get('lru_cached_ptxas_version_90'))[:60]!r}, runs {ts.get('get_ptxas_90_path_now')})"
        )
    for r in summary.get("per_run", []):
        log(
            f"  {r['tag']}: {r['verdicts']} in {r['wall_s']} s; not-reproducible {r['not_reproducible']}"
        )
    ch = summary.get("files_changed_first_to_last_snapshot") or {}
    log(
        f"  cache files changed between first and last snapshot: {ch.get('n_changed')} "
        f"(content {ch.get('n_content_changed')}, added {ch.get('n_added')}, removed {ch.get('n_removed')})"
    )
    log(f"  mixed-toolchain entries: {(summary.get('mixed_toolchain') or {}).get('n_mixed')}")
    for d in summary.get("diagnoses", []):
        log(
            f"  {d['id'][:12]} {d['metadata'].get('name')}: PTX {d.get('ptx', {}).get('version')}, cubin producer "
            f"{d.get('cubin', {}).get('producer')}, reproduced by {d.get('reproduced_by') or 'NONE'}"
        )
        for c in d.get("candidates", []):
            log(
                f"     {c['role']:8s} {c.get('release')}: distinct/5 {c.get('distinct_outputs_of_5')}, equal {c.get('equal_to_cached')}, "
                f"{(c.get('differences') or [c.get('error', '')])[:1]}"
            )
    log(
        f"  tamper: {summary.get('tamper', {}).get('ok')}; cli rc {summary.get('cli', {}).get('rc')} codes "
        f"{summary.get('cli', {}).get('finding_codes')}; errors {len(summary.get('errors', []))}"
    )


if __name__ == "__main__":
    main()
