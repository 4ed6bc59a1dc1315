"""The GPU side of ``jitwarden canary``: one pass of the battery in a fresh Python process (torch and Triton).

Run as ``python -m jitwarden.ops.canary_worker``: it runs every case of :data:`~jitwarden.ops.canary.BATTERY`
through the Triton cache (compiling or loading), compares each output with a torch reference
(:func:`compare`) and prints one line, ``MARKER`` then a JSON document, which the stdlib parent
(:mod:`jitwarden.ops.canary`) reads. torch and Triton are imported inside the functions that need
them, so importing this module costs nothing (ARCHITECTURE.md, ``ops/``).
"""

from __future__ import annotations

import json
import math
import sys

from jitwarden.ops.canary import (
    BATTERY,
    COLS,
    MARKER,
    MM,
    N_BINS,
    N_ELEM,
    ROWS,
    Case,
    Comparison,
    KernelRun,
    NoGPU,
    Tolerance,
)


def compare(out, ref, tol: Tolerance) -> Comparison:
    """Compare tensor ``out`` with ``ref`` (any device, any dtype) in float64 on the CPU.

    NaN where the reference has NaN (or the same infinity) counts as equal; NaN or inf where the
    reference is finite is an infinite error. Relative error is ``|out - ref| / |ref|`` over
    elements whose reference is larger than the absolute tolerance (elsewhere it means little).
    """
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(
            math.inf,
            math.inf,
            max(out.numel(), ref.numel()),
            ref.numel(),
            tol,
            f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}",
        )
    o = out.detach().to("cpu").to(torch.float64)
    r = ref.detach().to("cpu").to(torch.float64)
    same = (o == r) | (torch.isnan(o) & torch.isnan(r))
    diff = torch.where(same, torch.zeros_like(o), (o - r).abs())
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
    thresh = tol.atol + tol.rtol * r.abs()
    thresh = torch.where(torch.isnan(thresh), torch.zeros_like(thresh), thresh)
    bad = ((diff > thresh) | torch.isinf(diff)) & ~same
    # Relative error where it means something: references larger than the absolute tolerance.
    big = torch.isfinite(r) & (r.abs() > max(tol.atol, 1e-300))
    rel = torch.where(big, diff / r.abs().clamp_min(1e-300), torch.zeros_like(diff))
    n = r.numel()
    return Comparison(
        float(diff.max()) if n else 0.0, float(rel.max()) if n else 0.0, int(bad.sum()), n, tol
    )


# ---------------------------------------------------------------- inputs and references (torch, any device)


def make_inputs(case: Case, device="cpu", seed: int = 0) -> dict:
    """The inputs of ``case``, reproducible from ``seed`` (generated on the CPU, moved to ``device``)."""
    import torch

    g = torch.Generator().manual_seed(seed)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype).to(device)

    if case.name == "add":
        return {"x": randn(N_ELEM), "y": randn(N_ELEM)}
    if case.name in ("rowsum", "softmax"):
        return {"x": randn(ROWS, COLS) * (4.0 if case.name == "softmax" else 1.0)}
    if case.name.startswith("dot-"):
        dt = getattr(torch, case.dtype)
        m, n, k = MM
        return {"a": randn(m, k, dtype=dt), "b": randn(k, n, dtype=dt)}
    if case.name == "fp8-e4m3":
        return {"x": (torch.randn(N_ELEM, generator=g) * 64).clamp(-400, 400).to(device)}
    if case.name == "atomic-hist":
        return {"x": torch.randint(0, N_BINS, (N_ELEM,), generator=g, dtype=torch.int32).to(device)}
    raise KeyError(case.name)


def reference(case: Case, inputs: dict):
    """The expected output of ``case`` computed by torch (float64 where it matters)."""
    import torch

    if case.name == "add":
        return inputs["x"] + inputs["y"]
    if case.name == "rowsum":
        return inputs["x"].double().sum(dim=1)
    if case.name == "softmax":
        return torch.softmax(inputs["x"].double(), dim=1)
    if case.name.startswith("dot-"):
        return inputs["a"].double() @ inputs["b"].double()
    if case.name == "fp8-e4m3":
        return inputs["x"].to(torch.float8_e4m3fn).to(torch.float32)
    if case.name == "atomic-hist":
        return torch.bincount(inputs["x"].long(), minlength=N_BINS).to(torch.int32)
    raise KeyError(case.name)


