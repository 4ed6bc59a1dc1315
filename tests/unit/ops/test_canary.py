"""``jitwarden canary`` on a machine without a GPU: the no-GPU path, and the comparison and
reporting logic on real tensors computed on the CPU with torch.

The GPU path itself (compiling and launching the battery, the cache-hit pass) is proven by
the H200 run in ``docs/gpu_proof.md``, not imitated here.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os

import pytest
import torch

from jitwarden.cli.main import main
from jitwarden.ops import canary, canary_worker
from jitwarden.ops.canary import BATTERY, CASES, CanaryReport, Comparison, KernelRun, Tolerance
from jitwarden.ops.canary_worker import compare

# ---------------------------------------------------------------- the no-GPU path


def test_no_gpu_exits_2_with_one_clear_line(capsys):
    assert not torch.cuda.is_available()  # the CI machine; on a GPU box this test is not meaningful
    assert main(["canary"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert (
        lines[0].startswith("jitwarden: error: canary needs a CUDA GPU: ")
        and "no CUDA GPU" not in lines[0]
    )
    assert "torch" in lines[0]


def test_no_gpu_with_cache_leaves_the_cache_untouched(tmp_path, capsys):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "keep.txt").write_text("x")
    assert main(["canary", "--cache", str(cache), "--format", "json"]) == 2
    assert sorted(os.listdir(cache)) == ["keep.txt"]
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_scratch_cache_is_removed_after_a_no_gpu_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    assert main(["canary"]) == 2
    assert [p for p in os.listdir(tmp_path) if p.startswith("jitwarden-canary-")] == []


def test_missing_torch_or_triton_is_a_usage_error(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    assert main(["canary"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jitwarden: error: canary needs torch and Triton")
    assert "torch is not installed" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["canary", "--cache", "/nonexistent/jw-canary"], "no such directory"),
        (["canary", "--guard"], "--guard goes with --cache"),
        (["canary", "--passes", "0"], "--passes must be 1 or more"),
    ],
)
def test_bad_arguments(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_worker_reports_no_gpu_as_a_document():
    env = canary.worker_env("/nonexistent-cache", None)
    doc = canary.run_pass(env, timeout=300)
    assert set(doc) == {"no_gpu"}
    assert "no CUDA GPU" in doc["no_gpu"]


@pytest.mark.parametrize(
    "line, why",
    [
        (
            "[" * 100_000 + "]" * 100_000,
            "nested deeper than",
        ),  # json.loads: RecursionError out of the parent
        ('{"runs": [1, 2', "not JSON jitwarden reads"),
        ("[]", "a JSON list, not an object"),
    ],
)
def test_a_hostile_worker_result_is_a_failed_pass(line, why):
    with pytest.raises(canary.PassFailed, match=why):
        canary.worker_result(f"noise\n{canary.MARKER}{line}\n")


def test_worker_result_is_the_marked_line():
    assert canary.worker_result(f'x\n{canary.MARKER}{{"no_gpu": "none"}}\n') == {"no_gpu": "none"}
    assert canary.worker_result("no marker here\n") is None


def test_module_imports_no_torch_or_triton():
    import subprocess
    import sys

    code = "import sys, jitwarden.ops.canary, jitwarden.cli.commands.canary; print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=canary.worker_env("/x", None),
    ).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------- comparison on real CPU tensors


def _inputs(name):
    return canary_worker.make_inputs(CASES[name], "cpu", seed=0)


def test_add_seed_failure_is_caught():
    """The seed's corruption: a cubin computing x - y under the key of x + y."""
    case = CASES["add"]
    inp = _inputs("add")
    ref = canary_worker.reference(case, inp)
    assert compare(inp["x"] + inp["y"], ref, case.tolerance).ok
    bad = compare(inp["x"] - inp["y"], ref, case.tolerance)
    assert not bad.ok
    assert bad.max_abs == pytest.approx(float((2 * inp["y"]).abs().max()), rel=1e-6)
    assert bad.mismatched > 0.99 * bad.total


