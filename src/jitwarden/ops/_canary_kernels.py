"""The Triton kernels of ``jitwarden canary``; imported only by the canary's GPU worker.

Each one exercises a different part of the compiler and runtime: plain loads and stores,
a reduction, a numerically delicate row kernel, tensor-core ``tl.dot`` (one entry per
dtype), fp8 conversion (sm_89 and newer) and atomics. Their sources are fixed, so the
cache keys they produce are stable across runs of the same toolchain.
"""

import triton
import triton.language as tl


@triton.jit
def jw_canary_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def jw_canary_rowsum(x_ptr, out_ptr, ncols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < ncols
    x = tl.load(x_ptr + row * ncols + offs, mask=m, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def jw_canary_softmax(x_ptr, out_ptr, ncols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < ncols
    x = tl.load(x_ptr + row * ncols + offs, mask=m, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * ncols + offs, e / tl.sum(e, axis=0), mask=m)


@triton.jit
def jw_canary_matmul(
    a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr
):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        ka = k0 + rk
        a = tl.load(
            a_ptr + rm[:, None] * K + ka[None, :],
            mask=(rm[:, None] < M) & (ka[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + ka[:, None] * N + rn[None, :],
            mask=(ka[:, None] < K) & (rn[None, :] < N),
            other=0.0,
        )
        acc += tl.dot(a, b)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def jw_canary_fp8_roundtrip(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x.to(tl.float8e4nv).to(tl.float32), mask=m)


@triton.jit
def jw_canary_histogram(x_ptr, hist_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    b = tl.load(x_ptr + offs, mask=m, other=0)
    tl.atomic_add(hist_ptr + b, 1, mask=m)
