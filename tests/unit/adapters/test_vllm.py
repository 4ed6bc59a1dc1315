"""The vLLM adapter on a cache root laid out the way vLLM's own source writes it (``tests/helpers/vllm_root.py``),
holding real torch artifacts made by the CPU torch.
"""

from __future__ import annotations

import json
import os
import pprint
import shutil
import time

import pytest

from jitwarden import adapters
from jitwarden.adapters import vllm as vl
from jitwarden.adapters.base import expand_partitions
from jitwarden.cli.main import main
from tests.helpers import inductor_real
from tests.helpers.vllm_root import (
    AOT_NEW,
    AOT_OLD,
    ART0,
    ART1,
    FI,
    PREFIX,
    RANK,
    codes,
    factors,
    judge,
)


@pytest.fixture
def root(vllm_root):
    return vllm_root


def entries(root, j=None):
    names, _ = vl.list_entry_names(root)
    return {n: vl.inspect_entry(root, n, j or judge(), os.stat(root).st_uid) for n in names}


def test_every_part_of_the_layout_is_an_entry_and_a_fresh_root_is_clean(root):
    es = entries(root)
    assert es[PREFIX].type == "compile" and es[PREFIX].name == "backbone"
    f = es[PREFIX].facts
    assert (f.vllm_version, f.system.gpu_name, f.system.cuda, f.graphs) == (
        "0.34.0",
        "NVIDIA H200",
        "13.0",
        2,
    )
    assert es[f"{AOT_NEW}/rank_0_0"].type == "aot" and es[f"{AOT_OLD}/rank_0_0"].type == "aot"
    assert es[FI].type == "flashinfer-autotune" and es[FI].name == "0.6.1/90a"
    assert es["deep_gemm/cache/kernel.fp8_gemm_nt.0123abcd"].arch == 90
    nested = [n for n in es if n.startswith(f"{RANK}/inductor_cache/")]
    assert {es[n].type for n in nested} >= {"fxgraph", "aotautograd", "library", "locks"}
    assert any(n.startswith(f"{AOT_NEW}/inductor_cache/fxgraph/") for n in es)
    assert all(es[n].kind == "vllm" and es[n].path == os.path.join(root, n) for n in es)
    assert not any("triton_cache" in n or "/triton/" in n for n in es)
    assert {n: e.findings for n, e in es.items() if e.findings} == {}


def test_another_vllm_gpu_or_cuda_is_stale(root):
    e = vl.inspect_entry(root, PREFIX, judge(versions=(("vllm", "0.35.1"),)), os.getuid())
    assert codes(e) == ["stale"] and "vLLM 0.34.0" in e.findings[0].message
    e = vl.inspect_entry(root, PREFIX, judge(gpu_names=("NVIDIA GB10",)), os.getuid())
    assert codes(e) == ["stale"] and "NVIDIA H200" in e.findings[0].message
    e = vl.inspect_entry(root, PREFIX, judge(torch_cuda="12.8"), os.getuid())
    assert codes(e) == ["stale"] and "CUDA 13.0" in e.findings[0].message
    # Same name, another device (a GB10 against a GB10 of another driver): vLLM's key cannot tell, nor can we.
    assert vl.inspect_entry(root, PREFIX, judge(driver_version="999.1"), os.getuid()).findings == ()


