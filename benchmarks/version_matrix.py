"""The supported-versions matrix: every Triton release jitwarden supports, each in its own venv.

For each Triton version (default 3.4 to 3.9), on the CPU:

1. compile real kernels (elementwise, reduction, ``tl.dot``, fp8) for sm_80/90/100/120/121
   twice: once stock, once through jitwarden's guarded cache manager (``TRITON_CACHE_MANAGER``);
2. the guard: the write seals every entry and serves the same cubins as stock; a second
   compile is a hit (no file rewritten, same bytes); a tampered cubin is a miss (the original
   bytes come back, the entry is rebuilt);
3. ``verify --quick`` and ``verify --rebuild --target sm_90`` on both clean caches: every
   finding at warn or error level is a false alarm;
4. damaged copies (a flipped code byte, sealed and unsealed; another kernel's cubin; a
   truncated cubin) are each still caught at error level.

Usage::

    python benchmarks/version_matrix.py [--versions 3.4,3.9] [--venvs DIR] [--json FILE]

A missing venv ``<DIR>/triton-<v>`` is created (``pip install triton==<v>.0`` and this
checkout, no torch). The version the current interpreter has is run in-process's venv
(``--here``) without creating anything. Prints one table; exits 1 when any version has a
false alarm, a guard failure or uncaught damage.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VERSIONS = ("3.4", "3.5", "3.6", "3.7", "3.8", "3.9")
ARCHS = (80, 90, 100, 120, 121)
TARGET = "sm_90"
SEAL = ".jitwarden-seal.json"
GUARD = "jitwarden.guard:GuardedCacheManager"

KERNELS = textwrap.dedent(
    """
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)

    @triton.jit
    def rowsum_kernel(x, out, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        v = tl.load(x + row * n + cols, mask=cols < n, other=0.0)
        tl.store(out + row, tl.sum(v, axis=0))

    @triton.jit
    def matmul_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            acc += tl.dot(tl.load(a + rm[:, None] * K + (k + rk)[None, :]),
                          tl.load(b + (k + rk)[:, None] * N + rn[None, :]))
        tl.store(c + rm[:, None] * N + rn[None, :], acc)

    @triton.jit
    def fp8_kernel(x, scale, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        v = tl.load(x + offs, mask=m).to(tl.float32) * tl.load(scale)
        tl.store(out + offs, v.to(tl.float8e5), mask=m)
    """
)

# (label, kernel, signature, constexprs)
VARIANTS = (
    (
        "elementwise",
        "add_kernel",
        {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32"},
        {"BLOCK": 128},
    ),
    ("reduction", "rowsum_kernel", {"x": "*fp32", "out": "*fp32", "n": "i32"}, {"BLOCK": 256}),
    (
        "dot",
        "matmul_kernel",
        {"a": "*fp16", "b": "*fp16", "c": "*fp32", "M": "i32", "N": "i32", "K": "i32"},
        {"BM": 128, "BN": 128, "BK": 64},
    ),
    (
        "fp8",
        "fp8_kernel",
        {"x": "*fp8e5", "scale": "*fp32", "out": "*fp8e5", "n": "i32"},
        {"BLOCK": 128},
    ),
)

# Runs inside a version's venv: compiles every job into TRITON_CACHE_DIR, prints one JSON line.
COMPILE = textwrap.dedent(
    """
    import hashlib, json, os, sys
    sys.path.insert(0, os.environ["JW_KERNEL_DIR"])
    import triton
    from triton.compiler import ASTSource
    from triton.backends.compiler import GPUTarget
    import jw_matrix_kernels as K
    out = []
    for job in json.loads(os.environ["JW_JOBS"]):
        src = ASTSource(fn=getattr(K, job["kernel"]), signature=job["signature"], constexprs=job["constexprs"])
        try:
            k = triton.compile(src, target=GPUTarget("cuda", job["arch"], 32))
        except Exception as exc:
            out.append(dict(job, error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ''}"))
            continue
        out.append(dict(job, hash=k.metadata.hash, name=k.metadata.name,
                        cubin=hashlib.sha256(k.asm["cubin"]).hexdigest()))
    print(json.dumps({"triton": triton.__version__, "jobs": out}))
    """
)


def _entry_id(hash_hex: str) -> str:
    return base64.b32encode(bytes.fromhex(hash_hex)).decode().rstrip("=")


def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _snapshot(root: str, entries) -> dict:
    """Every file of these entries but jitwarden's lock files: (inode, size, mtime) by relative path."""
    snap = {}
    for d, _dirs, files in os.walk(root):
        if os.path.relpath(d, root).split(os.sep)[0] not in entries:
            continue
        for f in files:
            if f in (".jitwarden-lock", ".jitwarden-writers"):
                continue
            st = os.lstat(os.path.join(d, f))
            snap[os.path.relpath(os.path.join(d, f), root)] = (
                st.st_ino,
                st.st_size,
                st.st_mtime_ns,
            )
    return snap


class Worker:
    """One version's checks, run by the venv's own interpreter (``python version_matrix.py --worker``)."""

    def __init__(self, work: str):
        self.work = work
        self.kdir = os.path.join(work, "kernels")
        os.makedirs(self.kdir, exist_ok=True)
        with open(os.path.join(self.kdir, "jw_matrix_kernels.py"), "w") as f:
            f.write(KERNELS)
        self.jobs = [
            {
                "label": f"{label}_sm{arch}",
                "variant": label,
                "kernel": kernel,
                "signature": sig,
                "constexprs": cx,
                "arch": arch,
            }
            for arch in ARCHS
            for label, kernel, sig, cx in VARIANTS
        ]

    def compile(self, cache: str, guard: bool, jobs=None) -> dict:
        env = dict(
            os.environ,
            TRITON_CACHE_DIR=cache,
            JW_KERNEL_DIR=self.kdir,
            JW_JOBS=json.dumps(self.jobs if jobs is None else jobs),
            JITWARDEN_PARTITION="0",
        )
        env.pop("TRITON_CACHE_MANAGER", None)
        if guard:
            env["TRITON_CACHE_MANAGER"] = GUARD
        p = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"compile driver failed: {p.stderr[-2000:]}")
        doc = json.loads(p.stdout.strip().splitlines()[-1])
        for j in doc["jobs"]:
            if "hash" in j:
                j["path"] = os.path.join(cache, _entry_id(j["hash"]))
        return doc

    def verify(self, root: str, mode: str) -> tuple[list[dict], int]:
        """(warn/error findings, exit status) of ``jitwarden verify --<mode> --target sm_90``."""
        cmd = [
            sys.executable,
            "-m",
            "jitwarden",
            "verify",
            f"--{mode}",
            "--target",
            TARGET,
            "--format",
            "json",
            root,
        ]
        p = subprocess.run(
            cmd, capture_output=True, text=True, env=dict(os.environ, JITWARDEN_PARTITION="0")
        )
        if p.returncode not in (0, 1):
            return [
                {"code": "internal", "severity": "error", "message": p.stderr.strip()[-300:]}
            ], p.returncode
        doc = json.loads(p.stdout)
        bad = []
        for e in doc["entries"]:
            for f in e["findings"]:
                if f["severity"] in ("warn", "warning", "error"):
                    bad.append(dict(f, entry=e.get("name"), arch=e.get("arch")))
        for c in doc["caches"]:
            for f in c.get("findings") or ():
                if f["severity"] in ("warn", "warning", "error"):
                    bad.append(dict(f, entry=c["root"]))
        return bad, p.returncode

    def run(self) -> dict:
        t0 = time.perf_counter()
        stock_dir, guard_dir = os.path.join(self.work, "stock"), os.path.join(self.work, "guarded")
        stock = self.compile(stock_dir, guard=False)
        ok = [j for j in stock["jobs"] if "hash" in j]
        skipped = [f"{j['label']}: {j['error']}" for j in stock["jobs"] if "error" in j]
        guarded = self.compile(guard_dir, guard=True)
        gj = {j["label"]: j for j in guarded["jobs"]}
        guard_problems, stock_differs = [], []
        for j in ok:
            g = gj.get(j["label"], {})
            if "path" not in g:
                guard_problems.append(
                    f"{j['label']}: compiles stock, not through the guard: {g.get('error')}"
                )
                continue
            if g["cubin"] != _sha(os.path.join(g["path"], f"{g['name']}.cubin")):
                guard_problems.append(
                    f"{j['label']}: the guard stored other bytes than Triton compiled"
                )
            elif not os.path.isfile(os.path.join(g["path"], SEAL)):
                guard_problems.append(f"{j['label']}: not sealed on write")
            if g["cubin"] != j["cubin"]:
                # ptxas (13.x, large tl.dot kernels) is not deterministic: two compiles of one PTX can
                # differ. Both caches are then judged by verify --rebuild below, which retries.
                stock_differs.append(j["label"])
        # Jobs Triton cannot compile (a ptxas too old for sm_121) leave their early stages behind
        # and rewrite them on every attempt: judge the hit on the compiled entries alone.
        entries = {os.path.basename(j["path"]) for j in ok}
        before = _snapshot(guard_dir, entries)
        hit = self.compile(guard_dir, guard=True)
        if _snapshot(guard_dir, entries) != before:
            guard_problems.append("the second compile rewrote files: not a hit")
        if any(h.get("cubin") != gj[h["label"]].get("cubin") for h in hit["jobs"] if "hash" in h):
            guard_problems.append("a hit served other bytes than the write")

        quick_fa, rebuild_fa = [], []
        for root in (stock_dir, guard_dir):
            quick_fa += self.verify(root, "quick")[0]
            rebuild_fa += self.verify(root, "rebuild")[0]

        # Tamper: flip one byte in the middle of a sealed cubin; the guard must serve the original.
        victim = next(j for j in ok if j["variant"] == "elementwise" and j["arch"] == 90)
        tamper_dir = os.path.join(self.work, "tamper")
        shutil.copytree(guard_dir, tamper_dir, symlinks=True)
        _repoint(tamper_dir)
        vpath = os.path.join(tamper_dir, _entry_id(victim["hash"]), f"{victim['name']}.cubin")
        _flip(vpath, os.path.getsize(vpath) // 2)
        again = self.compile(
            tamper_dir,
            guard=True,
            jobs=[self.jobs[[x["label"] for x in self.jobs].index(victim["label"])]],
        )
        served = again["jobs"][0].get("cubin")
        if served != victim["cubin"]:
            guard_problems.append(
                "a tampered cubin was served" if served else f"tamper: {again['jobs'][0]}"
            )
        elif _sha(vpath) != victim["cubin"]:
            guard_problems.append("after a tamper the entry was not rebuilt")

        damage = self.damage(stock_dir, guard_dir, ok)
        try:
            from jitwarden.ops.rebuild import recipe_disagreements
        except ImportError:  # a jitwarden without per-release recipes
            table = None
        else:
            table = recipe_disagreements()
        return {
            "triton": stock["triton"],
            "kernels": len(ok),
            "skipped": skipped,
            "quick_fa": quick_fa,
            "rebuild_fa": rebuild_fa,
            "guard_problems": guard_problems,
            "stock_differs": stock_differs,
            "damage": damage,
            "table_problems": table,
            "seconds": round(time.perf_counter() - t0, 1),
        }

    def damage(self, stock_dir: str, guard_dir: str, ok: list[dict]) -> list[dict]:
        """Each damaged copy and whether verify caught it at error level."""
        from jitwarden.formats import elf

        out = []
        by_arch = {}
        for j in ok:
            by_arch.setdefault(j["arch"], []).append(j)
        dot = next(j for j in ok if j["variant"] == "dot" and j["arch"] == 90)
        # ptxas 13.x does not assemble large tl.dot kernels the same way twice: an unsealed code
        # flip there is `unverifiable` by design (the seal catches it), so the rebuild-only case
        # uses a kernel ptxas reproduces every time.
        steady = next(j for j in ok if j["variant"] == "reduction" and j["arch"] == 90)
        other = next(j for j in ok if j["variant"] == "elementwise" and j["arch"] == 90)

        def text_offset(path: str) -> int:
            with open(path, "rb") as f:
                data = f.read()
            e = elf.parse(data)
            s = next(s for s in e.sections if s.name.startswith(".text."))
            return s.offset + s.size // 2

        def case(name: str, src: str, mode: str, mutate, victim=dot) -> None:
            dst = os.path.join(self.work, f"damage-{name}-{mode}")
            shutil.copytree(src, dst, symlinks=True)
            _repoint(dst)
            cubin = os.path.join(dst, _entry_id(victim["hash"]), f"{victim['name']}.cubin")
            mutate(cubin, dst)
            bad, rc = self.verify(dst, mode)
            errors = [
                f for f in bad if f["severity"] == "error" and f.get("entry") == victim["name"]
            ]
            out.append(
                {
                    "case": name,
                    "mode": mode,
                    "kernel": victim["label"],
                    "caught": bool(errors) and rc == 1,
                    "finding": errors[0]["code"] if errors else None,
                }
            )

        def flip_code(cubin, _dst):
            _flip(cubin, text_offset(cubin))

        def swap(cubin, dst):
            shutil.copyfile(
                os.path.join(dst, _entry_id(other["hash"]), f"{other['name']}.cubin"), cubin
            )

        def truncate(cubin, _dst):
            with open(cubin, "r+b") as f:
                f.truncate(os.path.getsize(cubin) // 2)

        case("code-byte-sealed", guard_dir, "quick", flip_code)
        case("code-byte-sealed", guard_dir, "rebuild", flip_code)
        case("code-byte-unsealed", stock_dir, "rebuild", flip_code, steady)
        case("other-kernel-cubin", stock_dir, "quick", swap)
        case("truncated-cubin", stock_dir, "quick", truncate)
        return out


def _flip(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


def _repoint(root: str) -> None:
    """Point a copied cache's group files at the copy, as if it had been built there."""
    for name in os.listdir(root):
        entry = os.path.join(root, name)
        if not os.path.isdir(entry) or os.path.islink(entry):
            continue
        for fname in os.listdir(entry):
            if fname.startswith("__grp__"):
                gpath = os.path.join(entry, fname)
                with open(gpath) as f:
                    doc = json.load(f)
                doc["child_paths"] = {
                    c: os.path.join(entry, os.path.basename(p))
                    for c, p in doc["child_paths"].items()
                }
                with open(gpath, "w") as f:
                    json.dump(doc, f)
        # The seal covers the group file's bytes: reseal the repointed copy as the guard would.
        if os.path.isfile(os.path.join(entry, SEAL)):
            _reseal(entry)


def _reseal(entry: str) -> None:
    from jitwarden.store import seal

    old = seal.read(entry)
    seal.write(entry, seal.compute(entry, old.files, old.fingerprint, old.producer))


# ---------------------------------------------------------------- the parent


def venv_python(venvs: str, version: str) -> str:
    return os.path.join(venvs, f"triton-{version}", "bin", "python")


def ensure_venv(venvs: str, version: str) -> tuple[str, float]:
    """The venv's python (created when missing) and the seconds its creation took."""
    py = venv_python(venvs, version)
    if os.path.exists(py):
        return py, 0.0
    t0 = time.perf_counter()
    d = os.path.dirname(os.path.dirname(py))
    subprocess.run([sys.executable, "-m", "venv", d], check=True)
    subprocess.run(
        [py, "-m", "pip", "install", "-q", f"triton=={version}.0", "-e", REPO], check=True
    )
    return py, time.perf_counter() - t0


def run_version(py: str, keep: str | None) -> dict:
    work = tempfile.mkdtemp(prefix="jw-matrix-", dir=keep)
    try:
        # A private HOME: the matrix runs beside the main suite in CI, whose last check is that nothing in the
        # caller's home or default cache locations changed (jitwarden's memo and keys live under ~/.cache).
        home = os.path.join(work, "home")
        os.makedirs(home, exist_ok=True)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TRITON_", "JITWARDEN_", "XDG_"))
        }
        env["HOME"] = home
        p = subprocess.run(
            [py, os.path.abspath(__file__), "--worker", work],
            capture_output=True,
            text=True,
            env=env,
        )
        if p.returncode != 0:
            return {"error": (p.stderr or p.stdout).strip()[-1500:]}
        return json.loads(p.stdout.strip().splitlines()[-1])
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


def row(version: str, r: dict) -> list[str]:
    if "error" in r:
        return [
            version,
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "FAILED: " + r["error"].splitlines()[-1][:80],
        ]
    caught = sum(d["caught"] for d in r["damage"])
    return [
        r["triton"],
        f"{r['kernels']}/{r['kernels'] + len(r['skipped'])}",
        str(len(false_alarms(r["quick_fa"]))),
        str(len(false_alarms(r["rebuild_fa"]))),
        str(len(r["rebuild_fa"]) - len(false_alarms(r["rebuild_fa"]))),
        "yes" if not r["guard_problems"] else "NO",
        f"{caught}/{len(r['damage'])}",
        "n/a" if r.get("table_problems") is None else "ok" if not r["table_problems"] else "NO",
        f"{r['seconds']:.0f}",
    ]


HEADER = [
    "triton",
    "kernels",
    "quick FA",
    "rebuild FA",
    "unproven",
    "guard ok",
    "damage caught",
    "ptxas table",
    "seconds",
]


def false_alarms(findings: list[dict]) -> list[dict]:
    """Findings on a clean cache that claim something is wrong (error, stale, ...).

    ``unverifiable`` claims nothing: it says a rebuild could not prove the entry (ptxas output
    that varies between runs, say). It is counted apart, as "unproven".
    """
    return [f for f in findings if f["code"] != "unverifiable"]


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [HEADER] + rows) for i in range(len(HEADER))]
    fmt = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join(
        [fmt(HEADER), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [fmt(r) for r in rows]
    )


def failed(r: dict) -> bool:
    return (
        "error" in r
        or false_alarms(r["quick_fa"])
        or false_alarms(r["rebuild_fa"])
        or r["guard_problems"]
        or r.get("table_problems")
        or not all(d["caught"] for d in r["damage"])
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--versions", default=",".join(VERSIONS), help="comma-separated Triton versions (3.4,...)"
    )
    ap.add_argument(
        "--venvs",
        default=os.path.join(tempfile.gettempdir(), "jw-matrix-venvs"),
        help="where the per-version venvs live (created when missing)",
    )
    ap.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="VERSION=PYTHON",
        help="use this interpreter for VERSION instead of a venv under --venvs",
    )
    ap.add_argument("--json", default=None, help="write the full results here")
    ap.add_argument("--keep", default=None, help="keep the work trees under this directory")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(Worker(a.worker).run()))
        return 0
    given = dict(x.split("=", 1) for x in a.python)
    results, rows = {}, []
    for v in [x.strip() for x in a.versions.split(",") if x.strip()]:
        setup = 0.0
        py = given.get(v)
        if py is None:
            py, setup = ensure_venv(a.venvs, v)
        r = run_version(py, a.keep)
        r["setup_seconds"] = round(setup, 1)
        results[v] = r
        rows.append(row(v, r))
        print(f"triton {v}: done", file=sys.stderr, flush=True)
        for key in ("quick_fa", "rebuild_fa"):
            for f in r.get(key, ()):
                print(
                    f"  {v} {key}: {f.get('entry')} sm_{f.get('arch')}: {f['code']}: {f['message'][:200]}",
                    file=sys.stderr,
                )
        for p in r.get("guard_problems", ()):
            print(f"  {v} guard: {p}", file=sys.stderr)
        for d in r.get("damage", ()):
            if not d["caught"]:
                print(f"  {v} damage not caught: {d['case']} ({d['mode']})", file=sys.stderr)
        for p in r.get("table_problems") or ():
            print(f"  {v} ptxas table: {p}", file=sys.stderr)
        for s in r.get("stock_differs", ()):
            print(
                f"  {v} note: {s}: the stock and the guarded compile got different cubins from ptxas "
                "(ptxas is not deterministic for this kernel)",
                file=sys.stderr,
            )
        for s in r.get("skipped", ()):
            print(f"  {v} not compiled: {s}", file=sys.stderr)
    print(table(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if any(failed(r) for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
