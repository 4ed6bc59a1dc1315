"""Hostile state on the activation path: it fails closed, never hangs, never trusts another user's memo.

Every case is a real activation (a fresh interpreter, `jitwarden run`, the vLLM plugin's
``register``) against real hostile state: FIFOs, 100k-deep JSON, a really full tmpfs, a
really read-only mount, a forged memo. Disk cases need root and mount namespaces
(``unshare -m``); they are skipped, saying so, where those are not available.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.cli import jw as run_cli
from tests.helpers.guarded import DRIVER, JOBS, SRC, clean_env, compile_jobs, kernel_dir

MANAGER = "jitwarden.guard:GuardedCacheManager"
HANG_S = 30
"""A hang is an activation that has not finished after this long (a warm one takes milliseconds)."""

_ACTIVATE = textwrap.dedent("""
    import json, os, jitwarden
    rec = jitwarden.activate()
    print(json.dumps({"rec": rec.to_json(), "dir": os.environ.get("TRITON_CACHE_DIR"),
                      "manager": os.environ.get("TRITON_CACHE_MANAGER")}))
""")


def _activate(env: dict, code: str = _ACTIVATE) -> dict:
    """Activate in a fresh interpreter; a hang fails the test (it does not block the suite)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=HANG_S
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"activation hung for {HANG_S} s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["stderr"] = proc.stderr
    return out


def _jw_run(env: dict, *cmd: str):
    return run_cli("run", "-v", "--", *cmd, env=env, timeout=HANG_S + 270, src=None)


def _assert_partitioned_and_guarded(out: dict) -> None:
    assert out["manager"] == MANAGER
    assert out["dir"] and f"{os.sep}jitwarden-v1{os.sep}" in out["dir"], out
    assert "all" not in out["rec"]["skipped"], out["rec"]


def _partition_of(tmp_path, env) -> str:
    out = _activate(env)
    _assert_partitioned_and_guarded(out)
    return out["dir"]


# --- damaged partition info -----------------------------------------------------------


def test_deeply_nested_partition_info_keeps_the_partition_and_the_guard(tmp_path):
    env = clean_env(tmp_path)
    part = _partition_of(tmp_path, env)
    info = os.path.join(part, ".jitwarden-partition.json")
    with open(info, "w") as f:
        f.write("[" * 100_000)
    out = _activate(env)
    _assert_partitioned_and_guarded(out)
    assert out["dir"] == part
    assert "activation failed" not in out["stderr"] and "activation skipped" not in out["stderr"]
    assert json.load(open(info))["digest"] == out["rec"]["digest"]  # rewritten, the garbage is gone


def test_fifo_as_partition_info_does_not_hang_activation(tmp_path):
    env = clean_env(tmp_path)
    part = _partition_of(tmp_path, env)
    info = os.path.join(part, ".jitwarden-partition.json")
    os.unlink(info)
    os.mkfifo(info)
    out = _activate(env)
    _assert_partitioned_and_guarded(out)


@pytest.mark.parametrize("how", ["activate", "run", "vllm-plugin"])
def test_fifo_as_activation_memo_does_not_hang_any_activation(tmp_path, how):
    home = tmp_path / "jwhome"
    home.mkdir(mode=0o700)
    env = clean_env(tmp_path, JITWARDEN_HOME=str(home))
    os.mkfifo(home / "activation-memo.json")
    if how == "activate":
        _assert_partitioned_and_guarded(_activate(env))
    elif how == "run":
        proc = _jw_run(
            env, sys.executable, "-c", "import os; print(os.environ['TRITON_CACHE_MANAGER'])"
        )
        assert proc.returncode == 0 and proc.stdout.strip() == MANAGER, proc.stderr
    else:
        out = _activate(
            env, "from jitwarden.runtime import vllm_plugin; vllm_plugin.register(); " + _ACTIVATE
        )
        _assert_partitioned_and_guarded(out)


def test_fifo_as_fingerprint_memo_does_not_hang_activation(tmp_path):
    """A cold activation computes the fingerprint, which reads ``fingerprint-memo.json``: a FIFO there is skipped."""
    home = tmp_path / "jwhome"
    home.mkdir(mode=0o700)
    env = clean_env(tmp_path, JITWARDEN_HOME=str(home))
    os.mkfifo(home / "fingerprint-memo.json")
    _assert_partitioned_and_guarded(_activate(env))


