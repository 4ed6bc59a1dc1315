"""``doctor``: the main job, on an empty machine and on damaged real caches."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import kernels
from tests.helpers.maint import cli, damage_everything
from tests.helpers.paths import DATA


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
    assert (
        doc["schema"] == 2
        and doc["command"] == "doctor"
        and doc["mode"] == "quick"
        and doc["ok"] is True
    )
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
        assert (
            probs[code]["severity"] == "error"
            and probs[code]["fix"] == f"jitwarden clean --code {code} --target sm_90"
        )
    assert probs["stale"]["fix"].startswith("jitwarden clean --stale")
    assert probs["orphan"]["fix"].startswith("jitwarden clean --orphans")
    # made just now: another environment's, in use; no prune line offered for it (tests/unit/cli/test_fix_lines.py)
    assert "partitions" not in probs and probs["partitions-recent"]["fix"] is None
    assert any(c["root"] == root for c in doc["caches"]) and doc["summary"]["errors"] == 6
    table = cli("doctor", "--target", "90", env=env)
    assert (
        table.returncode == 1
        and "fix: jitwarden clean --code corrupt --target sm_90" in table.stdout
    )
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
    probs = [
        x
        for x in json.loads(p.stdout)["problems"]
        if x["code"] == "unsafe" and "world-writable" in x["message"]
    ]
    assert probs and probs[0]["fix"] == f"chmod o-w {root}"


def test_rebuild_flag_and_bad_input(env):
    p = cli("doctor", "--rebuild", "--jobs", "0", env=env)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    p = cli("doctor", "--rebuild", env=env)
    assert p.returncode == 0, p.stderr
    doc = json.loads(cli("doctor", "--rebuild", "--format", "json", env=env).stdout)
    assert doc["command"] == "doctor" and doc["mode"] == "rebuild"


def test_unsealed_kernels_point_at_a_rebuild_which_catches_a_same_named_substitute(
    built_cache, env, tmp_path
):
    """A cubin of another kernel under the same name passes every structural check: only a rebuild tells."""
    src, manifest = built_cache
    root = env["TRITON_CACHE_DIR"]
    kernels.copy_cache(src, root)
    by = {j["label"]: os.path.join(root, j["id"]) for j in manifest}
    # the 256-wide add_kernel's cubin under the 128-wide add_kernel's key: same symbol, same arch
    import shutil

    shutil.copyfile(
        os.path.join(by["add_b256_sm90"], "add_kernel.cubin"),
        os.path.join(by["add_sm90"], "add_kernel.cubin"),
    )
    quick = json.loads(cli("doctor", "--target", "90", "--format", "json", env=env).stdout)
    probs = {x["code"]: x for x in quick["problems"]}
    assert (
        quick["summary"]["errors"] == 0
        and "`jitwarden doctor --rebuild --target sm_90`" in probs["unproven"]["fix"]
        and probs["unproven"]["count"] == quick["summary"]["verdicts"]["unproven"] > 0
    )
    p = cli("doctor", "--rebuild", "--target", "90", "--format", "json", env=env)
    assert p.returncode == 1
    rebuilt = {x["code"]: x for x in json.loads(p.stdout)["problems"]}
    assert rebuilt["not-reproducible"]["count"] == 1 and "unproven" not in rebuilt


# ---------------------------------------------------------------- --target reaches the start-up checks


def _torch_with_arch_list(dest, flags="sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"):
    """A torch install whose libtorch_python.so is a real ELF shared object carrying ``CUDA_ARCH_FLAGS``
    (as torch 2.11+cu130's does), read by the same code that reads a real one: only the kernels are missing."""
    import subprocess

    pkg = dest / "torch"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('jitwarden must not import torch')\n")
    (pkg / "version.py").write_text(
        "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n"
        "git_version = '0123456789abcdef'\n"
    )
    src = dest / "flags.c"
    src.write_text(
        f'const char jw_cuda_arch_flags[] = "{flags}";\n'
        "const char *jw_arch_flags(void) { return jw_cuda_arch_flags; }\n"
    )
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(pkg / "lib" / "libtorch_python.so"), str(src)],
        check=True,
    )
    dist = dest / "torch-2.11.0+cu130.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0+cu130\n")
    (dist / "RECORD").write_text("torch/__init__.py,,\n")
    return str(dest)


