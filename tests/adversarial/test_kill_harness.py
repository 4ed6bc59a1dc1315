"""SIGKILL at random moments of ``clean``, ``quarantine restore``, ``quarantine empty`` and ``prune``.

After every kill: each entry and partition is wholly in place, wholly in quarantine, or
gone by request (never two copies, never half of one: every file byte-identical), and
nothing outside the root changed. Afterwards an unkilled ``quarantine empty`` finishes what
the kills left, trash included. ``JW_ADV_KILLS`` sets the number of kills (default 10, for CI).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time

from jitwarden.store import partition
from jitwarden.store import quarantine as q
from tests.adversarial.adv import TALLY, clean_failure, jw, tree_hash, truncate_cubin
from tests.helpers import kernels

KILLS = int(os.environ.get("JW_ADV_KILLS", "10"))
SEED = int(os.environ.get("JW_ADV_SEED", str(int(time.time()))))
DIGESTS = ("a" * 16, "b" * 16)


def _ours(tree: dict) -> dict:
    """A tree hash without jitwarden's own files (locks, seals, records)."""
    return {k: v for k, v in tree.items() if not os.path.basename(k).startswith(".jitwarden")}


def _places(root: str, name: str, home: str) -> list[str]:
    """Where ``name`` is now: in ``home`` (its own place) or in a quarantine slot of ``root``."""
    out = [os.path.join(home, name)] if os.path.lexists(os.path.join(home, name)) else []
    qdir = os.path.join(root, "jitwarden-quarantine")
    for slot in os.listdir(qdir) if os.path.isdir(qdir) else ():
        p = os.path.join(qdir, slot, name)
        if os.path.lexists(p):
            out.append(p)
    return out


def _setup(root: str, recs: dict, spare: str) -> tuple[dict, dict]:
    """Damage every entry (so clean takes it), add two old partitions; returns the expected trees."""
    for r in recs.values():
        truncate_cubin(r["path"])
    pristine = {}
    for d in DIGESTS:
        path = partition.path_for(root, d)
        kernels.copy_cache(spare, path)
        partition.ensure(path, d, None, "triton", now=time.time() - 30 * 86400)
        pristine[d] = _ours(tree_hash(path))
        shutil.copytree(path, os.path.join(os.path.dirname(root), "spare-" + d), symlinks=True)
    entries = {r["id"]: _ours(tree_hash(r["path"])) for r in recs.values()}
    for r in recs.values():
        shutil.copytree(
            r["path"], os.path.join(os.path.dirname(root), "spare-" + r["id"]), symlinks=True
        )
    return entries, pristine


def _check_and_refill(root: str, entries: dict, parts: dict) -> None:
    """Every entry and partition whole in one place at most; those deleted on request come back for the next round."""
    pdir = os.path.join(root, "jitwarden-v1")
    for group, home in ((entries, root), (parts, pdir)):
        for name, want in group.items():
            places = _places(root, name, home)
            assert len(places) <= 1, f"{name} in {len(places)} places: {places}"
            for p in places:
                assert _ours(tree_hash(p)) == want, f"{p} is not whole"
            if not places:
                os.makedirs(home, exist_ok=True)
                shutil.copytree(
                    os.path.join(os.path.dirname(root), "spare-" + name),
                    os.path.join(home, name),
                    symlinks=True,
                )


def _args(op: str, root: str, rng: random.Random) -> list:
    if op == "clean":
        return ["clean", root, "--target", "90", "-y"] + (["--purge"] if rng.random() < 0.3 else [])
    if op == "restore":
        ids = [r.id for r in q.list_root(root) if r.present]
        return ["quarantine", "restore", *(ids or ["none"]), "--root", root, "--replace", "-y"]
    if op == "empty":
        return ["quarantine", "empty", "--root", root, "-y"]
    return [
        "prune",
        root,
        "--older-than",
        "1d",
        "--orphan-age",
        "0",
        "-y",
        "--keep-quarantined" if rng.random() < 0.5 else "-y",
    ]


def _measure(root: str, env: dict, base: list) -> dict:
    """Seconds one uninterrupted run of each verb takes here and now, on a scratch copy of the damaged root (in
    the order that gives each work to do: clean fills the quarantine that restore and empty then act on)."""
    scratch = os.path.join(os.path.dirname(root), "kill-scratch")
    shutil.copytree(root, scratch, symlinks=True)
    took = {}
    try:
        for op in ("clean", "restore", "clean", "empty", "prune"):
            start = time.monotonic()
            subprocess.run(
                base + _args(op, scratch, random.Random(0)),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=120,
            )
            took[op] = min(took.get(op, float("inf")), time.monotonic() - start)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return took


def test_random_kills_keep_every_entry_whole(acache, small_cache, outside, env):
    root, recs = acache
    entries, parts = _setup(root, recs, small_cache[0])
    before_outside = tree_hash(outside)
    rng = random.Random(SEED)
    base = [sys.executable, "-m", "jitwarden"]  # Popen, not the runner: the test kills it mid-run
    took = _measure(
        root, env, base
    )  # kill delays are drawn within a run's measured length, not guessed
    landed = 0
    for i in range(KILLS):
        op = rng.choice(("clean", "restore", "empty", "prune"))
        args = _args(op, root, rng)
        for attempt in range(4):  # a run that finished before its kill is run again, aimed earlier
            start = time.monotonic()
            proc = subprocess.Popen(
                base + args,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = (
                start + rng.uniform(0.5, 0.95) * took[op]
            )  # late in the run: where the moves and deletes are
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(
                    0.005
                )  # the kill's moment is what is tested: drawn within a run, not an event to await
            alive = proc.poll() is None
            proc.send_signal(signal.SIGKILL)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
                TALLY["hangs"] += 1
                raise
            print(
                f"kill {i}.{attempt}: {op} alive={alive} at {time.monotonic() - start:.2f}s "
                f"(a run took {took[op]:.2f}s)",
                flush=True,
            )
            assert tree_hash(outside) == before_outside, (
                f"kill {i} ({op}, seed {SEED}) changed data outside the root"
            )
            _check_and_refill(root, entries, parts)
            if alive:
                break
            took[op] = (
                min(took[op], time.monotonic() - start) * 0.8
            )  # this run was quicker than measured
            if op == "restore":
                args = _args(op, root, rng)  # what is quarantined now
        TALLY["kills"] += alive  # only a kill that landed counts
        landed += alive
    # A kill that lands after the command finished tests nothing: aimed within a measured run and retried earlier
    # when it missed, nearly every kill must land mid-run.
    assert landed >= max(1, KILLS - KILLS // 5), (
        f"only {landed} of {KILLS} kills landed mid-run (seed {SEED})"
    )
    # An unkilled run finishes what the kills left: no trash, no half-deleted slot.
    p = jw("quarantine", "empty", "--root", root, "-y", env=env)
    clean_failure(p, 0)
    assert not os.path.lexists(os.path.join(root, ".jitwarden-trash")), os.listdir(
        os.path.join(root, ".jitwarden-trash")
    )
    _check_and_refill(root, entries, parts)
    clean_failure(jw("verify", root, "--target", "90", env=env))
