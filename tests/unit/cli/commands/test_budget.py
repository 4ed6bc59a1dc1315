"""``jitwarden budget`` and ``run --budget`` (issue 45, item 1) on real guarded Triton compiles."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from jitwarden.store import partition
from tests.helpers import guarded
from tests.helpers.maint import cli
from tests.helpers.paths import SRC

HOLD = guarded.DRIVER + '\nprint("ready", flush=True)\nsys.stdin.read()\n'


@pytest.fixture
def env(isolated_env, tmp_path):
    e = dict(os.environ)
    e["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    e["PYTHONPATH"] = SRC
    return e


def _partition(env) -> str:
    digest = json.loads(cli("fingerprint", "--format", "json", env=env).stdout)["digest"]
    part = partition.path_for(env["TRITON_CACHE_DIR"], digest)
    os.makedirs(part, exist_ok=True)
    return part


def _compile(part, jobs, env) -> list[str]:
    out = guarded.compile_jobs(
        part, jobs, extra_env={"HOME": env["HOME"], "XDG_CACHE_HOME": env["XDG_CACHE_HOME"]}
    )
    return [out[j["label"]]["id"] for j in jobs]


def _fillers(part, src_id, n) -> list[str]:
    """``n`` copies of a real entry under keys no run was ever served (Triton's base32 alphabet)."""
    names = []
    for i in range(n):
        name = f"FILL{i:04d}".ljust(52, "A").replace("0", "Q").replace("1", "R")
        shutil.copytree(os.path.join(part, src_id), os.path.join(part, name))
        names.append(name)
    return names


def _holder(part, jobs, env) -> subprocess.Popen:
    """A guarded workload that was served ``jobs`` from the cache and is still running."""
    e = dict(env, TRITON_CACHE_DIR=part, TRITON_CACHE_MANAGER=guarded.MANAGER)
    e.update(JW_KERNEL_DIR=guarded.kernel_dir(), JW_JOBS=json.dumps(jobs))
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD],
        env=e,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    for line in p.stdout:
        if line.strip() == "ready":
            return p
    raise AssertionError(f"the workload ended early: {p.wait()}")


def _left(part) -> set[str]:
    return {n for n in os.listdir(part) if not n.startswith((".", "jitwarden"))}


def test_budget_evicts_the_least_recently_served_and_never_what_a_live_workload_holds(env):
    part = _partition(env)
    jobs = guarded.JOBS
    ids = _compile(part, jobs, env)  # written through the guard, sealed
    fill = _fillers(part, ids[0], 6)
    _compile(part, jobs[1:], env)  # an earlier run, ended: served jobs 1 and 2
    holder = _holder(part, jobs[:1], env)  # still running: served job 0
    try:
        size = json.loads(cli("budget", "1T", "--dry-run", "--format", "json", env=env).stdout)
        total = size["before"]["triton"]["bytes"]
        one = total // (len(fill) + len(ids))
        p = cli("budget", str(total - 3 * one), "--dry-run", "--format", "json", env=env)
        doc = json.loads(p.stdout)
        assert p.returncode == 0 and doc["plan"] != [], p.stderr
        assert {r["id"] for r in doc["plan"]} <= set(fill)  # never served: first to go
        p = cli("budget", "0", "-y", "--format", "json", env=env)
        doc = json.loads(p.stdout)
        assert p.returncode == 0, p.stderr
        assert doc["pinned"] == 1 and not doc["fits"]
        assert _left(part) == {ids[0]}  # what the live workload was served stayed
        order = [r["id"] for r in doc["plan"]]
        assert set(order[: len(fill)]) == set(fill) and set(order[len(fill) :]) == set(ids[1:])
        assert all(d["status"] == "deleted" for d in doc["done"]), doc["done"]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=120)
    p = cli("budget", "0", "-y", "--keep-quarantined", env=env)
    assert p.returncode == 0 and _left(part) == set(), p.stderr
    assert "undo: jitwarden quarantine restore --batch" in p.stdout, p.stdout
    batch = p.stdout.split("--batch ", 1)[1].split()[0]
    assert cli("quarantine", "restore", "--batch", batch, "-y", env=env).returncode == 0
    assert _left(part) == {ids[0]}
    m = cli("metrics", env=env).stdout
    assert 'jitwarden_budget_evictions_total{kind="triton"} 9' in m, m
    assert 'jitwarden_budget_entries{kind="triton"} 0' in m, m


def test_run_budget_holds_the_caches_to_it_after_the_workload_ends(env):
    part = _partition(env)
    ids = _compile(part, guarded.JOBS[:1], env)
    fill = _fillers(part, ids[0], 3)
    count = "import os, sys; print(len(os.listdir(os.environ['TRITON_CACHE_DIR']))); sys.exit(3)"
    p = cli("run", "--budget", "1", "--", sys.executable, "-c", count, env=env)
    assert p.returncode == 3, p.stderr  # the workload's own status
    seen = int(p.stdout.strip().splitlines()[-1])
    assert seen >= len(fill) + 1  # every entry still there while it ran: never during
    assert _left(part) == set(), os.listdir(part)
    assert "budget 1 B: evicted 4 entries" in p.stderr, p.stderr


def test_a_bad_budget_is_refused_before_anything_runs(env, tmp_path):
    marker = tmp_path / "ran"
    p = cli(
        "run",
        "--budget",
        "lots",
        "--",
        sys.executable,
        "-c",
        f"open({str(marker)!r}, 'w')",
        env=env,
    )
    assert p.returncode == 2 and not marker.exists() and len(p.stderr.splitlines()) == 1, p.stderr
    p = cli("budget", env=env)
    assert p.returncode == 2 and "JITWARDEN_BUDGET" in p.stderr, p.stderr


def test_run_budget_passes_sigterm_on_and_applies_the_budget_once_cmd_is_gone(env):
    part = _partition(env)
    ids = _compile(part, guarded.JOBS[:1], env)
    _fillers(part, ids[0], 2)
    wait = "import time; print('up', flush=True); time.sleep(120)"
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jitwarden",
            "run",
            "--budget",
            "1",
            "--",
            sys.executable,
            "-c",
            wait,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "up"
    assert len(_left(part)) == 3  # the workload runs: nothing evicted yet
    p.terminate()  # SIGTERM to jitwarden, as a scheduler sends it
    _out, err = p.communicate(timeout=120)
    assert p.returncode == 128 + 15, err  # CMD's own end, by the signal passed on
    assert _left(part) == set() and "evicted 3 entries" in err, err
