"""The load hooks for JAX and CuPy on a GPU (issue 33; runtime/guards/jax.py, runtime/guards/cupy.py): the two held-out swaps, false alarms,
the proofs' cost and the warm-hit ratio. NOT RUN YET: written for the next session with an H200.

Run from the repository root on the GPU machine, with JAX (CUDA plugin) and CuPy installed in the Python that runs
it: ``python3 benchmarks/h200_jax_cupy_hooks.py OUT [jax] [cupy]`` (``--cpu``: JAX's half on JAX's CPU backend,
to try the script without a GPU). Every program runs in a fresh process; the JAX programs name their cache dir in
code (``jax.config.update``), as the held-out programs did.

Swaps (two entries of one name, one computation's file over the other's key), each in three states:
- JAX: ``f`` is gelu(x @ w) or relu(x @ w) (``jit_f-<key>-cache`` both): relu's file over gelu's key; right is the
  fraction of negative outputs gelu gives (> 0), relu gives 0.0;
- CuPy: ``RawModule`` with the name expression ``scale<float>``, ``x * a`` or ``x / a``: the ``/`` file over the
  ``*`` key; right is 12.0, the swap gives 3.0.
States: ``unsealed`` (stock builds the cache, the swap, then a guarded run), ``sealed`` (a guarded run builds it, a
guarded start, the swap, a guarded run), ``window`` (a guarded run builds it, the swap at once, a guarded run). Stock
runs on the swapped cache too (the attack is real). Expected: every guarded result right.

False alarms: the capture programs of ``benchmarks/h200_capture_jax_cupy.py`` (4 JAX, 4 CuPy) and 3 more per tool
here, built stock, then run guarded twice: no ``quarantined`` line, results equal to stock's. ``verify`` over the
real captures in ``tests/data/real/jax_cupy``: nothing at error level beyond the captured swaps.

Cost: per tool, the first guarded run over a stock-built cache (each entry proven by the tool's own compile)
against a cold stock run; warm guarded against warm stock in >= 6 interleaved pairs (issue 33: <= 1.05).
``OUT/results.json`` holds every step.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import textwrap
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from benchmarks.h200_capture_jax_cupy import (
    CUPY_PRELUDE,
    CUPY_PROGRAMS,
    JAX_PRELUDE,
    JAX_PROGRAMS,
)

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
from _budget import Budget


def _budget_options(argv: list[str]) -> tuple[list[str], float, str | None]:
    """``--budget SECONDS`` and ``--json PATH`` (benchmarks/_budget.py) taken out of ``argv`` before the
    positional arguments are read; ``-h``/``--help`` prints this module's docstring."""
    rest, budget, path = [], float(os.environ.get("JW_BUDGET", "0") or 0), None
    it = iter(argv)
    for a in it:
        if a in ("-h", "--help"):
            print(__doc__)
            print(
                "Options: --budget SECONDS (skip steps that would not fit, said), --json PATH (results file)."
            )
            raise SystemExit(0)
        if a == "--budget" or a.startswith("--budget="):
            budget = float(a.split("=", 1)[1] if "=" in a else next(it, "0"))
        elif a == "--json" or a.startswith("--json="):
            path = a.split("=", 1)[1] if "=" in a else next(it, None)
        else:
            rest.append(a)
    return rest, budget, path


_ARGV, BUDGET_S, JSON_PATH = _budget_options(sys.argv[1:])
ARGS = [a for a in _ARGV if not a.startswith("--")]
OUT = os.path.abspath(ARGS[0] if ARGS else "jax-cupy-hooks-out")
CPU = "--cpu" in _ARGV
ONLY = [t for t in ARGS[1:] if t in ("jax", "cupy")] or (["jax"] if CPU else ["jax", "cupy"])
PAIRS = next((int(a.split("=", 1)[1]) for a in _ARGV if a.startswith("--pairs=")), 6)
STEPS = [a.split("=", 1)[1].split(",") for a in _ARGV if a.startswith("--steps=")]
"""``--steps=cost`` (or ``swaps,false_alarms,cost``): only those steps (a re-measure of the warm ratio alone)."""

