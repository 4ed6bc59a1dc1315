"""``doctor``: the main job, on an empty machine and on damaged real caches."""

from __future__ import annotations

import json
import os

import pytest

import kernels
from maint_helpers import cli, damage_everything


@pytest.fixture
def env(isolated_env, tmp_path):
    e = dict(os.environ)
    e["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    return e


def test_empty_machine_says_something_useful_and_exits_0(env):
    p = cli("doctor", env=env)
    assert p.returncode == 0, p.stderr
    assert "fp " in p.stdout and "no kernel caches found yet" in p.stdout
    assert "--target" in p.stdout  # no GPU here: it says how to judge for one
    assert "Traceback" not in p.stderr
    doc = json.loads(cli("doctor", "--format", "json", env=env).stdout)
    assert doc["schema"] == 1 and doc["command"] == "doctor" and doc["ok"] is True
    assert doc["caches"] == [] and doc["fingerprint_digest"]


def test_damaged_cache_every_problem_has_its_fix(built_cache, env, tmp_path):
    src, manifest = built_cache
    root = env["TRITON_CACHE_DIR"]
    kernels.copy_cache(src, root)
    recs = {j["label"]: dict(j, path=os.path.join(root, j["id"])) for j in manifest}
    outside = tmp_path / "outside"
    outside.mkdir()
    damage_everything(root, recs, str(outside))
    os.makedirs(os.path.join(root, "jitwarden-v1", "f" * 16))
    p = cli("doctor", "--target", "90", "--format", "json", env=env)
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    probs = {x["code"]: x for x in doc["problems"]}
    for code in ("corrupt", "mismatch", "incomplete", "foreign-path", "unsafe"):
        assert probs[code]["severity"] == "error" and probs[code]["fix"] == f"jitwarden clean --code {code} --target sm_90"
    assert probs["stale"]["fix"].startswith("jitwarden clean --stale")
    assert probs["orphan"]["fix"].startswith("jitwarden clean --orphans")
    assert probs["partitions"]["fix"].startswith("jitwarden prune")
    assert any(c["root"] == root for c in doc["caches"]) and doc["summary"]["errors"] == 6
    table = cli("doctor", "--target", "90", env=env)
    assert table.returncode == 1 and "fix: jitwarden clean --code corrupt --target sm_90" in table.stdout
    # the fixes do fix it
    assert cli("clean", "--target", "90", "-y", env=env).returncode == 0
    after = cli("doctor", "--target", "90", "--format", "json", env=env)
    assert after.returncode == 0 and json.loads(after.stdout)["summary"]["errors"] == 0
    assert {x["code"] for x in json.loads(after.stdout)["problems"]} >= {"quarantined"}


def test_world_writable_root_names_chmod(built_cache, env):
    src, manifest = built_cache
    root = env["TRITON_CACHE_DIR"]
    kernels.copy_cache(src, root)
    os.chmod(root, 0o777)
    p = cli("doctor", "--target", "90", "--format", "json", env=env)
    assert p.returncode == 1
    probs = [x for x in json.loads(p.stdout)["problems"] if x["code"] == "unsafe" and "world-writable" in x["message"]]
    assert probs and probs[0]["fix"] == f"chmod o-w {root}"


def test_rebuild_flag_and_bad_input(env):
    p = cli("doctor", "--rebuild", "--jobs", "0", env=env)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    p = cli("doctor", "--rebuild", env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(cli("doctor", "--rebuild", "--format", "json", env=env).stdout)["command"] == "doctor --rebuild"


def test_unsealed_kernels_point_at_a_rebuild_which_catches_a_same_named_substitute(built_cache, env, tmp_path):
    """A cubin of another kernel under the same name passes every structural check: only a rebuild tells."""
    src, manifest = built_cache
    root = env["TRITON_CACHE_DIR"]
    kernels.copy_cache(src, root)
    by = {j["label"]: os.path.join(root, j["id"]) for j in manifest}
    # the 256-wide add_kernel's cubin under the 128-wide add_kernel's key: same symbol, same arch
    import shutil

    shutil.copyfile(os.path.join(by["add_b256_sm90"], "add_kernel.cubin"), os.path.join(by["add_sm90"], "add_kernel.cubin"))
    quick = json.loads(cli("doctor", "--target", "90", "--format", "json", env=env).stdout)
    probs = {x["code"]: x for x in quick["problems"]}
    assert quick["summary"]["errors"] == 0 and probs["unsealed"]["fix"] == "jitwarden doctor --rebuild --target sm_90"
    p = cli("doctor", "--rebuild", "--target", "90", "--format", "json", env=env)
    assert p.returncode == 1
    rebuilt = {x["code"]: x for x in json.loads(p.stdout)["problems"]}
    assert rebuilt["not-reproducible"]["count"] == 1 and "unsealed" not in rebuilt
