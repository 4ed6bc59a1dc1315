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

from tests.adversarial.adv import TALLY, clean_failure, jw, tree_hash, truncate_cubin

from tests.helpers import kernels
from jitwarden.store import partition
from jitwarden.store import quarantine as q

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
        shutil.copytree(r["path"], os.path.join(os.path.dirname(root), "spare-" + r["id"]), symlinks=True)
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
                shutil.copytree(os.path.join(os.path.dirname(root), "spare-" + name), os.path.join(home, name),
                                symlinks=True)


def test_random_kills_keep_every_entry_whole(acache, small_cache, outside, env):
    root, recs = acache
    entries, parts = _setup(root, recs, small_cache[0])
    before_outside = tree_hash(outside)
    rng = random.Random(SEED)
    base = [sys.executable, "-m", "jitwarden"]  # Popen, not the runner: the test kills it mid-run
    took = {op: 1.5 for op in ("clean", "restore", "empty", "prune")}  # seconds a run of each takes, as seen
    landed = 0
    for i in range(KILLS):
        op = rng.choice(("clean", "restore", "empty", "prune"))
        if op == "clean":
            args = ["clean", root, "--target", "90", "-y"] + (["--purge"] if rng.random() < 0.3 else [])
        elif op == "restore":
            ids = [r.id for r in q.list_root(root) if r.present]
            args = ["quarantine", "restore", *(ids or ["none"]), "--root", root, "--replace", "-y"]
        elif op == "empty":
            args = ["quarantine", "empty", "--root", root, "-y"]
        else:
            args = ["prune", root, "--older-than", "1d", "--orphan-age", "0", "-y", "--keep-quarantined"
                    if rng.random() < 0.5 else "-y"]
        start = time.monotonic()
        proc = subprocess.Popen(base + args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = start + rng.uniform(0.5, 1.0) * took[op]  # late in the run: where the moves and deletes are
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.005)
        alive = proc.poll() is None
        if not alive:
            took[op] = time.monotonic() - start  # finished first: aim earlier next time
        proc.send_signal(signal.SIGKILL)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            TALLY["hangs"] += 1
            raise
        TALLY["kills"] += alive  # only a kill that landed counts
        landed += alive
        print(f"kill {i}: {op} alive={alive} at {time.monotonic() - start:.2f}s", flush=True)
        assert tree_hash(outside) == before_outside, f"kill {i} ({op}, seed {SEED}) changed data outside the root"
        _check_and_refill(root, entries, parts)
    # A kill that lands after the command finished tests nothing: most must land mid-run (the aim adapts).
    assert landed >= max(1, KILLS // 2), f"only {landed} of {KILLS} kills landed mid-run (seed {SEED})"
    # An unkilled run finishes what the kills left: no trash, no half-deleted slot.
    p = jw("quarantine", "empty", "--root", root, "-y", env=env)
    clean_failure(p, 0)
    assert not os.path.lexists(os.path.join(root, ".jitwarden-trash")), os.listdir(os.path.join(root, ".jitwarden-trash"))
    _check_and_refill(root, entries, parts)
    clean_failure(jw("verify", root, "--target", "90", env=env))