@pytest.mark.parametrize(
    "name", ["rowsum", "softmax", "dot-fp16", "dot-bf16", "fp8-e4m3", "atomic-hist"]
)
def test_cpu_result_within_tolerance(name):
    """Each case computed honestly on the CPU in its own dtype passes against the float64 reference."""
    case = CASES[name]
    inp = _inputs(name)
    if name == "rowsum":
        out = inp["x"].sum(dim=1)
    elif name == "softmax":
        x = inp["x"]
        e = torch.exp(x - x.max(dim=1, keepdim=True).values)
        out = e / e.sum(dim=1, keepdim=True)
    elif name.startswith("dot-"):
        out = (inp["a"].float() @ inp["b"].float()).to(
            inp["a"].dtype
        )  # fp32 accumulate, stored in the dtype
    elif name == "fp8-e4m3":
        out = inp["x"].to(torch.float8_e4m3fn).to(torch.float32)
    else:
        out = torch.zeros(canary.N_BINS, dtype=torch.int32)
        out.index_add_(0, inp["x"].long(), torch.ones_like(inp["x"]))
    c = compare(out, canary_worker.reference(case, inp), case.tolerance)
    assert c.ok, c
    assert c.total == canary_worker.reference(case, inp).numel()


@pytest.mark.parametrize(
    "name, wrong",
    [
        ("rowsum", lambda i: i["x"][:, :-1].sum(dim=1)),  # a reduction that drops the masked tail
        ("softmax", lambda i: torch.softmax(i["x"], dim=0)),  # over the wrong axis
        ("dot-fp16", lambda i: (i["a"].float() @ i["b"].float().flip(0)).half()),  # K order swapped
        ("dot-bf16", lambda i: (i["a"].float() @ i["b"].float() * 1.05).bfloat16()),  # 5% off
        (
            "fp8-e4m3",
            lambda i: i["x"].to(torch.float8_e5m2).to(torch.float32),
        ),  # the other fp8 format
        (
            "atomic-hist",
            lambda i: torch.bincount(i["x"].long() // 2 * 2, minlength=canary.N_BINS).int(),
        ),  # lost updates
    ],
)
def test_wrong_kernels_fail(name, wrong):
    case = CASES[name]
    inp = _inputs(name)
    c = compare(wrong(inp), canary_worker.reference(case, inp), case.tolerance)
    assert not c.ok
    assert c.mismatched > 0
    assert c.max_abs > case.tolerance.atol


def test_tolerance_boundary():
    tol = Tolerance(0.5, 0.125)
    ref = torch.tensor([10.0, 0.0, -4.0], dtype=torch.float64)
    assert compare(
        ref + torch.tensor([1.75, 0.5, -1.0], dtype=torch.float64), ref, tol
    ).ok  # exactly at the limit
    c = compare(ref + torch.tensor([1.76, 0.0, 0.0], dtype=torch.float64), ref, tol)
    assert not c.ok and c.mismatched == 1
    assert c.max_abs == pytest.approx(1.76, rel=1e-9)
    assert c.max_rel == pytest.approx(0.176, rel=1e-9)


def test_nan_and_inf():
    tol = Tolerance(1e-3, 1e-3)
    ref = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    assert compare(ref.clone(), ref, tol).ok  # NaN where NaN is expected, the same infinity
    c = compare(torch.tensor([1.0, float("nan"), float("inf"), float("nan")]), ref, tol)
    assert not c.ok and c.mismatched == 1 and math.isinf(c.max_abs)
    c = compare(
        torch.tensor([1.0, 0.0, float("inf"), 2.0]), ref, tol
    )  # a number where NaN was expected
    assert not c.ok and c.mismatched == 1
    c = compare(
        torch.tensor([1.0, float("nan"), 1e30, 2.0]), ref, tol
    )  # finite where inf was expected
    assert not c.ok
    assert c.to_json()["max_abs"] is None  # JSON has no infinity
    assert Comparison.from_json(c.to_json()).max_abs == math.inf


def test_shape_mismatch():
    c = compare(torch.zeros(3), torch.zeros(4), Tolerance(0, 0))
    assert not c.ok and "shape" in c.detail


def test_compare_accepts_low_precision_dtypes_exactly():
    ref = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    c = compare(ref.to(torch.bfloat16), ref, Tolerance(0, 0))
    assert c.ok and c.max_abs == 0


# ---------------------------------------------------------------- reporting


def _run(name, out_fn, hit):
    case = CASES[name]
    inp = _inputs(name)
    return KernelRun(
        name, hit, compare(out_fn(inp), canary_worker.reference(case, inp), case.tolerance)
    )


def _report(pass1, pass2, **kw):
    kernels = canary.merge_passes([pass1, pass2])
    return CanaryReport(
        kernels, "/tmp/c", True, canary.MANAGER, {"name": "CPU test", "capability": [9, 0]}, **kw
    )


def _good_passes():
    p1 = [_run("add", lambda i: i["x"] + i["y"], False)]
    p2 = [_run("add", lambda i: i["x"] + i["y"], True)]
    others = [KernelRun(c.name, skipped="not on this test") for c in BATTERY if c.name != "add"]
    return p1 + others, p2 + others


def test_report_all_pass():
    rep = _report(*_good_passes())
    assert rep.ok and rep.exit_code == 0
    add = next(k for k in rep.kernels if k.case.name == "add")
    assert add.status == "pass" and add.cache_path_tested and add.detail() == ""
    assert rep.counts == {"pass": 1, "FAIL": 0, "skipped": len(BATTERY) - 1}
    row = next(r for r in canary.table_rows(rep) if r[0] == "add")
    assert row[3] == "compiled/cache" and row[4] == "0" and row[6] == "pass"


def test_report_wrong_on_cache_hit_fails():
    p1, p2 = _good_passes()
    p2[0] = _run("add", lambda i: i["x"] - i["y"], True)  # right when compiled, wrong when loaded
    rep = _report(p1, p2)
    assert not rep.ok and rep.exit_code == 1
    add = next(k for k in rep.kernels if k.case.name == "add")
    assert add.status == "FAIL"
    assert add.detail().startswith("pass 2 (cache): ")
    assert add.max_abs > 1.0
    doc = json.loads(json.dumps(rep.to_json()))
    assert doc["ok"] is False and doc["counts"]["FAIL"] == 1
    k = next(k for k in doc["kernels"] if k["name"] == "add")
    assert [p["cache_hit"] for p in k["passes"]] == [False, True]
    assert [p["ok"] for p in k["passes"]] == [True, False]
    assert KernelRun.from_json(k["passes"][1]) == p2[0]


def test_report_errors_missing_runs_and_uncached():
    p1, p2 = _good_passes()
    p2 = [r for r in p2 if r.name != "add"]  # the second pass never reported the kernel
    rep = _report(p1, p2)
    add = next(k for k in rep.kernels if k.case.name == "add")
    assert add.status == "FAIL" and "no result in pass 2" in add.detail()
    p1, p2 = _good_passes()
    p2[0] = KernelRun("add", True, error="RuntimeError: CUDA error: no kernel image is available")
    add = next(k for k in _report(p1, p2).kernels if k.case.name == "add")
    assert add.status == "FAIL" and "no kernel image" in add.detail()
    p1, p2 = _good_passes()
    p2[0] = dataclasses_replace(p2[0], cache_hit=False)
    add = next(k for k in _report(p1, p2).kernels if k.case.name == "add")
    assert add.status == "pass" and add.detail() == "never loaded from the cache"


def dataclasses_replace(obj, **kw):
    import dataclasses

    return dataclasses.replace(obj, **kw)


def test_skipped_fp8_does_not_fail():
    p1, p2 = _good_passes()
    rep = _report(p1, p2)
    fp8 = next(k for k in rep.kernels if k.case.name == "fp8-e4m3")
    assert fp8.status == "skipped" and fp8.ok
    row = next(r for r in canary.table_rows(rep) if r[0] == "fp8-e4m3")
    assert row[4] == "-" and row[6] == "skipped"


def test_cli_prints_table_and_json_from_a_report(monkeypatch, capsys):
    """The command's rendering and exit code, with the GPU passes replaced by a report built on the CPU."""
    p1, p2 = _good_passes()
    p2[0] = _run("add", lambda i: i["x"] - i["y"], True)
    monkeypatch.setattr(
        canary, "run_passes", lambda *a, **k: _report(p1, p2, quarantined=1, notes=("a note",))
    )
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    assert main(["canary"]) == 1
    out = capsys.readouterr().out
    assert "KERNEL" in out and "MAX ABS ERR" in out
    line = next(line for line in out.splitlines() if line.startswith("add "))
    assert "FAIL" in line and "compiled/cache" in line and "pass 2 (cache)" in line
    assert "1 quarantined" in out and "note a note" in out
    assert main(["canary", "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == 2 and doc["tool"]["name"] == "jitwarden" and doc["command"] == "canary"
    assert doc["ok"] is False and doc["counts"]["FAIL"] == 1 and doc["quarantined"] == 1
