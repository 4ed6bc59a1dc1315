"""``verify`` and ``clean`` racing real Triton writers in the same cache.

Writers compile fresh kernels (new entries, each written through ``tmp.pid_*`` files that
appear and vanish) while ``verify`` and ``clean`` run again and again. A file vanishing
under the scanner is not damage: no run may report ``cannot stat``/``cannot list``, end in an
internal error, or make ``clean`` move a healthy entry; every run has a timeout (a hang is
counted). ``JW_ADV_RACES`` sets the number of verify/clean runs (default 8, for CI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.adversarial.adv import TALLY, clean_failure, jw
from tests.helpers import kernels
from tests.helpers.wait import wait_for

RACES = int(os.environ.get("JW_ADV_RACES", "8"))
WRITERS = 2


def _writer(root: str, k: int, env: dict) -> subprocess.Popen:
    """A process compiling ``RACES`` kernels no other writer compiles into ``root``."""
    kdir = os.path.join(os.path.dirname(root), ".jw-kernels")
    os.makedirs(kdir, exist_ok=True)
    with open(os.path.join(kdir, "jw_test_kernels.py"), "w") as f:
        f.write(kernels.KERNEL_SOURCE)
    jobs = [
        {
            "label": f"w{k}_{i}",
            "kernel": "add_kernel",
            "signature": kernels.SIGNATURES["add_kernel"],
            "constexprs": {"BLOCK": 16 << (i % 6)},
            "options": {"num_warps": 1 << (k % 3), "num_stages": 1 + i // 6},
            "arch": 90,
        }
        for i in range(max(RACES, 6))
    ]
    e = dict(env, TRITON_CACHE_DIR=root, JW_KERNEL_DIR=kdir, JW_JOBS=json.dumps(jobs))
    return subprocess.Popen(
        [sys.executable, "-c", kernels.DRIVER],
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_verify_and_clean_racing_writers(tmp_path, env):
    root = str(tmp_path / "race")
    os.makedirs(root)
    writers = [_writer(root, k, env) for k in range(WRITERS)]
    runs = 0
    try:
        # The race starts with the first key dir a writer makes: before it, the root is an empty directory, which
        # verify and clean rightly refuse as "no cache here" (a loaded machine imports Triton slowly).
        wait_for(
            lambda: (
                any(len(n) == 52 for n in os.listdir(root))
                or all(w.poll() is not None for w in writers)
            ),
            120,
            "a writer's first Triton key dir",
        )
        while runs < RACES or any(w.poll() is None for w in writers):
            racing = any(w.poll() is None for w in writers)
            args = (
                ("clean", root, "--target", "90", "-y")
                if runs % 3 == 2
                else ("verify", root, "--target", "90", "--format", "json")
            )
            p = jw(*args, env=env)
            clean_failure(p)
            assert (
                "cannot stat" not in p.stdout + p.stderr
                and "cannot list" not in p.stdout + p.stderr
            ), p.stdout[-3000:]
            if args[0] == "clean":
                assert "quarantined 0" in p.stdout or "nothing to clean" in p.stdout, (
                    p.stdout,
                    p.stderr,
                )
            TALLY["races"] += racing
            runs += 1
            if runs >= 4 * RACES:
                break
    finally:
        for w in writers:
            try:
                w.wait(timeout=300)
            except subprocess.TimeoutExpired:
                TALLY["hangs"] += 1
                w.kill()
                raise
    for w in writers:
        assert w.returncode == 0, w.stderr[-3000:]
    p = jw("verify", root, "--target", "90", env=env)
    clean_failure(p, 0)
    assert not os.path.isdir(os.path.join(root, "jitwarden-quarantine"))


CHURN = r"""
import os, sys, time, uuid
root, stop = sys.argv[1], time.time() + float(sys.argv[2])
entries = [os.path.join(root, n) for n in os.listdir(root) if len(n) == 52]
while time.time() < stop:
    for e in entries:
        t = os.path.join(e, f"tmp.pid_{os.getpid()}_{uuid.uuid4()}")
        os.mkdir(t)
        with open(os.path.join(t, "x.cubin"), "wb") as f:
            f.write(b"x")
        os.unlink(os.path.join(t, "x.cubin"))
        os.rmdir(t)
"""


def test_verify_racing_temporary_files_that_vanish(acache, env):
    """Triton's write pattern at full speed (a ``tmp.pid_*`` dir made, filled, emptied, removed in every
    entry): a temporary file gone between listing and stat is not damage."""
    root, recs = acache
    churn = [subprocess.Popen([sys.executable, "-c", CHURN, root, "30"]) for _ in range(2)]
    try:
        for _ in range(max(4, RACES // 2)):
            p = jw("verify", root, "--target", "90", "--format", "json", env=env)
            clean_failure(p, 0)
            assert "cannot stat" not in p.stdout and "cannot list" not in p.stdout, p.stdout[-2000:]
            TALLY["races"] += 1
    finally:
        for c in churn:
            c.kill()
            c.wait()
