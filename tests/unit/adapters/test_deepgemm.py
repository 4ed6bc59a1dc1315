"""DeepGEMM adapter on caches laid out as DeepGEMM writes them, with real cubins (Triton, on the CPU).

DeepGEMM cannot run here (it needs a Hopper/Blackwell GPU and nvcc), so the fixture follows its source:
deepseek-ai/DeepGEMM ``csrc/jit/compiler.hpp`` (``Compiler()``: ``$DG_JIT_CACHE_DIR`` else ``$HOME/.deep_gemm``;
``build()``: ``cache/kernel.<name>.<hex digest>/`` with ``kernel.cu`` + ``kernel.cubin``, compiled in
``tmp/<uuid>/`` and renamed whole), ``csrc/jit/kernel_runtime.hpp`` (``check_validity``: both files
required), ``csrc/jit/device_runtime.hpp`` (``get_arch``: ``sm_120f`` for every 12.x); and for the
PyPI 1.0.0 layout ``deep_gemm/jit/compiler.py`` (``DG_CACHE_DIR``, ``kernel.cu``/``kernel.args``/``kernel.so``,
``tmp/nvcc.tmp.<uuid>.<hash>.so``) and ``deep_gemm/jit/runtime.py`` (``is_path_valid``).
The cubins are real sm_80/sm_90a/sm_120a kernels compiled by Triton's ptxas; the ``.so`` is a real g++ build.
"""

from __future__ import annotations

import os
import shutil

import pytest

from jitwarden.adapters import deepgemm
from tests.helpers import otherkinds as ok

KCU = "// Includes' hash value: 5a4f\n#include <deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh>\n"
NAME = {
    80: "kernel.sm80_gemm.0123456789abcdef",
    90: "kernel.sm90_fp8_gemm_1d2d.9f3c2a1b7d6e5f40",
    120: "kernel.sm100_bf16_gemm.aa55aa55aa55aa55",
}


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    d = tmp_path_factory.mktemp("dg_arts")
    a = ok.triton_artifacts(str(d), (80, 90, 120))
    a["so"] = ok.gxx_so(str(d / "so"), "kernel")
    return a


@pytest.fixture
def dg(arts, tmp_path):
    """A ``.deep_gemm`` root with one complete kernel per arch."""
    root = tmp_path / ".deep_gemm"
    for arch, name in NAME.items():
        d = root / "cache" / name
        d.mkdir(parents=True)
        (d / "kernel.cu").write_text(KCU)
        shutil.copy(arts[arch]["cubin"], d / "kernel.cubin")
    (root / "tmp").mkdir()
    return str(root)


def test_complete_kernels_judged_by_cubin_sm(dg, capsys):
    rc, doc = ok.verify(capsys, dg, "--target", "90")
    assert doc["caches"][0]["kind"] == "deepgemm"
    c = ok.codes(doc)
    assert c == {
        f"cache/{NAME[80]}": ["foreign-arch"],
        f"cache/{NAME[90]}": [],
        f"cache/{NAME[120]}": ["foreign-arch"],
    }
    e = next(e for e in doc["entries"] if e["id"] == f"cache/{NAME[90]}")
    assert (
        e["cubin_sm"] == 90
        and e["name"] == "sm90_fp8_gemm_1d2d"
        and e["extra"]["hash"] == "9f3c2a1b7d6e5f40"
    )
    assert rc == 0


def test_family_cubin_serves_the_whole_family(dg, capsys):
    """get_arch compiles sm_120f for a 12.1 GPU too: the sm_120 cubin is reachable there, the sm_90 one is not."""
    rc, doc = ok.verify(capsys, dg, "--target", "121")
    c = ok.codes(doc)
    assert c[f"cache/{NAME[120]}"] == [] and c[f"cache/{NAME[90]}"] == ["foreign-arch"]