def launch(case: Case, inputs: dict, kernels):
    """Run ``case``'s Triton kernel (module ``kernels``) on ``inputs``; returns its output tensor."""
    import torch

    grid1 = lambda n, block: ((n + block - 1) // block,)  # noqa: E731
    if case.name == "add":
        x, y = inputs["x"], inputs["y"]
        out = torch.empty_like(x)
        kernels.jw_canary_add[grid1(x.numel(), 1024)](x, y, out, x.numel(), BLOCK=1024)
    elif case.name == "rowsum":
        x = inputs["x"]
        out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
        kernels.jw_canary_rowsum[(x.shape[0],)](x, out, x.shape[1], BLOCK=1024)
    elif case.name == "softmax":
        x = inputs["x"]
        out = torch.empty_like(x)
        kernels.jw_canary_softmax[(x.shape[0],)](x, out, x.shape[1], BLOCK=1024)
    elif case.name.startswith("dot-"):
        a, b = inputs["a"], inputs["b"]
        m, k = a.shape
        n = b.shape[1]
        out = torch.empty(m, n, device=a.device, dtype=a.dtype)
        kernels.jw_canary_matmul[((m + 63) // 64, (n + 63) // 64)](
            a, b, out, m, n, k, BM=64, BN=64, BK=32
        )
    elif case.name == "fp8-e4m3":
        x = inputs["x"]
        out = torch.empty_like(x)
        kernels.jw_canary_fp8_roundtrip[grid1(x.numel(), 1024)](x, out, x.numel(), BLOCK=1024)
    elif case.name == "atomic-hist":
        x = inputs["x"]
        out = torch.zeros(N_BINS, device=x.device, dtype=torch.int32)
        kernels.jw_canary_histogram[grid1(x.numel(), 1024)](x, out, x.numel(), BLOCK=1024)
    else:
        raise KeyError(case.name)
    return out


def _worker(seed: int = 0) -> dict:
    """Run the battery once in this process; returns the JSON document the parent reads."""
    torch, triton = _gpu_stack()
    cc = torch.cuda.get_device_capability()
    events: list[tuple[str, bool]] = []
    listener_ok = _listen(events)
    from jitwarden.ops import _canary_kernels as kernels

    runs = []
    for case in BATTERY:
        skipped = _skipped(case, cc, torch)
        if skipped:
            runs.append(KernelRun(case.name, skipped=skipped))
        else:
            runs.append(_run_case(case, seed, kernels, events, listener_ok, torch))
    return {
        "device": {
            "name": torch.cuda.get_device_name(),
            "capability": list(cc),
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "triton": triton.__version__,
        },
        "listener": listener_ok,
        "runs": [r.to_json() for r in runs],
    }


def _gpu_stack():
    """(torch, triton), imported; :class:`NoGPU` saying why when either is missing or no CUDA GPU is seen."""
    try:
        import torch
    except ImportError as exc:
        raise NoGPU(f"torch is not importable ({exc})") from None
    try:
        import triton
    except ImportError as exc:
        raise NoGPU(f"Triton is not importable ({exc})") from None
    if not torch.cuda.is_available() or torch.version.cuda is None:
        why = (
            "torch was built without CUDA"
            if torch.version.cuda is None
            else "torch sees no CUDA device"
        )
        raise NoGPU(f"no CUDA GPU: {why} (torch {torch.__version__})")
    return torch, triton


def _listen(events: list[tuple[str, bool]]) -> bool:
    """Record each compilation Triton reports (kernel name, cache hit) into ``events``; whether it could."""
    try:
        from triton import knobs

        def listener(*, src, metadata, metadata_group, times, cache_hit, **_kw):
            events.append((str(metadata.get("name", "")), bool(cache_hit)))

        knobs.compilation.listener = listener
        return True
    except Exception:
        return False


def _skipped(case, cc: tuple[int, int], torch) -> str | None:
    """Why ``case`` cannot run on this GPU or torch, None when it can."""
    if cc < case.min_capability:
        return (
            f"needs compute capability {case.min_capability[0]}."
            f"{case.min_capability[1]}+, this GPU is {cc[0]}.{cc[1]}"
        )
    if case.name == "fp8-e4m3" and not hasattr(torch, "float8_e4m3fn"):
        return "torch has no float8_e4m3fn"
    return None


def _run_case(case, seed: int, kernels, events: list, listener_ok: bool, torch) -> KernelRun:
    """One case of the battery: launched, compared with its reference, and whether its kernel came from
    the cache (the listener's events since it began; None when there is no listener or no event)."""
    start = len(events)

    def cache_hit() -> bool | None:
        mine = [hit for name, hit in events[start:] if name == case.kernel]
        return (all(mine) if mine else None) if listener_ok else None

    try:
        inputs = make_inputs(case, "cuda", seed)
        out = launch(case, inputs, kernels)
        torch.cuda.synchronize()
        cmp = compare(out, reference(case, inputs), case.tolerance)
        return KernelRun(case.name, cache_hit(), cmp)
    except Exception as exc:
        return KernelRun(
            case.name,
            cache_hit(),
            error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300],
        )


def worker_main(argv=None) -> int:
    seed = 0
    args = list(sys.argv[1:] if argv is None else argv)
    if "--seed" in args:
        seed = int(args[args.index("--seed") + 1])
    try:
        doc = _worker(seed)
    except NoGPU as exc:
        doc = {"no_gpu": str(exc)}
    sys.stdout.flush()
    print(MARKER + json.dumps(doc), flush=True)
    return 0


if __name__ == "__main__":
    if "--worker" in sys.argv[1:]:
        sys.exit(worker_main())
    print("usage: jitwarden canary (this module's --worker mode is internal)", file=sys.stderr)
    sys.exit(2)
