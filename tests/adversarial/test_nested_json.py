"""JSON nested 100,000 deep in every file jitwarden parses: a finding on that entry (never an
internal error), and the scan goes on to the other entries."""

from __future__ import annotations

import json
import os

import pytest

from jitwarden.store import quarantine as q
from jitwarden.store import seal
from tests.adversarial.adv import clean_failure, jw, tree_hash

DEEP = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJ = b'{"a":' * 100_000 + b"1" + b"}" * 100_000


def test_loads_limits_depth_and_size():
    from jitwarden.formats import jsonlimits

    _limits(jsonlimits)


def _limits(jsonlimits):
    for doc in (DEEP, DEEP_OBJ, b'{"s": "[[[[' + b"[" * 10_000 + b'"}'):
        try:
            jsonlimits.loads(doc)
        except ValueError:
            pass
    assert jsonlimits.loads(b'{"s": "' + b"[" * 10_000 + b'"}') == {
        "s": "[" * 10_000
    }  # brackets in strings are text
    assert jsonlimits.loads(b'{"a": [1, {"b": "\\"]"}]}') == {"a": [1, {"b": '"]'}]}
    with pytest.raises(ValueError, match="deeper"):
        jsonlimits.loads(DEEP)
    with pytest.raises(ValueError, match="deeper"):
        jsonlimits.loads(DEEP_OBJ)
    with pytest.raises(ValueError):
        jsonlimits.loads(b"1" * 100, max_bytes=10)


def _entries(root, env):
    p = jw("verify", root, "--target", "90", "--format", "json", env=env)
    clean_failure(p)
    assert "RecursionError" not in p.stderr
    return p, {e["id"]: e for e in json.loads(p.stdout)["entries"]}


@pytest.mark.parametrize("which", ["metadata", "group", "seal"])
def test_nested_triton_files(acache, env, which):
    root, recs = acache
    e = recs["add_sm90"]
    names = [n for n in os.listdir(e["path"]) if not n.startswith(".jitwarden")]
    seal.write(e["path"], seal.compute(e["path"], names))
    target = {
        "metadata": f"{e['name']}.json",
        "group": f"__grp__{e['name']}.json",
        "seal": ".jitwarden-seal.json",
    }[which]
    with open(os.path.join(e["path"], target), "wb") as f:
        f.write(DEEP)
    p, entries = _entries(root, env)
    assert len(entries) == len(recs)
    assert entries[e["id"]]["findings"], entries[e["id"]]
    if (
        which == "seal"
    ):  # a seal that does not authenticate is no seal, and no damage (issue 32): unsealed
        assert {f["code"] for f in entries[e["id"]]["findings"]} == {"unrecognised"}
    before = tree_hash(root)
    for args in (
        ("ls", root, "--target", "90"),
        ("clean", root, "--target", "90", "--dry-run"),
        ("doctor", root, "--target", "90"),
    ):
        p = jw(*args, env=env)
        clean_failure(p)
        if args[0] != "doctor" and (args[0], which) != ("clean", "seal"):
            assert e["id"][:8] in p.stdout, (args, p.stdout)  # listed, not skipped
    assert tree_hash(root) == before


def test_nested_quarantine_record(acache, env):
    root, recs = acache
    rec = q.move(recs["add_sm90"]["path"], "test", root=root)
    with open(os.path.join(rec.path, q.RECORD), "wb") as f:
        f.write(DEEP)
    p = jw("quarantine", "ls", "--root", root, "--format", "json", env=env)
    clean_failure(p, 0)
    assert len(json.loads(p.stdout)["quarantined"]) == 1
    p = jw("quarantine", "restore", rec.id, "--root", root, "-y", env=env)
    clean_failure(p)
    home = recs["add_sm90"]["path"]
    if p.returncode == 0:  # restored where it came from, whole
        assert os.path.isdir(home) and not os.path.lexists(rec.path), p.stderr
    else:  # refused: the slot and its entry are still there, nothing half-moved
        assert os.path.isdir(rec.path) and not os.path.lexists(home), p.stderr
    clean_failure(jw("clean", root, "--target", "90", "-y", env=env))
    assert os.path.isdir(home) or any(r.present for r in q.list_root(root))  # never lost


def test_nested_partition_info(tmp_path, env):
    from jitwarden.store import partition

    base = str(tmp_path / "base")
    part = partition.path_for(base, "a" * 16)
    os.makedirs(part)
    with open(os.path.join(part, ".jitwarden-partition.json"), "wb") as f:
        f.write(DEEP)
    assert partition.read_info(part) is None
    before = tree_hash(base)
    clean_failure(jw("prune", base, "--older-than", "0s", "--dry-run", env=env))
    clean_failure(jw("ls", base, env=env), 0)
    assert tree_hash(base) == before  # a dry run and a listing change nothing


def test_nested_best_config(tmp_path):
    from jitwarden.adapters import inductor as ind
    from jitwarden.model.entries import Judge

    cache = str(tmp_path / "inductor")
    os.makedirs(os.path.join(cache, "ab"))
    with open(os.path.join(cache, "ab", "cabk.best_config"), "wb") as f:
        f.write(DEEP)
    e = ind.inspect_entry(cache, "ab/cabk.best_config", Judge(target_arch=None), os.getuid())
    assert e.findings and all(f.code != "unsafe" for f in e.findings)


def test_nested_cache_key_factors(tmp_path):
    from jitwarden.adapters import vllm as vl
    from jitwarden.model.entries import Judge

    root = str(tmp_path / "vllm")
    prefix = os.path.join(root, "torch_compile_cache", "3f9c0a1b2d", "rank_0_0", "backbone")
    os.makedirs(prefix)
    with open(os.path.join(prefix, "cache_key_factors.json"), "wb") as f:
        f.write(DEEP)
    with open(os.path.join(prefix, "vllm_compile_cache.py"), "w") as f:
        f.write("{}\n")
    e = vl.inspect_entry(
        root,
        "torch_compile_cache/3f9c0a1b2d/rank_0_0/backbone",
        Judge(target_arch=None),
        os.getuid(),
    )
    assert any("cache_key_factors.json" in f.message for f in e.findings), e.findings
