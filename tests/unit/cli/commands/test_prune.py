"""``prune`` on real partitions, and ``clean``/``prune`` beside a process compiling into the same cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from jitwarden.ops import plans as cleanplan
from jitwarden.store import partition
from tests.helpers import kernels
from tests.helpers.maint import cli, snapshot


@pytest.fixture
def env(isolated_env, tmp_path):
    e = dict(os.environ)
    e["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    return e


def current_digest(env) -> str:
    p = cli("fingerprint", "--format", "json", env=env)
    return json.loads(p.stdout)["digest"]


def make_partitions(built_cache, base, digests, ages_days):
    src, _ = built_cache
    now = time.time()
    for d, age in zip(digests, ages_days):
        path = partition.path_for(base, d)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        kernels.copy_cache(src, path)
        t = now - age * 86400
        partition.ensure(path, d, None, "triton", now=t)
        for dp, dirs, files in os.walk(path):
            for n in dirs + files:
                os.utime(os.path.join(dp, n), (t, t), follow_symlinks=False)


def test_prune_least_recently_used_first_never_current(built_cache, env):
    base = env["TRITON_CACHE_DIR"]
    cur = current_digest(env)
    others = ["a" * 16, "b" * 16, "c" * 16]
    make_partitions(built_cache, base, [cur] + others, [90, 1, 10, 40])  # current is the oldest
    keep_cur = snapshot(partition.path_for(base, cur))
    p = cli("prune", "--keep-last", "2", "--dry-run", "--format", "json", env=env)
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)["plan"]
    assert [x["digest"] for x in plan] == ["c" * 16, "b" * 16]  # least recently used first
    assert os.path.isdir(partition.path_for(base, "c" * 16))
    p = cli("prune", "--older-than", "7d", "-y", env=env)
    assert p.returncode == 0, p.stderr
    left = sorted(os.listdir(os.path.join(base, "jitwarden-v1")))
    assert left == sorted([cur, "a" * 16])
    assert snapshot(partition.path_for(base, cur)) == keep_cur
    size = sum(
        os.path.getsize(os.path.join(d, f))
        for d, _, fs in os.walk(partition.path_for(base, "a" * 16))
        for f in fs
    )
    p = cli("prune", "--max-size", "1k", "-y", "--keep-quarantined", env=env)
    assert p.returncode == 0, p.stderr
    assert os.listdir(os.path.join(base, "jitwarden-v1")) == [
        cur
    ]  # the current one stays even over the limit
    p = cli("quarantine", "ls", "--format", "json", "--root", base, env=env)
    (rec,) = json.loads(p.stdout)["quarantined"]
    assert rec["entry_id"] == f"jitwarden-v1/{'a' * 16}" and rec["bytes"] >= size - 4096


def test_busy_partition_is_kept():
    now = 1_000_000.0
    P = cleanplan.PartitionFacts
    parts = [
        P(
            base="/b",
            path="/b/x",
            digest="x",
            last_used=now - 9e6,
            bytes=10,
            current=False,
            newest=now - 5,
        ),
        P(
            base="/b",
            path="/b/y",
            digest="y",
            last_used=now - 9e6,
            bytes=10,
            current=False,
            newest=now - 9e6,
        ),
        P(
            base="/b",
            path="/b/c",
            digest="c",
            last_used=now - 9e9,
            bytes=10,
            current=True,
            newest=now - 9e9,
        ),
    ]
    plan = cleanplan.plan_prune(parts, keep=1, now=now, busy_age=3600)
    assert [a.partition.digest for a in plan.actions] == ["y"]


COMPILER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, os.environ["JW_KERNEL_DIR"])
    import triton
    from triton.compiler import ASTSource
    from triton.backends.compiler import GPUTarget
    import jw_test_kernels as K
    sig = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32"}
    stop = time.time() + float(os.environ["JW_SECONDS"])
    n = 0
    while time.time() < stop:
        for fn in (K.add_kernel, K.sub_kernel):
            block = (16, 32, 64, 128, 256, 512)[n % 6]
            arch = (80, 90)[n % 2]
            triton.compile(ASTSource(fn=fn, signature=sig, constexprs={"BLOCK": block}),
                           target=GPUTarget("cuda", arch, 32))
            n += 1
    print(n)
""")


def test_compiling_beside_clean_and_prune(built_cache, env, tmp_path):
    """A process compiling real kernels in a loop while ``clean -y`` and ``prune -y`` run: no exception anywhere."""
    from tests.helpers.maint import damage_everything

    base = env["TRITON_CACHE_DIR"]
    cur = current_digest(env)
    make_partitions(built_cache, base, ["d" * 16, "e" * 16], [30, 60])
    src, manifest = built_cache
    live = partition.path_for(base, cur)
    kernels.copy_cache(src, live)
    recs = {j["label"]: dict(j, path=os.path.join(live, j["id"])) for j in manifest}
    outside = tmp_path / "outside"
    outside.mkdir()
    damage_everything(live, recs, str(outside))
    kdir = tmp_path / "k"
    kdir.mkdir()
    (kdir / "jw_test_kernels.py").write_text(kernels.KERNEL_SOURCE)
    cenv = dict(env, TRITON_CACHE_DIR=live, JW_KERNEL_DIR=str(kdir), JW_SECONDS="25")
    comp = subprocess.Popen(
        [sys.executable, "-c", COMPILER],
        env=cenv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        results = []
        for _ in range(3):
            results.append(cli("clean", live, "--target", "90", "-y", env=env))
            results.append(
                cli(
                    "clean",
                    live,
                    "--target",
                    "90",
                    "-y",
                    "--stale",
                    "--orphans",
                    "--purge",
                    env=env,
                )
            )
            results.append(cli("prune", "--keep-last", "1", "-y", env=env))
        for r in results:
            assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    finally:
        out, err = comp.communicate(timeout=300)
    assert comp.returncode == 0, err[-3000:]
    assert int(out.strip()) > 0
    assert os.listdir(os.path.join(base, "jitwarden-v1")) == [cur]
    p = cli("verify", live, "--target", "90", env=env)
    assert p.returncode == 0, (
        p.stdout
    )  # nothing at error level is left, and the compiler's entries are sound