# --- forged memo ------------------------------------------------------------------------


def _forge(memo: str, **fp) -> None:
    doc = json.load(open(memo))
    for e in doc["entries"]:
        e["fp"].update(fp)
    with open(memo, "w") as f:
        json.dump(doc, f)


def _memo_env(tmp_path, mode=0o700):
    """A real memo, then ``JITWARDEN_HOME`` given ``mode`` (an attacker's copy of it stands in for theirs)."""
    home = tmp_path / "jwhome"
    home.mkdir(mode=0o700)
    env = clean_env(tmp_path, JITWARDEN_HOME=str(home))
    real = _activate(env)
    os.chmod(home, mode)
    return env, str(home / "activation-memo.json"), real


FORGED = "deadbeefdeadbeef"


@pytest.mark.parametrize(
    "how", ["world-writable-home", "foreign-owned-memo", "group-writable-foreign-group"]
)
def test_a_memo_another_user_could_write_is_not_believed(tmp_path, how):
    env, memo, real = _memo_env(tmp_path, 0o777 if how == "world-writable-home" else 0o700)
    _forge(memo, digest=FORGED, headline=f"forged · fp {FORGED}")
    if how == "foreign-owned-memo":
        os.chown(memo, 12345, 12345)
    elif how == "group-writable-foreign-group":
        os.chown(memo, os.getuid(), 12345)
        os.chmod(memo, 0o660)
    out = _activate(env)
    _assert_partitioned_and_guarded(out)
    assert out["rec"]["digest"] == real["rec"]["digest"] != FORGED
    assert FORGED not in out["dir"] and "forged" not in (out["rec"]["headline"] or "")


def test_a_fingerprint_memo_another_user_could_write_does_not_decide_the_digest(tmp_path):
    """The fingerprint memo caches each package's RECORD hash: a foreign-owned copy with forged hashes is not read."""
    env, memo, real = _memo_env(tmp_path)
    fmemo = os.path.join(os.path.dirname(memo), "fingerprint-memo.json")
    doc = json.load(open(fmemo))
    assert doc["records"], doc  # what the forgery replaces: package identities
    doc["records"] = dict.fromkeys(doc["records"], "0" * 64)
    with open(fmemo, "w") as f:
        json.dump(doc, f)
    os.chown(fmemo, 12345, 12345)
    os.unlink(memo)  # a cold start: the fingerprint is computed again
    out = _activate(env)
    _assert_partitioned_and_guarded(out)
    assert out["rec"]["digest"] == real["rec"]["digest"]


def test_a_memo_whose_headline_names_another_digest_is_recomputed(tmp_path):
    env, memo, real = _memo_env(tmp_path)
    _forge(memo, digest=FORGED)  # the headline still ends in the real digest
    out = _activate(env)
    assert out["rec"]["digest"] == real["rec"]["digest"]


def test_a_memo_hiding_torch_from_a_process_that_imported_it_is_recomputed(tmp_path):
    """The vLLM plugin runs after torch is imported: a memo saying "no torch" would skip the sweep."""
    home = tmp_path / "jwhome"
    home.mkdir(mode=0o700)
    env = clean_env(tmp_path, JITWARDEN_HOME=str(home))
    code = "import torch\n" + _ACTIVATE
    real = _activate(env, code)
    assert "TORCHINDUCTOR_CACHE_DIR" in real["rec"]["partitions"]
    memo = str(home / "activation-memo.json")
    doc = json.load(open(memo))
    for e in doc["entries"]:
        e["fp"]["packages"].pop("torch", None)
        e["fp"]["headline"] = " · ".join(
            b for b in e["fp"]["headline"].split(" · ") if not b.startswith("torch ")
        )
    with open(memo, "w") as f:
        json.dump(doc, f)
    out = _activate(env, code)
    assert "TORCHINDUCTOR_CACHE_DIR" in out["rec"]["partitions"], out["rec"]


# --- disks that refuse writes (real tmpfs in a private mount namespace) -------------------


def _can_mount() -> str | None:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "needs root and unshare(1) to mount a private tmpfs"
    p = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k none /mnt"], capture_output=True
    )
    return (
        None
        if p.returncode == 0
        else f"cannot mount a tmpfs in a mount namespace: {p.stderr.decode()[-200:]}"
    )