def test_damaged_files_are_corrupt(root):
    p = os.path.join(root, PREFIX, ART0)
    data = bytearray(open(p, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(p, "wb").write(bytes(data))
    e = vl.inspect_entry(root, PREFIX, judge(), os.getuid())
    assert codes(e) == ["corrupt"] and "CRC32" in e.findings[0].message
    open(p, "wb").write(bytes(data[:-100]))
    assert codes(vl.inspect_entry(root, PREFIX, judge(), os.getuid())) == ["corrupt"]
    shutil.copy(
        os.path.join(root, AOT_OLD, "rank_0_0", "model"), p
    )  # a pickle where an artifact belongs
    assert codes(vl.inspect_entry(root, PREFIX, judge(), os.getuid())) == ["corrupt"]
    f = os.path.join(root, PREFIX, "cache_key_factors.json")
    open(f, "w").write(json.dumps(factors())[:50])
    assert any(
        "cache_key_factors.json" in x.message
        for x in vl.inspect_entry(root, PREFIX, judge(), os.getuid()).findings
    )
    f = os.path.join(root, PREFIX, "vllm_compile_cache.py")
    open(f, "w").write("__import__('os').system('id')\n")
    e = vl.inspect_entry(root, PREFIX, judge(), os.getuid())
    assert any("not a Python literal" in x.message for x in e.findings)
    m = os.path.join(root, AOT_NEW, "rank_0_0", "model")
    open(m, "r+b").truncate(1000)
    e = vl.inspect_entry(root, f"{AOT_NEW}/rank_0_0", judge(), os.getuid())
    assert codes(e) == ["corrupt"] and "STOP" in e.findings[0].message
    # an unpacked artifact's pickles are judged as Inductor's
    (fx,) = [
        os.path.join(d, x)
        for d, _s, fs in os.walk(os.path.join(root, PREFIX, ART1, "fxgraph"))
        for x in fs
    ]
    open(fx, "r+b").truncate(64)
    assert any(
        ART1 in x.message for x in vl.inspect_entry(root, PREFIX, judge(), os.getuid()).findings
    )


def test_copied_root_points_into_the_old_tree_and_missing_artifacts_are_incomplete(root, tmp_path):
    # vLLM 0.16-0.31 load each artifact from the absolute path stored in vllm_compile_cache.py (0.32 and later
    # from <prefix>/<key>: tests/unit/adapters/test_layouts_by_release.py); the entry is judged as its installed reader loads it.
    v031 = (("torch", "2.13.0"), ("vllm", "0.31.0"))
    with open(os.path.join(root, PREFIX, "cache_key_factors.json"), "w") as f:
        json.dump(
            {"env": {}, "config_hash": "1" * 64, "code_hash": "2" * 64, "compiler_hash": "3" * 10},
            f,
        )  # 0.31's
    copy = inductor_real.copy(root, str(tmp_path / "copied"))
    e = vl.inspect_entry(copy, PREFIX, judge(versions=v031), os.getuid())
    assert codes(e) == ["foreign-path"] and "2 exist there" in e.findings[0].message
    shutil.rmtree(root)
    e = vl.inspect_entry(copy, PREFIX, judge(versions=v031), os.getuid())
    assert codes(e) == ["foreign-path"] and "0 exist there" in e.findings[0].message
    os.remove(os.path.join(copy, PREFIX, ART0))
    shutil.rmtree(os.path.join(copy, PREFIX, ART1))
    with open(os.path.join(copy, PREFIX, "vllm_compile_cache.py"), "w") as f:
        f.write(
            pprint.pformat(
                {
                    ((1, 8192), 0, "inductor_standalone"): {
                        "graph_handle": (ART0, os.path.join(copy, PREFIX, ART0)),
                        "cache_key": ART0,
                    }
                }
            )
        )
    e = vl.inspect_entry(copy, PREFIX, judge(), os.getuid())
    assert codes(e) == ["incomplete"] and ART0 in e.findings[0].message


def test_aot_half_written_and_orphans(root):
    rank = os.path.join(root, AOT_OLD, "rank_0_0")
    os.remove(os.path.join(rank, "model"))
    tmp = os.path.join(rank, "model.4242.tmp")
    open(tmp, "wb").write(b"\x80\x04")
    assert (
        vl.inspect_entry(root, f"{AOT_OLD}/rank_0_0", judge(), os.getuid()).findings == ()
    )  # being written now
    old = time.time() - 7200
    os.utime(tmp, (old, old))
    # a save that never finished: vLLM loads nothing and compiles again, so it is no damage
    assert codes(vl.inspect_entry(root, f"{AOT_OLD}/rank_0_0", judge(), os.getuid())) == ["orphan"]


def test_flashinfer_and_deepgemm(root):
    assert codes(vl.inspect_entry(root, FI, judge(100), os.getuid())) == ["foreign-arch"]
    e = vl.inspect_entry(root, FI, judge(versions=(("flashinfer", "0.6.3"),)), os.getuid())
    assert codes(e) == ["stale"]
    dg = "deep_gemm/cache/kernel.fp8_gemm_nt.0123abcd"
    assert codes(vl.inspect_entry(root, dg, judge(100), os.getuid())) == ["foreign-arch"]
    open(os.path.join(root, dg, "kernel.cubin"), "r+b").truncate(200)
    assert codes(vl.inspect_entry(root, dg, judge(90), os.getuid())) == ["corrupt"]
    open(os.path.join(root, FI, "autotune_configs.json"), "w").write("{")
    assert codes(vl.inspect_entry(root, FI, judge(90), os.getuid())) == ["corrupt"]


def test_unsafe_root_entries_and_links(root, tmp_path):
    os.chmod(os.path.join(root, PREFIX, "vllm_compile_cache.py"), 0o666)
    assert "unsafe" in codes(vl.inspect_entry(root, PREFIX, judge(), os.getuid()))
    os.symlink(str(tmp_path), os.path.join(root, "deep_gemm", "cache", "kernel.evil"))
    e = vl.inspect_entry(root, "deep_gemm/cache/kernel.evil", judge(), os.getuid())
    assert e.type == "link" and codes(e) == ["unsafe"]
    os.chmod(root, 0o777)
    (f,) = adapters.judge_root(vl, root)
    assert f.code == "unsafe"
    # a nested Inductor entry keeps the Inductor adapter's judgement, under the vLLM root
    es = entries(root)
    so = next(n for n, e in es.items() if e.type == "library")
    os.chmod(os.path.join(root, so), 0o777)
    assert codes(vl.inspect_entry(root, so, judge(), os.getuid())) == ["unsafe"]


def test_discovery_follows_vllm(tmp_path):
    home = tmp_path / "home"
    for d in (tmp_path / "explicit", tmp_path / "xdg" / "vllm", home / ".cache" / "vllm"):
        d.mkdir(parents=True)
    env = {
        "HOME": str(home),
        "VLLM_CACHE_ROOT": str(tmp_path / "explicit"),
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "JITWARDEN_HOME": str(tmp_path / "jw"),
    }
    assert [(r.path, r.source) for r in vl.discover_roots(env)] == [
        (str(tmp_path / "explicit"), "VLLM_CACHE_ROOT")
    ]
    del env["VLLM_CACHE_ROOT"]
    assert [(r.path, r.source) for r in vl.discover_roots(env)] == [
        (str(tmp_path / "xdg" / "vllm"), "XDG_CACHE_HOME")
    ]
    del env["XDG_CACHE_HOME"]
    assert [(r.path, r.source) for r in vl.discover_roots(env)] == [
        (str(home / ".cache" / "vllm"), "default")
    ]
    # under activation VLLM_CACHE_ROOT names a partition: the user's root is listed and the scanner expands it
    part = home / ".cache" / "vllm" / "jitwarden-v1" / "fedcba9876543210"
    part.mkdir(parents=True)
    env["VLLM_CACHE_ROOT"] = str(part)
    (r,) = vl.discover_roots(env)
    assert r.path == str(home / ".cache" / "vllm")
    assert [x.partition for x in expand_partitions(r)] == [None, "fedcba9876543210"]
    (tmp_path / "jw" / "roots" / "vllm").mkdir(parents=True)
    assert ("private", str(tmp_path / "jw" / "roots" / "vllm")) in [
        (r.source, r.path) for r in vl.discover_roots(env)
    ]


def test_cli_lists_verifies_and_cleans_vllm(root, isolated_env, monkeypatch, capsys):
    monkeypatch.setenv("VLLM_CACHE_ROOT", root)
    assert main(["ls", "--format", "json", "--target", "90"]) == 0
    doc = json.loads(capsys.readouterr().out)
    kinds = {e["kind"] for e in doc["entries"]}
    assert "vllm" in kinds and any(e["id"] == PREFIX for e in doc["entries"])
    assert vl.looks_like_root(root)
    data = bytearray(open(os.path.join(root, PREFIX, ART0), "rb").read())
    data[100] ^= 0xFF
    open(os.path.join(root, PREFIX, ART0), "wb").write(bytes(data))
    assert main(["verify", "--quick", "--target", "90"]) == 1
    capsys.readouterr()
    assert main(["clean", "-y", "--target", "90"]) == 0
    capsys.readouterr()
    assert not os.path.exists(os.path.join(root, PREFIX))
    assert os.path.isdir(os.path.join(root, RANK, "inductor_cache", "fxgraph"))
    assert main(["verify", "--quick", "--target", "90"]) == 0
    assert (
        main(["verify", "--quick", "--target", "90", root]) == 0
    )  # a root named on the command line is vLLM's
    capsys.readouterr()
    assert main(["quarantine", "list"]) == 0
    assert "backbone" in capsys.readouterr().out
