"""One rule for "unchanged since sealed" (jitwarden.store.seal.unchanged), on real sealed kernels.

The time recorded inside the seal decides, never the seal file's own ctime: flip a cubin byte,
then ``chmod`` the seal (its ctime moves past the tampered cubin's), and every runtime check that
skips hashing an unchanged entry must still see the change. Decisions are made from the reason
codes of :func:`jitwarden.store.seal.judge`, never from its sentences.
"""

from __future__ import annotations

import os
import shutil

from jitwarden.model.layout import SEAL_FILE
from jitwarden.runtime import sweep
from jitwarden.runtime.guards import inductor_bundle
from jitwarden.store import seal
from tests.helpers.guarded import flip, kernel_entry


def _tampered_then_seal_chmodded(sealed_tree, tmp_path) -> str:
    tree = str(tmp_path / "triton" / "0")
    shutil.copytree(sealed_tree, tree)
    sweep.sweep(
        [tree]
    )  # the copy gave every file a new ctime: this pass reseals, recording a fresh time
    entry = os.path.join(tree, kernel_entry(tree))
    cubin, sealf = os.path.join(entry, "add_kernel.cubin"), os.path.join(entry, SEAL_FILE)
    flip(cubin)
    mode = 0o644
    while (
        os.lstat(sealf).st_ctime_ns <= os.lstat(cubin).st_ctime_ns
    ):  # until the clock ticks past the flip
        mode ^= 0o020
        os.chmod(sealf, mode)  # the attack: the seal's own ctime is now the newest
    return entry


def test_the_torch_hooks_see_a_flipped_cubin_after_the_seal_was_chmodded(sealed_tree, tmp_path):
    entry = _tampered_then_seal_chmodded(sealed_tree, tmp_path)
    assert inductor_bundle._seal_problems(entry) == (
        "corrupt",
        ["add_kernel.cubin does not match its sealed sha256"],
    )


def test_the_one_rule_reads_the_time_inside_the_seal_not_the_seal_files_ctime(
    sealed_tree, tmp_path
):
    entry = _tampered_then_seal_chmodded(sealed_tree, tmp_path)
    ctimes = {n: os.lstat(os.path.join(entry, n)).st_ctime_ns for n in os.listdir(entry)}
    assert ctimes[SEAL_FILE] > ctimes["add_kernel.cubin"]  # what the old rule trusted
    files = [c for n, c in ctimes.items() if not n.startswith(".jitwarden")]
    assert seal.unchanged(entry, files) is False
    untouched = [
        c for n, c in ctimes.items() if not n.startswith(".jitwarden") and n != "add_kernel.cubin"
    ]
    assert (
        seal.unchanged(entry, untouched) is True
    )  # the other files did not change since it was sealed


def test_a_seal_check_gives_reason_codes_the_sweep_decides_from(sealed_tree, tmp_path):
    entry = _tampered_then_seal_chmodded(sealed_tree, tmp_path)
    with open(os.path.join(entry, "extra.bin"), "wb") as f:
        f.write(b"x")
    found = seal.judge(
        entry,
        seal.read(entry),
        present=[n for n in os.listdir(entry) if not n.startswith(".jitwarden")],
    )
    assert not found.ok
    assert [(p.reason, p.names) for p in found.problems] == [
        (seal.DIGEST, ("add_kernel.cubin",)),
        (seal.NOT_COVERED, ("extra.bin",)),
    ]
    assert seal.check(entry, seal.read(entry)) == [
        "add_kernel.cubin does not match its sealed sha256"
    ]
    # A group file whose sentence happens to read like a relocated one is judged by its code and name only.
    fake = seal.Problem(
        ("__grp__add_kernel.json",),
        seal.NOT_COVERED,
        "__grp__add_kernel.json does not match its sealed sha256",
    )
    assert sweep._relocated_group(entry, fake) is False


def _old_seal(entry: str) -> None:
    """The entry's seal as jitwarden wrote it before seal schema 2: plain JSON, no MAC."""
    import json

    names = [n for n in os.listdir(entry) if not n.startswith(".jitwarden")]
    doc = {
        "schema": 1,
        "files": seal.compute(entry, names).files,
        "fingerprint": None,
        "producer": {},
        "sealed_at": 1.0,
        "fs_time_ns": 2**62,
    }
    with open(os.path.join(entry, SEAL_FILE), "w") as f:
        f.write(json.dumps(doc, sort_keys=True))


def test_after_an_upgrade_the_load_check_proves_an_old_seals_entry_and_seals_it_again(tmp_path):
    """An older jitwarden's seal is no seal, and no damage: the static launcher's check proves the kernel,
    seals it with this user's key and lets it load (it had raised on the seal it did not believe)."""
    from tests.helpers.guarded import ADD, compile_jobs

    tree = str(tmp_path / "triton" / "0")
    compile_jobs(tree, jobs=ADD, guarded=True)  # in place: its group names this very tree
    entry = os.path.join(tree, kernel_entry(tree))
    _old_seal(entry)
    assert seal.read(entry) is None
    assert sweep.check_loaded(entry, None) == (True, None)
    s = seal.read(entry)
    assert s is not None and s.producer.get("proven")


def test_after_an_upgrade_the_bundle_hook_proves_an_old_seals_dir_never_sets_it_aside(
    sealed_tree, tmp_path
):
    """A kernel dir an FX-graph bundle names, already on disk under an older jitwarden's seal, is proven and
    sealed again (it had been set aside as 'corrupt: not sealed')."""
    tree = str(tmp_path / "triton" / "0")
    shutil.copytree(sealed_tree, tree)
    entry = os.path.join(tree, kernel_entry(tree))
    _old_seal(entry)
    st = inductor_bundle._Staged()
    st.existing[entry] = (object(), tree)
    inductor_bundle._judge(st)
    assert st.refused == set() and os.path.isdir(entry)
    assert seal.read(entry) is not None
