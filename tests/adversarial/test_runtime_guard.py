"""The guard under attack: races between its check and Triton's read, symlinked entries, FIFOs, devices.

Real ``triton.compile`` hits through ``jitwarden.guard:GuardedCacheManager`` in a fresh
interpreter, against a second process that keeps changing the cache under it. The
promise: every compile returns exactly the cubin stock Triton built (never a tampered
one), never raises, never hangs, and nothing outside the root is read or written.

Race sizes are bounded for CI (``JW_RACE_COMPILES``, default 400 compiles per race).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from jitwarden.store import quarantine
from tests.helpers.guarded import JOBS, SRC, compile_jobs, kernel_dir

MANAGER = "jitwarden.guard:GuardedCacheManager"
RACE_COMPILES = int(os.environ.get("JW_RACE_COMPILES", "400"))
HANG_S = 60

# Compile one kernel N times (every one a cache hit, unless the guard calls it a miss), counting
# results whose cubin is not the reference and exceptions by type.
_LOOP = textwrap.dedent("""
    import collections, hashlib, json, os, sys
    sys.path.insert(0, os.environ["JW_KERNEL_DIR"])
    import triton
    from triton.compiler import ASTSource
    from triton.backends.compiler import GPUTarget
    import jw_test_kernels as K
    job = json.loads(os.environ["JW_JOB"])
    good = os.environ["JW_GOOD"]
    n = int(os.environ["JW_N"])
    bad, errors = 0, collections.Counter()
    open(os.environ["JW_READY"], "w").close()
    for i in range(n):
        src = ASTSource(fn=getattr(K, job["kernel"]), signature=job["signature"], constexprs=job["constexprs"])
        try:
            k = triton.compile(src, target=GPUTarget("cuda", job["arch"], 32), options=job["options"])
        except Exception as exc:
            if not errors[type(exc).__name__]:
                import traceback
                traceback.print_exc()
            errors[type(exc).__name__] += 1
            continue
        if hashlib.sha256(k.asm["cubin"]).hexdigest() != good:
            bad += 1
    print(json.dumps({"compiles": n, "tampered": bad, "errors": dict(errors)}))
""")

# Keep swapping the entry's cubin (by rename: a new inode each time) for a tampered one and back.
_SWAP_CUBIN = textwrap.dedent("""
    import os, sys, time
    entry, good, evil, ready = sys.argv[1:5]
    cubin = os.path.join(entry, os.path.basename(good))
    tmp = os.path.join(os.path.dirname(good), ".swap")
    while not os.path.exists(ready):  # the test's start signal
        time.sleep(0.001)
    swaps = 0
    while os.path.exists(ready):
        for src in (evil, good):
            try:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                os.link(src, tmp)
                os.replace(tmp, cubin)
                swaps += 1
            except OSError:
                pass
    print(swaps)
""")

# `jitwarden clean` racing compiles: each time the entry is complete (sealed), move it away into a
# quarantine-like slot after a short random delay, as a clean that judged it stale or damaged would.
_MOVE_ENTRY = textwrap.dedent("""
    import os, random, shutil, sys, time
    entry, aside, ready = sys.argv[1:4]
    while not os.path.exists(ready):  # the test's start signal
        time.sleep(0.001)
    seal = os.path.join(entry, ".jitwarden-seal.json")
    moves = 0
    while os.path.exists(ready):
        if not os.path.exists(seal):
            continue
        time.sleep(random.random() * 0.002)  # the race itself: the move lands at a random point of a compile
        try:
            os.rename(entry, f"{aside}.{moves}")
        except OSError:
            continue
        shutil.rmtree(f"{aside}.{moves}", ignore_errors=True)
        moves += 1
    print(moves)
""")


@pytest.fixture(scope="module")
def stock(tmp_path_factory):
    """Stock Triton's cubins for JOBS (no guard), and a stock cache to plant from."""
    d = tmp_path_factory.mktemp("stock") / "cache"
    out = compile_jobs(str(d), guarded=False)
    return str(d), out


