"""TorchInductor's Triton kernels checked before its static launcher loads them, on real sealed kernels.

TorchInductor's static CUDA launcher reads ``<inductor cache>/triton/<device>/<key>/<name>.cubin``
itself on an FX-graph-cache hit (torch/_inductor/runtime/triton_heuristics.py,
``reload_cubin_path``). With the torch hooks in the workload each entry is checked as it is loaded
(``sweep.check_loaded``, O(kernels used)) and activation walks nothing; with them off, activation
sweeps every entry first (``runtime/fullsweep.py``).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from jitwarden.model.layout import SEAL_FILE
from jitwarden.runtime import activation, sweep
from jitwarden.store import quarantine, seal
from tests.helpers import kernels
from tests.helpers.guarded import clean_env, compile_jobs, entries, flip, kernel_entry, snapshot


def test_unchanged_sealed_tree_costs_no_hashing_and_changes_nothing(sealed_tree, tmp_path):
    tree = str(tmp_path / "triton" / "0")
    shutil.copytree(sealed_tree, tree)
    kernels_before = snapshot(tree)
    sweep.sweep([tree])  # the copy gave every file a new ctime: first pass rehashes and reseals
    warnings, counts = sweep.sweep([tree])
    assert warnings == [] and counts["rehashed"] == 0 and counts["quarantined"] == 0
    assert counts["entries"] == len(entries(tree)) >= 3
    assert snapshot(tree) == kernels_before


def test_a_flipped_byte_in_a_sealed_cubin_is_quarantined_before_inductor_loads_it(
    sealed_tree, tmp_path
):
    tree = str(tmp_path / "triton" / "0")
    shutil.copytree(sealed_tree, tree)
    sweep.sweep([tree])
    victim = kernel_entry(tree)
    others = {k: v for k, v in snapshot(tree).items() if k[0] != victim}
    flip(os.path.join(tree, victim, "add_kernel.cubin"))
    warnings, counts = sweep.sweep([tree], digest="0123456789abcdef")
    assert counts["quarantined"] == 1 and len(warnings) == 1
    assert "add_kernel.cubin does not match its sealed sha256" in warnings[0]
    assert victim not in entries(tree)
    recs = quarantine.list_root(tree)
    assert [r.entry_id for r in recs] == [victim] and recs[0].by == "sweep"
    assert dict(snapshot(tree).items()) == others


def test_an_entry_restored_elsewhere_by_inductors_bundle_passes_and_is_resealed(
    sealed_tree, tmp_path
):
    """The bundle writes every file anew (new ctimes) and rewrites the group's absolute paths."""
    tree = str(tmp_path / "moved" / "triton" / "0")
    kernels.copy_cache(sealed_tree, tree)
    for n in entries(tree):  # as the bundle does: each file written anew, after the seal
        for f in os.listdir(os.path.join(tree, n)):
            if f.endswith(".cubin"):
                p = os.path.join(tree, n, f)
                with open(p, "rb") as fh:
                    data = fh.read()
                with open(p, "wb") as fh:
                    fh.write(data)
    warnings, counts = sweep.sweep([tree])
    assert (
        warnings == [] and counts["quarantined"] == 0 and counts["rehashed"] == len(entries(tree))
    )
    for n in entries(tree):
        s = seal.read(os.path.join(tree, n))
        assert seal.check(os.path.join(tree, n), s) == []
    assert sweep.sweep([tree])[1]["rehashed"] == 0


def test_a_group_pointing_into_another_tree_is_not_excused(sealed_tree, tmp_path):
    tree = str(tmp_path / "triton" / "0")
    shutil.copytree(sealed_tree, tree)  # group files still name sealed_tree: a copied cache
    victim = kernel_entry(tree)
    grp = os.path.join(tree, victim, "__grp__add_kernel.json")
    with open(grp) as f:
        text = f.read()
    with open(grp, "w") as f:
        f.write(text.replace(sealed_tree, "/elsewhere"))
    cubin = os.path.join(tree, victim, "add_kernel.cubin")
    with open(cubin, "rb") as fh:
        data = fh.read()
    with open(cubin, "wb") as fh:  # rewritten with the same bytes: the sweep looks again
        fh.write(data)
    warnings, counts = sweep.sweep([tree])
    assert counts["quarantined"] == 1 and victim not in entries(tree)