JAX_SWAP = """
    import time
    t = time.perf_counter()
    if sys.argv[1] == "gelu":
        def f(x, w): return jax.nn.gelu(x @ w)
    else:
        def f(x, w): return jax.nn.relu(x @ w)
    x = (jnp.arange(4096.0).reshape(64, 64) - 2048) / 512
    r = jax.jit(f)(x, jnp.eye(64))
    out(value=float((r < 0).mean()), s=time.perf_counter() - t)
"""
CUPY_SWAP = """
    import time
    t = time.perf_counter()
    op = "*" if sys.argv[1] == "mul" else "/"
    src = "template<typename T> __global__ void scale(T* a, T s, int n) " \\
          "{ int i = blockIdx.x*blockDim.x+threadIdx.x; if (i<n) a[i] = a[i] %s s; }" % op
    m = cp.RawModule(code=src, options=("-std=c++17",), name_expressions=("scale<float>",))
    a = cp.full(256, 6.0, cp.float32)
    m.get_function("scale<float>")((1,), (256,), (a, cp.float32(2.0), cp.int32(256)))
    out(value=float(a[0]), s=time.perf_counter() - t)
"""
JAX_MORE = {
    "attention": """
        q = jnp.ones((8, 64, 32)) / 7; k = q * 0.5
        s = jax.nn.softmax(jnp.einsum("bqd,bkd->bqk", q, k), -1)
        out(attn=float(jax.jit(lambda s, v: (s @ v).sum())(s, k)))
    """,
    "loss_grad": """
        def loss(w, x): return jnp.mean((jnp.tanh(x @ w) - 1.0) ** 2)
        g = jax.jit(jax.grad(loss))(jnp.ones((32, 32)) / 32, jnp.ones((16, 32)))
        out(grad=float(g.sum()))
    """,
    "vmap_cumsum": """
        f = jax.jit(jax.vmap(lambda r: jnp.cumsum(jnp.sin(r)) / (1 + jnp.arange(r.shape[0]))))
        out(vm=float(f(jnp.arange(256.0).reshape(16, 16)).sum()))
    """,
}
CUPY_MORE = {
    "saxpy": """
        k = cp.ElementwiseKernel("float32 a, float32 x, float32 y", "float32 z", "z = a * x + y", "jw_saxpy")
        x = cp.arange(2048, dtype=cp.float32); out(saxpy=float(k(cp.float32(3), x, x).sum()))
    """,
    "softmax_rows": """
        x = cp.arange(4096, dtype=cp.float32).reshape(64, 64) / 64
        e = cp.exp(x - x.max(axis=1, keepdims=True)); out(sm=float((e / e.sum(axis=1, keepdims=True)).sum()))
    """,
    "raw_relu": """
        src = 'extern "C" __global__ void jw_relu(float* a, int n) { int i = blockIdx.x*blockDim.x+threadIdx.x; if (i<n) a[i] = a[i] > 0 ? a[i] : 0; }'
        a = cp.arange(-512, 512, dtype=cp.float32); cp.RawKernel(src, "jw_relu")((4,), (256,), (a, cp.int32(1024)))
        out(relu=float(a.sum()))
    """,
}
TOOLS = {
    "jax": ("JW_JAX_DIR", JAX_PRELUDE, JAX_SWAP, ("gelu", "relu"), {**JAX_PROGRAMS, **JAX_MORE}),
    "cupy": (
        "CUPY_CACHE_DIR",
        CUPY_PRELUDE,
        CUPY_SWAP,
        ("mul", "div"),
        {**CUPY_PROGRAMS, **CUPY_MORE},
    ),
}
RESULTS: dict = {}


def run(code: str, env: dict, argv: tuple = (), guarded: bool = False) -> dict:
    cmd = [sys.executable, "-c", code, *argv]
    if guarded:
        cmd = [sys.executable, "-m", "jitwarden", "run", "--", *cmd]
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    outs = [json.loads(ln[3:]) for ln in p.stdout.splitlines() if ln.startswith("JW ")]
    return {
        "rc": p.returncode,
        "wall": round(time.perf_counter() - t, 3),
        "out": outs,
        "jitwarden": [ln for ln in p.stderr.splitlines() if "jitwarden" in ln][-20:],
        "err_tail": p.stderr[-800:] if p.returncode else "",
    }


def entries(d: str) -> set[str]:
    return {
        n for n in os.listdir(d) if os.path.isfile(os.path.join(d, n)) and not n.startswith(".")
    }


def env_for(var: str, d: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "src"), **{var: d})
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    if CPU:
        env["JAX_PLATFORMS"] = "cpu"
    return env


def is_swapped_kind(tool: str, d: str, name: str) -> bool:
    """The entry the swap is about: JAX's ``jit_f-...-cache``; CuPy's module with name expressions (its payload,
    after the 40-byte SHA-1 header, starts with CuPy's name-expressions magic)."""
    if tool == "jax":
        return name.startswith("jit_f-") and name.endswith("-cache")
    with open(os.path.join(d, name), "rb") as f:
        return f.read(48)[40:] == b"\x93CUPYNE\x00"


