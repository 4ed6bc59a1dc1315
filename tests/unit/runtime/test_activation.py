"""``jitwarden.activate()``: partitions, the guard, idempotence, refusals, start-up warnings.

Real fingerprints (real ptxas binaries, real installed packages), real Triton compiles
where a cache is needed; environments are private copies under tmp_path.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from jitwarden.env import ptxas
from jitwarden.env.fingerprint import Fingerprint, Package
from jitwarden.env.nvml import Gpu
from jitwarden.model.layout import PARTITION_INFO
from jitwarden.runtime import activation, startup_checks
from jitwarden.store import partition, removal
from tests.helpers import kernels
from tests.helpers.guarded import MANAGER, clean_env, py


def test_activation_imports_only_the_stdlib_and_never_cuda(tmp_path):
    proc = py(
        """
        import json, sys
        import jitwarden
        rec = jitwarden.activate()
        maps = open("/proc/self/maps").read()
        print(json.dumps({"heavy": sorted(m for m in ("torch", "triton", "rich", "numpy") if m in sys.modules),
                          "cuda_libs": "libcuda" in maps or "libnvidia-ml" in maps, "digest": rec.digest}))
    """,
        clean_env(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out == {"heavy": [], "cuda_libs": False, "digest": out["digest"]} and out["digest"]


def test_partitions_guard_and_last_use(tmp_path):
    env = clean_env(tmp_path)
    rec = activation.activate(env=env)
    home = env["HOME"]
    want = os.path.join(home, ".triton", "cache", "jitwarden-v1", rec.digest)
    assert rec.partitions["TRITON_CACHE_DIR"] == want == env["TRITON_CACHE_DIR"]
    assert (
        env["TORCHINDUCTOR_CACHE_DIR"]
        == os.path.join(str(tmp_path / "inductor"), "jitwarden-v1", rec.digest)
        or "TORCHINDUCTOR_CACHE_DIR" in rec.skipped
    )  # only when torch is installed
    assert env["TRITON_CACHE_MANAGER"] == MANAGER == rec.cache_manager
    info = partition.read_info(want)
    assert info.digest == rec.digest and "triton" in info.kinds and info.last_used > 0
    assert os.path.isfile(os.path.join(want, PARTITION_INFO))


def test_idempotent_and_never_nested(tmp_path):
    env = clean_env(tmp_path)
    first = activation.activate(env=env)
    snapshot = dict(env)
    assert activation.activate(env=env) is first
    assert env == snapshot
    # A child process inherits the activated environment and lands in the same partition.
    child = py(
        """
        import json, os, jitwarden
        rec = jitwarden.activate()
        print(json.dumps([rec.digest, os.environ["TRITON_CACHE_DIR"]]))
    """,
        dict(env),
    )
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout) == [first.digest, env["TRITON_CACHE_DIR"]]


def test_explicit_cache_dir_is_partitioned_inside_or_left_alone(tmp_path):
    mine = str(tmp_path / "volume")
    env = clean_env(tmp_path, TRITON_CACHE_DIR=mine)
    rec = activation.activate(env=env)
    assert env["TRITON_CACHE_DIR"] == os.path.join(mine, "jitwarden-v1", rec.digest)
    env = clean_env(tmp_path, TRITON_CACHE_DIR=mine, JITWARDEN_PARTITION="0")
    rec = activation.activate(env=env)
    assert (
        env["TRITON_CACHE_DIR"] == mine
        and rec.skipped["TRITON_CACHE_DIR"] == "JITWARDEN_PARTITION=0"
    )
    assert env["TRITON_CACHE_MANAGER"] == MANAGER


def test_user_cache_manager_is_left_with_a_warning(tmp_path, caplog):
    env = clean_env(tmp_path, TRITON_CACHE_MANAGER="mypkg.cache:Manager")
    rec = activation.activate(env=env)
    assert env["TRITON_CACHE_MANAGER"] == "mypkg.cache:Manager" == rec.cache_manager
    assert any("TRITON_CACHE_MANAGER=mypkg.cache:Manager is set" in w for w in rec.warnings)


def test_world_writable_root_is_refused_for_a_private_partition(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    env = clean_env(tmp_path, TRITON_CACHE_DIR=str(shared))
    rec = activation.activate(env=env)
    private = os.path.join(
        env["XDG_CACHE_HOME"], "jitwarden", "roots", "triton", "jitwarden-v1", rec.digest
    )
    assert env["TRITON_CACHE_DIR"] == private
    assert any(
        w.startswith(f"refusing cache root {shared}") and "world-writable" in w and "chmod o-w" in w
        for w in rec.warnings
    )
    assert not (shared / "jitwarden-v1").exists()


def test_unusable_root_and_home_fall_back_to_a_private_runtime_partition(tmp_path):
    run = tmp_path / "run"
    env = clean_env(
        tmp_path,
        HOME="/dev/null/home",
        XDG_CACHE_HOME="/dev/null/cache",
        TRITON_CACHE_DIR="/dev/null/t",
        TMPDIR=str(run),
    )
    run.mkdir()
    rec = activation.activate(env=env)
    assert env["TRITON_CACHE_DIR"] == str(
        run / f"jitwarden-{os.getuid()}" / "roots" / "triton" / "jitwarden-v1" / rec.digest
    )
    assert "TRITON_CACHE_DIR" not in rec.skipped
    (w,) = [w for w in rec.warnings if "refusing cache root /dev/null/t" in w]
    assert (
        "chmod o-w" not in w and "a directory you can write" in w
    )  # not a sharing problem: no owner/mode advice


class _Flaky(dict):
    """An environment that fails to take the cache manager (as a read-only mapping would)."""

    def __setitem__(self, k, v):
        if k == "TRITON_CACHE_MANAGER":
            raise PermissionError("read-only environment")
        super().__setitem__(k, v)


def test_never_raises_and_restores_the_environment(tmp_path, caplog):
    env = _Flaky(clean_env(tmp_path))
    before = dict(env)
    rec = activation.activate(env=env)
    assert rec.digest is None and "PermissionError" in rec.skipped["all"]
    assert dict(env) == before
    assert any("activation failed" in r.getMessage() for r in caplog.records)


def _real_ptxas() -> str:
    path = ptxas.for_arch(90)
    if not path:
        pytest.skip("no runnable ptxas (Triton's bundled one is missing)")
    return path


def test_ptxas_binary_decides_the_partition(tmp_path):
    real = _real_ptxas()
    wrapper = tmp_path / "ptxas-wrapper"
    wrapper.write_text(f'#!/bin/sh\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    same_text = subprocess.run([str(wrapper), "--version"], capture_output=True, text=True).stdout
    assert same_text == subprocess.run([real, "--version"], capture_output=True, text=True).stdout
    plain = activation.activate(env=clean_env(tmp_path))
    again = activation.activate(env=clean_env(tmp_path))
    wrapped = activation.activate(env=clean_env(tmp_path, TRITON_PTXAS_PATH=str(wrapper)))
    assert plain.digest == again.digest
    assert wrapped.digest != plain.digest
    assert wrapped.partitions["TRITON_CACHE_DIR"] != plain.partitions["TRITON_CACHE_DIR"]


def test_python_level_knob_is_followed_when_triton_is_imported(tmp_path):
    mine = str(tmp_path / "knob")
    proc = py(
        f"""
        import json, os
        import triton
        triton.knobs.cache.dir = {mine!r}
        import jitwarden
        rec = jitwarden.activate()
        print(json.dumps([rec.digest, triton.knobs.cache.dir, triton.knobs.cache.manager_class.__name__]))
    """,
        clean_env(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    digest, knob_dir, cls = json.loads(proc.stdout)
    assert knob_dir == os.path.join(mine, "jitwarden-v1", digest) and cls == "GuardedCacheManager"


# ------------------------------------------------------------------ start-up warnings


def _fp(cap, torch_archs=None, cuda="12.8", release="12.8"):
    info = ptxas.PtxasInfo(
        path="/opt/ptxas",
        realpath="/opt/ptxas",
        version_text=f"Cuda compilation tools, release {release}",
        release=release,
        build=None,
        sha256="0" * 64,
        size=1,
    )
    pk = (
        (
            Package(
                name="torch",
                dist="torch",
                version="2.9.0",
                identity=None,
                cuda=cuda,
                git_version=None,
                arch_list=tuple(torch_archs),
            ),
        )
        if torch_archs is not None
        else ()
    )
    role = "triton-blackwell" if cap[0] * 10 + cap[1] >= 100 else "triton"
    return Fingerprint(
        gpu_source="nvml",
        gpus=(Gpu(0, "NVIDIA GB10", cap, None, None),),
        driver_version="580.1",
        cuda_driver_version="13.0",
        ptxas=((role, info),),
        packages=pk,
        python=(),
        platform=(),
        env=(),
    )


def test_warns_when_torch_lacks_the_device_arch():
    ws = startup_checks.torch_arch(_fp((12, 1), ["sm_80", "sm_90", "sm_100", "sm_120"]))
    assert len(ws) == 1 and ws[0].startswith(
        "sm_121 is not in torch 2.9.0's compiled arch list (sm_80 sm_90 sm_100 sm_120)"
    )
    assert "TORCH_CUDA_ARCH_LIST" in ws[0] and "PTX JIT" in ws[0]
    assert startup_checks.torch_arch(_fp((12, 0), ["sm_80", "sm_120"])) == []
    assert startup_checks.torch_arch(_fp((12, 1), ["sm_80", "sm_121a"])) == []
    assert (
        startup_checks.torch_arch(_fp((12, 1), ["sm_80", "sm_121"], cuda=None)) == []
    )  # a CPU torch: nothing to say


def test_one_arch_rule_for_the_fingerprint_and_the_start_up_check():
    """The seed report's case, sm_121 under a torch list ending in sm_120: both say so, in one sentence."""
    fp = _fp((12, 1), ["sm_80", "sm_90", "sm_100", "sm_120"])
    (w,) = startup_checks.torch_arch(fp)
    assert w in fp.warnings()
    neighbour = _fp((8, 6), ["sm_80", "sm_90"])  # no sm_86 cubins: the same answer from both
    assert startup_checks.torch_arch(neighbour) == [
        x for x in neighbour.warnings() if x.startswith("sm_86 is not")
    ]
    assert startup_checks.torch_arch(neighbour)


