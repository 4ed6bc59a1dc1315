"""``jitwarden run -- CMD``: activation through the environment, exit codes and signals passed through."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from jitwarden.store import seal
from tests.helpers.cli import jw as run_cli
from tests.helpers.guarded import DRIVER, JOBS, clean_env, kernel_dir


def jw(args, env):
    return run_cli(*args, env=env, src=None)


def test_env_is_activated_for_the_command(tmp_path):
    env = clean_env(tmp_path)
    proc = jw(
        [
            "run",
            "--",
            sys.executable,
            "-c",
            "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('TRITON_CACHE_DIR', 'TRITON_CACHE_MANAGER')}))",
        ],
        env,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["TRITON_CACHE_MANAGER"] == "jitwarden.guard:GuardedCacheManager"
    assert got["TRITON_CACHE_DIR"].startswith(
        os.path.join(env["HOME"], ".triton", "cache", "jitwarden-v1") + os.sep
    )


def test_exit_code_and_signal_pass_through(tmp_path):
    env = clean_env(tmp_path)
    assert jw(["run", "--", "sh", "-c", "exit 7"], env).returncode == 7
    assert jw(["run", "--", "sh", "-c", "kill -TERM $$"], env).returncode == -signal.SIGTERM
    # A signal sent to `jitwarden run` reaches CMD: it *is* CMD after exec.
    p = subprocess.Popen(
        [sys.executable, "-m", "jitwarden", "run", "--", "sh", "-c", "echo ready; exec sleep 30"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=30) == -signal.SIGINT


def test_usage_errors(tmp_path):
    env = clean_env(tmp_path)
    proc = jw(["run"], env)
    assert (
        proc.returncode == 2
        and proc.stderr.strip().count("\n") == 0
        and "needs a command" in proc.stderr
    )
    proc = jw(["run", "--", "no-such-command-jw"], env)
    assert (
        proc.returncode == 127
        and proc.stderr.strip() == "jitwarden: no-such-command-jw: command not found"
    )


def test_compiles_land_sealed_in_the_partition(tmp_path):
    env = clean_env(tmp_path, JW_KERNEL_DIR=kernel_dir(), JW_JOBS=json.dumps(JOBS[:1]))
    proc = jw(["run", "-v", "--", sys.executable, "-c", DRIVER], env)
    assert proc.returncode == 0, proc.stderr
    entry_id = json.loads(proc.stdout.strip().splitlines()[-1])[JOBS[0]["label"]]["id"]
    part = next(
        line.split("=", 1)[1]
        for line in proc.stderr.splitlines()
        if line.startswith("jitwarden: TRITON_CACHE_DIR=")
    )
    entry = os.path.join(part, entry_id)
    assert seal.check(entry, seal.read(entry)) == []