needs_mount = pytest.mark.skipif(_can_mount() is not None, reason=_can_mount() or "")


def _in_namespace(script: str, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run a shell ``script`` in a private mount namespace (its mounts vanish with it)."""
    try:
        return subprocess.run(
            ["unshare", "-m", "sh", "-ec", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("hung")


@needs_mount
def test_full_disk_when_last_use_is_written_keeps_the_partition(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = clean_env(
        tmp_path,
        TRITON_CACHE_DIR=str(mnt / "triton"),
        JW_PY=sys.executable,
        JW_CODE=_ACTIVATE,
        JITWARDEN_HOME=str(mnt / "jwhome"),
    )
    # Activate once with room (partition + info + memo), age the info, fill the disk, activate again.
    script = f"""
        mount -t tmpfs -o size=2m none {mnt}
        "$JW_PY" -c "$JW_CODE" > {tmp_path}/first.json
        for f in {mnt}/triton/jitwarden-v1/*/.jitwarden-partition.json; do
            "$JW_PY" -c "import json,sys; p=sys.argv[1]; d=json.load(open(p)); d['last_used']=1; json.dump(d, open(p,'w'))" "$f"
        done
        dd if=/dev/zero of={mnt}/fill bs=4k 2>/dev/null || true
        df -k {mnt} | tail -1 > {tmp_path}/df
        "$JW_PY" -c "$JW_CODE"
    """
    proc = _in_namespace(script, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert open(tmp_path / "df").read().split()[3] == "0"  # really full
    first = json.loads(open(tmp_path / "first.json").read())
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["manager"] == MANAGER and out["dir"] == first["dir"], proc.stderr
    assert "activation failed" not in proc.stderr and "activation skipped" not in proc.stderr


_COMPILE_IN = DRIVER


@needs_mount
def test_a_seal_that_does_not_fit_on_the_disk_never_fails_the_compile(tmp_path):
    """Free space for exactly what stock Triton writes: stock succeeds, so must the guarded compile."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = clean_env(
        tmp_path,
        JW_PY=sys.executable,
        JW_KERNEL_DIR=kernel_dir(),
        JW_JOBS=json.dumps(JOBS[:1]),
        JW_CODE=_COMPILE_IN,
        PYTHONPATH=SRC,
    )
    free = f"""$(df -k --output=avail {mnt} | tail -1 | tr -d ' ')"""
    script = f"""
        mount -t tmpfs -o size=4m none {mnt}
        before={free}
        TRITON_CACHE_DIR={mnt}/stock "$JW_PY" -c "$JW_CODE" > /dev/null
        need=$((before - {free}))
        rm -rf {mnt}/stock
        avail={free}
        dd if=/dev/zero of={mnt}/fill bs=1k count=$((avail - need)) 2>/dev/null
        echo "need=$need left={free}" > {tmp_path}/space
        TRITON_CACHE_DIR={mnt}/stock2 "$JW_PY" -c "$JW_CODE" > {tmp_path}/stock.json
        rm -rf {mnt}/stock2
        TRITON_CACHE_DIR={mnt}/guarded TRITON_CACHE_MANAGER={MANAGER} "$JW_PY" -c "$JW_CODE"
    """
    proc = _in_namespace(script, env)
    space = open(tmp_path / "space").read() if (tmp_path / "space").exists() else ""
    assert json.loads(
        open(tmp_path / "stock.json").read().strip().splitlines()[-1]
    )  # stock Triton fits
    assert proc.returncode == 0, space + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    stock = json.loads(open(tmp_path / "stock.json").read().strip().splitlines()[-1])
    label = JOBS[0]["label"]
    assert out[label]["cubin"] == stock[label]["cubin"]  # the same kernel as stock, just not sealed


@needs_mount
def test_read_only_home_and_cache_fall_back_to_a_private_writable_partition(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    run = tmp_path / "tmp"
    run.mkdir()
    env = clean_env(
        tmp_path,
        HOME=str(ro / "home"),
        XDG_CACHE_HOME=str(ro / "home" / ".cache"),
        TORCHINDUCTOR_CACHE_DIR=str(ro / "inductor"),
        TRITON_CACHE_DIR=str(ro / "triton"),
        TMPDIR=str(run),
        JW_PY=sys.executable,
        JW_KERNEL_DIR=kernel_dir(),
        JW_JOBS=json.dumps(JOBS[:1]),
        JW_CODE=DRIVER,
    )
    script = f"""
        mount -t tmpfs -o size=1m none {ro}
        mkdir -p {ro}/home/.cache {ro}/triton {ro}/inductor
        mount -o remount,ro {ro}
        "$JW_PY" -m jitwarden run -v -- "$JW_PY" -c "$JW_CODE"
    """
    proc = _in_namespace(script, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])[JOBS[0]["label"]]["cubin"]
    where = next(
        ln.split("=", 1)[1]
        for ln in proc.stderr.splitlines()
        if ln.startswith("jitwarden: TRITON_CACHE_DIR=")
    )
    assert where.startswith(str(run) + os.sep), where
    assert proc.stderr.count(f"refusing cache root {ro}/triton") == 1


def test_a_partitions_dir_symlinked_out_of_the_root_is_not_written_through(tmp_path):
    root = tmp_path / "triton"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "jitwarden-v1")
    env = clean_env(tmp_path, TRITON_CACHE_DIR=str(root))
    out = _activate(env)
    _assert_partitioned_and_guarded(out)
    assert os.listdir(outside) == []  # no partition, no info file made out there
    assert not out["dir"].startswith(str(root) + os.sep)  # a private partition instead
    assert "refusing cache root" in out["stderr"] and "symlink" in out["stderr"]


@pytest.mark.skipif(
    os.geteuid() != 0, reason="planting a directory owned by another user needs root"
)
def test_a_private_root_dir_planted_by_another_user_is_not_used(tmp_path):
    tmp = tmp_path / "tmp"
    planted = tmp / f"jitwarden-{os.getuid()}"
    planted.mkdir(parents=True)
    os.chown(planted, 12345, 12345)
    env = clean_env(
        tmp_path,
        HOME="/dev/null/home",
        XDG_CACHE_HOME="/dev/null/cache",
        TRITON_CACHE_DIR="/dev/null/t",
        TMPDIR=str(tmp),
    )
    out = _activate(env)
    _assert_partitioned_and_guarded(out)
    assert os.listdir(planted) == []
    assert out["dir"].startswith(str(tmp / "jitwarden-triton-"))  # a fresh 0700 dir of its own


_PROVE_ON_FULL_DISK = """
import json, os, sys
from jitwarden.runtime import hiding, prover
from jitwarden.runtime.tree import unsealed_kernels
tree = sys.argv[1]
fd = hiding.claim(tree)
assert fd is not None
assert hiding.hide(tree, unsealed_kernels([tree])) == []
with open(os.path.join(os.path.dirname(tree), "fill"), "wb") as f:  # no room left for any seal
    try:
        while True:
            f.write(b"\\0" * 65536)
    except OSError:
        pass
counts = prover.prove_staged([(tree, None, fd)], cores=2)
print(json.dumps({"counts": {k: getattr(counts, k) for k in ("proven", "refuted", "unproven")},
                  "staged": hiding.staged(tree), "entries": sorted(os.listdir(tree))}))
"""


@needs_mount
def test_proofs_in_the_background_on_a_full_disk_put_every_proven_kernel_back(tmp_path):
    """No room for a seal: the proven entries go back unsealed (proven again at their next use), none stays hidden."""
    stock = str(tmp_path / "stock")
    built = compile_jobs(stock, guarded=False)
    ids = sorted(v["id"] for k, v in built.items() if k != "_stderr")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    root = os.path.dirname(SRC)  # the repo: tests.helpers
    env = clean_env(
        tmp_path,
        PYTHONPATH=SRC + os.pathsep + root,
        JW_PY=sys.executable,
        JW_CODE=_PROVE_ON_FULL_DISK,
    )
    script = f"""
        mount -t tmpfs -o size=4m none {mnt}
        "$JW_PY" -c "from tests.helpers.kernels import copy_cache; copy_cache('{stock}', '{mnt}/triton')"
        "$JW_PY" -c "$JW_CODE" {mnt}/triton
    """
    proc = _in_namespace(script, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["counts"] == {"proven": 3, "refuted": 0, "unproven": 0}
    assert out["staged"] == [] and [e for e in out["entries"] if not e.startswith(".")] == ids
