"""Reserved names planted by someone with write access to a cache root: jitwarden refuses them with
one clear line and never reads, writes, moves or deletes anything outside the root through them."""

from __future__ import annotations

import json
import os

from jitwarden.store import partition
from jitwarden.store import quarantine as q
from tests.adversarial.adv import clean_failure, jw, truncate_cubin


def quarantine_one(root, recs, env):
    truncate_cubin(recs["add_sm90"]["path"])
    p = jw("clean", root, "--target", "90", "-y", env=env)
    assert p.returncode == 0 and "quarantined 1" in p.stdout, p.stderr
    return q.list_root(root)[0]


def test_trash_symlink_out_of_the_root_is_refused_by_empty(acache, outside, env):
    root, recs = acache
    rec = quarantine_one(root, recs, env)
    os.symlink(outside, os.path.join(root, ".jitwarden-trash"))
    p = jw("quarantine", "empty", "--root", root, "-y", env=env)
    clean_failure(p, 2)
    assert ".jitwarden-trash" in p.stderr and len(p.stderr.strip().splitlines()) <= 2, p.stderr
    assert os.path.isdir(rec.payload_path)  # still restorable


def test_trash_symlink_out_of_the_root_is_refused_by_clean_purge(acache, outside, env):
    root, recs = acache
    truncate_cubin(recs["add_sm90"]["path"])
    os.symlink(outside, os.path.join(root, ".jitwarden-trash"))
    p = jw("clean", root, "--target", "90", "-y", "--purge", env=env)
    clean_failure(p, 2)
    assert os.path.isdir(recs["add_sm90"]["path"])


def test_quarantine_dir_symlink_out_of_the_root(acache, outside, env):
    root, recs = acache
    truncate_cubin(recs["add_sm90"]["path"])
    os.symlink(outside, os.path.join(root, "jitwarden-quarantine"))
    p = jw("clean", root, "--target", "90", "-y", env=env)
    clean_failure(p, 2)
    assert "jitwarden-quarantine" in p.stderr
    assert os.path.isdir(recs["add_sm90"]["path"])  # not moved out of the root
    for args in (
        ("quarantine", "empty", "--root", root, "-y"),
        ("quarantine", "restore", "a", "--root", root, "-y"),
    ):
        p = jw(*args, env=env)
        clean_failure(p, 2)
    p = jw("quarantine", "ls", "--root", root, env=env)
    clean_failure(p)


def test_quarantine_dir_that_is_a_file_or_foreign(acache, env, tmp_path):
    root, recs = acache
    truncate_cubin(recs["add_sm90"]["path"])
    with open(os.path.join(root, "jitwarden-quarantine"), "w") as f:
        f.write("not a dir\n")
    p = jw("clean", root, "--target", "90", "-y", env=env)
    clean_failure(p, 2)
    os.unlink(os.path.join(root, "jitwarden-quarantine"))
    os.mkdir(os.path.join(root, "jitwarden-quarantine"))
    os.chown(os.path.join(root, "jitwarden-quarantine"), 65534, 65534)
    p = jw("clean", root, "--target", "90", "-y", env=env)
    clean_failure(p, 2)
    assert os.path.isdir(recs["add_sm90"]["path"])


def test_partitions_dir_symlink_out_of_the_root_is_refused_by_prune(
    small_cache, outside, env, tmp_path
):
    base = str(tmp_path / "base")
    os.makedirs(base)
    parts = os.path.join(outside, "a")  # holds files and a subdirectory "b": looks like partitions
    os.symlink(parts, os.path.join(base, "jitwarden-v1"))
    p = jw("prune", base, "--older-than", "0s", "--orphan-age", "0", "-y", env=env)
    clean_failure(p, 2)
    assert "jitwarden-v1" in p.stderr
    p = jw("prune", base, "--keep-last", "1", "--orphan-age", "0", "-y", env=env)
    clean_failure(p, 2)


def test_lock_file_hard_linked_to_an_outside_file(acache, outside, env):
    root, recs = acache
    truncate_cubin(recs["add_sm90"]["path"])
    os.link(os.path.join(outside, "precious0.txt"), os.path.join(root, ".jitwarden-lock"))
    p = jw("clean", root, "--target", "90", "-y", env=env)
    clean_failure(p, 2)
    assert ".jitwarden-lock" in p.stderr


def test_lock_file_symlink_or_fifo(acache, outside, env):
    root, recs = acache
    truncate_cubin(recs["add_sm90"]["path"])
    os.symlink(os.path.join(outside, "precious0.txt"), os.path.join(root, ".jitwarden-lock"))
    p = jw("clean", root, "--target", "90", "-y", env=env)
    clean_failure(p, 2)
    os.unlink(os.path.join(root, ".jitwarden-lock"))
    os.mkfifo(os.path.join(root, ".jitwarden-lock"))
    p = jw("clean", root, "--target", "90", "-y", env=env)
    clean_failure(p, 2)