def dirs(tool: str, name: str) -> tuple[str, dict, dict]:
    """(the dir the entries are in, stock's env, guarded's env): ``jitwarden run`` points CuPy's variable at its
    fingerprint partition of the dir, so stock is pointed at that partition; JAX's dir is named in code."""
    var = TOOLS[tool][0]
    base = os.path.join(OUT, "work", f"{tool}_{name}")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    guarded = env_for(var, base)
    if tool == "jax":
        return base, guarded, guarded
    p = subprocess.run(
        [sys.executable, "-m", "jitwarden", "run", "-v", "--", "true"],
        env=guarded,
        capture_output=True,
        text=True,
    )
    part = next(
        ln.split("=", 1)[1] for ln in p.stderr.splitlines() if ln.startswith(f"jitwarden: {var}=")
    )
    return part, env_for(var, part), guarded


def swap_case(tool: str, state: str) -> dict:
    _var, prelude, body, (right, other), _ = TOOLS[tool]
    code = prelude + textwrap.dedent(body)
    d, stock, guarded = dirs(tool, state)
    if state == "window":  # written under the guard, sealed as written
        r = {"build": run(code, guarded, (right,), guarded=True)}
    else:
        r = {"build": run(code, stock, (right,))}
    if state == "sealed":  # proven and sealed by a guarded run before the swap
        r["prove"] = run(code, guarded, (right,), guarded=True)
    before = entries(d)
    r["build_other"] = run(code, stock, (other,))  # the same dir: the key JAX and CuPy compute here
    (target,) = [n for n in before if is_swapped_kind(tool, d, n)]
    (source,) = [n for n in entries(d) - before if is_swapped_kind(tool, d, n)]
    shutil.copyfile(os.path.join(d, source), os.path.join(d, target))
    r["swapped"] = {"target": target, "copied_from": source}
    r["stock"] = run(code, stock, (right,))
    r["guarded"] = run(code, guarded, (right,), guarded=True)
    r["guarded_again"] = run(code, guarded, (right,), guarded=True)
    return r


def false_alarms(tool: str) -> dict:
    _var, prelude, _body, _names, programs = TOOLS[tool]
    out: dict = {}
    for name, body in programs.items():
        _d, senv, genv = dirs(tool, f"fa_{name}")
        code = prelude + textwrap.dedent(body)
        stock = run(code, senv)
        g1 = run(code, genv, guarded=True)
        g2 = run(code, genv, guarded=True)
        out[name] = {
            "stock": stock,
            "guarded": g1,
            "guarded_again": g2,
            "false_alarm": any("quarantined" in ln for ln in g1["jitwarden"] + g2["jitwarden"]),
            "same_result": stock["out"] == g1["out"] == g2["out"],
        }
    return out


def cost(tool: str) -> dict:
    _var, prelude, body, (right, _), _ = TOOLS[tool]
    code = prelude + textwrap.dedent(body)
    colds, firsts = [], []
    for _ in range(3):
        _d, senv, genv = dirs(tool, "cost")
        colds.append(run(code, senv, (right,))["out"][-1]["s"])
        firsts.append(run(code, genv, (right,), guarded=True)["out"][-1]["s"])
    ws, wg = [], []
    for i in range(
        PAIRS
    ):  # interleaved, the order flipped every pair: neither side always goes first
        for side in ("stock", "guarded")[:: 1 if i % 2 == 0 else -1]:
            if side == "stock":
                ws.append(run(code, senv, (right,))["out"][-1]["s"])
            else:
                wg.append(run(code, genv, (right,), guarded=True)["out"][-1]["s"])
    med = statistics.median
    return {
        "cold": colds,
        "first_use": firsts,
        "first_use_vs_cold": med(firsts) / med(colds),
        "warm_stock": ws,
        "warm_guarded": wg,
        "warm_ratio": med(wg) / med(ws),
    }


CUPY_PHASES = """
    import time
    before = set(sys.modules)
    t0 = time.perf_counter()
    a = cp.full(256, 6.0, cp.float32); cp.cuda.Device().synchronize()
    t1 = time.perf_counter()
    src = "template<typename T> __global__ void scale(T* a, T s, int n) " \\
          "{ int i = blockIdx.x*blockDim.x+threadIdx.x; if (i<n) a[i] = a[i] * s; }"
    m = cp.RawModule(code=src, options=("-std=c++17",), name_expressions=("scale<float>",))
    f = m.get_function("scale<float>")
    t2 = time.perf_counter()
    f((1,), (256,), (a, cp.float32(2.0), cp.int32(256))); v = float(a[0])
    t3 = time.perf_counter()
    new = sorted(set(sys.modules) - before)
    out(init=t1 - t0, load=t2 - t1, launch=t3 - t2, s=t3 - t0, value=v, imported=len(new),
        jitwarden=[n for n in new if n.startswith("jitwarden")], other=new[:40])
"""