def _race(tmp_path, stock, attacker: str, args_for) -> dict:
    """Fill a guarded cache, start ``attacker`` against the add kernel's entry, compile it N times."""
    root = str(tmp_path / "cache")
    out = compile_jobs(root, jobs=JOBS[:1])
    job = JOBS[0]
    entry = os.path.join(root, out[job["label"]]["id"])
    ready = str(tmp_path / "ready")
    env = dict(
        os.environ,
        TRITON_CACHE_DIR=root,
        TRITON_CACHE_MANAGER=MANAGER,
        JW_KERNEL_DIR=kernel_dir(),
        JW_JOB=json.dumps(job),
        JW_GOOD=stock[1][job["label"]]["cubin"],
        JW_N=str(RACE_COMPILES),
        JW_READY=ready,
        PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    att = subprocess.Popen(
        [sys.executable, "-c", attacker, *args_for(root, entry, ready)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _LOOP], env=env, capture_output=True, text=True, timeout=600
        )
    finally:
        if os.path.exists(ready):
            os.unlink(ready)
        moves = int((att.communicate(timeout=60)[0] or "0").strip() or 0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if res["errors"]:
        print(proc.stderr[-6000:])
    res["attacks"] = moves
    print(f"race {attacker is _SWAP_CUBIN and 'swap-cubin' or 'move-entry'}: {res}")
    return res


def test_race_swapping_the_cubin_between_check_and_read_serves_no_tampered_cubin(tmp_path, stock):
    def args(root, entry, ready):
        name = next(n for n in os.listdir(entry) if n.endswith(".cubin"))
        good, evil = str(tmp_path / name), str(tmp_path / "evil" / name)
        os.makedirs(os.path.dirname(evil))
        shutil.copyfile(os.path.join(entry, name), good)
        data = bytearray(open(good, "rb").read())
        data[len(data) // 2] ^= 0xFF
        open(evil, "wb").write(bytes(data))
        return [entry, good, evil, ready]

    res = _race(tmp_path, stock, _SWAP_CUBIN, args)
    assert res["attacks"] > 0
    assert res["tampered"] == 0 and res["errors"] == {}, res


def test_race_moving_the_entry_away_like_clean_is_a_miss_never_an_error(tmp_path, stock):
    res = _race(
        tmp_path,
        stock,
        _MOVE_ENTRY,
        lambda root, entry, ready: [entry, str(tmp_path / "aside"), ready],
    )
    assert res["attacks"] > 0
    assert res["tampered"] == 0 and res["errors"] == {}, res


def _plant_outside(tmp_path, stock, root: str, label: str, other: str) -> tuple[str, str]:
    """Replace the entry of ``label`` by a symlink to a copy outside the root holding ``other``'s cubin,
    sealed to match (what an attacker who can write the root would build)."""
    from jitwarden.store import seal

    entry_id = stock[1][label]["id"]
    entry = os.path.join(root, entry_id)
    outside = str(tmp_path / "outside" / entry_id)
    shutil.copytree(entry, outside)
    src_root = stock[0]
    other_entry = os.path.join(src_root, stock[1][other]["id"])
    cubin = next(n for n in os.listdir(outside) if n.endswith(".cubin"))
    shutil.copyfile(
        os.path.join(other_entry, next(n for n in os.listdir(other_entry) if n.endswith(".cubin"))),
        os.path.join(outside, cubin),
    )
    names = [n for n in os.listdir(outside) if not n.startswith(".jitwarden")]
    seal.write(outside, seal.compute(outside, names))
    shutil.rmtree(entry)
    os.symlink(outside, entry)
    return entry, outside


def _tree(path: str) -> dict:
    out = {}
    for d, _dirs, files in os.walk(path):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, path)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def test_a_sealed_entry_symlinked_out_of_the_root_is_never_served(tmp_path, stock):
    root = str(tmp_path / "cache")
    compile_jobs(root, jobs=JOBS[:1])
    label, other = JOBS[0]["label"], JOBS[2]["label"]  # add, sub
    entry, outside = _plant_outside(tmp_path, stock, root, label, other)
    before = _tree(os.path.dirname(outside))
    out = compile_jobs(root, jobs=JOBS[:1])
    assert out[label]["cubin"] == stock[1][label]["cubin"]  # not sub's cubin from outside
    assert (
        _tree(os.path.dirname(outside)) == before
    )  # nothing read-locked, written or moved out there
    assert not os.path.islink(entry) and os.path.isdir(entry)  # recompiled into a real dir
    recs = quarantine.list_root(root)
    assert [r.reason for r in recs] == ["unsafe"]


@pytest.mark.parametrize(
    "what", ["fifo-cubin", "fifo-ptx", "fifo-seal", "fifo-group", "device-cubin"]
)
def test_special_files_under_sealed_names_are_a_miss_never_a_hang(
    tmp_path, stock, what, monkeypatch
):
    root = str(tmp_path / "cache")
    out = compile_jobs(root, jobs=JOBS[:1])
    label = JOBS[0]["label"]
    entry = os.path.join(root, out[label]["id"])
    names = os.listdir(entry)
    target = {"fifo-cubin": ".cubin", "fifo-ptx": ".ptx", "device-cubin": ".cubin"}.get(what)
    if what == "fifo-seal":
        name = ".jitwarden-seal.json"
    elif what == "fifo-group":
        name = next(n for n in names if n.startswith("__grp__"))
    else:
        name = next(n for n in names if n.endswith(target))
    os.unlink(os.path.join(entry, name))
    if what == "device-cubin":
        if os.geteuid() != 0:
            pytest.skip("making a character device needs root")
        os.mknod(
            os.path.join(entry, name), 0o600 | __import__("stat").S_IFCHR, os.makedev(1, 5)
        )  # /dev/zero
    else:
        os.mkfifo(os.path.join(entry, name))
    from tests.helpers import guarded as test_guard

    monkeypatch.setattr(subprocess, "run", _with_timeout(subprocess.run, HANG_S))
    try:
        got = test_guard.compile_jobs(root, jobs=JOBS[:1])
    except subprocess.TimeoutExpired:
        pytest.fail(f"a compile hung on {what}")
    assert got[label]["cubin"] == stock[1][label]["cubin"]


def _with_timeout(run, limit):
    def wrapped(*a, **kw):
        kw["timeout"] = min(kw.get("timeout") or limit, limit)
        return run(*a, **kw)

    return wrapped