def test_half_entries_are_incomplete(dg, capsys):
    os.remove(os.path.join(dg, "cache", NAME[90], "kernel.cubin"))
    os.remove(os.path.join(dg, "cache", NAME[80], "kernel.cu"))
    rc, doc = ok.verify(capsys, dg, "--target", "90")
    c = ok.codes(doc)
    assert c[f"cache/{NAME[90]}"] == ["incomplete"] and c[f"cache/{NAME[80]}"] == [
        "foreign-arch",
        "incomplete",
    ]
    assert rc == 1


def test_truncated_cubin_is_corrupt_and_host_elf_is_mismatch(dg, arts, capsys):
    ok.truncate(os.path.join(dg, "cache", NAME[90], "kernel.cubin"), 0.3)
    shutil.copy(arts["so"]["so"], os.path.join(dg, "cache", NAME[80], "kernel.cubin"))
    rc, doc = ok.verify(capsys, dg, "--target", "90")
    c = ok.codes(doc)
    assert (
        c[f"cache/{NAME[90]}"] == ["corrupt"] and c[f"cache/{NAME[80]}"] == ["mismatch"] and rc == 1
    )


def test_ptx_dump_contradicting_cubin_is_mismatch(dg, arts, capsys):
    """DG_JIT_DUMP_PTX writes kernel.ptx beside the cubin; another target there means the files were mixed."""
    shutil.copy(arts[90]["ptx"], os.path.join(dg, "cache", NAME[90], "kernel.ptx"))
    shutil.copy(arts[80]["ptx"], os.path.join(dg, "cache", NAME[120], "kernel.ptx"))
    rc, doc = ok.verify(capsys, dg, "--target", "90")
    c = ok.codes(doc)
    assert c[f"cache/{NAME[90]}"] == [] and c[f"cache/{NAME[120]}"] == ["foreign-arch", "mismatch"]


def test_tmp_leftovers_are_orphans_only_when_old(dg, arts, capsys):
    young = os.path.join(dg, "tmp", "0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9")
    old = os.path.join(dg, "tmp", "11111111-2222-3333-4444-555555555555")
    for d in (young, old):
        os.makedirs(d)
        open(os.path.join(d, "kernel.cu"), "w").write(KCU)
        shutil.copy(arts[90]["cubin"], os.path.join(d, "kernel.cubin"))
    legacy = os.path.join(
        dg, "tmp", "nvcc.tmp.6b1d0c2e-aaaa-bbbb-cccc-000000000000.0123456789ab.so"
    )
    shutil.copy(arts["so"]["so"], legacy)
    ok.set_age(old, 7200)
    ok.set_age(legacy, 7200)
    rc, doc = ok.verify(capsys, dg, "--target", "90")
    c = ok.codes(doc)
    assert c[f"tmp/{os.path.basename(young)}"] == []
    assert c[f"tmp/{os.path.basename(old)}"] == ["orphan"] and c[
        f"tmp/{os.path.basename(legacy)}"
    ] == ["orphan"]


def test_legacy_so_layout(dg, arts, capsys):
    """DeepGEMM 1.0.0: kernel.cu + kernel.args + kernel.so (always sm_90a); kernel.args is never evaluated."""
    d = os.path.join(dg, "cache", "kernel.gemm_fp8_fp8_bf16_nt.2f4e6a8c0b1d")
    os.makedirs(d)
    open(os.path.join(d, "kernel.cu"), "w").write(KCU)
    open(os.path.join(d, "kernel.args"), "w").write(
        "__import__('os')._exit(3)"
    )  # proves nothing is eval'd
    shutil.copy(arts["so"]["so"], os.path.join(d, "kernel.so"))
    rid = "cache/kernel.gemm_fp8_fp8_bf16_nt.2f4e6a8c0b1d"
    rc, doc = ok.verify(capsys, dg, "--target", "90")
    assert ok.codes(doc)[rid] == []
    assert next(e for e in doc["entries"] if e["id"] == rid)["type"] == "kernel-so"
    rc, doc = ok.verify(capsys, dg, "--target", "100")
    assert ok.codes(doc)[rid] == ["foreign-arch"]
    ok.set_machine(os.path.join(d, "kernel.so"), ok.EM_AARCH64)
    rc, doc = ok.verify(capsys, dg, "--target", "90")
    assert ok.codes(doc)[rid] == ["foreign-arch"]
    os.remove(os.path.join(d, "kernel.so"))
    rc, doc = ok.verify(capsys, dg, "--target", "90")
    assert ok.codes(doc)[rid] == []  # young: maybe compiling now
    ok.set_age(d, 7200)
    rc, doc = ok.verify(capsys, dg, "--target", "90")
    assert ok.codes(doc)[rid] == ["incomplete"]