def phases(tool: str) -> dict:
    """CuPy's warm start cut into phases (CUDA init, the module's cache load, launch and sync) and the modules
    imported inside the timed window, stock vs guarded, interleaved: where a warm-hit difference comes from."""
    if tool != "cupy":
        return {}
    code = CUPY_PRELUDE + textwrap.dedent(CUPY_PHASES)
    _d, senv, genv = dirs(tool, "phases")
    run(
        code, senv
    )  # cold fills: stock's dir, then the guarded partition (proved and sealed by the next run)
    run(code, genv, guarded=True)
    run(code, genv, guarded=True)
    rows: dict[str, list] = {"stock": [], "guarded": []}
    for i in range(PAIRS):
        for side in ("stock", "guarded")[:: 1 if i % 2 == 0 else -1]:
            r = run(code, senv if side == "stock" else genv, guarded=side == "guarded")
            rows[side].append(r["out"][-1] if r["out"] else {"error": r["err_tail"][-300:]})
    med = statistics.median
    summary = {
        side: {k: med(x[k] for x in rs if k in x) for k in ("init", "load", "launch", "s")}
        for side, rs in rows.items()
        if all("s" in x for x in rs)
    }
    if len(summary) == 2:
        summary["ratio"] = {
            k: summary["guarded"][k] / summary["stock"][k] for k in summary["stock"]
        }
    return {"rows": rows, "median": summary}


def verify_real() -> dict:
    import tarfile

    d = os.path.join(OUT, "work", "real")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    real = os.path.join(REPO, "tests", "data", "real", "jax_cupy")
    out = {}
    for name in ("jax_cache", "cupy_cache"):
        with tarfile.open(os.path.join(real, f"{name}.tar.xz")) as t:
            t.extractall(d)
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "jitwarden",
                "verify",
                "--format",
                "json",
                os.path.join(d, name),
            ],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "src")),
        )
        out[name] = {"rc": p.returncode, "errors": p.stdout.count('"severity": "error"')}
    return out


NEED = {"swaps": 90, "false_alarms": 90, "cost": 45, "phases": 40, "verify_real": 20}
"""Rough seconds per step and tool on a GPU host, to skip rather than be killed mid-step (``--budget``)."""


def main() -> None:
    os.makedirs(os.path.join(OUT, "work"), exist_ok=True)
    b = Budget(
        "h200_jax_cupy_hooks",
        BUDGET_S,
        JSON_PATH or os.path.join(OUT, "results.json"),
        {"tools": ONLY, "cpu": CPU, "pairs": PAIRS},
    )
    steps = {
        "swaps": lambda tool: {s: swap_case(tool, s) for s in ("unsealed", "sealed", "window")},
        "false_alarms": false_alarms,
        "cost": cost,
        "phases": phases,
    }
    for tool in ONLY:
        RESULTS[tool] = {}
        for step, fn in steps.items():
            if (step not in STEPS[0]) if STEPS else step == "phases":  # phases only when named
                continue
            if not b.fits(f"{tool} {step}", NEED[step]):
                continue
            try:
                RESULTS[tool][step] = fn(tool)
            except Exception as exc:  # one tool failing must not lose the other's results
                RESULTS[tool]["error"] = repr(exc)
                b.put(tool, RESULTS[tool])
                break
            b.put(tool, RESULTS[tool])
    if (not STEPS or "verify_real" in STEPS[0]) and b.fits("verify_real", NEED["verify_real"]):
        RESULTS["verify_real"] = verify_real()
        b.put("verify_real", RESULTS["verify_real"])
    b.finish()
    for tool in ONLY:
        r = RESULTS[tool]
        if "error" in r:
            print(tool, r["error"])
        for s, c in r.get("swaps", {}).items():
            val = lambda x: x["out"][-1]["value"] if x["out"] else x["err_tail"][-120:]  # noqa: E731
            print(
                f"{tool:4} {s:8} stock {val(c['stock'])}  guarded {val(c['guarded'])}  again {val(c['guarded_again'])}"
            )
        fa = r.get("false_alarms")
        if fa is None:
            continue
        print(
            f"{tool:4} false alarms {sum(v['false_alarm'] for v in fa.values())} of {len(fa)} programs; "
            f"results differ in {sum(not v['same_result'] for v in fa.values())}"
        )
        c = r.get("cost")
        if c is None:
            continue
        print(
            f"{tool:4} first use {c['first_use_vs_cold']:.2f}x cold; warm {c['warm_ratio']:.3f}x stock over {PAIRS} pairs"
        )
    for tool in ONLY:
        ph = RESULTS[tool].get("phases", {}).get("median", {})
        if ph:
            print(f"{tool:4} phases (median s): {json.dumps(ph)}")
    print("verify real captures:", RESULTS.get("verify_real", "skipped"))


if __name__ == "__main__":
    main()
