"""Issue 44: a recorded workload's kernel list (``run --record``), ``coverage`` before a start, and
always-miss with its cause, on real Triton compiles (explicit ``GPUTarget``) through the real guard."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from tests.helpers import guarded, kernels
from tests.helpers.cli import jw

JOBS5 = kernels.jobs_for(
    archs=(90,), variants=kernels.VARIANTS[:5]
)  # add, add_b256, sub, add_debug, add_nofma
ADD = [j for j in guarded.JOBS if j["label"] == "add_sm90"]


def _start(env, name, jobs, kdir=None, extra=None, verbose=False):
    """One start of the workload ``name``: ``jitwarden run --record NAME`` of a real guarded compile."""
    e = dict(
        env, JW_KERNEL_DIR=kdir or guarded.kernel_dir(), JW_JOBS=json.dumps(jobs), **(extra or {})
    )
    r = jw(
        "run",
        *(["-v"] if verbose else []),
        "--record",
        name,
        "--",
        sys.executable,
        "-c",
        guarded.DRIVER,
        env=e,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def _record(env, name):
    top = os.path.join(env["XDG_CACHE_HOME"], "jitwarden", "records")
    (digest,) = os.listdir(top)
    with open(os.path.join(top, digest, f"{name}.jsonl")) as f:
        return digest, [json.loads(line) for line in f]


def _coverage(env, *args):
    r = jw("coverage", *args, "--format", "json", env=env)
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def _triton_partition(env, digest):
    return os.path.join(env["HOME"], ".triton", "cache", "jitwarden-v1", digest)


def test_record_and_coverage(tmp_path):
    env = guarded.clean_env(tmp_path)
    _start(env, "svc", JOBS5)
    _start(env, "svc", JOBS5)  # warm: every kernel a hit
    digest, lines = _record(env, "svc")
    assert [ln["event"] for ln in lines] == ["compile"] * 5 + ["hit"] * 5
    assert len({ln["start"] for ln in lines}) == 2
    assert all(ln["kind"] == "triton" and ln["seconds"] > 0 for ln in lines[:5])
    assert {ln["name"] for ln in lines} == {"add_kernel", "sub_kernel", "fma_kernel"}
    part = _triton_partition(env, digest)
    assert {ln["key"] for ln in lines} <= set(os.listdir(part))

    rc, doc = _coverage(env, "svc")  # this node's own cache
    assert (rc, doc["percent"], doc["proven"], doc["missing"]) == (0, 100, 5, 0), doc

    empty = tmp_path / "empty"
    empty.mkdir()
    rc, doc = _coverage(env, "svc", "--cache", str(empty))
    assert (rc, doc["percent"], doc["missing"]) == (5, 0, 5), doc
    cold = sum(ln["seconds"] for ln in lines[:5])
    assert abs(doc["compile_seconds"] - cold) < 0.01
    assert "5 will compile" in doc["line"]

    # a bundle carries the list; another node judges it before installing anything
    bundle = tmp_path / "b.tar"
    r = jw("export", "-o", str(bundle), "--unsigned", "--kind", "triton", env=env)
    assert r.returncode == 0, r.stderr
    (tmp_path / "node2").mkdir()
    other = guarded.clean_env(tmp_path / "node2")
    rc, doc = _coverage(other, "svc", str(bundle))
    assert (rc, doc["percent"], doc["unproven"], doc["missing"]) == (6, 100, 5, 0), doc
    assert not os.path.exists(os.path.join(other["HOME"], ".triton")), "nothing installed"
    r = jw("import", str(bundle), "--allow-unsigned", env=other)
    assert r.returncode == 0, r.stderr
    rc, doc = _coverage(other, "svc")  # learned with the import: no record of its own
    assert (rc, doc["percent"], doc["kernels"]) == (0, 100, 5), doc

    gone = sorted({ln["key"] for ln in lines})[:3]  # a node whose cache lost 3 entries
    for key in gone:
        shutil.rmtree(os.path.join(part, key))
    rc, doc = _coverage(env, "svc")
    assert (rc, doc["percent"], doc["missing"]) == (5, 40, 3), doc
    assert sorted(k["key"] for k in doc["missing_kernels"]) == gone
    table = jw("coverage", "svc", env=env)
    assert table.returncode == 5 and "40% of 5 kernels ready; 3 will compile" in table.stdout
    assert all(key in table.stdout for key in gone)


def test_unknown_workload_is_a_usage_error(tmp_path):
    env = guarded.clean_env(tmp_path)
    r = jw("coverage", "nothing-recorded", env=env, in_process=True)
    assert r.returncode == 2 and "no record of workload" in r.stderr and "Traceback" not in r.stderr


def _edited_kernel_dir(tmp_path) -> str:
    """The test kernels with one comment line added above ``add_kernel``: a new source hash, the same code."""
    d = tmp_path / "edited"
    d.mkdir()
    src = kernels.KERNEL_SOURCE.replace(
        "@triton.jit\ndef add_kernel",
        "# a comment that moves add_kernel one line down\n@triton.jit\ndef add_kernel",
    )
    assert src != kernels.KERNEL_SOURCE
    (d / "jw_test_kernels.py").write_text(src)
    return str(d)


def _always_miss(env):
    r = jw("doctor", "--format", "json", env=env)
    doc = json.loads(r.stdout)
    return [p for p in doc["problems"] if p["code"] == "always-miss"]


def test_always_miss_names_the_env_var(tmp_path):
    env = guarded.clean_env(tmp_path)
    _start(env, "fp", ADD)
    _start(env, "fp", ADD, extra={"TRITON_DEFAULT_FP_FUSION": "0"})
    _start(env, "fp", ADD, extra={"TRITON_DEFAULT_FP_FUSION": "1"})
    (p,) = _always_miss(env)
    assert (
        "add_kernel compiled 3 times in 3 starts: only TRITON_DEFAULT_FP_FUSION differs (unset,"
        in p["message"]
    )
    assert "TRITON_DEFAULT_FP_FUSION" in p["fix"]
    r = _start(
        env, "fp", ADD, extra={"TRITON_DEFAULT_FP_FUSION": "1"}, verbose=True
    )  # run -v says it too
    assert "always-miss: triton: add_kernel compiled 3 times" in r.stderr


def test_always_miss_names_the_option(tmp_path):
    env = guarded.clean_env(tmp_path)
    for warps in (2, 4, 8):
        _start(env, "warps", [dict(ADD[0], options={"num_warps": warps})])
    (p,) = _always_miss(env)
    assert "only num_warps differs (2, 4, 8)" in p["message"], p
    r = jw("run", "-v", "--record", "warps", "--", sys.executable, "-c", "pass", env=env)
    assert "only num_warps differs (2, 4, 8)" in r.stderr


def test_always_miss_names_a_source_edit_that_keeps_the_code(tmp_path):
    env = guarded.clean_env(tmp_path)
    _start(env, "src", ADD)
    _start(env, "src", ADD, kdir=_edited_kernel_dir(tmp_path))
    (p,) = _always_miss(env)
    assert "only the kernel's source text differs, not the code it compiles to" in p["message"], p


def test_stable_workload_has_no_always_miss(tmp_path):
    env = guarded.clean_env(tmp_path)
    jobs = guarded.JOBS  # add_kernel twice (two BLOCKs: two keys in one start), sub_kernel
    _start(env, "stable", jobs)
    _start(env, "stable", jobs)
    assert _always_miss(env) == []


def test_coverage_of_a_registry_reference_reads_its_signed_config_before_any_pull(tmp_path):
    """Issue 44 item 2 with a real registry: a signed push carries the workload's list in its signed config, and
    a fresh node's ``coverage NAME REF`` reads the index and that config only (the layer is deleted from the
    registry's storage first): every kernel held under a trusted signature (exit 0), nothing installed."""
    from tests.helpers import registry as reghelp

    exe = reghelp.binary()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("no docker-registry on PATH (.ci/run installs it)")
        pytest.skip("no docker-registry on PATH")
    reg = reghelp.Registry(exe, str(tmp_path / "registry"))
    try:
        keys = tmp_path / "keys"
        keys.mkdir()
        signing = {
            "JITWARDEN_SIGNING_KEY": str(keys / "builder"),
            "JITWARDEN_TRUSTED_KEYS": str(keys / "builder.pub"),
        }
        env = dict(guarded.clean_env(tmp_path), **signing)
        assert jw("keygen", env=env).returncode == 0
        _start(env, "svc", JOBS5)
        ref = f"{reg.host}/kernels/svc:v1"
        r = jw("push", ref, "--insecure", "--kind", "triton", env=env)
        assert r.returncode == 0, r.stderr
        (tmp_path / "node").mkdir()
        node = dict(
            guarded.clean_env(tmp_path / "node"), JITWARDEN_TRUSTED_KEYS=str(keys / "builder.pub")
        )
        # the layer gone from the registry's storage: what coverage reads is the index and the signed config only
        blobs = sorted(reg.blobs(), key=os.path.getsize)
        sizes = [os.path.getsize(b) for b in blobs]
        assert sizes[-1] > 4 * sizes[-2], (
            sizes
        )  # the layer: the configs, manifests and signature are KBs
        os.remove(blobs[-1])
        rc, doc = _coverage(node, "svc", ref, "--insecure")
        # a bundle signed by a trusted key is installed sealed: every kernel ready
        assert (rc, doc["percent"], doc["kernels"], doc["proven"], doc["missing"]) == (
            0,
            100,
            5,
            5,
            0,
        ), doc
        assert not os.path.exists(os.path.join(node["HOME"], ".triton")), "nothing installed"
    finally:
        reg.stop()


