"""The TorchInductor adapter on a real Inductor cache made by the CPU torch, and on damaged copies of it.

Layouts followed (torch 2.13): ``torch/_inductor/codecache.py`` (``get_path``: ``<basename[1:3]>/<basename>.<ext>``;
``FxGraphCache._get_tmp_dir_for_key``: ``fxgraph/<key[1:3]>/<key>/``; ``write_atomic``: ``.<pid>.<tid>.tmp``;
``CacheBase.get_local_cache_path``: ``cache/<system hash>``), ``_functorch/_aot_autograd/autograd_cache.py``
(``aotautograd/<key>/``), ``runtime/autotune_cache.py`` (``<hash>.best_config`` JSON beside the kernel),
``runtime/cache_dir_utils.py`` (``TORCHINDUCTOR_CACHE_DIR``, else ``<gettempdir()>/torchinductor_<user>``),
``codegen/triton.py`` and ``runtime/hints.py`` (``triton_meta['device'] = DeviceProperties(..., cc=...)``).
GPU-made kernel sources are written by that layout (``inductor_real.triton_kernel_source``): this machine has no GPU.
"""

from __future__ import annotations

import json
import os
import platform
import time

import pytest

from jitwarden import adapters
from jitwarden.adapters import inductor as ind
from jitwarden.adapters import triton as tri
from jitwarden.adapters.base import expand_partitions
from jitwarden.cli.main import main
from jitwarden.model.entries import Judge
from tests.helpers import inductor_real

HOST = {"x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(
    platform.machine(), platform.machine()
)


@pytest.fixture
def cache(inductor_cache):
    return inductor_cache


def judge(arch=90, **kw):
    base = {
        "target_arch": arch,
        "host_machine": HOST,
        "now": time.time(),
        "orphan_age": 3600.0,
        "versions": (("torch", "2.13.0"),),
        "gpu_names": ("NVIDIA H200",),
        "torch_cuda": "13.0",
        "uid": os.getuid(),
    }
    base.update(kw)
    return Judge(**base)


def entries(root, j=None):
    names, _ = ind.list_entry_names(root)
    uid = os.stat(root).st_uid
    return {n: ind.inspect_entry(root, n, j or judge(), uid) for n in names}


def codes(e):
    return sorted({f.code for f in e.findings})


def first(es, pred):
    return next(n for n, e in es.items() if pred(n, e))


def test_real_cache_enumerates_every_part_and_is_clean(cache):
    es = entries(cache)
    types = {e.type for e in es.values()}
    assert {"fxgraph", "aotautograd", "output-code", "source", "library", "locks"} <= types
    assert any(n.startswith("fxgraph/") and n.count("/") == 2 for n in es)
    assert any(n.startswith("aotautograd/") and n.count("/") == 1 for n in es)
    assert all(not e.findings for e in es.values()), {
        n: e.findings for n, e in es.items() if e.findings
    }
    aot = es[first(es, lambda n, e: e.type == "aotautograd" and e.facts.fx_graphs)]
    fx_keys = aot.facts.fx_graphs
    assert fx_keys and all(f"fxgraph/{k[1:3]}/{k}" in es for k in fx_keys)
    assert all(e.kind == "inductor" and e.path == os.path.join(cache, n) for n, e in es.items())


def test_truncated_and_foreign_pickles_are_corrupt(cache):
    es = entries(cache)
    fx = first(es, lambda n, e: e.type == "fxgraph")
    (pkl,) = os.listdir(os.path.join(cache, fx))
    path = os.path.join(cache, fx, pkl)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    e = ind.inspect_entry(cache, fx, judge(), os.getuid())
    assert codes(e) == ["corrupt"] and "STOP" in e.findings[0].message
    open(path, "wb").write(b"#!/bin/sh\nrm -rf ~\n")
    e = ind.inspect_entry(
        cache, fx, judge(), os.getuid()
    )  # not a pickle: a format we do not know, not damage
    assert codes(e) == ["unrecognised"] and "not a pickle" in e.findings[0].message
    open(path, "wb").write(b"")
    assert codes(ind.inspect_entry(cache, fx, judge(), os.getuid())) == ["corrupt"]


