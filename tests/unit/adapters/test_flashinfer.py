"""FlashInfer adapter on workspaces laid out as FlashInfer writes them, with real host objects (g++).

FlashInfer's JIT needs nvcc and a GPU, so the fixture follows its source (``pip download flashinfer-python``):
0.7.4 ``flashinfer/jit/env.py`` (``FLASHINFER_WORKSPACE_BASE`` else ``Path.home()``; workspace
``<base>/.cache/flashinfer/<__version__>/<archs>/``, ``cached_ops/``, ``generated/``),
``flashinfer/compilation_context.py`` (``_normalize_cuda_arch``: ``90a``, ``120f``, ``121a``),
``flashinfer/jit/core.py`` (``JitSpecNvcc.build_dir``/``jit_library_path``: ``cached_ops/<name>/<name>.so``;
``get_tmpdir``: ``cached_ops/tmp`` for locks), ``flashinfer/jit/cpp_ext.py`` (``generate_ninja_build_for_op``:
the ``build.ninja`` text and object names below); 0.2.0.post1 and 0.2.5 ``flashinfer/jit/env.py`` for the
unversioned ``<base>/.cache/flashinfer/<archs>/cached_ops/<name>/`` layout (``80_90``, ``noarch``) and
``cached_ops/<name>.lock``.
"""

from __future__ import annotations

import os
import shutil

import pytest

from jitwarden.adapters import flashinfer
from tests.helpers import otherkinds as ok

VERSION = "0.7.4"

NINJA = """ninja_required_version = 1.3
name = {name}
cuda_home = /usr/local/cuda
cxx = c++
nvcc = $cuda_home/bin/nvcc
cxx_launcher =
nvcc_launcher =

common_cflags = -DTVM_FFI_INCLUDE -isystem $cuda_home/include
cflags = $common_cflags -O3 -std=c++17
post_cflags =
cuda_cflags = $common_cflags $
    --expt-relaxed-constexpr $
{gencode}    -O3 $
    -std=c++17 $
    -DFLASHINFER_ENABLE_FP8_E8M0
cuda_post_cflags =
cuda_arch_flags = {arch_flags}
ldflags = -shared -L$cuda_home/lib64 -L$cuda_home/lib64/stubs -lcudart -lcuda

rule compile
  command = $cxx_launcher $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags
  depfile = $out.d
  deps = gcc

rule cuda_compile
  command = $nvcc_launcher $nvcc --generate-dependencies-with-compile -MF $out.d $cuda_cflags -c $in -o $out $cuda_post_cflags
  depfile = $out.d
  deps = gcc

rule link
  command = $cxx $in $ldflags -o $out

build {dir}/{name}/norm_norm.cuda.o: cuda_compile /site-packages/flashinfer/data/csrc/norm.cu
build {dir}/{name}/{name}.so: link {dir}/{name}/norm_norm.cuda.o
default {dir}/{name}/{name}.so
"""


def gencode(*targets: str) -> tuple[str, str]:
    flags = [f"-gencode=arch=compute_{t},code=sm_{t}" for t in targets]
    return "".join(f"    {f} $\n" for f in flags), " ".join(flags)


def make_op(ws_dir, name: str, so_src: str, targets: tuple[str, ...]) -> str:
    d = os.path.join(ws_dir, "cached_ops", name)
    os.makedirs(d)
    shutil.copy(so_src, os.path.join(d, f"{name}.so"))
    shutil.copy(so_src.replace(".so", ".o"), os.path.join(d, "norm_norm.cuda.o"))
    g, a = gencode(*targets)
    with open(os.path.join(d, "build.ninja"), "w") as f:
        f.write(
            NINJA.format(name=name, gencode=g, arch_flags=a, dir=os.path.join(ws_dir, "cached_ops"))
        )
    return d


@pytest.fixture(scope="module")
def so(tmp_path_factory):
    return ok.gxx_so(str(tmp_path_factory.mktemp("fi_so")), "op")["so"]


