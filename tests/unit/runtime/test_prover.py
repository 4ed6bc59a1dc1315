"""Proofs in the background while the workload starts (jitwarden.runtime.prover), on real compiles and real ptxas.

The start-up hides each unsealed kernel from the workload, a detached prover rebuilds it and
puts it back sealed (or quarantines it), and a lookup of a hidden kernel waits for it rather
than recompiling it. The workload never sees an unsealed kernel at its place.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from jitwarden.model.layout import PROVING_DIR
from jitwarden.runtime import activation, hiding, prover
from jitwarden.runtime import tree as tree_
from jitwarden.store import quarantine, seal
from tests.helpers import kernels
from tests.helpers.guarded import ADD, clean_env, compile_jobs, quarantined, substitute
from tests.helpers.wait import wait_for


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A stock (unsealed) Triton cache of add, add_b256 and sub for sm_90, compiled once for the module."""
    tree = str(tmp_path_factory.mktemp("stock") / "triton")
    return tree, {k: v for k, v in compile_jobs(tree, guarded=False).items() if k != "_stderr"}


@pytest.fixture
def _stock(template):
    """``_stock(tmp_path, evil=None)``: a copy of the template (group files pointing at the copy), the add cubin
    replaced by ``evil`` when given."""
    return lambda tmp_path, evil=None: _copy(template, tmp_path, evil)


def _copy(template, tmp_path, evil=None) -> tuple[str, dict]:
    tree = kernels.copy_cache(template[0], str(tmp_path / "triton"))
    out = template[1]
    if evil is not None:
        substitute(tree, out["add_sm90"]["id"], evil)
    return tree, out


def _env(tmp_path, tree, **extra) -> dict:
    """The start-up sweep's world: the torch hooks off, so activation sweeps the tree and hides what it proves
    (with them on, each kernel is checked as it is loaded instead: tests/unit/runtime/test_sweep.py)."""
    return clean_env(
        tmp_path, JITWARDEN_PARTITION="0", TRITON_CACHE_DIR=tree, JITWARDEN_TORCH_HOOKS="0", **extra
    )


def _wait_prover(tree: str, timeout: float = 120) -> None:
    """Until the background prover is gone: it holds the staging lock for its whole life."""
    wait_for(
        lambda: not hiding.alive(tree),
        timeout,
        "the background prover to finish (release its staging lock)",
    )