def test_aotautograd_whose_fx_graph_is_gone_is_incomplete(cache):
    import shutil

    es = entries(cache)
    aot = first(es, lambda n, e: e.type == "aotautograd" and e.facts.fx_graphs)
    for k in es[aot].facts.fx_graphs:
        shutil.rmtree(os.path.join(cache, "fxgraph", k[1:3], k))
    e = ind.inspect_entry(cache, aot, judge(), os.getuid())
    assert codes(e) == ["incomplete"] and "missing from fxgraph/" in e.findings[0].message


def test_world_writable_file_dir_and_root_are_unsafe(cache):
    es = entries(cache)
    so = first(es, lambda n, e: e.type == "library")
    os.chmod(os.path.join(cache, so), 0o777)
    assert codes(ind.inspect_entry(cache, so, judge(), os.getuid())) == ["unsafe"]
    fx = first(es, lambda n, e: e.type == "fxgraph")
    os.chmod(os.path.join(cache, fx), 0o777)
    e = ind.inspect_entry(cache, fx, judge(), os.getuid())
    assert codes(e) == ["unsafe"] and "world-writable" in e.findings[0].message
    assert adapters.judge_root(ind, cache) == []
    os.chmod(cache, 0o777)
    (f,) = adapters.judge_root(ind, cache)
    assert f.code == "unsafe" and "runs their code" in f.message


def test_root_and_entries_owned_by_someone_else_are_unsafe(cache):
    # As root we can hand the tree to other uids; the judge takes the root's owner as the cache's owner.
    if os.getuid() != 0:
        pytest.skip("needs root to chown")
    os.chown(cache, 4343, 4343)
    (f,) = adapters.judge_root(
        ind, cache, uid=4242
    )  # a root that is not the user's (nor root's): someone else's pickles
    assert f.code == "unsafe" and "owned by uid" in f.message
    es = entries(cache)
    py = first(es, lambda n, e: e.type == "output-code")
    os.chown(cache, 4242, 4242)
    os.chown(os.path.join(cache, py), 4343, 4343)
    e = ind.inspect_entry(cache, py, judge(), 4242)
    assert codes(e) == ["unsafe"] and "uid 4343" in e.findings[0].message


def test_symlinks_out_of_the_root_are_unsafe_and_not_followed(cache, tmp_path):
    outside = tmp_path / "elsewhere.py"
    outside.write_text("import os\n")
    es = entries(cache)
    shard = first(es, lambda n, e: e.type == "output-code").split("/")[0]
    os.symlink(str(outside), os.path.join(cache, shard, "cevil.py"))
    e = ind.inspect_entry(cache, f"{shard}/cevil.py", judge(), os.getuid())
    assert (
        e.type == "link"
        and codes(e) == ["unsafe"]
        and "leaving the cache root" in e.findings[0].message
    )
    fx = first(es, lambda n, e: e.type == "fxgraph")
    os.symlink(str(outside), os.path.join(cache, fx, "zzzz"))
    e = ind.inspect_entry(cache, fx, judge(), os.getuid())
    assert "unsafe" in codes(e)


def test_generated_triton_kernels_are_judged_by_their_triton_meta(cache):
    shard = os.path.join(cache, "ab")
    os.makedirs(shard)
    name = "cabkernel0000000000000000000000000000000000000000000.py"
    src = inductor_real.triton_kernel_source(cc=90)
    open(os.path.join(shard, name), "w").write(src)
    e = ind.inspect_entry(cache, f"ab/{name}", judge(90), os.getuid())
    assert (e.type, e.name, e.arch, e.findings) == ("kernel", "triton_poi_fused_add_relu_0", 90, ())
    assert e.facts.generated_for.multi_processor_count == 132
    e = ind.inspect_entry(cache, f"ab/{name}", judge(121), os.getuid())
    assert (
        codes(e) == ["foreign-arch"]
        and "sm_90" in e.findings[0].message
        and "sm_121" in e.findings[0].message
    )
    assert ind.inspect_entry(cache, f"ab/{name}", judge(None), os.getuid()).findings == ()
    # Inductor writes triton_mm templates without a final newline: that alone is no damage.
    open(os.path.join(shard, name), "w").write(src.rstrip("\n"))
    assert ind.inspect_entry(cache, f"ab/{name}", judge(90), os.getuid()).findings == ()
    # Cut mid-way (a write that was not atomic, a full disk): the source stops mid-statement.
    for cut in (src.index("@triton.jit") + 14, src.index("triton_meta=") + 30):
        open(os.path.join(shard, name), "w").write(src[:cut])
        e = ind.inspect_entry(cache, f"ab/{name}", judge(90), os.getuid())
        assert codes(e) == ["corrupt"] and "truncated" in e.findings[0].message, cut
    # The same kernel made on a GB10 (cc 121) is foreign to an H200.
    open(os.path.join(shard, name), "w").write(inductor_real.triton_kernel_source(cc=121, sms=48))
    assert codes(ind.inspect_entry(cache, f"ab/{name}", judge(90), os.getuid())) == ["foreign-arch"]


