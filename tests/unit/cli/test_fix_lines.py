"""Every fix line ``doctor`` prints, run as printed (issue 23, item 5).

A fix that is a command (it starts with ``jitwarden ``) is run exactly as printed, with ``-y`` where the verb
asks first, and the finding must be gone from the next ``doctor``. A finding that no single command clears
says what to do in words instead. The finding codes come from ``model/findings.py`` ``CATALOG``: a new code
with a fix is covered here without an edit.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import time

import pytest

from jitwarden.model.findings import CATALOG
from jitwarden.store import partition
from jitwarden.store import quarantine as q
from tests.helpers import kernels
from tests.helpers.maint import cli, damage_everything, file_of

ASKS_FIRST = {"clean", "relocate", "prune", "quarantine"}
"""Verbs that print a plan and ask: run with ``-y``, as a user answering yes would."""


def doctor(*args) -> dict[str, dict]:
    p = cli("doctor", "--format", "json", *args)
    assert p.returncode in (0, 1), p.stderr
    return {pr["code"]: pr for pr in json.loads(p.stdout)["problems"]}


def is_command(fix: str) -> bool:
    return fix.startswith("jitwarden ")


def run_fix(fix: str, doctor_args: tuple) -> dict[str, dict]:
    """Run ``fix`` as printed (the words after two spaces and a parenthesis are its comment); doctor's view after."""
    argv = shlex.split(fix.split("  (", 1)[0])
    assert argv[0] == "jitwarden", fix
    verb = argv[1:]
    if verb[0] == "doctor":
        return doctor(*verb[1:])  # a doctor fix is the better doctor run itself
    p = cli(*verb, *(["-y"] if verb[0] in ASKS_FIRST else []))
    assert p.returncode == 0, (fix, p.stdout, p.stderr)
    return doctor(*doctor_args)


def assert_fix_clears(code: str, doctor_args: tuple) -> dict:
    before = doctor(*doctor_args)
    assert code in before, (code, sorted(before))
    fix = before[code]["fix"]
    assert fix and is_command(fix), (code, fix)
    after = run_fix(fix, doctor_args)
    assert code not in after, (code, fix, after.get(code))
    return before[code]


@pytest.fixture
def home_cache(built_cache):
    """The session's real Triton cache copied to ``~/.triton/cache`` of the sandboxed HOME, where ``doctor`` and
    every fix find it without a path: (root, {label: record})."""
    src, manifest = built_cache
    root = os.path.join(os.environ["HOME"], ".triton", "cache")
    kernels.copy_cache(src, root)
    return root, {j["label"]: dict(j, path=os.path.join(root, j["id"])) for j in manifest}


@pytest.fixture
def damaged_home(home_cache, tmp_path):
    root, recs = home_cache
    outside = tmp_path / "outside"
    outside.mkdir()
    damage_everything(root, recs, str(outside))
    return root, recs


CODES_WITH_FIX = [c for c, k in CATALOG.items() if k.fix]
REBUILT = {"not-reproducible"}  # found (and cleaned) only with a rebuild


@pytest.mark.parametrize("code", CODES_WITH_FIX)
def test_every_catalog_fix_clears_its_finding(code, home_cache, tmp_path, evil_cubin):
    root, recs = home_cache
    args = ("--target", "90")
    if code in REBUILT:
        # another kernel's cubin under add_kernel's key, same symbol: every structural check passes, a rebuild differs
        with open(file_of(recs["add_sm90"], "cubin"), "wb") as f:
            f.write(evil_cubin)
        args = ("--rebuild",) + args
    else:
        (tmp_path / "outside").mkdir()
        damage_everything(root, recs, str(tmp_path / "outside"))
    shown = assert_fix_clears(code, args)
    assert shown["fix"] == CATALOG[code].fix + " --target sm_90"


def test_the_catalog_fixes_are_commands_and_every_code_is_tried():
    assert set(CODES_WITH_FIX) >= {
        "corrupt",
        "mismatch",
        "foreign-path",
        "moved",
        "incomplete",
        "unsafe",
        "stale",
        "orphan",
        "foreign-arch",
        "not-reproducible",
    }
    assert all(is_command(CATALOG[c].fix) for c in CODES_WITH_FIX)