def test_target_sm_121_explains_the_dgx_spark_case_as_a_live_gb10_would(env, tmp_path):
    """``doctor --target sm_121`` against a torch whose arch list ends at sm_120: the torch-arch warning, in the very
    words the start-up check gives for a live GB10 (capability 12.1)."""
    env["PYTHONPATH"] = _torch_with_arch_list(tmp_path / "site")
    p = cli("doctor", "--target", "sm_121", "--format", "json", env=env)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    doc = json.loads(p.stdout)
    warned = [x["message"] for x in doc["problems"] if x["code"] == "torch-arch"]
    assert len(warned) == 1 and warned[0].startswith(
        "sm_121 is not in torch 2.11.0+cu130's compiled arch list "
        "(sm_75 sm_80 sm_86 sm_90 sm_100 sm_120)"
    ), doc["problems"]
    assert not [
        x for x in doc["problems"] if x["code"] == "not-run" and "torch-arch" in x["message"]
    ]
    # the same torch, on a machine with a live GB10 and no --target (a child process: it sees that torch)
    code = (
        "import json, dataclasses; from jitwarden.env import fingerprint; from jitwarden.runtime import startup_checks as sc; "
        "from jitwarden.env.nvml import Gpu; fp = fingerprint.of_host(use_memo=False); "
        "fp = dataclasses.replace(fp, gpus=(Gpu(0, 'NVIDIA GB10', (12, 1), None, None),)); "
        "print(json.dumps(sc.torch_arch(fp)))"
    )
    import subprocess
    import sys

    from tests.helpers.maint import SRC

    live = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(env, PYTHONPATH=env["PYTHONPATH"] + os.pathsep + SRC),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert live.returncode == 0, live.stderr
    assert json.loads(live.stdout) == warned
    table = cli("doctor", "--target", "121", env=env)
    assert "warn torch-arch: sm_121 is not in torch 2.11.0+cu130" in " ".join(table.stdout.split())
    assert "all good" not in table.stdout
    # the arch list covers sm_90: nothing to say for an H200
    p = cli("doctor", "--target", "sm_90", "--format", "json", env=env)
    assert not [
        x for x in json.loads(p.stdout)["problems"] if x["code"] in ("torch-arch", "not-run")
    ]


def test_a_check_that_cannot_run_says_so(env):
    """This machine's torch is a CPU build: no arch list to check sm_121 against. doctor says the check did not
    run, and does not say "all good"."""
    p = cli("doctor", "--target", "sm_121", "--format", "json", env=env)
    doc = json.loads(p.stdout)
    not_run = [x["message"] for x in doc["problems"] if x["code"] == "not-run"]
    from jitwarden.env import torchinfo

    ti = torchinfo.info()
    if ti is not None and not ti.cuda:
        assert any(
            "torch-arch could not run" in m and "CPU build" in m and "sm_121" in m for m in not_run
        ), not_run
    table = cli("doctor", "--target", "sm_121", env=env)
    assert table.returncode == 0 and "all good" not in table.stdout
    assert "could not run" in table.stdout


def test_doctor_counts_entries_it_cannot_judge(env, tmp_path):
    """An entry of a format jitwarden does not know is counted and named as such, never as damage."""
    import shutil

    cc = tmp_path / "ComputeCache"
    shutil.copytree(os.path.join(DATA, "cuda_compute_h200", "ComputeCache"), cc)
    (cc / "0" / "1").mkdir(parents=True)
    (cc / "0" / "1" / "00aa11bb22cc33").write_bytes(b"\x42\0\0\0" + os.urandom(500))
    (cc / "0" / "1" / "00aa11bb22cc44").write_bytes(b"not the driver's\n")
    p = cli("doctor", "--target", "90", "--format", "json", str(cc), env=env)
    assert p.returncode == 0, p.stderr
    probs = {x["code"]: x for x in json.loads(p.stdout)["problems"]}
    assert probs["unrecognised"]["count"] == 2 and probs["unrecognised"]["severity"] == "info"
    assert "cannot judge" in probs["unrecognised"]["message"]
    table = cli("doctor", "--target", "90", str(cc), env=env)
    assert (
        "2 entries could not be judged" in " ".join(table.stdout.split())
        and "all good" not in table.stdout
    )


def test_doctor_lists_the_gpus_it_sees_and_warns_when_they_mix_compute_capabilities(env):
    """Issue 26: on a multi-GPU host doctor lists every GPU and says when the visible set mixes kinds."""
    from types import SimpleNamespace

    from jitwarden.cli.commands._diagnosis import mixed_gpus
    from jitwarden.env.nvml import Gpu

    doc = json.loads(cli("doctor", "--format", "json", env=env).stdout)
    assert isinstance(
        doc["gpus"], list
    )  # this machine's, from NVML or /proc (none on a CPU runner)
    assert all({"index", "name", "capability", "uuid", "pci_bus_id"} <= set(g) for g in doc["gpus"])
    h200 = [Gpu(i, "NVIDIA H200", (9, 0), f"GPU-{i}", None) for i in range(2)]
    assert mixed_gpus(SimpleNamespace(gpus=h200)) == []
    a100 = Gpu(2, "NVIDIA A100-SXM4-80GB", (8, 0), "GPU-2", None)
    unknown = Gpu(
        3, "GPU from /proc", None, None, None
    )  # a capability nobody can tell says nothing
    (p,) = mixed_gpus(SimpleNamespace(gpus=h200 + [a100, unknown]))
    assert (
        p.code == "mixed-gpus" and "sm_80 (GPU 2)" in p.message and "sm_90 (GPU 0, 1)" in p.message
    )
    assert p.fix.startswith("export CUDA_VISIBLE_DEVICES=2 ")
    assert mixed_gpus(None) == [] and mixed_gpus(SimpleNamespace(gpus=h200[:1] + [unknown])) == []