def test_coverage_for_another_node_by_its_fingerprint(tmp_path):
    """``--target FINGERPRINT.json`` (issue 44, item 4): what a bundle would warm on another node, judged here
    from that node's saved fingerprint: its own fingerprint gives this node's answer, another GPU's none."""
    env = guarded.clean_env(tmp_path)
    _start(env, "svc", JOBS5)
    bundle = tmp_path / "b.tar"
    assert (
        jw("export", "-o", str(bundle), "--unsigned", "--kind", "triton", env=env).returncode == 0
    )
    r = jw("fingerprint", "--format", "json", env=env)
    assert r.returncode == 0, r.stderr
    mine = json.loads(r.stdout)
    (tmp_path / "same.json").write_text(r.stdout)
    other = dict(mine, driver=dict(mine["driver"], version="999.99"))
    (tmp_path / "other.json").write_text(json.dumps(other))

    rc, doc = _coverage(env, "svc", str(bundle), "--target", str(tmp_path / "same.json"))
    assert (rc, doc["percent"], doc["unproven"]) == (6, 100, 5), doc  # as this node: held, unsealed

    r = jw(
        "coverage",
        "svc",
        str(bundle),
        "--target",
        str(tmp_path / "other.json"),
        "--format",
        "json",
        env=env,
    )
    doc = json.loads(r.stdout)
    assert (r.returncode, doc["percent"], doc["missing"]) == (5, 0, 5), doc
    assert "the target node" in r.stderr and "would install none of it" in r.stderr, r.stderr

    rc, doc = _coverage(env, "svc", "--target", str(tmp_path / "other.json"))
    assert (rc, doc["percent"]) == (5, 0), doc  # no partition here for that fingerprint
    assert "this machine's partitions for the target node" in doc["source"], doc

    (tmp_path / "bad.json").write_text("{")
    r = jw("coverage", "svc", "--target", str(tmp_path / "bad.json"), env=env)
    assert r.returncode == 2 and "bad.json" in r.stderr and "Traceback" not in r.stderr
