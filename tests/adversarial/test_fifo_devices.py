"""FIFOs and devices where jitwarden expects a regular file: reported, never opened for a blocking
or unbounded read. Every run has a timeout; a run past it is counted as a hang."""

from __future__ import annotations

import json
import os
import stat

import pytest

from jitwarden.store import partition, seal
from jitwarden.store import quarantine as q
from tests.adversarial.adv import clean_failure, jw, tree_hash


def seal_entry(entry: str) -> None:
    names = [n for n in os.listdir(entry) if not n.startswith(".jitwarden")]
    seal.write(entry, seal.compute(entry, names))


def cubin_of(entry: str) -> str:
    return next(os.path.join(entry, n) for n in os.listdir(entry) if n.endswith(".cubin"))


def every_reader(root, env, extra=()) -> dict:
    """Run each reader once: {verb: result}; every one finishes with an exit users can act on."""
    out = {}
    for args in (
        ("verify", root, "--target", "90"),
        ("ls", root, "--target", "90"),
        ("doctor", root, "--target", "90"),
        ("clean", root, "--target", "90", "--dry-run"),
        ("quarantine", "ls", "--root", root),
        *extra,
    ):
        p = jw(*args, env=env)
        clean_failure(p)
        out[" ".join(args[:2]) if args[0] == "quarantine" else args[0]] = p
    return out


def _json_entries(root, env):
    p = jw("verify", root, "--target", "90", "--format", "json", env=env)
    clean_failure(p)
    return p, {e["id"]: e for e in json.loads(p.stdout)["entries"]}


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "unsealed"])
def test_fifo_in_place_of_a_cubin(acache, env, sealed):
    root, recs = acache
    entry = recs["add_sm90"]["path"]
    if sealed:
        seal_entry(entry)
    cub = cubin_of(entry)
    os.unlink(cub)
    os.mkfifo(cub)
    before = tree_hash(root)
    ran = every_reader(root, env)
    eid = recs["add_sm90"]["id"]
    assert (
        ran["verify"].returncode == 1 and eid[:8] in ran["verify"].stdout
    )  # named, at error level
    assert ran["doctor"].returncode == 1
    assert eid[:8] in ran["ls"].stdout
    assert (
        eid[:8] in ran["clean"].stdout and "dry run" in ran["clean"].stderr
    )  # would be quarantined
    assert tree_hash(root) == before  # readers and a dry run change nothing, the FIFO included
    p, entries = _json_entries(root, env)
    assert p.returncode == 1  # the cubin Triton loads is not a file
    assert len(entries) == len(recs)  # the scan went on past it
    assert any(f["severity"] == "error" for f in entries[recs["add_sm90"]["id"]]["findings"])


def test_char_device_under_a_sealed_name(acache, env):
    root, recs = acache
    entry = recs["add_sm90"]["path"]
    seal_entry(entry)
    cub = cubin_of(entry)
    os.unlink(cub)
    try:
        os.mknod(cub, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero: endless bytes
    except (PermissionError, OSError):
        pytest.skip("cannot make a device node here")
    p, entries = _json_entries(root, env)
    assert p.returncode == 1 and "MemoryError" not in p.stderr
    assert len(entries) == len(recs)


def test_fifo_as_the_partition_info(tmp_path, env):
    base = str(tmp_path / "base")
    part = partition.path_for(base, "a" * 16)
    os.makedirs(part)
    os.mkfifo(os.path.join(part, ".jitwarden-partition.json"))
    for args in (
        ("ls", base, "--target", "90"),
        ("verify", base, "--target", "90"),
        ("doctor", base, "--target", "90"),
        ("prune", base, "--older-than", "0s", "--dry-run"),
        ("quarantine", "ls", "--root", base),
    ):
        clean_failure(jw(*args, env=env))


def test_fifo_as_a_quarantine_record(acache, env):
    root, recs = acache
    rec = q.move(recs["add_sm90"]["path"], "test", root=root)
    rp = os.path.join(rec.path, q.RECORD)
    os.unlink(rp)
    os.mkfifo(rp)
    for args in (
        ("quarantine", "ls", "--root", root),
        ("quarantine", "restore", rec.id, "--root", root, "--dry-run"),
        ("quarantine", "empty", "--root", root, "--dry-run"),
        ("clean", root, "--target", "90", "--dry-run"),
        ("doctor", root, "--target", "90"),
    ):
        clean_failure(jw(*args, env=env))


def test_fifo_as_a_seal_and_as_an_entry_lock(acache, env):
    root, recs = acache
    os.mkfifo(os.path.join(recs["add_sm90"]["path"], ".jitwarden-seal.json"))
    os.mkfifo(os.path.join(recs["sub_sm90"]["path"], ".jitwarden-lock"))
    before = tree_hash(root)
    every_reader(root, env)
    assert tree_hash(root) == before
    p, entries = _json_entries(root, env)
    assert len(entries) == len(recs)
    assert not [
        f for f in entries[recs["sub_sm90"]["id"]]["findings"] if f["severity"] == "error"
    ]  # a lock is no damage
    # The guard quarantines an entry whose seal is a FIFO ("seal unreadable"); the scan must not call it clean.
    assert entries[recs["add_sm90"]["id"]]["findings"], (
        "an entry whose seal is a FIFO is reported as clean"
    )


def test_fifo_as_group_and_metadata(acache, env):
    root, recs = acache
    e = recs["add_sm90"]
    for n in (f"__grp__{e['name']}.json", f"{e['name']}.json"):
        os.unlink(os.path.join(e["path"], n))
        os.mkfifo(os.path.join(e["path"], n))
    ran = every_reader(root, env)
    # Triton opens both files with a blocking open(): a FIFO there hangs the workload. Not a regular file
    # where the format has one is unreadable: corrupt, at error level (design.md section 3).
    assert ran["verify"].returncode == 1, ran["verify"].stdout
    p, entries = _json_entries(root, env)
    assert len(entries) == len(recs)
    assert any(f["severity"] == "error" for f in entries[e["id"]]["findings"]), entries[e["id"]]