@pytest.fixture
def fi(so, tmp_path):
    """``<base>/.cache/flashinfer`` with a 0.7.4 workspace for sm_90a and one for sm_120f, and their locks."""
    root = tmp_path / "base" / ".cache" / "flashinfer"
    for archs, targets in (("90a", ("90a",)), ("120f", ("120f",))):
        ws = root / VERSION / archs
        make_op(str(ws), "norm", so, targets)
        (ws / "cached_ops" / "tmp").mkdir()
        (ws / "cached_ops" / "tmp" / "norm.lock").write_text("")
        (ws / "generated").mkdir(parents=True)
        (ws / "generated" / "batch_prefill_config.inc").write_text("#define HEAD_DIM 128\n")
    (root / "cubins").mkdir()
    return str(root)


def judged(root: str, target: int, version: str | None = VERSION) -> tuple[dict, dict]:
    """(codes by id, entries by id) of ``root`` judged for sm_``target`` with FlashInfer ``version`` installed.

    The CLI reads the installed version from dist metadata (none here), so the scanner is called with a judge.
    """
    import dataclasses

    from jitwarden.model.entries import CacheRoot
    from jitwarden.ops import scan

    j = scan.make_judge(target)
    if version:
        j = dataclasses.replace(
            j,
            versions=tuple(v for v in j.versions if v[0] != "flashinfer")
            + (("flashinfer", version),),
        )
    report = scan.scan(
        [(CacheRoot(kind="flashinfer", path=root, source="cli"), None)],
        j,
        scan.Target(target, "cli"),
    )
    es = {e.id: e for e in report.entries}
    return {i: sorted(f.code for f in e.findings) for i, e in es.items()}, es


def test_versioned_workspaces_judged_by_arch(fi, capsys):
    rc, doc = ok.verify(capsys, fi, "--target", "90")
    assert doc["caches"][0]["kind"] == "flashinfer"
    c = ok.codes(doc)
    assert c == {
        f"{VERSION}/90a/cached_ops/norm": [],
        f"{VERSION}/90a/generated": [],
        f"{VERSION}/120f/cached_ops/norm": ["foreign-arch"],
        f"{VERSION}/120f/generated": ["foreign-arch"],
    }, c
    e = next(e for e in doc["entries"] if e["id"] == f"{VERSION}/90a/cached_ops/norm")
    assert e["type"] == "op" and e["name"] == "norm" and e["arch"] == 90
    assert e["extra"]["gencode"] == ["sm_90a"] and e["extra"]["version"] == VERSION
    assert rc == 0
    rc, doc = ok.verify(capsys, fi, "--target", "121")
    assert (
        ok.codes(doc)[f"{VERSION}/120f/cached_ops/norm"] == []
    )  # sm_120f runs on the whole 12.x family
    assert ok.codes(doc)[f"{VERSION}/90a/cached_ops/norm"] == ["foreign-arch"]


def test_other_version_and_unversioned_layout_are_stale(fi, so):
    make_op(os.path.join(fi, "0.6.1", "90a"), "norm", so, ("90a",))
    make_op(os.path.join(fi, "80_90"), "norm", so, ("80", "90"))
    os.makedirs(os.path.join(fi, "noarch", "cached_ops"))
    open(
        os.path.join(fi, "80_90", "cached_ops", "norm.lock"), "w"
    ).close()  # 0.2.x lock beside the op dir
    c, es = judged(fi, 90)
    assert c["0.6.1/90a/cached_ops/norm"] == ["stale"] and c["80_90/cached_ops/norm"] == ["stale"]
    assert c[f"{VERSION}/90a/cached_ops/norm"] == []
    assert (
        es["80_90/cached_ops/norm"].facts.layout == "unversioned"
        and "80_90/cached_ops/norm.lock" not in c
    )
    c, _ = judged(fi, 90, "0.2.5")  # 0.2.x itself reads the unversioned layout
    assert c["80_90/cached_ops/norm"] == [] and c[f"{VERSION}/90a/cached_ops/norm"] == ["stale"]
    c, _ = judged(fi, 90, None)  # nothing installed: nothing to compare with
    assert c["0.6.1/90a/cached_ops/norm"] == [] and c["80_90/cached_ops/norm"] == []


