"""``jitwarden canary``: run a battery of Triton kernels on the GPU, compiled and from the cache.

The battery (:data:`BATTERY`) exercises different code paths: elementwise, a reduction,
softmax, tensor-core ``tl.dot`` in fp16 and bf16, fp8 (e4m3) conversion where the GPU has
it (compute capability 8.9 and newer), and atomics. Each kernel's output is compared with a
torch reference computed in float64 (``canary_worker.compare``), with a tolerance per dtype.

Two passes, each in a fresh Python process (:func:`run_passes`): the first compiles into the
cache (or, with an existing cache, loads what is there), the second must load every kernel
from the on-disk cache; Triton's compilation listener reports, per kernel, whether it was a
cache hit. A wrong binary under a key (the silent corruption jitwarden exists for) shows up as
a wrong answer in the pass that loads it.

This module is the parent: the battery, the records, the passes; standard library only. The
GPU worker each pass runs (torch and Triton: inputs, references, :func:`~jitwarden.ops.canary_worker.compare`)
is :mod:`jitwarden.ops.canary_worker`, started as ``python -m jitwarden.ops.canary_worker --worker``; its
one line of JSON is read with the bounded JSON reader (``formats/jsonlimits``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import time

from jitwarden.formats import jsonlimits
from jitwarden.model.asjson import fields_json
from jitwarden.model.errors import JitwardenError

MARKER = "JW-CANARY-RESULT "
MANAGER = "jitwarden.guard:GuardedCacheManager"


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """Pass when ``|out - ref| <= atol + rtol * |ref|`` everywhere (``torch.allclose``'s rule)."""

    atol: float
    rtol: float

    def to_json(self) -> dict:
        return fields_json(self)


# Per output dtype. fp32 results of exact or nearly exact operations are held tight; fp16/bf16
# results of tl.dot allow about one unit in the last place of the stored dtype plus fp32
# accumulation order; fp8 (both sides round to nearest even) is expected exact and allowed less
# than one e4m3 step, so the wrong format or rounding fails; integers are exact.
TOLERANCES = {
    "float32": Tolerance(1e-6, 1e-6),
    "float32-reduce": Tolerance(1e-4, 1e-5),
    "float32-softmax": Tolerance(1e-6, 1e-4),
    "float16": Tolerance(1e-2, 2e-3),
    "bfloat16": Tolerance(5e-2, 1e-2),
    "float8_e4m3": Tolerance(2.0**-10, 2.0**-4),
    "int32": Tolerance(0.0, 0.0),
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One battery item: a kernel, the dtype it runs in, what it exercises, and when it applies."""

    name: str
    kernel: str  # function name in jitwarden.ops._canary_kernels
    dtype: str
    exercises: str
    tolerance: Tolerance
    min_capability: tuple[int, int] = (0, 0)


BATTERY: tuple[Case, ...] = (
    Case("add", "jw_canary_add", "float32", "elementwise load/store", TOLERANCES["float32"]),
    Case(
        "rowsum", "jw_canary_rowsum", "float32", "reduction (tl.sum)", TOLERANCES["float32-reduce"]
    ),
    Case(
        "softmax", "jw_canary_softmax", "float32", "row max/exp/sum", TOLERANCES["float32-softmax"]
    ),
    Case(
        "dot-fp16",
        "jw_canary_matmul",
        "float16",
        "tl.dot on tensor cores",
        TOLERANCES["float16"],
        (7, 0),
    ),
    Case(
        "dot-bf16",
        "jw_canary_matmul",
        "bfloat16",
        "tl.dot on tensor cores",
        TOLERANCES["bfloat16"],
        (8, 0),
    ),
    Case(
        "fp8-e4m3",
        "jw_canary_fp8_roundtrip",
        "float8_e4m3",
        "fp32 -> fp8 e4m3 -> fp32 conversion",
        TOLERANCES["float8_e4m3"],
        (8, 9),
    ),
    Case(
        "atomic-hist",
        "jw_canary_histogram",
        "int32",
        "tl.atomic_add histogram",
        TOLERANCES["int32"],
    ),
)

CASES = {c.name: c for c in BATTERY}

# Problem sizes: odd lengths so masks matter; matmul tiles 64x64x32.
N_ELEM = 100_003
ROWS, COLS = 64, 1000
MM = (192, 160, 256)  # M, N, K
N_BINS = 97


# ---------------------------------------------------------------- comparison


@dataclasses.dataclass(frozen=True)
class Comparison:
    """How far one output is from its reference: largest absolute and relative error, count out of tolerance."""

    max_abs: float
    max_rel: float
    mismatched: int
    total: int
    tolerance: Tolerance
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.mismatched == 0 and not self.detail

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            **fields_json(
                self,
                max_abs=_finite(self.max_abs),
                max_rel=_finite(self.max_rel),
                tolerance=self.tolerance.to_json(),
            ),
        }

    @classmethod
    def from_json(cls, d: dict) -> Comparison:
        inf = float("inf")
        return cls(
            inf if d["max_abs"] is None else d["max_abs"],
            inf if d["max_rel"] is None else d["max_rel"],
            d["mismatched"],
            d["total"],
            Tolerance(**d["tolerance"]),
            d.get("detail", ""),
        )


def _finite(x: float):
    return x if math.isfinite(x) else None  # JSON has no inf/nan


def _num(x: float) -> str:
    if not math.isfinite(x):
        return "inf"
    return "0" if x == 0 else f"{x:.2g}"


# ---------------------------------------------------------------- results


@dataclasses.dataclass(frozen=True)
class KernelRun:
    """One kernel in one pass: compiled or loaded from the cache, and how close it came."""

    name: str
    cache_hit: bool | None = None  # None: Triton did not say (no listener, or it never compiled)
    comparison: Comparison | None = None
    error: str | None = None
    skipped: str | None = None

    @property
    def ok(self) -> bool:
        return self.skipped is not None or (
            self.error is None and self.comparison is not None and self.comparison.ok
        )

    @property
    def source_str(self) -> str:
        return {True: "cache", False: "compiled", None: "?"}[self.cache_hit]

    def to_json(self) -> dict:
        comparison = self.comparison.to_json() if self.comparison else None
        return {
            "name": self.name,
            "ok": self.ok,
            **fields_json(self, omit=("name",), comparison=comparison),
        }

    @classmethod
    def from_json(cls, d: dict) -> KernelRun:
        c = d.get("comparison")
        return cls(
            d["name"],
            d.get("cache_hit"),
            Comparison.from_json(c) if c else None,
            d.get("error"),
            d.get("skipped"),
        )


@dataclasses.dataclass(frozen=True)
class KernelResult:
    """A battery item over every pass."""

    case: Case
    runs: tuple[KernelRun, ...]

    @property
    def skipped(self) -> str | None:
        return next((r.skipped for r in self.runs if r.skipped), None)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs) and bool(self.runs)

    @property
    def status(self) -> str:
        if self.skipped:
            return "skipped"
        return "pass" if self.ok else "FAIL"

    @property
    def max_abs(self) -> float:
        return max((r.comparison.max_abs for r in self.runs if r.comparison), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((r.comparison.max_rel for r in self.runs if r.comparison), default=0.0)

    @property
    def cache_path_tested(self) -> bool:
        """Did at least one pass load this kernel from the on-disk cache?"""
        return any(r.cache_hit for r in self.runs)

    def detail(self) -> str:
        if self.skipped:
            return self.skipped
        parts = []
        for i, r in enumerate(self.runs, 1):
            if r.error:
                parts.append(f"pass {i}: {r.error}")
            elif r.comparison and not r.comparison.ok:
                c = r.comparison
                parts.append(
                    f"pass {i} ({r.source_str}): {c.detail or f'{c.mismatched}/{c.total} out of tolerance'}"
                )
        if not parts and not self.cache_path_tested:
            parts.append("never loaded from the cache")
        return "; ".join(parts)

    def to_json(self) -> dict:
        return {
            "name": self.case.name,
            "kernel": self.case.kernel,
            "dtype": self.case.dtype,
            "exercises": self.case.exercises,
            "status": self.status,
            "ok": self.ok,
            "max_abs": _finite(self.max_abs),
            "max_rel": _finite(self.max_rel),
            "tolerance": self.case.tolerance.to_json(),
            "cache_path_tested": self.cache_path_tested,
            "passes": [r.to_json() for r in self.runs],
            "detail": self.detail(),
        }


@dataclasses.dataclass(frozen=True)
class CanaryReport:
    kernels: tuple[KernelResult, ...]
    cache_dir: str
    scratch: bool
    cache_manager: str | None
    device: dict
    quarantined: int = 0
    notes: tuple[str, ...] = ()
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return all(k.ok for k in self.kernels) and bool(self.kernels)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def counts(self) -> dict:
        out = {"pass": 0, "FAIL": 0, "skipped": 0}
        for k in self.kernels:
            out[k.status] += 1
        return out

    def summary_line(self) -> str:
        c = self.counts
        where = "scratch cache (guarded)" if self.scratch else f"cache {self.cache_dir}"
        q = f" · {self.quarantined} quarantined" if self.quarantined else ""
        dev = self.device.get("name") or "GPU"
        cc = self.device.get("capability")
        cc_s = f" (sm_{cc[0]}{cc[1]})" if cc else ""
        return (
            f"{c['pass']} passed · {c['FAIL']} failed · {c['skipped']} skipped · {len(self.kernels[0].runs) if self.kernels else 0}"
            f" passes · {where} · {dev}{cc_s}{q} · {self.elapsed:.1f}s"
        )

    def to_json(self) -> dict:
        """The report's fields (the CLI adds its envelope: schema, tool, command)."""
        return {
            "ok": self.ok,
            "cache_dir": self.cache_dir,
            "scratch": self.scratch,
            "cache_manager": self.cache_manager,
            "device": self.device,
            "quarantined": self.quarantined,
            "counts": self.counts,
            "notes": list(self.notes),
            "kernels": [k.to_json() for k in self.kernels],
            "elapsed_s": round(self.elapsed, 3),
        }


def merge_passes(passes: list[list[KernelRun]], battery=BATTERY) -> tuple[KernelResult, ...]:
    """One :class:`KernelResult` per battery item from each pass's runs (a run missing from a pass is an error)."""
    out = []
    for case in battery:
        runs = []
        for i, p in enumerate(passes, 1):
            run = next((r for r in p if r.name == case.name), None)
            runs.append(run or KernelRun(case.name, error=f"no result in pass {i}"))
        out.append(KernelResult(case, tuple(runs)))
    return tuple(out)


def table_rows(report: CanaryReport) -> list[tuple[str, ...]]:
    """Rows for the table: kernel, dtype, what it exercises, each pass's source, largest errors, status, details."""
    rows: list[tuple[str, ...]] = []
    for k in report.kernels:
        src = "/".join("-" if r.skipped else r.source_str for r in k.runs)
        skipped = k.status == "skipped"
        rows.append(
            (
                k.case.name,
                k.case.dtype,
                k.case.exercises,
                src,
                "-" if skipped else _num(k.max_abs),
                "-" if skipped else _num(k.max_rel),
                k.status,
                k.detail(),
            )
        )
    return rows


TABLE_HEADER = (
    "KERNEL",
    "DTYPE",
    "EXERCISES",
    "PASSES",
    "MAX ABS ERR",
    "MAX REL ERR",
    "STATUS",
    "DETAILS",
)


# ---------------------------------------------------------------- the GPU worker (one pass, one process)


class NoGPU(JitwardenError):
    """The worker found no usable CUDA GPU (or no torch/Triton)."""


# ---------------------------------------------------------------- the parent: passes in fresh processes


class PassFailed(JitwardenError):
    """A worker process ended without a result (a crash inside the GPU runtime, a timeout)."""


def count_entries(cache_dir: str) -> int:
    """Triton cache entries (directories holding a ``__grp__*.json``) directly under ``cache_dir``."""
    n = 0
    try:
        names = os.listdir(cache_dir)
    except OSError:
        return 0
    for name in names:
        p = os.path.join(cache_dir, name)
        try:
            if os.path.isdir(p) and any(f.startswith("__grp__") for f in os.listdir(p)):
                n += 1
        except OSError:
            pass
    return n


def count_quarantined(cache_dir: str) -> int:
    from jitwarden.model.layout import QUARANTINE_DIR

    try:
        return len(os.listdir(os.path.join(cache_dir, QUARANTINE_DIR)))
    except OSError:
        return 0


def worker_env(cache_dir: str, manager: str | None, base=None) -> dict:
    env = dict(os.environ if base is None else base)
    env["TRITON_CACHE_DIR"] = cache_dir
    if manager:
        env["TRITON_CACHE_MANAGER"] = manager
    else:
        env.pop("TRITON_CACHE_MANAGER", None)
    pkg_parent = os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    )  # src/, above jitwarden/ops/
    env["PYTHONPATH"] = pkg_parent + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_pass(env: dict, timeout: float = 900.0, stderr_sink=None) -> dict:
    """One pass of the battery in a fresh Python process; returns the worker's document."""
    cmd = [sys.executable, "-m", "jitwarden.ops.canary_worker", "--worker"]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PassFailed(f"the worker did not finish within {timeout:.0f} s") from None
    if stderr_sink is not None:
        for line in p.stderr.splitlines():
            if line.startswith("jitwarden:"):
                stderr_sink(line)
    doc = worker_result(p.stdout)
    if doc is None:
        tail = " | ".join(p.stderr.strip().splitlines()[-3:])
        raise PassFailed(
            f"the worker exited with status {p.returncode} and no result: {tail or 'no output'}"
        )
    return doc


def worker_result(stdout: str) -> dict | None:
    """The worker's document: the first line of ``stdout`` that starts with :data:`MARKER`, read with the
    bounded JSON reader (pure); None when there is no such line. A result that is not a JSON object we
    read (too deep, too large, malformed: the worker's process may be anyone's) raises :class:`PassFailed`."""
    for line in stdout.splitlines():
        if line.startswith(MARKER):
            try:
                doc = jsonlimits.loads(line[len(MARKER) :])
            except ValueError as exc:
                raise PassFailed(
                    f"the worker's result is not JSON jitwarden reads: {exc}"
                ) from None
            if not isinstance(doc, dict):
                raise PassFailed(
                    f"the worker's result is a JSON {type(doc).__name__}, not an object"
                )
            return doc
    return None


def run_passes(
    cache_dir: str, scratch: bool, manager: str | None, passes: int = 2, stderr_sink=None
) -> CanaryReport:
    """Run the battery ``passes`` times, each in a fresh process, through ``cache_dir``.

    Raises :class:`NoGPU` when the first worker finds no GPU, torch or Triton.
    """
    start = time.perf_counter()
    env = worker_env(cache_dir, manager)
    q0 = count_quarantined(cache_dir)
    docs, notes = [], []
    device: dict = {}
    for i in range(passes):
        before = count_entries(cache_dir)
        try:
            doc = run_pass(env, stderr_sink=stderr_sink)
        except PassFailed as exc:
            notes.append(f"pass {i + 1}: {exc}")
            docs.append([KernelRun(c.name, error=f"worker died: {exc}") for c in BATTERY])
            continue
        if "no_gpu" in doc:
            raise NoGPU(doc["no_gpu"])
        device = doc.get("device", device)
        if not doc.get("listener"):
            notes.append("this Triton has no compilation listener: cache hits are not reported")
        docs.append([KernelRun.from_json(r) for r in doc["runs"]])
        added = count_entries(cache_dir) - before
        if i > 0 and added > 0:
            notes.append(
                f"pass {i + 1} wrote {added} new cache entries: some kernels were compiled again, not loaded"
            )
    kernels = merge_passes(docs)
    return CanaryReport(
        kernels,
        cache_dir,
        scratch,
        manager,
        device,
        count_quarantined(cache_dir) - q0,
        tuple(dict.fromkeys(notes)),
        time.perf_counter() - start,
    )