def _forge(rec, **fields):
    path = os.path.join(rec.path, q.RECORD)
    with open(path) as f:
        doc = json.load(f)
    doc.update(fields)
    with open(path, "w") as f:
        json.dump(doc, f)


def test_forged_record_cannot_move_an_outside_file(acache, outside, env):
    root, recs = acache
    rec = quarantine_one(root, recs, env)
    victim = os.path.join(outside, "precious1.txt")
    _forge(rec, original_path=victim)
    p = jw("quarantine", "restore", rec.id, "--root", root, "--replace", "-y", env=env)
    clean_failure(p)
    assert os.path.isfile(victim)
    # The record is read as naming the entry's own place inside the root, or refused.
    assert p.returncode == 2 or os.path.isdir(recs["add_sm90"]["path"])


def test_forged_entry_id_climbing_out(acache, outside, env):
    root, recs = acache
    rec = quarantine_one(root, recs, env)
    rel = os.path.relpath(os.path.join(outside, "precious1.txt"), root)
    _forge(rec, entry_id=rel, original_path=os.path.join(outside, "precious1.txt"))
    p = jw("quarantine", "restore", rec.id, "--root", root, "--replace", "-y", env=env)
    clean_failure(p)
    assert os.path.isdir(
        recs["add_sm90"]["path"]
    )  # back where its slot's name says, inside the root
    host = os.path.join(os.path.dirname(outside), "hostname")  # outside the root too
    with open(host, "w") as f:
        f.write("outside\n")
    rec = q.move(recs["add_sm90"]["path"], "test", root=root)
    _forge(rec, entry_id=host, original_path=host)
    p = jw("quarantine", "restore", rec.id, "--root", root, "--replace", "-y", env=env)
    clean_failure(p)
    with open(host) as f:
        assert f.read() == "outside\n"


def test_entry_parent_swapped_for_a_symlink_after_the_scan(acache, outside):
    """The mechanism, below the CLI: a move whose parent became a symlink fails instead of following it."""
    root, recs = acache
    inner = os.path.join(root, "sub")
    os.makedirs(inner)
    os.rename(recs["add_sm90"]["path"], os.path.join(inner, recs["add_sm90"]["id"]))
    os.rename(inner, os.path.join(root, "sub.real"))
    os.symlink(outside, inner)  # "sub" now leaves the root
    try:
        q.move(os.path.join(inner, "a"), "test", root=root, entry_id="sub/a")
    except (OSError, q.QuarantineError):
        pass
    else:
        raise AssertionError("moved a path through a symlink leaving the root")


def test_negative_or_absurd_orphan_age_is_refused(acache, env):
    root, recs = acache
    live = os.path.join(
        recs["add_sm90"]["path"], "tmp.pid_4242_0c4f6a7e-aaaa-bbbb-cccc-1234567890ab"
    )
    os.makedirs(live)
    for bad in ("-1e9", "nan", "inf", "-1", "1e400"):
        p = jw(
            "clean",
            root,
            "--target",
            "90",
            "--orphans",
            "-y",
            env=dict(env, JITWARDEN_ORPHAN_AGE=bad),
        )
        clean_failure(p, 2)
        assert "JITWARDEN_ORPHAN_AGE" in p.stderr
        p = jw("clean", root, "--target", "90", "--orphans", "--orphan-age", bad, "-y", env=env)
        clean_failure(p, 2)
        assert os.path.isdir(live)
    p = jw("prune", root, "--older-than", "1d", "--orphan-age", "-5", "-y", env=env)
    clean_failure(p, 2)


def test_partition_info_is_never_followed(tmp_path, outside, env):
    """A partition info that is a symlink to an outside file is not read through (nor replaced)."""
    base = str(tmp_path / "base")
    part = partition.path_for(base, "a" * 16)
    os.makedirs(part)
    os.symlink(
        os.path.join(outside, "precious0.txt"), os.path.join(part, ".jitwarden-partition.json")
    )
    assert partition.read_info(part) is None
    p = jw("prune", base, "--older-than", "0s", "--orphan-age", "0", "--dry-run", env=env)
    clean_failure(p)


def test_partition_root_is_opened_from_its_base(tmp_path, outside):
    """A lock or a move in a partition whose jitwarden-v1 was swapped for a symlink never lands outside."""
    from jitwarden.store import locks as lock

    base = str(tmp_path / "base")
    os.makedirs(base)
    os.symlink(outside, os.path.join(base, "jitwarden-v1"))
    part = os.path.join(base, "jitwarden-v1", "a")  # outside/a: a real directory out there
    try:
        fd = lock.acquire(part, timeout=1)
    except lock.LockError as exc:
        assert "jitwarden-v1 is a symlink" in str(exc)
    else:
        os.close(fd)
        raise AssertionError("took a lock through a symlinked partitions dir")
    try:
        q.move(os.path.join(part, "b"), "test", root=part)
    except OSError:
        pass
    else:
        raise AssertionError("moved an entry of a partition reached through a symlink")