def test_unsealed_entries_are_judged_then_sealed_and_bad_ones_quarantined(tmp_path):
    tree = str(tmp_path / "triton" / "0")
    compile_jobs(tree, guarded=False)
    assert not any(os.path.exists(os.path.join(tree, n, SEAL_FILE)) for n in entries(tree))
    add, sub = kernel_entry(tree, "add_kernel"), kernel_entry(tree, "sub_kernel")
    shutil.copyfile(
        os.path.join(tree, sub, "sub_kernel.cubin"), os.path.join(tree, add, "add_kernel.cubin")
    )
    warnings, counts = sweep.sweep([tree])
    assert counts["quarantined"] == 1 and "mismatch" in warnings[0] and add not in entries(tree)
    assert counts["sealed"] >= 2
    for n in entries(tree):
        if os.path.exists(os.path.join(tree, n, "sub_kernel.cubin")) or n == sub:
            assert seal.read(os.path.join(tree, n)) is not None


def test_activation_sweeps_the_inductor_partition_and_can_be_turned_off(sealed_tree, tmp_path):
    env = clean_env(tmp_path, JITWARDEN_TORCH_HOOKS="0")
    rec = activation.activate(env=dict(env), quiet=True)
    part = rec.partitions.get("TORCHINDUCTOR_CACHE_DIR")
    if part is None:
        pytest.skip(f"torch is not installed here: {rec.skipped}")
    tree = os.path.join(part, "triton", "0")
    shutil.copytree(sealed_tree, tree)
    assert activation.activate(env=dict(env), quiet=True).warnings == ()
    victim = kernel_entry(tree)
    flip(os.path.join(tree, victim, "add_kernel.cubin"))
    off = activation.activate(env=dict(env, JITWARDEN_SWEEP="0"), quiet=True)
    assert off.warnings == () and victim in entries(tree)
    on = activation.activate(env=dict(env), quiet=True)
    assert any("at start-up" in w for w in on.warnings), on.warnings
    assert victim not in entries(tree)


def _partition_with_a_flipped_kernel(sealed_tree, env):
    """(activation record, its Triton partition holding the sealed kernels, the one whose cubin has a byte flipped)."""
    rec = activation.activate(env=dict(env), quiet=True)
    if "TORCHINDUCTOR_CACHE_DIR" not in rec.partitions:
        pytest.skip(f"torch is not installed here: {rec.skipped}")
    tree = rec.partitions["TRITON_CACHE_DIR"]
    for n in entries(sealed_tree):
        shutil.copytree(os.path.join(sealed_tree, n), os.path.join(tree, n))
    victim = kernel_entry(tree)
    flip(os.path.join(tree, victim, "add_kernel.cubin"))
    return rec, tree, victim


def test_activation_sweeps_the_triton_partition_where_inductor_puts_its_kernels(
    sealed_tree, tmp_path
):
    """With TRITON_CACHE_DIR set (activation sets it), Inductor's kernels live in the Triton partition."""
    env = clean_env(tmp_path, JITWARDEN_TORCH_HOOKS="0")
    _rec, tree, victim = _partition_with_a_flipped_kernel(sealed_tree, env)
    on = activation.activate(env=dict(env), quiet=True)
    assert any("at start-up" in w for w in on.warnings), on.warnings
    assert victim not in entries(tree) and len(entries(tree)) == len(entries(sealed_tree)) - 1


def test_without_partitions_the_users_own_dirs_are_swept(sealed_tree, tmp_path):
    """JITWARDEN_PARTITION=0: Inductor still loads from TRITON_CACHE_DIR behind the guard's back."""
    own = tmp_path / "own-triton"
    env = clean_env(
        tmp_path, JITWARDEN_PARTITION="0", TRITON_CACHE_DIR=str(own), JITWARDEN_TORCH_HOOKS="0"
    )
    shutil.copytree(sealed_tree, own)
    rec = activation.activate(env=dict(env), quiet=True)
    if (
        "TORCHINDUCTOR_CACHE_DIR" not in rec.skipped
        or "torch" in rec.skipped["TORCHINDUCTOR_CACHE_DIR"]
    ):
        pytest.skip(f"torch is not installed here: {rec.skipped}")
    assert rec.partitions == {}
    victim = kernel_entry(str(own))
    flip(os.path.join(own, victim, "add_kernel.cubin"))
    on = activation.activate(env=dict(env), quiet=True)
    assert any("at start-up" in w for w in on.warnings), on.warnings
    assert victim not in entries(str(own))
    (rec_,) = quarantine.list_root(str(own))
    assert rec_.fingerprint is None  # not a partition: sealed and judged under no fingerprint


# ---- with the torch hooks on: nothing walked at start-up, each kernel checked as it is loaded ----------


def test_with_the_hooks_on_activation_walks_nothing_and_every_python_it_starts_installs_them(
    sealed_tree, tmp_path
):
    env = clean_env(tmp_path)
    rec, tree, victim = _partition_with_a_flipped_kernel(sealed_tree, env)
    before = snapshot(tree)
    child = dict(env)
    on = activation.activate(env=child, quiet=True)
    assert (
        on.warnings == () and snapshot(tree) == before
    )  # not even the damaged one: it is judged when loaded
    from jitwarden.runtime.guards import boot_dir

    assert child["PYTHONPATH"].split(os.pathsep)[0] == boot_dir()
    ok, line = sweep.check_loaded(os.path.join(tree, victim), rec.digest)
    assert not ok and "about to load" in line and victim not in entries(tree)