def _in_thread(target, done: dict) -> threading.Thread:
    """``target`` in a started thread; what it raises is kept in ``done["error"]`` for :func:`_joined`."""

    def run():
        try:
            target()
        except BaseException as exc:
            done["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    return t


def _joined(t: threading.Thread, done: dict) -> None:
    t.join()
    if "error" in done:
        raise done["error"]


def test_run_hides_unsealed_kernels_from_the_command_and_the_prover_brings_back_only_the_proven(
    tmp_path, evil_cubin, _stock
):
    tree, out = _stock(tmp_path, evil_cubin)
    env = _env(tmp_path, tree)
    look = "import os, sys, json; print(json.dumps(sorted(os.listdir(sys.argv[1]))))"
    p = subprocess.run(
        [sys.executable, "-m", "jitwarden.cli.main", "run", "--", sys.executable, "-c", look, tree],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert not set(seen) & {v["id"] for v in out.values()}  # nothing unproven where a loader looks
    _wait_prover(tree)
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("jitwarden: proved ")]
    assert len(lines) == 1 and "proved 2 of 3 unsealed Triton kernels" in lines[0], p.stderr
    assert "beside the workload start" in lines[0] and "1 refuted" in lines[0]
    victim = out["add_sm90"]["id"]
    assert not os.path.exists(os.path.join(tree, victim))
    for k in ("add_b256_sm90", "sub_sm90"):
        path = os.path.join(tree, out[k]["id"])
        s = seal.read(path)
        assert s is not None and s.producer.get("proven") and seal.check(path, s) == []
    assert hiding.staged(tree) == []
    [rec] = quarantined(tree)
    assert (rec.entry_id, rec.reason, rec.original_path) == (
        victim,
        "not-reproducible",
        os.path.join(tree, victim),
    )
    quarantine.restore(rec)  # restorable to its own place, not to the staging dir
    assert os.path.isdir(os.path.join(tree, victim)) and hiding.staged(tree) == []


def _hide_all(tree: str) -> int:
    fd = hiding.claim(tree)
    assert fd is not None
    assert hiding.hide(tree, tree_.unsealed_kernels([tree])) == []
    return fd


def test_a_lookup_of_a_hidden_kernel_waits_for_its_proof_and_is_served_not_recompiled(
    tmp_path, _stock
):
    """The guard waits while a prover holds the kernel; it is then a hit on the proven entry (nothing rewritten)."""
    tree, out = _stock(tmp_path)
    fd = _hide_all(tree)
    done = {}
    ended = threading.Event()
    looked_up = os.path.join(tree, out["add_sm90"]["id"])

    def prove_later():
        try:  # until the workload looks the hidden kernel up: Triton's cache manager makes the key's (empty) dir,
            # then the guard's lookup waits; the proofs begin only then
            wait_for(
                lambda: os.path.isdir(looked_up) or ended.is_set(),
                300,
                "the workload's lookup of the kernel",
            )
            done["looked_up"] = os.path.isdir(looked_up)
        finally:
            done["counts"] = prover.prove_staged([(tree, None, fd)], cores=1)
            os.close(fd)

    t = _in_thread(prove_later, done)
    try:
        again = compile_jobs(tree, jobs=ADD)  # the guard, in a fresh interpreter
    finally:
        ended.set()
        _joined(t, done)
    assert done["looked_up"]
    assert done["counts"].proven == 3
    assert again["add_sm90"]["cubin"] == out["add_sm90"]["cubin"]
    path = os.path.join(tree, out["add_sm90"]["id"])
    assert (
        seal.read(path).producer.get("by") == "sweep"
    )  # the prover's seal: the workload wrote nothing there
    assert (
        quarantined(tree) == []
    )  # a recompile meanwhile would have made the prover's copy "replaced"


@pytest.mark.parametrize("hooks", ["off", "on"])
def test_a_kernel_left_hidden_by_a_dead_prover_is_a_miss_then_taken_up_by_the_next_start(
    tmp_path, evil_cubin, _stock, hooks
):
    """Also where the torch hooks check loads and nothing else is swept at start-up: leftovers are taken up."""
    tree, out = _stock(tmp_path, evil_cubin)
    os.close(_hide_all(tree))  # the prover that hid them is gone
    w = hiding.wait_for(tree, out["sub_sm90"]["id"])
    assert w.outcome == "no-prover" and w.polls == 0  # nobody holds the lock: no waiting
    env = _env(tmp_path, tree)
    if hooks == "on":
        del env["JITWARDEN_TORCH_HOOKS"]
    rec = activation.activate(env=dict(env), quiet=True)
    assert rec.active
    _wait_prover(tree)
    assert hiding.staged(tree) == []
    assert seal.read(os.path.join(tree, out["sub_sm90"]["id"])).producer.get("proven")
    assert [r.reason for r in quarantined(tree)] == ["not-reproducible"]


def test_when_no_prover_can_start_the_proofs_are_made_before_the_workload(
    tmp_path, evil_cubin, monkeypatch, _stock
):
    tree, out = _stock(tmp_path, evil_cubin)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    rec = activation.activate(env=_env(tmp_path, tree), quiet=True)
    lines = [w for w in rec.warnings if w.startswith("proved ")]
    assert len(lines) == 1 and "proved 2 of 3" in lines[0] and "beside" not in lines[0], (
        rec.warnings
    )
    assert any("quarantined Triton cache entry" in w for w in rec.warnings)
    assert seal.read(os.path.join(tree, out["sub_sm90"]["id"])).producer.get("proven")
    assert hiding.staged(tree) == [] and not hiding.alive(tree)


def test_prove_wait_makes_the_proofs_before_the_workload(tmp_path, _stock):
    tree, out = _stock(tmp_path)
    rec = activation.activate(env=_env(tmp_path, tree, JITWARDEN_PROVE_WAIT="1"), quiet=True)
    assert [w for w in rec.warnings if w.startswith("proved 3 of 3")], rec.warnings
    assert all(seal.read(os.path.join(tree, v["id"])) for v in out.values())
    assert not os.path.exists(os.path.join(tree, PROVING_DIR))
    assert hiding.background({}) and not hiding.background({"JITWARDEN_PROVE_WAIT": "yes"})


def test_a_second_start_while_a_prover_runs_proves_its_own_new_kernels_itself(tmp_path, _stock):
    tree, out = _stock(tmp_path)
    fd = _hide_all(tree)  # a prover of another start-up holds the tree
    try:
        assert hiding.claim(tree) is None
        extra = compile_jobs(str(tmp_path / "other"), jobs=ADD, guarded=False)
        import shutil

        new = extra["add_sm90"]["id"]
        shutil.copytree(
            str(tmp_path / "other" / new), os.path.join(tree, new + "X")
        )  # another unsealed kernel
        rec = activation.activate(env=_env(tmp_path, tree), quiet=True)
        assert [w for w in rec.warnings if w.startswith("proved 1 of 1")], rec.warnings
        assert len(hiding.staged(tree)) == 3  # the other prover's entries are left to it
    finally:
        prover.prove_staged([(tree, None, fd)], cores=1)
        os.close(fd)
    assert hiding.staged(tree) == []


def test_a_staging_dir_that_is_a_symlink_is_never_used(tmp_path, _stock):
    tree, out = _stock(tmp_path)
    os.makedirs(tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", os.path.join(tree, PROVING_DIR))
    assert hiding.claim(tree) is None
    rec = activation.activate(env=_env(tmp_path, tree), quiet=True)
    assert [w for w in rec.warnings if w.startswith("proved 3 of 3")], (
        rec.warnings
    )  # proven before the start
    assert os.listdir(tmp_path / "elsewhere") == []


def test_a_bundle_restore_waits_for_a_hidden_kernel(tmp_path, _stock):
    """Inductor's bundle hook, like the guard, waits for a hidden kernel and then finds it proven in place."""
    pytest.importorskip("torch")
    from tests.unit.runtime.test_torchhooks import restore

    src, out = _stock(tmp_path / "src")
    dst = kernels.copy_cache(src, str(tmp_path / "dst"))
    fd = _hide_all(dst)
    done = {}
    ended = threading.Event()
    waiting = str(
        tmp_path / "waiting"
    )  # made by the child when torch's hook starts waiting for a hidden kernel

    def prove_later():
        try:
            wait_for(
                lambda: os.path.exists(waiting) or ended.is_set(),
                300,
                "the bundle hook to wait for a kernel",
            )
        finally:
            done["counts"] = prover.prove_staged([(dst, None, fd)], cores=1)
            os.close(fd)

    t = _in_thread(prove_later, done)
    try:
        res, err = restore(
            src, dst, [v["id"] for v in out.values()], "1", {"JW_WAITING_FILE": waiting}
        )
    finally:
        ended.set()
        _joined(t, done)
    assert os.path.exists(
        waiting
    )  # the hook waited for the hidden kernels (rather than restoring the bundle's)
    assert done["counts"].proven == 3 and res["restored"] == []
    for v in out.values():
        assert seal.read(os.path.join(dst, v["id"])).producer.get("by") == "sweep"
    assert quarantined(dst) == []


def test_a_fifo_planted_as_the_staging_lock_never_hangs_a_lookup(tmp_path, _stock):
    """Whoever can write the cache may plant a FIFO where the prover's lock goes: the guard's lookup still ends."""
    tree, out = _stock(tmp_path)
    key = out["add_sm90"]["id"]
    stage = os.path.join(tree, PROVING_DIR)
    os.makedirs(os.path.join(stage, key))  # looks hidden
    os.mkfifo(os.path.join(stage, ".jitwarden-lock"))
    assert hiding.hidden(tree, key) and not hiding.alive(tree)
    assert (
        hiding.wait_for(tree, key, timeout=5).outcome == "no-prover"
    )  # no prover holds a real lock: no waiting
    assert hiding.claim(tree) is None  # and no prover of ours takes a FIFO for its lock
    again = compile_jobs(tree, jobs=ADD)  # the guard, in a fresh interpreter: a hit, no hang
    assert again["add_sm90"]["cubin"] == out["add_sm90"]["cubin"]


def test_an_entry_is_never_hidden_into_or_put_back_through_a_link(tmp_path, _stock):
    tree, out = _stock(tmp_path)
    fd = hiding.claim(tree)
    stage = os.path.join(tree, PROVING_DIR)
    os.rename(stage, stage + ".real")
    os.makedirs(tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", stage)  # swapped for a link after the claim
    try:
        victim = os.path.join(tree, out["sub_sm90"]["id"])
        assert hiding.hide(tree, [victim]) == [victim] and os.path.isdir(victim)
        assert os.listdir(tmp_path / "elsewhere") == []
    finally:
        os.close(fd)


def test_doctor_names_kernels_left_hidden_by_a_prover_that_stopped(tmp_path, _stock):
    from tests.helpers.maint import cli

    tree, out = _stock(tmp_path)
    fd = _hide_all(tree)
    env = dict(_env(tmp_path, tree))
    busy = json.loads(cli("doctor", "--format", "json", env=env).stdout)
    [p] = [p for p in busy["problems"] if p["code"] == "proofs-pending"]
    assert p["severity"] == "info" and p["count"] == 3 and "being proven now" in p["message"]
    os.close(fd)  # the prover is gone
    gone = json.loads(cli("doctor", "--format", "json", env=env).stdout)
    [p] = [p for p in gone["problems"] if p["code"] == "proofs-pending"]
    assert (
        p["severity"] == "warn"
        and "stopped" in p["message"]
        and p["fix"].startswith("jitwarden run")
    )
    assert "Traceback" not in cli("doctor", env=env).stdout


# ---------------------------------------------------------------- the waits: one budget per process, no waiting in vain


@pytest.fixture
def _fresh_waits(monkeypatch):
    """This process's wait state as at its start (the budget is per process; tests share one)."""
    monkeypatch.setitem(hiding.BUDGET, "left", hiding.WAIT_S)
    monkeypatch.setattr(hiding, "_stalled", set())


def _stopped_prover(tmp_path, tree: str, fd: int) -> subprocess.Popen:
    """A real prover process holding ``tree``'s staging lock, stopped (SIGSTOP) before it makes any progress."""
    import signal

    code = (
        "import sys; from jitwarden.runtime import prover; "
        "prover.prove_staged([(sys.argv[1], None, int(sys.argv[2]))], cores=1)"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code, tree, str(fd)], pass_fds=[fd], env=_env(tmp_path, tree)
    )
    os.close(fd)  # the lock is the prover's alone now (its copy of the open file)
    os.kill(p.pid, signal.SIGSTOP)
    return p


def _resume(p: subprocess.Popen) -> None:
    import signal

    os.kill(p.pid, signal.SIGCONT)
    assert p.wait(timeout=300) == 0


def test_a_stopped_prover_costs_one_stall_bound_for_the_whole_process_not_a_wait_per_key(
    tmp_path, _stock, _fresh_waits
):
    """Issue 21: a SIGSTOPped prover made a workload wait 601 s for 2 keys. Now the first lookup gives up after the
    stall bound (no beat from the prover), and every later lookup of that tree gives up at once."""
    tree, out = _stock(tmp_path)
    p = _stopped_prover(tmp_path, tree, _hide_all(tree))
    try:
        keys = [out["add_sm90"]["id"], out["sub_sm90"]["id"]]
        assert all(hiding.hidden(tree, k) for k in keys) and hiding.alive(
            tree
        )  # hidden, and the lock is held
        first = hiding.wait_for(tree, keys[0], stall=1.0)
        second = hiding.wait_for(tree, keys[1], stall=1.0)
        assert first.outcome == "stalled" and first.polls > 0
        assert (
            second.outcome == "stalled" and second.polls == 0
        )  # no second wait: the tree is known stalled
        assert (
            first.seconds < 1.0 + 30
        )  # one stall bound (and scheduling slack on a loaded 2-core machine)
        assert hiding.BUDGET["left"] == pytest.approx(
            hiding.WAIT_S - first.seconds - second.seconds
        )
    finally:
        _resume(p)
    assert hiding.staged(tree) == []  # resumed, it proved them and put them back


def test_the_wait_budget_is_one_per_process_across_keys(
    tmp_path, _stock, _fresh_waits, monkeypatch
):
    """A prover that beats but never finishes: the lookups of all keys together wait at most the process budget."""
    tree, out = _stock(tmp_path)
    p = _stopped_prover(tmp_path, tree, _hide_all(tree))
    monkeypatch.setitem(hiding.BUDGET, "left", 0.5)
    try:
        first = hiding.wait_for(tree, out["add_sm90"]["id"], stall=600)
        second = hiding.wait_for(tree, out["sub_sm90"]["id"], stall=600)
        assert (first.outcome, second.outcome) == ("budget", "budget")
        assert first.polls > 0 and second.polls == 0 and hiding.BUDGET["left"] == 0.0
    finally:
        _resume(p)


def test_a_planted_staging_dir_with_a_held_lock_never_delays_a_sealed_entry_in_the_tree(
    sealed_tree, tmp_path, _fresh_waits
):
    """Issue 21: anyone who holds the staging lock, with a same-named dir planted in the staging dir, made a lookup
    wait although the sealed entry was in the tree. The sealed entry in the tree ends the wait before it starts."""
    from tests.helpers.guarded import kernel_entry

    tree = str(tmp_path / "triton")
    shutil.copytree(sealed_tree, tree)
    key = kernel_entry(tree)
    os.makedirs(os.path.join(tree, PROVING_DIR, key))  # the planted same-named dir
    held = hiding.claim(
        tree
    )  # someone else holds the lock (another open file: flock conflicts with ours)
    try:
        assert hiding.hidden(tree, key) and hiding.alive(tree)
        w = hiding.wait_for(tree, key, stall=600)
        assert (w.outcome, w.polls) == ("in-tree", 0)
    finally:
        os.close(held)


def test_a_staging_dir_or_lock_another_user_owns_means_no_wait(sealed_tree, tmp_path, _fresh_waits):
    from tests.helpers.guarded import kernel_entry

    if os.geteuid() != 0:
        pytest.skip("making files another user owns needs root")
    tree = str(tmp_path / "triton")
    shutil.copytree(sealed_tree, tree)
    key = kernel_entry(tree)
    stage = os.path.join(tree, PROVING_DIR)
    os.makedirs(os.path.join(stage, key + "x"))
    held = hiding.claim(tree)
    try:
        assert hiding.alive(tree) and hiding.hidden(tree, key + "x")
        os.chown(
            os.path.join(stage, ".jitwarden-lock"), 4242, 4242
        )  # a lock file planted by another user
        assert not hiding.alive(tree)
        assert hiding.wait_for(tree, key + "x", stall=600).outcome == "no-prover"
        os.chown(stage, 4242, 4242)  # a staging dir another user made
        assert not hiding.hidden(tree, key + "x")
        assert hiding.wait_for(tree, key + "x", stall=600) == hiding.Wait("not-ours", 0.0, 0)
    finally:
        os.close(held)