def test_doctor_takes_the_ptxas_variable_from_the_record_not_from_the_sentence():
    """A ptxas whose path happens to contain the other variable's name: the fix still names the right one."""
    from types import SimpleNamespace

    from jitwarden.cli.commands import _diagnosis

    path = "/opt/TRITON_PTXAS_BLACKWELL_PATH/bin/ptxas"
    info = ptxas.PtxasInfo(
        path=path,
        realpath=path,
        version_text="Cuda compilation tools, release 11.0",
        release="11.0",
        build=None,
        sha256="0" * 64,
        size=1,
    )
    fp = Fingerprint(
        gpu_source="nvml",
        gpus=(Gpu(0, "NVIDIA H200", (9, 0), None, None),),
        driver_version="580.1",
        cuda_driver_version="13.0",
        ptxas=(("triton", info),),
        packages=(),
        python=(),
        platform=(),
        env=(),
    )
    report = SimpleNamespace(target=SimpleNamespace(arch=None, source="live"), caches=())
    fixes = [fix for kind, _w, fix in _diagnosis.startup_warnings(fp, report) if kind == "ptxas"]
    assert fixes == [
        "export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas  (a CUDA release that supports the GPU)"
    ]
    (p,) = startup_checks.ptxas_problems(fp)
    assert (p.arch, p.variable) == (90, "TRITON_PTXAS_PATH")


