"""The CPU-runnable parts of ``benchmarks/gpu_proof.py``'s ``firstuse`` step, on real kernels and real ptxas.

The GPU run needs a same-named substitute that only a rebuild can tell apart, and a way to put it
inside an FX-graph bundle: both are built here from real Triton entries compiled on the CPU.
"""

from __future__ import annotations

import os
import pickle
import shutil
import sys

import pytest

from jitwarden.adapters import triton as tri
from jitwarden.runtime import proof
from tests.helpers.guarded import compile_jobs
from tests.helpers.paths import BENCHMARKS

sys.path.insert(0, BENCHMARKS)
import gpu_proof


@pytest.fixture(scope="module")
def stock(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("gp") / "cache")
    out = compile_jobs(root, guarded=False)
    return root, {k: v for k, v in out.items() if k != "_stderr"}


def test_mutated_ptx_keeps_the_kernel_and_changes_its_arithmetic(stock):
    root, out = stock
    with open(os.path.join(root, out["add_sm90"]["id"], "add_kernel.ptx")) as f:
        ptx = f.read()
    mutated, n = gpu_proof.mutate_ptx(ptx)
    assert n >= 1 and "sub.f32" in mutated and ".entry add_kernel" in mutated
    assert gpu_proof.mutate_ptx(mutated)[1] == 0


def test_same_named_substitute_passes_the_structure_and_fails_the_proof(stock, tmp_path):
    root, out = stock
    entry = os.path.join(root, out["add_sm90"]["id"])
    sub = gpu_proof.same_named_substitute(entry)
    assert sub is not None and sub["name"] == "add_kernel" and sub["cubin"] != sub["original"]
    assert sub["same_length"]  # swappable inside a pickle byte for byte
    from tests.helpers import kernels

    copy = os.path.join(kernels.copy_cache(root, str(tmp_path / "c")), out["add_sm90"]["id"])
    with open(os.path.join(copy, "add_kernel.cubin"), "wb") as f:
        f.write(sub["cubin"])
    errors, kind = tri.structural_errors(copy)
    assert errors == [] and kind == "kernel"
    pr = proof.prove_many([copy])[copy]
    assert pr.state == proof.REFUTED, pr


def test_substitute_inside_a_pickled_bundle_and_clear_the_kernel_dirs(stock, tmp_path):
    pytest.importorskip("torch")
    from torch._inductor.triton_bundler import (
        TritonBundle,
        TritonKernelArtifact,
        TritonKernelArtifacts,
    )

    root, out = stock
    entry = os.path.join(root, out["add_sm90"]["id"])
    sub = gpu_proof.same_named_substitute(entry)
    arts = [
        TritonKernelArtifact(n, open(os.path.join(entry, n), "rb").read())
        for n in sorted(os.listdir(entry))
    ]
    pk = tmp_path / "fxgraph" / "ab" / "key" / "graph"
    pk.parent.mkdir(parents=True)
    pk.write_bytes(
        pickle.dumps(TritonBundle([TritonKernelArtifacts(out["add_sm90"]["id"], 0, arts)], []))
    )
    assert gpu_proof.files_holding(str(tmp_path / "fxgraph"), sub["original"]) == [str(pk)]
    changed = gpu_proof.substitute_in_files(
        str(tmp_path / "fxgraph"), sub["original"], sub["cubin"]
    )
    assert changed == [str(pk)]
    back = pickle.loads(pk.read_bytes())
    cubin = next(
        a.payload for a in back.kernel_artifacts[0].artifacts if a.filename.endswith(".cubin")
    )
    assert cubin == sub["cubin"]
    tree = str(tmp_path / "triton")
    shutil.copytree(root, tree)
    n = len(gpu_proof._kernel_entries(tree))
    assert n and gpu_proof.clear_triton_dirs(tree) == n and gpu_proof._kernel_entries(tree) == []


def test_the_firstuse_section_renders_from_the_data():
    s = {
        "schema": 1,
        "firstuse": {
            "triton": {
                "stock_tampered": {
                    "rc": 0,
                    "result": [2.0, 2.0, 2.0],
                    "cmd": "python combine.py add",
                },
                "guarded": {
                    "rc": 0,
                    "result": [4.0, 4.0, 4.0],
                    "quarantine_lines": 1,
                    "jitwarden_lines": ["jitwarden: x"],
                    "cmd": "JITWARDEN_PARTITION=0 jitwarden run -- python combine.py add",
                },
                "guarded_again": {
                    "rc": 0,
                    "result": [4.0, 4.0, 4.0],
                    "quarantine_lines": 0,
                    "jitwarden_lines": [],
                },
            },
            "cost": {
                "mode": "max-autotune-no-cudagraphs",
                "widths": "768",
                "all_correct": True,
                "proof": {"line": "proved 3 of 3"},
                "aggregate": {
                    "kernels": 300,
                    "cold_wall_s": 60.0,
                    "stock_warm_wall_s": 5.0,
                    "guarded_first_wall_s": 8.0,
                    "guarded_warm_wall_s": 5.1,
                    "first_use_extra_s": 3.0,
                    "first_use_ratio_to_cold": 0.05,
                    "proof_s_ratio_to_cold": 0.04,
                    "warm_ratio": 1.02,
                },
            },
        },
    }
    md = gpu_proof.render_md(s)
    assert "## 6. First use of unsealed kernels" in md and "**0.050**" in md and "**1.020**" in md
    assert any("First use of a 300-kernel stock cache: 0.05" in h for h in gpu_proof.headlines(s))