def test_build_ninja_for_another_arch_is_mismatch(fi, so, capsys):
    make_op(os.path.join(fi, VERSION, "90a"), "rope", so, ("90a", "100a"))
    make_op(
        os.path.join(fi, VERSION, "107a"), "gemm", so, ("100f",)
    )  # SM107 builds sm_100f: named by its family
    rc, doc = ok.verify(capsys, fi, "--target", "90")
    c = ok.codes(doc)
    assert c[f"{VERSION}/90a/cached_ops/rope"] == ["mismatch"] and c[
        f"{VERSION}/107a/cached_ops/gemm"
    ] == ["foreign-arch"]
    assert rc == 1


def test_truncated_and_foreign_so(fi, capsys):
    d = os.path.join(fi, VERSION, "90a", "cached_ops", "norm")
    ok.truncate(os.path.join(d, "norm.so"))
    rc, doc = ok.verify(capsys, fi, "--target", "90")
    assert ok.codes(doc)[f"{VERSION}/90a/cached_ops/norm"] == ["corrupt"] and rc == 1
    d = os.path.join(fi, VERSION, "120f", "cached_ops", "norm")
    ok.set_machine(os.path.join(d, "norm.so"), ok.EM_AARCH64)
    rc, doc = ok.verify(capsys, fi, "--target", "120")
    assert ok.codes(doc)[f"{VERSION}/120f/cached_ops/norm"] == ["foreign-arch"]


def test_op_without_so_is_incomplete_only_when_old(fi, capsys):
    d = os.path.join(fi, VERSION, "90a", "cached_ops", "norm")
    os.remove(os.path.join(d, "norm.so"))
    rc, doc = ok.verify(capsys, fi, "--target", "90")
    assert ok.codes(doc)[f"{VERSION}/90a/cached_ops/norm"] == []
    ok.set_age(d, 7200)
    rc, doc = ok.verify(capsys, fi, "--target", "90")
    assert ok.codes(doc)[f"{VERSION}/90a/cached_ops/norm"] == ["incomplete"] and rc == 1


def test_unsafe(fi, tmp_path, capsys):
    d = os.path.join(fi, VERSION, "90a", "cached_ops")
    os.chmod(os.path.join(d, "norm", "build.ninja"), 0o666)
    os.symlink(str(tmp_path), os.path.join(d, "evil"))
    rc, doc = ok.verify(capsys, fi, "--target", "90")
    c = ok.codes(doc)
    assert c[f"{VERSION}/90a/cached_ops/norm"] == ["unsafe"] and c[
        f"{VERSION}/90a/cached_ops/evil"
    ] == ["unsafe"]
    assert rc == 1


def test_discovery(tmp_path):
    home = tmp_path / "home"
    (home / ".cache" / "flashinfer").mkdir(parents=True)
    assert [r.source for r in flashinfer.discover_roots({"HOME": str(home)})] == ["default"]
    (tmp_path / "ws" / ".cache" / "flashinfer").mkdir(parents=True)
    env = {"HOME": str(home), "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "ws")}
    roots = flashinfer.discover_roots(env)
    assert [(r.path, r.source) for r in roots] == [
        (str(tmp_path / "ws" / ".cache" / "flashinfer"), "FLASHINFER_WORKSPACE_BASE"),
        (str(home / ".cache" / "flashinfer"), "default"),
    ]
    assert flashinfer.looks_like_root(roots[0].path)


def test_clean_quarantines_broken_and_foreign(fi, capsys):
    d = os.path.join(fi, VERSION, "90a", "cached_ops", "norm")
    ok.truncate(os.path.join(d, "norm.so"))
    plan, outcomes = ok.clean_codes(fi, "flashinfer", ("corrupt", "foreign-arch"))
    assert sorted(a.id for a in plan.actions) == sorted(
        [
            f"{VERSION}/90a/cached_ops/norm",
            f"{VERSION}/120f/cached_ops/norm",
            f"{VERSION}/120f/generated",
        ]
    )
    assert {o.status for o in outcomes} == {"quarantined"}
    assert not os.path.exists(d) and not os.path.exists(
        os.path.join(fi, VERSION, "120f", "generated")
    )
    rc, doc = ok.verify(capsys, fi, "--target", "90")
    assert rc == 0 and ok.codes(doc) == {f"{VERSION}/90a/generated": []}
