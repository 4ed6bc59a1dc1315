"""The start-up sweep's fast path cannot be fooled by metadata: a changed cubin is always re-hashed.

The fast path skips hashing an entry when nothing changed since it was sealed. Whatever
someone does to the metadata of the seal or of the cubin after changing the cubin's bytes,
the next sweep must hash it and quarantine it before Inductor's static launcher loads it.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from jitwarden.model.layout import SEAL_FILE
from jitwarden.runtime import sweep
from jitwarden.store import quarantine
from tests.helpers.guarded import (
    entries,
    flip,
    kernel_entry,
)  # sealed_tree: a fixture in tests/conftest.py


def _chmod(p):
    os.chmod(p, 0o600)
    os.chmod(p, 0o644)


def _touch_now(p):
    os.utime(p)


def _touch_future(p):
    t = time.time() + 86400
    os.utime(p, (t, t))


def _same_bytes_new_inode(p):
    shutil.copy2(p, p + ".x")
    os.replace(p + ".x", p)


SEAL_TRICKS = {
    "chmod": _chmod,
    "touch": _touch_now,
    "touch-future": _touch_future,
    "recopied": _same_bytes_new_inode,
}


def _ready(sealed_tree, tmp_path):
    tree = str(tmp_path / "triton" / "0")
    shutil.copytree(sealed_tree, tree)
    sweep.sweep([tree])  # the copy gave every file a new ctime: this pass reseals
    assert sweep.sweep([tree])[1]["rehashed"] == 0  # the fast path holds now
    return tree


@pytest.mark.parametrize("trick", sorted(SEAL_TRICKS))
def test_metadata_changes_of_the_seal_never_hide_a_flipped_cubin(sealed_tree, tmp_path, trick):
    tree = _ready(sealed_tree, tmp_path)
    victim = kernel_entry(tree)
    flip(os.path.join(tree, victim, "add_kernel.cubin"))
    time.sleep(
        0.02
    )  # the trick lands in a later clock tick than the flip, as an attacker would make sure
    SEAL_TRICKS[trick](os.path.join(tree, victim, SEAL_FILE))
    warnings, counts = sweep.sweep([tree])
    assert counts["quarantined"] == 1, (trick, warnings, counts)
    assert victim not in entries(tree)
    assert [r.entry_id for r in quarantine.list_root(tree)] == [victim]


def _restore_times(p, st):
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("how", ["in-place, times restored", "renamed over, times restored"])
def test_a_changed_cubin_with_its_old_times_and_mode_is_rehashed(sealed_tree, tmp_path, how):
    tree = _ready(sealed_tree, tmp_path)
    victim = kernel_entry(tree)
    cubin = os.path.join(tree, victim, "add_kernel.cubin")
    st = os.stat(cubin)
    if how.startswith("in-place"):
        flip(cubin)
    else:
        shutil.copyfile(cubin, cubin + ".x")
        flip(cubin + ".x")
        os.chmod(cubin + ".x", st.st_mode & 0o7777)
        os.replace(cubin + ".x", cubin)
    _restore_times(cubin, st)
    time.sleep(
        0.02
    )  # the seal's chmod lands in a later clock tick than the cubin's change (its ctime), as above
    _chmod(os.path.join(tree, victim, SEAL_FILE))
    warnings, counts = sweep.sweep([tree])
    assert counts["quarantined"] == 1, (how, warnings)


def test_a_fifo_as_the_seal_does_not_hang_the_sweep(sealed_tree, tmp_path):
    tree = _ready(sealed_tree, tmp_path)
    victim = kernel_entry(tree)
    seal_path = os.path.join(tree, victim, SEAL_FILE)
    os.unlink(seal_path)
    os.mkfifo(seal_path)
    import threading

    result = {}
    t = threading.Thread(target=lambda: result.update(out=sweep.sweep([tree])), daemon=True)
    t.start()
    t.join(30)
    if t.is_alive():
        with open(seal_path, "wb"):  # unblock the reader so the test process can exit
            pass
        pytest.fail("the sweep hung on a FIFO in place of a seal")
    warnings, counts = result["out"]
    assert counts["quarantined"] == 1 and victim not in entries(tree)