def test_activation_facts_are_one_record_on_the_cold_and_the_warm_path(tmp_path):
    from jitwarden.runtime import memo

    env = clean_env(tmp_path, JITWARDEN_HOME=str(tmp_path / "jw"))
    cold = memo.compute(env)
    warm = memo.lookup(env)
    assert memo.last == "hit", memo.last
    assert type(cold) is type(warm) is memo.ActivationFacts and cold == warm
    assert (
        isinstance(warm.warnings, tuple)
        and isinstance(warm.headline, str)
        and warm.headline.endswith(warm.digest)
    )
    assert warm.version("definitely-not-installed") is None
    with pytest.raises(AttributeError):
        warm.digest = "0" * 16


def test_warns_when_ptxas_cannot_target_the_device():
    ws = startup_checks.ptxas_target(_fp((12, 1), release="12.8"))
    assert (
        len(ws) == 1 and "cannot target sm_121" in ws[0] and "TRITON_PTXAS_BLACKWELL_PATH" in ws[0]
    )
    assert startup_checks.ptxas_target(_fp((12, 1), release="12.9")) == []


def test_warns_about_an_unpartitioned_root_shared_with_another_arch(tmp_path):
    root = str(tmp_path / "shared")
    kernels.build_cache(root, kernels.jobs_for(archs=(80,), variants=kernels.VARIANTS[:2]))
    fp = _fp((9, 0))
    ws = startup_checks.shared_root(root, fp.device_archs(), None)  # _fp has no Triton: arch alone
    assert len(ws) == 1 and "entries built for sm_80" in ws[0] and "JITWARDEN_PARTITION" in ws[0]
    # Proofs before the start (not in the background), so that the entries are in place to sample below.
    env = clean_env(
        tmp_path, TRITON_CACHE_DIR=root, JITWARDEN_PARTITION="0", JITWARDEN_PROVE_WAIT="1"
    )
    rec = activation.activate(
        env=env
    )  # the live fingerprint has no GPU: Triton version is what can differ
    assert env["TRITON_CACHE_DIR"] == root and rec.skipped
    metas = startup_checks.sample_metadata(root)
    assert (
        len(metas) == 2
        and startup_checks.foreign_entries(metas, (80,), metas[0]["triton_version"]) == []
    )
    assert startup_checks.foreign_entries(metas, (), "3.4.0") == [
        f"Triton {metas[0]['triton_version']}"
    ]
    # Older layouts are read as the scanner reads them: a [backend, arch, warp] target is still sm_80.
    older = [dict(m, target=["cuda", 80, 32]) for m in metas]
    assert startup_checks.foreign_entries(older, (90,), metas[0]["triton_version"]) == ["sm_80"]