def test_best_config_and_local_cache(cache):
    shard = os.path.join(cache, "ab")
    os.makedirs(shard, exist_ok=True)
    good = {
        "XBLOCK": 1024,
        "num_warps": 4,
        "num_stages": 1,
        "configs_hash": "c0ffee",
        "found_by_coordesc": False,
        "time_taken_ms": 12,
        "triton_cache_hash": "UQW2ZBXLO3U7V4OHQNTWMPEA4KPBJ6Q5T7HJD3ZV6CDPUDDK4LTA",
    }
    open(os.path.join(shard, "cabk.best_config"), "w").write(json.dumps(good))
    e = ind.inspect_entry(cache, "ab/cabk.best_config", judge(), os.getuid())
    assert (
        e.type == "autotune"
        and not e.findings
        and e.facts.triton_cache_hash == good["triton_cache_hash"]
    )
    open(os.path.join(shard, "cabk.best_config"), "w").write(json.dumps(good)[:-9])
    assert codes(ind.inspect_entry(cache, "ab/cabk.best_config", judge(), os.getuid())) == [
        "corrupt"
    ]
    os.makedirs(os.path.join(cache, "cache"), exist_ok=True)
    doc = {
        "system": {
            "device": {"name": "NVIDIA H100 80GB HBM3"},
            "version": {"triton": "3.6.0", "cuda": "12.8"},
            "hash": "ab12",
        },
        "cache": {},
    }
    open(os.path.join(cache, "cache", "ab12"), "w").write(json.dumps(doc))
    e = ind.inspect_entry(cache, "cache/ab12", judge(), os.getuid())
    assert e.type == "local-cache" and codes(e) == ["stale"] and len(e.findings) == 2
    doc["system"]["device"]["name"], doc["system"]["version"]["cuda"] = "NVIDIA H200", "13.0"
    open(os.path.join(cache, "cache", "ab12"), "w").write(json.dumps(doc))
    assert ind.inspect_entry(cache, "cache/ab12", judge(), os.getuid()).findings == ()
    assert "cache/ab12" in ind.list_entry_names(cache)[0]


def test_old_temp_files_are_orphans_and_fresh_ones_are_not(cache):
    es = entries(cache)
    fx = first(es, lambda n, e: e.type == "fxgraph")
    tmp = os.path.join(cache, fx, ".4242.139872.tmp")
    open(tmp, "wb").write(b"\x80\x04\x95")
    assert ind.inspect_entry(cache, fx, judge(), os.getuid()).findings == ()
    old = time.time() - 7200
    os.utime(tmp, (old, old))
    e = ind.inspect_entry(cache, fx, judge(), os.getuid())
    assert codes(e) == ["orphan"]


def test_cpu_library_for_another_host_is_foreign(cache):
    es = entries(cache)
    so = first(es, lambda n, e: e.type == "library")
    other = "aarch64" if HOST != "aarch64" else "x86_64"
    e = ind.inspect_entry(cache, so, judge(host_machine=other), os.getuid())
    assert codes(e) == ["foreign-arch"]
    data = open(os.path.join(cache, so), "rb").read()
    open(os.path.join(cache, so), "wb").write(data[:4000])
    e = ind.inspect_entry(cache, so, judge(), os.getuid())
    assert codes(e) == ["corrupt"] and "truncated" in e.findings[0].message


