"""``clean`` on real Triton caches damaged in every way the vocabulary names."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from jitwarden.cli.main import main
from jitwarden.ops import plans as cleanplan
from jitwarden.store import quarantine as q
from tests.helpers import kernels
from tests.helpers.maint import cli, damage_everything, snapshot, sub

ERRORS = {"corrupt", "mismatch", "incomplete", "foreign-path", "unsafe"}


@pytest.fixture
def damaged(cache, tmp_path):
    root, recs = cache
    outside = tmp_path / "outside"
    outside.mkdir()
    codes = damage_everything(root, recs, str(outside))
    return root, recs, codes, str(outside)


def _outside_snapshot(outside):
    return snapshot(outside)


def test_dry_run_changes_nothing(damaged, capsys):
    root, recs, codes, outside = damaged
    before, before_out = snapshot(root), snapshot(outside)
    assert main(["clean", root, "--target", "90", "--dry-run"]) == 0
    text = capsys.readouterr().out
    for label, code in codes.items():
        if code in ERRORS:
            assert recs[label]["id"][:12] in text, label
    assert "plan: 6 entries" in text
    assert snapshot(root) == before and snapshot(outside) == before_out


def test_clean_moves_every_error_entry_and_leaves_the_rest_byte_identical(damaged, capsys):
    root, recs, codes, outside = damaged
    before, before_out = snapshot(root), snapshot(outside)
    assert main(["clean", root, "--target", "90", "-y", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    moved = {d["path"] for d in doc["done"] if d["status"] == "quarantined"}
    bad = {recs[label]["path"] for label, code in codes.items() if code in ERRORS}
    assert moved == bad
    after = snapshot(root)
    for label, rec in recs.items():
        rel = rec["id"]
        if rec["path"] in bad:
            assert rel not in after
        else:
            assert after[rel] == before[rel] and sub(after, rel) == sub(before, rel), label
    assert snapshot(outside) == before_out  # the symlinks' targets were never followed
    # every quarantined entry keeps where it came from and why, and comes back byte for byte
    recs_q = q.list_root(root)
    assert {r.original_path for r in recs_q} == bad
    assert {r.reason for r in recs_q} == ERRORS
    for r in recs_q:
        assert r.details and r.by == "clean"
    assert main(["quarantine", "restore", *[r.id for r in recs_q], "--root", root, "-y"]) == 0
    restored = snapshot(root)
    for label, rec in recs.items():
        assert restored[rec["id"]] == before[rec["id"]] and sub(restored, rec["id"]) == sub(
            before, rec["id"]
        ), label
    assert snapshot(outside) == before_out


def test_purge_and_empty_never_touch_a_symlink_target(damaged, capsys):
    root, recs, codes, outside = damaged
    before_out = snapshot(outside)
    assert main(["clean", root, "--target", "90", "-y", "--code", "unsafe"]) == 0
    assert main(["quarantine", "empty", "--root", root, "-y"]) == 0
    assert q.list_root(root) == []
    assert main(["clean", root, "--target", "90", "-y", "--purge"]) == 0
    assert snapshot(outside) == before_out
    assert not os.path.lexists(recs["add_sm80"]["path"]) and os.path.isdir(
        os.path.join(outside, "entry_dir")
    )
    capsys.readouterr()


def test_selectors(damaged, capsys):
    root, recs, codes, outside = damaged

    def planned(*args):
        main(["clean", root, "--target", "90", "--dry-run", "--format", "json", *args])
        return {a["id"]: a for a in json.loads(capsys.readouterr().out)["plan"]}

    assert set(planned("--stale")) == {recs["sub_sm90"]["id"]}
    orphans = planned("--orphans")
    assert orphans[recs["add_sm120"]["id"]]["scope"] == "leftovers"
    fa = planned("--foreign-arch")
    assert fa and all(recs_arch(recs, i) not in (90, None) for i in fa)
    assert set(planned("--code", "mismatch")) == {recs["add_b256_sm90"]["id"]}
    assert planned("--older-than", "1d") == {}
    inc = planned("--kind", "triton", "--code", "incomplete")
    assert recs["matmul_sm90"]["id"] in inc and all(a["kind"] == "triton" for a in inc.values())


def recs_arch(recs, entry_id):
    return next(r["arch"] for r in recs.values() if r["id"] == entry_id)


def test_orphans_lose_only_old_leftovers_and_fresh_ones_stay(cache, capsys):
    root, recs = cache
    entry = recs["add_sm90"]["path"]
    old = os.path.join(entry, "tmp.pid_11_0c4f6a7e-aaaa")
    fresh = os.path.join(entry, "tmp.pid_12_0c4f6a7e-bbbb")
    os.makedirs(old)
    os.makedirs(fresh)
    t = time.time() - 7200
    os.utime(old, (t, t))
    before = snapshot(entry)
    assert main(["clean", root, "--target", "90", "--orphans", "-y"]) == 0
    # the fresh tmp.pid_* marks a live writer: the whole entry is left alone this time
    assert snapshot(entry) == before
    assert "being written by a live process" in capsys.readouterr().err
    os.rmdir(fresh)
    assert main(["clean", root, "--target", "90", "--orphans", "-y"]) == 0
    assert not os.path.exists(old) and os.path.isdir(entry)
    (rec,) = q.list_root(root)
    assert (
        rec.entry_id == f"{recs['add_sm90']['id']}/tmp.pid_11_0c4f6a7e-aaaa"
        and rec.reason == "orphan"
    )
    assert q.restore(rec) is None and os.path.isdir(old)
    capsys.readouterr()


def test_nested_ids_and_single_files_round_trip(tmp_path):
    root = tmp_path / "root"
    (root / "fxgraph" / "ab").mkdir(parents=True)
    f = root / "fxgraph" / "ab" / "KEY123"
    f.write_bytes(b"\x00pickled-ish\xff")
    os.chmod(f, 0o640)
    d = root / "kernels" / "xy"
    d.mkdir(parents=True)
    (d / "a.so").write_bytes(b"ELF")
    link = root / "kernels" / "ln"
    link.symlink_to("/etc/hostname")
    before = snapshot(str(root))
    recs = [
        q.move(str(p), "corrupt", ["test"], root=str(root), kind="inductor") for p in (f, d, link)
    ]
    assert [r.entry_id for r in recs] == ["fxgraph/ab/KEY123", "kernels/xy", "kernels/ln"]
    assert all(os.sep not in r.id for r in recs)
    assert not f.exists() and not d.exists() and not os.path.lexists(link)
    listed = q.list_root(str(root))
    assert {r.entry_id for r in listed} == {r.entry_id for r in recs} and all(
        r.kind == "inductor" for r in listed
    )
    # the slot is taken again: restore refuses, even for a plain file
    f.write_bytes(b"rebuilt")
    rf = next(r for r in listed if r.entry_id == "fxgraph/ab/KEY123")
    with pytest.raises(q.QuarantineError):
        q.restore(rf)
    f.unlink()
    for r in listed:
        q.restore(r)
    after = snapshot(str(root))
    assert {k: v for k, v in after.items() if not k.startswith("jitwarden-quarantine")} == before


def test_restore_refuses_a_taken_slot_and_never_replaces(damaged, capsys):
    root, recs, codes, outside = damaged
    main(["clean", root, "--target", "90", "-y", "--code", "corrupt"])
    (rec,) = q.list_root(root)
    os.makedirs(rec.original_path)  # an empty dir: plain rename() would silently replace it
    p = cli("quarantine", "restore", rec.id, "--root", root, "-y")
    assert p.returncode == 2 and "exists" in p.stderr and "Traceback" not in p.stderr
    assert os.listdir(rec.original_path) == [] and q.list_root(root)[0].id == rec.id
    capsys.readouterr()


def test_planner_is_pure_and_default_is_errors():
    sel = cleanplan.selection(now=1.0)
    assert sel.codes == cleanplan.ERROR_CODES
    assert cleanplan.selection(stale=True).codes == {"stale"}
    assert cleanplan.selection(older_than=60).codes == frozenset()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["clean", "--code", "bogus", "/tmp"], "unknown finding code"),
        (["clean", "--older-than", "soon", "/tmp"], "not an age"),
        (["clean", "--kind", "nope", "/tmp"], "unknown cache kind"),
        (["clean", "/nonexistent/x"], "no such file"),
        (["prune", "--max-size", "lots"], "not a size"),
        (["prune"], "needs --keep"),
        (["quarantine", "restore", "nothing-like-this", "--root", "/tmp"], "no quarantined entry"),
        (["quarantine", "empty", "--older-than", "x"], "not an age"),
    ],
)
def test_bad_input_one_line_exit_2(args, needle):
    p = cli(*args)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_non_tty_without_yes_is_refused(damaged):
    root, *_ = damaged
    before = snapshot(root)
    p = cli("clean", root, "--target", "90")
    assert p.returncode == 2 and "pass -y" in p.stderr
    assert snapshot(root) == before


def test_waits_visibly_for_the_lock(damaged):
    from jitwarden.store import locks as lock

    root, *_ = damaged
    fd = lock.acquire(root)
    try:
        p = cli("clean", root, "--target", "90", "-y", "--lock-timeout", "1s")
        assert p.returncode == 2
        assert f"waiting for the lock on {root} held by pid {os.getpid()}" in p.stderr
        assert "gave up waiting" in p.stderr and "Traceback" not in p.stderr
        proc = subprocess.Popen(
            [sys.executable, "-m", "jitwarden", "clean", root, "--target", "90", "-y"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        first = proc.stderr.readline()  # blocks until it says it waits: no sleeping, no timing
        assert "waiting for the lock" in first, first
        assert q.list_root(root) == []  # nothing moved while we hold it
    finally:
        os.close(fd)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "got the lock" in err and len(q.list_root(root)) == 6


def _whole_or_quarantined(root, original, entries) -> tuple[int, int, set]:
    """Check each entry is wholly in place or wholly in one quarantine slot; (in place, quarantined, gone)."""
    now = snapshot(root)
    slots = {
        k.rsplit("/", 1)[1]: k
        for k in now
        if k.startswith("jitwarden-quarantine/") and k.count("/") == 2 and not k.endswith(q.RECORD)
    }
    placed = moved = 0
    gone = set()
    for e in entries:
        if e in now:
            assert e not in slots and now[e] == original[e] and sub(now, e) == sub(original, e), e
            placed += 1
        elif e in slots:
            assert now[slots[e]] == original[e] and sub(now, slots[e]) == sub(original, e), e
            moved += 1
        else:
            gone.add(e)
    return placed, moved, gone


def test_sigkill_leaves_every_entry_whole(built_cache, tmp_path):
    """Kill ``clean -y`` at random moments: each entry is wholly in place or wholly in quarantine."""
    src, manifest = built_cache
    root = str(tmp_path / "big")
    os.makedirs(root)
    for n in range(16):  # 16 copies of 24 entries, each made incomplete so clean takes all of them
        part = kernels.copy_cache(src, str(tmp_path / f"c{n}"))
        for name in os.listdir(part):
            new = f"{name[:44]}{n:08d}"
            os.rename(os.path.join(part, name), os.path.join(root, new))
            ptx = [f for f in os.listdir(os.path.join(root, new)) if f.endswith(".ptx")]
            os.unlink(os.path.join(root, new, ptx[0]))
    original = snapshot(root)
    entries = {k for k in original if "/" not in k}
    rng = random.Random(1234)
    # One whole run first, to learn how long one takes here: the kills then land anywhere inside it.
    t0 = time.monotonic()
    cli("clean", root, "--target", "90", "-y")
    whole = time.monotonic() - t0
    for r in q.list_root(root):
        q.restore(r)
    midway = 0
    for it in range(6):
        purge = it == 5
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jitwarden",
                "clean",
                root,
                "--target",
                "90",
                "-y",
                *(["--purge"] if purge else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        time.sleep(
            rng.uniform(0.1, 1.0) * whole
        )  # the kill's moment is what is tested: drawn within a whole run
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        placed, moved, gone = _whole_or_quarantined(root, original, entries)
        assert not gone or purge  # only --purge deletes, and only after the move
        midway += bool(placed and (moved or gone))
        # and whatever was moved comes back whole (an interrupted move leaves only an empty slot)
        for r in q.list_root(root):
            q.restore(r)
        entries -= gone
        placed, moved, _ = _whole_or_quarantined(root, original, entries)
        assert placed == len(entries) and moved == 0
    print(f"killed mid-way in {midway} of 6 runs (a whole run: {whole:.2f}s)")