def test_check_loaded_says_yes_only_to_a_sealed_unchanged_or_newly_proven_kernel(tmp_path):
    tree = str(tmp_path / "t")
    compile_jobs(tree, guarded=True)  # here, not copied: a copy's group files name the other tree
    names = entries(tree)
    good = kernel_entry(tree)
    assert sweep.check_loaded(os.path.join(tree, good), None) == (True, None)
    os.chmod(
        os.path.join(tree, good, "add_kernel.cubin"), 0o600
    )  # a ctime moved, the bytes did not
    assert sweep.check_loaded(os.path.join(tree, good), None) == (True, None)  # checked, resealed
    assert sweep.sealed_unchanged(os.path.join(tree, good))
    os.unlink(os.path.join(tree, good, SEAL_FILE))  # unsealed: proven by a rebuild, then sealed
    assert sweep.check_loaded(os.path.join(tree, good), None) == (True, None)
    assert seal.read(os.path.join(tree, good)) is not None
    other = next(n for n in names if n != good and os.path.exists(os.path.join(tree, n, SEAL_FILE)))
    link = os.path.join(tree, other, "extra")
    os.symlink("/etc/passwd", link)  # a planted link is never loaded
    assert sweep.check_loaded(os.path.join(tree, other), None)[0] is False
    assert sweep.check_loaded(str(tmp_path / "absent"), None)[0] is False
    alias = os.path.join(tree, "B" * 52)
    os.symlink(
        os.path.join(tree, good), alias
    )  # a sealed, unchanged entry behind a link in another key's place
    ok, line = sweep.check_loaded(alias, None)
    assert ok is False and "not a directory of its own" in line


def test_an_unknown_torch_loader_shape_sweeps_every_tree_in_use_at_once(
    sealed_tree, tmp_path, monkeypatch
):
    """A torch with no StaticAutotunerFuture (another release, a refactor): the trees are swept as it is imported."""
    import types

    from jitwarden.runtime import guards
    from jitwarden.runtime.guards import inductor

    tree = str(tmp_path / "part")
    shutil.copytree(sealed_tree, tree)
    sweep.sweep([tree])
    victim = kernel_entry(tree)
    flip(os.path.join(tree, victim, "add_kernel.cubin"))
    for k, v in clean_env(
        tmp_path,
        TRITON_CACHE_DIR=tree,
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind"),
        JITWARDEN_PROVE_WAIT="1",
    ).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delitem(guards.noted, guards.STATIC, raising=False)
    inductor._guard_static_loads(
        types.ModuleType("torch._inductor.codecache")
    )  # the shape it does not know
    assert victim not in entries(tree)
    assert guards.torch_status()[guards.STATIC].startswith("swept at import")


def test_an_entry_another_process_takes_between_listing_and_checking_is_no_warning(
    sealed_tree, tmp_path, monkeypatch
):
    """Several ranks sweep one tree (hooks off): one hides or sets aside what another has just listed."""
    from jitwarden.runtime import proof
    from jitwarden.runtime import tree as tree_mod

    tree = str(tmp_path / "t")
    shutil.copytree(sealed_tree, tree)
    gone = os.path.join(tree, "A" * 52)
    real = tree_mod.entry_names
    monkeypatch.setattr(
        tree_mod, "entry_names", lambda t: real(t) + ["A" * 52]
    )  # listed, then gone
    warnings, counts = sweep.sweep([tree])
    assert not [w for w in warnings if "could not check" in w], warnings
    made = proof.prove_ahead([gone])
    assert made.total == 0 and made.summary() is None  # never "proved 0 of 1 ... quarantined"