def test_triton_tree_is_left_to_the_triton_adapter(cache, isolated_env, monkeypatch, built_cache):
    from tests.helpers import kernels

    src, manifest = built_cache
    tree = os.path.join(cache, "triton", "0")
    kernels.copy_cache(src, tree)
    assert not any(n.startswith("triton") for n in ind.list_entry_names(cache)[0])
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", cache)
    assert tree in [r.path for r in tri.discover_roots(os.environ)]
    assert ind.looks_like_root(cache) and not ind.looks_like_root(tree)


def test_discovery_follows_inductor(tmp_path, monkeypatch):
    d = tmp_path / "explicit"
    d.mkdir()
    env = {"TORCHINDUCTOR_CACHE_DIR": str(d), "HOME": str(tmp_path)}
    (r,) = [r for r in ind.discover_roots(env) if r.source != "private"]
    assert (r.kind, r.path, r.source) == ("inductor", str(d), "TORCHINDUCTOR_CACHE_DIR")
    # Default: tempfile.gettempdir() (TMPDIR first) and getpass.getuser() (LOGNAME, USER, ...).
    tmpdir = tmp_path / "tmp"
    (tmpdir / "torchinductor_alice").mkdir(parents=True)
    env = {"TMPDIR": str(tmpdir), "USER": "alice", "HOME": str(tmp_path)}
    (r,) = ind.discover_roots(env)
    assert (r.path, r.source) == (str(tmpdir / "torchinductor_alice"), "default")
    (tmpdir / "torchinductor_bob").mkdir()
    env = {"TMPDIR": str(tmpdir), "LOGNAME": "bob", "USER": "alice", "HOME": str(tmp_path)}
    assert ind.discover_roots(env)[0].path == str(tmpdir / "torchinductor_bob")
    # Activation points TORCHINDUCTOR_CACHE_DIR at a partition: the user's root is listed, partitions expanded.
    part = d / "jitwarden-v1" / "0123456789abcdef"
    part.mkdir(parents=True)
    (r,) = [
        r
        for r in ind.discover_roots({"TORCHINDUCTOR_CACHE_DIR": str(part), "HOME": str(tmp_path)})
        if r.source != "private"
    ]
    assert r.path == str(d)
    assert [(x.path, x.partition) for x in expand_partitions(r)] == [
        (str(d), None),
        (str(part), "0123456789abcdef"),
    ]
    # jitwarden's private root
    priv = tmp_path / "jw" / "roots" / "inductor"
    priv.mkdir(parents=True)
    roots = ind.discover_roots(
        {"TORCHINDUCTOR_CACHE_DIR": str(d), "JITWARDEN_HOME": str(tmp_path / "jw")}
    )
    assert ("private", str(priv)) in [(r.source, r.path) for r in roots]


def test_cli_ls_verify_status_and_clean(cache, isolated_env, monkeypatch, capsys):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", cache)
    assert main(["verify", "--quick", "--target", "90"]) == 0
    capsys.readouterr()
    es = entries(cache)
    aot = first(es, lambda n, e: e.type == "aotautograd" and e.facts.fx_graphs)
    k = es[aot].facts.fx_graphs[0]
    fx = f"fxgraph/{k[1:3]}/{k}"
    (pkl,) = os.listdir(os.path.join(cache, fx))
    with open(os.path.join(cache, fx, pkl), "r+b") as f:
        f.truncate(100)
    assert main(["verify", "--quick", "--target", "90", "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    bad = [e for e in doc["entries"] if e["findings"]]
    assert [(e["kind"], e["id"], e["findings"][0]["code"]) for e in bad] == [
        ("inductor", fx, "corrupt")
    ]
    main(["status", "--format", "json", "--target", "90"])
    doc = json.loads(capsys.readouterr().out)
    (c,) = [c for c in doc["caches"] if c["kind"] == "inductor"]
    assert c["root"] == cache and c["entries"] == len(es)
    aot_id = es[aot].id
    assert main(["clean", "-y", "--target", "90"]) == 0
    said = capsys.readouterr()
    assert not os.path.exists(os.path.join(cache, fx))
    # The AOTAutograd entry that loaded that graph now names a missing one: the same clean shows it and takes it.
    assert "now fail because what they depend on was moved" in said.err
    assert not os.path.exists(os.path.join(cache, aot_id))
    assert main(["verify", "--quick", "--target", "90"]) == 0
    assert main(["quarantine", "list"]) == 0
    assert fx.split("/")[-1][:8] in capsys.readouterr().out