# ------------------------------------------------------------------ warm path (activation memo)

WARM_PROBE = """
    import json, sys
    import jitwarden
    from jitwarden.runtime import memo as activation_memo
    rec = jitwarden.activate()
    heavy = ("dataclasses", "inspect", "ctypes", "hashlib", "_hashlib", "subprocess", "torch", "triton", "rich",
             "numpy", "jitwarden.env.fingerprint", "jitwarden.env.ptxas", "jitwarden.env.nvml", "jitwarden.env.torchinfo",
             "jitwarden.runtime.startup_checks")
    print(json.dumps({"rec": rec.to_json(), "memo": activation_memo.last,
                      "heavy": sorted(m for m in heavy if m in sys.modules)}))
"""


def warm_run(env: dict) -> dict:
    proc = py(WARM_PROBE, env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_warm_path_gives_the_slow_paths_record_and_imports_nothing_heavy(tmp_path):
    env = clean_env(tmp_path)
    cold = warm_run(dict(env))
    assert cold["memo"] == "stored" and "jitwarden.env.fingerprint" in cold["heavy"]
    warm = warm_run(dict(env))
    assert warm["memo"] == "hit"
    assert warm["rec"] == cold["rec"] and warm["rec"]["digest"]
    assert (
        warm["heavy"] == []
    )  # no dataclasses, ctypes, hashlib, torch, triton, rich, fingerprint layer
    # The memoised digest is the one the fingerprint computes right now.
    from jitwarden.env import fingerprint

    assert fingerprint.of_host(use_memo=False, env=env).digest == warm["rec"]["digest"]


def test_ptxas_replaced_behind_the_same_path_changes_the_digest(tmp_path):
    """TRITON_PTXAS_PATH keeps pointing at the same path; the binary there becomes a wrapper
    with the same ``--version`` text (Triton's own key would not notice)."""
    real = _real_ptxas()
    bindir = tmp_path / "cuda" / "bin"
    bindir.mkdir(parents=True)
    ptx = bindir / "ptxas"
    ptx.symlink_to(real)
    env = clean_env(tmp_path, TRITON_PTXAS_PATH=str(ptx))
    first = warm_run(dict(env))
    again = warm_run(dict(env))
    assert again["memo"] == "hit" and again["rec"]["digest"] == first["rec"]["digest"]
    wrapper = tmp_path / "wrapper"
    wrapper.write_text(f'#!/bin/sh\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    os.replace(wrapper, ptx)
    assert (
        subprocess.run([str(ptx), "--version"], capture_output=True).stdout
        == subprocess.run([real, "--version"], capture_output=True).stdout
    )
    swapped = warm_run(dict(env))
    assert swapped["rec"]["digest"] != first["rec"]["digest"]
    assert (
        swapped["rec"]["partitions"]["TRITON_CACHE_DIR"]
        != first["rec"]["partitions"]["TRITON_CACHE_DIR"]
    )
    # A file changed within the racy window is not trusted by stat: not memoised yet.
    assert swapped["memo"] == f"not stored: {ptx} changed just now"
    assert warm_run(dict(env))["rec"]["digest"] == swapped["rec"]["digest"]


def test_code_changing_env_var_changes_the_digest_and_both_stay_memoised(tmp_path):
    plain_env = clean_env(tmp_path)
    fused_env = clean_env(tmp_path, TRITON_DEFAULT_FP_FUSION="0")
    plain = warm_run(dict(plain_env))
    fused = warm_run(dict(fused_env))
    assert fused["memo"] == "stored" and fused["rec"]["digest"] != plain["rec"]["digest"]
    assert warm_run(dict(plain_env)) == {**plain, "memo": "hit", "heavy": []}
    assert warm_run(dict(fused_env)) == {**fused, "memo": "hit", "heavy": []}
    # CUDA_VISIBLE_DEVICES decides which GPUs count: a new value is a miss (same digest without GPUs).
    cvd = warm_run(clean_env(tmp_path, CUDA_VISIBLE_DEVICES="1"))
    assert cvd["memo"] == "stored"


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00garbage{{{",
        b"[]",
        b'{"schema": 1, "kind": "jitwarden-activation-memo"}',
        b'{"schema": 1, "kind": "jitwarden-activation-memo", "entries": [1, {}, []]}',
    ],
)
def test_garbage_activation_memo_is_ignored_and_rewritten(tmp_path, garbage):
    env = clean_env(tmp_path)
    good = warm_run(dict(env))
    memo = os.path.join(env["XDG_CACHE_HOME"], "jitwarden", "activation-memo.json")
    with open(memo, "wb") as f:
        f.write(garbage)
    out = warm_run(dict(env))
    assert out["rec"] == good["rec"] and out["memo"] == "stored"
    assert warm_run(dict(env))["memo"] == "hit"


def test_a_memoised_digest_that_is_not_a_digest_is_refused(tmp_path):
    env = clean_env(tmp_path)
    good = warm_run(dict(env))
    memo = os.path.join(env["XDG_CACHE_HOME"], "jitwarden", "activation-memo.json")
    doc = json.load(open(memo))
    doc["entries"][0]["fp"]["digest"] = "../../../../tmp/x"
    json.dump(doc, open(memo, "w"))
    out = warm_run(dict(env))
    assert out["rec"] == good["rec"] and out["memo"] == "stored"


def _tamper_entry(entry, what):
    if what == "env":
        entry["env"]["TRITON_DEFAULT_FP_FUSION"] = "0"
    elif what == "file":
        entry["files"][0][1][3] += 1  # mtime_ns of a recorded file
    elif what == "dir":
        entry["dirs"][-1][1] = None  # stat not trusted: the names decide
        entry["dirs"][-1][2] = (entry["dirs"][-1][2] or []) + ["vllm-0.0.1.dist-info"]
    elif what == "proc":
        entry["proc"][1] = [
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.0.0",
            ["0000:01:00.0"],
            [None],
        ]
    elif what == "key":
        entry["key"][1] = "3.0.0 (some other python)"
    elif what == "fingerprint memo":
        entry["files"][-1][1] = None


@pytest.mark.parametrize("what", ["env", "file", "dir", "proc", "key", "fingerprint memo"])
def test_any_recorded_fact_that_no_longer_holds_is_a_miss(tmp_path, what):
    from jitwarden.runtime import memo as activation_memo

    env = clean_env(tmp_path)
    facts = activation_memo.compute(env)
    assert (
        activation_memo.lookup(env).to_json() == facts.to_json() and activation_memo.last == "hit"
    )
    path = activation_memo.memo_path(env)
    doc = json.load(open(path))
    _tamper_entry(doc["entries"][0], what)
    json.dump(doc, open(path, "w"))
    assert activation_memo.lookup(env) is None and activation_memo.last.startswith("miss: ")


def test_sys_path_dirs_are_judged_by_the_package_names_they_hold(tmp_path, monkeypatch):
    from jitwarden.runtime import memo as activation_memo

    extra = tmp_path / "extra"
    extra.mkdir()
    monkeypatch.syspath_prepend(str(extra))
    env = clean_env(tmp_path)
    activation_memo.compute(env)
    (extra / "notes.txt").write_text("unrelated churn")  # e.g. a cwd that is written to
    assert activation_memo.lookup(env) is not None
    (extra / "vllm-0.0.1.dist-info").mkdir()
    assert activation_memo.lookup(env) is None and "lists other packages" in activation_memo.last


def test_nvml_failing_with_a_driver_present_is_never_memoised(tmp_path, monkeypatch):
    from jitwarden.env import nvml
    from jitwarden.runtime import memo as activation_memo

    monkeypatch.setattr(
        nvml,
        "probe",
        lambda proc_root="/proc", env=None, use_nvml=True: nvml.Probe(
            "proc", (), "580.1", None, "nvml: transient"
        ),
    )
    env = clean_env(tmp_path)
    facts = activation_memo.compute(env)
    assert facts.digest and activation_memo.last.startswith("not stored: NVML failed")
    assert activation_memo.lookup(env) is None


def test_memo_dir_agrees_with_the_fingerprints():
    from jitwarden.env import fingerprint
    from jitwarden.runtime import memo as activation_memo

    for env in ({"JITWARDEN_HOME": "/a", "XDG_CACHE_HOME": "/b"}, {"XDG_CACHE_HOME": "/b"}, {}):
        assert activation_memo.memo_dir(env) == fingerprint.memo_dir(env)


def test_activation_record_is_immutable_and_serialisable():
    rec = activation.Activation(
        "0123456789abcdef", {"TRITON_CACHE_DIR": "/x"}, MANAGER, ("w",), {}, "h"
    )
    with pytest.raises(AttributeError):
        rec.digest = "other"
    with pytest.raises(AttributeError):
        del rec.headline
    assert rec == activation.Activation(
        "0123456789abcdef", {"TRITON_CACHE_DIR": "/x"}, MANAGER, ["w"], {}, "h"
    )
    assert rec.active and not activation.Activation(None).active
    assert rec.to_json() == {
        "schema": 1,
        "digest": "0123456789abcdef",
        "partitions": {"TRITON_CACHE_DIR": "/x"},
        "cache_manager": MANAGER,
        "warnings": ["w"],
        "skipped": {},
        "headline": "h",
    }
    assert "digest='0123456789abcdef'" in repr(rec)


def test_the_remote_manager_is_not_reported_as_reduced_protection():
    """``RemoteGuardedCacheManager`` is the guard plus a remote cache: doctor must not call it unguarded."""
    from jitwarden.model import settings
    from jitwarden.runtime.activation import reduced_protection

    assert reduced_protection({"TRITON_CACHE_MANAGER": settings.REMOTE_MANAGER}) == []
    assert (
        reduced_protection({"TRITON_CACHE_MANAGER": "my.module:Manager"})[0][0]
        == "TRITON_CACHE_MANAGER=my.module:Manager"
    )


def test_vllm_plugin_says_guard_on_under_the_remote_manager(tmp_path):
    """With ``JITWARDEN_REMOTE`` the guard's subclass is installed; the plugin's line must say the guard is on."""
    import subprocess
    import sys

    from tests.helpers.guarded import clean_env

    env = clean_env(
        tmp_path,
        JITWARDEN_HOME=str(tmp_path / "jw"),
        JITWARDEN_REMOTE="redis://127.0.0.1:1/0",
        JITWARDEN_SWEEP="0",
        JITWARDEN_TORCH_HOOKS="0",
    )
    code = (
        "import logging, os; logging.basicConfig(level=logging.INFO)\n"
        "from jitwarden.runtime import vllm_plugin; vllm_plugin.register()\n"
        "print(os.environ['TRITON_CACHE_MANAGER'])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "jitwarden.runtime.remote_manager:RemoteGuardedCacheManager"
    assert "guard: on" in proc.stderr and "guard: off" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a directory another user owns")
@pytest.mark.parametrize("foreign", ["XDG_RUNTIME_DIR", "TMPDIR"])
def test_a_private_root_never_lives_in_another_users_runtime_or_temp_dir(tmp_path, foreign):
    """``su`` without ``-`` leaves the first user's XDG_RUNTIME_DIR (or TMPDIR): its owner could rename the
    private root made there and put their own partition of kernels in its place."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    os.chmod(theirs, 0o700 if foreign == "XDG_RUNTIME_DIR" else 0o777)
    ours = tmp_path / "tmp"
    ours.mkdir()
    env = clean_env(
        tmp_path,
        HOME="/dev/null/home",
        XDG_CACHE_HOME="/dev/null/cache",
        TRITON_CACHE_DIR="/dev/null/t",
        TMPDIR=str(ours),
    )
    env[foreign] = str(theirs)
    activation.activate(env=env)
    where = env["TRITON_CACHE_DIR"]
    base = where.split(os.sep + "jitwarden-v1" + os.sep)[0]
    try:
        assert not where.startswith(str(theirs) + os.sep), where
        assert os.listdir(theirs) == []
    finally:
        if not base.startswith(str(tmp_path) + os.sep):  # the last resort: a fresh dir in /tmp
            removal.remove_tree(base)