def test_unsafe_permissions_and_links(dg, tmp_path, capsys):
    os.chmod(os.path.join(dg, "cache", NAME[90], "kernel.cubin"), 0o666)
    os.symlink(str(tmp_path), os.path.join(dg, "cache", "kernel.evil.00000000deadbeef"))
    rc, doc = ok.verify(capsys, dg, "--target", "90")
    c = ok.codes(doc)
    assert (
        c[f"cache/{NAME[90]}"] == ["unsafe"]
        and c["cache/kernel.evil.00000000deadbeef"] == ["unsafe"]
        and rc == 1
    )


def test_discovery(tmp_path):
    home = tmp_path / "home"
    (home / ".deep_gemm").mkdir(parents=True)
    assert [(r.path, r.source) for r in deepgemm.discover_roots({"HOME": str(home)})] == [
        (str(home / ".deep_gemm"), "default")
    ]
    (tmp_path / "jit").mkdir()
    (tmp_path / "old").mkdir()
    env = {
        "HOME": str(home),
        "DG_JIT_CACHE_DIR": str(tmp_path / "jit"),
        "DG_CACHE_DIR": str(tmp_path / "old"),
    }
    assert [r.source for r in deepgemm.discover_roots(env)] == [
        "DG_JIT_CACHE_DIR",
        "DG_CACHE_DIR",
        "default",
    ]
    env["DG_JIT_CACHE_DIR"] = ""  # compiler.hpp: an empty value is ignored
    assert [r.source for r in deepgemm.discover_roots(env)] == ["DG_CACHE_DIR", "default"]
    assert not deepgemm.looks_like_root(str(home / ".deep_gemm"))  # empty: nothing says DeepGEMM
    (home / ".deep_gemm" / "cache").mkdir()
    assert deepgemm.looks_like_root(str(home / ".deep_gemm"))


def test_clean_quarantines_broken_entries_and_old_leftovers(dg, capsys):
    os.remove(os.path.join(dg, "cache", NAME[90], "kernel.cubin"))
    old = os.path.join(dg, "tmp", "11111111-2222-3333-4444-555555555555")
    os.makedirs(old)
    ok.set_age(old, 7200)
    plan, outcomes = ok.clean_codes(dg, "deepgemm", ("incomplete", "orphan"))
    assert sorted(a.id for a in plan.actions) == [
        f"cache/{NAME[90]}",
        "tmp/11111111-2222-3333-4444-555555555555",
    ]
    assert [o.status for o in outcomes] == ["quarantined", "quarantined"]
    assert not os.path.exists(old) and not os.path.exists(os.path.join(dg, "cache", NAME[90]))
    rc, doc = ok.verify(capsys, dg, "--target", "90")
    assert rc == 0 and len(doc["entries"]) == 2


def test_rebuild_leaves_deepgemm_alone(dg, capsys):
    """``verify --rebuild`` re-assembles Triton entries; a DeepGEMM cubin has no Triton metadata to rebuild from."""
    rc, doc = ok.verify(capsys, dg, "--target", "90", "--rebuild")
    assert ok.codes(doc)[f"cache/{NAME[90]}"] == [] and rc == 0
    assert next(e for e in doc["entries"] if e["id"] == f"cache/{NAME[90]}")["type"] == "cubin"