def test_a_seal_another_process_takes_before_the_recheck_is_no_warning(
    sealed_tree, tmp_path, monkeypatch
):
    """Listed as sealed, its seal gone by the time the sweep holds the entry's lock: never a "could not check"
    warning (it was an AttributeError). An entry with no seal is an unsealed one (issue 32: no seal believed is
    no seal): proven from its PTX and sealed again, never left loadable unjudged."""
    tree = str(tmp_path / "t")
    shutil.copytree(sealed_tree, tree)  # new ctimes: every sealed entry is rechecked
    for name in entries(tree):  # the copy's groups name the copy, as a relocated cache's do
        for f in os.listdir(os.path.join(tree, name)):
            if f.startswith("__grp__"):
                grp = os.path.join(tree, name, f)
                with open(grp) as fh:
                    doc = json.load(fh)
                doc["child_paths"] = {
                    c: os.path.join(tree, name, os.path.basename(p))
                    for c, p in doc["child_paths"].items()
                }
                with open(grp, "w") as fh:
                    json.dump(doc, fh)
    real = sweep._recheck

    def seal_taken(path, *args, **kwargs):
        os.unlink(os.path.join(path, SEAL_FILE))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(sweep, "_recheck", seal_taken)
    before = entries(tree)
    warnings, counts = sweep.sweep([tree])
    assert not [w for w in warnings if "could not check" in w], warnings
    assert entries(tree) == before and counts["quarantined"] == 0, warnings
    kernels = [n for n in before if os.path.exists(os.path.join(tree, n, SEAL_FILE))]
    assert len(kernels) >= 3 and counts["sealed"] == len(kernels)  # each proven and sealed again
    assert all(seal.read(os.path.join(tree, n)) is not None for n in kernels)


def _sealed_under(path: str, fingerprint: str) -> None:
    """Reseal ``path`` as another environment's partition sealed it: same files, same recorded time, its fingerprint."""
    s = seal.read(path)
    seal.write(
        path,
        seal.Seal(s.files, fingerprint, s.producer, s.sealed_at),
        seal.newest_ctime(path, list(s.files)),
    )


def test_a_kernel_sealed_under_another_fingerprint_is_never_loaded_moved_in_or_copied_in(tmp_path):
    """An entry of another environment's partition keeps its seal when moved into this one (its files keep their
    ctimes: "unchanged") or copied (new ctimes: rechecked, and every byte matches). The seal's fingerprint is
    not this partition's, so the static launcher's check refuses it and sets it aside as a mismatch, as the
    guard does on Triton's own loads; a root that is no partition judges by no fingerprint."""
    tree = str(tmp_path / "t")
    compile_jobs(tree, guarded=True)
    moved, copied = [n for n in entries(tree) if os.path.exists(os.path.join(tree, n, SEAL_FILE))][
        :2
    ]
    mine, theirs = "b" * 16, "a" * 16
    for name in (moved, copied):
        _sealed_under(os.path.join(tree, name), theirs)
    assert sweep.sealed_unchanged(
        os.path.join(tree, moved)
    )  # unpartitioned: no fingerprint to judge by
    assert sweep.check_loaded(os.path.join(tree, moved), None) == (True, None)
    a_file = next(
        f for f in sorted(os.listdir(os.path.join(tree, copied))) if not f.startswith(".jitwarden")
    )
    os.chmod(
        os.path.join(tree, copied, a_file), 0o600
    )  # a new ctime, as a copy gives, the bytes the same
    for name in (moved, copied):
        path = os.path.join(tree, name)
        assert not sweep.sealed_unchanged(path, mine)
        ok, line = sweep.check_loaded(path, mine)
        assert (
            ok is False and f"sealed under fingerprint {theirs}, this partition is {mine}" in line
        ), line
        assert name not in entries(tree)
    recs = quarantine.list_root(tree)
    assert sorted(r.entry_id for r in recs) == sorted([moved, copied]) and {
        r.reason for r in recs
    } == {"mismatch"}


def test_the_sweep_and_the_bundle_hook_refuse_a_seal_of_another_fingerprint(tmp_path):
    from jitwarden.runtime.guards import inductor_bundle

    tree = str(tmp_path / "t")
    compile_jobs(tree, guarded=True)
    name = kernel_entry(tree)
    path = os.path.join(tree, name)
    _sealed_under(path, "a" * 16)
    assert inductor_bundle._seal_problems(path) == ("", [])
    assert inductor_bundle._seal_problems(path, "a" * 16) == ("", [])
    code, problems = inductor_bundle._seal_problems(path, "b" * 16)
    assert code == "mismatch" and problems == [
        f"sealed under fingerprint {'a' * 16}, this partition is {'b' * 16}"
    ]
    warnings, counts = sweep.sweep([tree], digest="b" * 16)
    assert counts["quarantined"] == 1 and name not in entries(tree), warnings
    assert [r.reason for r in quarantine.list_root(tree)] == ["mismatch"]


def test_a_forged_fingerprint_in_a_seal_is_refused_and_not_echoed_whole():
    from jitwarden.store.seal import foreign

    assert (
        foreign("a" * 16, "a" * 16) is None
        and foreign(None, "b" * 16) is None
        and foreign("a" * 16, None) is None
    )
    line = foreign("x" * 3_000_000, "b" * 16)
    assert line.startswith("sealed under fingerprint 'xxx") and len(line) < 200
    assert foreign(12, "b" * 16) == "sealed under fingerprint '12'…, this partition is " + "b" * 16