def test_no_target_fix_names_the_gpu_and_clears_it(home_cache):
    assert_fix_clears("no-target", ())


def test_stale_does_not_call_another_venv_s_kernels_dead_weight(damaged_home):
    probs = doctor("--target", "90")
    assert "dead weight" not in probs["stale"]["message"]
    assert (
        "another venv or container on this machine may still use them" in probs["stale"]["message"]
    )


def test_unproven_says_in_words_that_the_guard_seals_them(home_cache):
    probs = doctor("--target", "90")
    fix = probs["unproven"]["fix"]
    assert not is_command(fix) and "jitwarden run -- CMD" in fix, fix
    # A rebuild proves the kernels but seals none: run again without it, the same line comes back.
    assert "unproven" in doctor("--target", "90")


def test_shared_root_says_what_to_do_and_blames_no_setting_the_user_never_made(home_cache):
    probs = doctor("--target", "90")
    p = probs["shared-root"]  # the sm_80, sm_120 and sm_121 entries beside the sm_90 ones
    assert "JITWARDEN_PARTITION" not in p["message"], p
    assert not is_command(p["fix"]) and "jitwarden run -- CMD" in p["fix"]
    assert "clean --stale" not in p["fix"]


def _other_partition(root: str, src_entry: str, digest: str, age_s: float) -> str:
    path = partition.path_for(root, digest)
    now = time.time() - age_s
    partition.ensure(path, digest, "another environment", "triton", now=now)
    dst = os.path.join(path, os.path.basename(src_entry))
    shutil.copytree(src_entry, dst)
    for d, _, files in os.walk(path):
        for n in files + [""]:
            os.utime(os.path.join(d, n) if n else d, (now, now))
    return path


def test_partitions_fix_prunes_the_old_and_leaves_the_recent_alone(home_cache):
    root, recs = home_cache
    old = _other_partition(root, recs["add_sm90"]["path"], "a" * 16, 40 * 86400)
    recent = _other_partition(root, recs["sub_sm90"]["path"], "b" * 16, 3 * 86400)
    probs = doctor("--target", "90")
    assert (
        probs["partitions"]["count"] == 1 and "more than 30 days" in probs["partitions"]["message"]
    )
    assert (
        probs["partitions-recent"]["fix"] is None
        and "may use them" in probs["partitions-recent"]["message"]
    )
    assert_fix_clears("partitions", ("--target", "90"))
    assert not os.path.exists(old) and os.path.isdir(recent)
    assert "partitions-recent" in doctor("--target", "90")


def test_quarantined_says_what_to_do_in_words(damaged_home):
    assert cli("clean", "--target", "90", "-y").returncode == 0
    fix = doctor("--target", "90")["quarantined"]["fix"]
    assert not is_command(fix)
    assert "jitwarden quarantine ls" in fix and "jitwarden quarantine restore ID" in fix


def test_empty_older_than_with_nothing_that_old_plans_nothing(damaged_home):
    root, _ = damaged_home
    assert cli("clean", "--target", "90", "-y").returncode == 0
    # An interrupted move's empty slot, made now: younger than 7 days like everything else here.
    slot = os.path.join(q.quarantine_dir(root), q.list_root(root)[0].id)
    payload = os.path.join(slot, next(n for n in os.listdir(slot) if n != q.RECORD))
    shutil.rmtree(payload) if os.path.isdir(payload) and not os.path.islink(payload) else os.unlink(
        payload
    )
    assert any(not r.present for r in q.list_root(root, include_empty=True))
    p = cli("quarantine", "empty", "--older-than", "7d", "--root", root)  # no -y, no terminal
    assert p.returncode == 0, p.stderr
    assert "nothing to delete" in p.stdout and "empty slot" not in p.stdout


def test_prune_with_nothing_old_enough_says_why(home_cache):
    root, recs = home_cache
    _other_partition(root, recs["sub_sm90"]["path"], "b" * 16, 3 * 86400)
    p = cli("prune", "--older-than", "30d", "-y")
    assert p.returncode == 0, p.stderr
    assert (
        "nothing to prune: 1 partition of other environments, the longest unused for 3" in p.stdout
    ), p.stdout
    assert "not more than 30" in p.stdout
