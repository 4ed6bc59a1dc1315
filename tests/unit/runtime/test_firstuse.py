"""First use of an unsealed Triton entry is proven by a rebuild (jitwarden.runtime.proof), on real compiles.

The substitute that passes every structural check: another kernel with the same name and
signature (``add_kernel`` computing x - y instead of x + y), compiled for the same target,
its cubin copied over the real one. Only re-assembling the entry's own PTX tells them apart.
"""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from jitwarden.model.layout import SEAL_FILE
from jitwarden.runtime import proof, sweep
from jitwarden.store import seal
from tests.helpers.guarded import ADD, assert_sound, compile_jobs, files_of, quarantined, substitute


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return compile_jobs(str(tmp_path_factory.mktemp("ref") / "cache"), guarded=False)


def test_substitute_passes_every_structural_check(tmp_path, reference, evil_cubin):
    """The premise: without a rebuild nothing tells the substitute from the real kernel."""
    from jitwarden.adapters import triton as tri

    root = str(tmp_path / "cache")
    out = compile_jobs(root, guarded=False)
    victim = out["add_sm90"]["id"]
    assert hashlib.sha256(evil_cubin).hexdigest() != reference["add_sm90"]["cubin"]
    substitute(root, victim, evil_cubin)
    errors, kind = tri.structural_errors(os.path.join(root, victim))
    assert errors == [] and kind == "kernel"


def test_guard_refuses_a_substituted_cubin_in_an_unsealed_entry(tmp_path, reference, evil_cubin):
    root = str(tmp_path / "cache")
    out = compile_jobs(root, guarded=False)  # a stock cache: nobody sealed it
    victim = out["add_sm90"]["id"]
    substitute(root, victim, evil_cubin)
    again = compile_jobs(root)
    assert (
        again["add_sm90"]["cubin"] == reference["add_sm90"]["cubin"]
    )  # recompiled, not the substitute
    recs = quarantined(root)
    assert [r.entry_id for r in recs] == [victim] and recs[0].reason == "not-reproducible", recs
    assert again["_stderr"].count("quarantined Triton cache entry") == 1
    with open(os.path.join(recs[0].path, recs[0].payload, "add_kernel.cubin"), "rb") as f:
        assert f.read() == evil_cubin  # kept, restorable
    assert_sound(root, victim)
    for label in (
        "add_b256_sm90",
        "sub_sm90",
    ):  # the genuine ones are proven and sealed, never moved
        assert_sound(root, out[label]["id"])
        assert seal.read(os.path.join(root, out[label]["id"])).producer.get("proven")


def test_a_proven_unsealed_entry_is_sealed_and_served_byte_identically(tmp_path, reference):
    root = str(tmp_path / "cache")
    out = compile_jobs(root, guarded=False)
    before = {lab: files_of(os.path.join(root, out[lab]["id"])) for lab in ("add_sm90", "sub_sm90")}
    again = compile_jobs(root)
    for lab in ("add_sm90", "sub_sm90"):
        path = os.path.join(root, out[lab]["id"])
        assert again[lab]["cubin"] == reference[lab]["cubin"]
        assert files_of(path) == before[lab]  # served from the cache, not rewritten
        s = seal.read(path)
        assert s.producer.get("legacy") and isinstance(
            s.producer.get("proven"), str
        )  # the ptxas that proved it
        assert seal.check(path, s) == []
    assert quarantined(root) == [] and "quarantined" not in again["_stderr"]


def test_deleting_the_seal_and_substituting_is_caught(tmp_path, reference, evil_cubin):
    root = str(tmp_path / "cache")
    out = compile_jobs(root)  # sealed by the guard
    victim = out["add_sm90"]["id"]
    os.unlink(os.path.join(root, victim, SEAL_FILE))
    substitute(root, victim, evil_cubin)
    again = compile_jobs(root)
    assert again["add_sm90"]["cubin"] == reference["add_sm90"]["cubin"]
    assert [(r.entry_id, r.reason) for r in quarantined(root)] == [(victim, "not-reproducible")]


def test_prove_off_trusts_structure_alone(tmp_path, reference, evil_cubin):
    """JITWARDEN_PROVE=0 is the accepted risk: the substitute is served and sealed as it is."""
    root = str(tmp_path / "cache")
    out = compile_jobs(root, guarded=False)
    victim = out["add_sm90"]["id"]
    substitute(root, victim, evil_cubin)
    again = compile_jobs(root, extra_env={"JITWARDEN_PROVE": "0"})
    assert again["add_sm90"]["cubin"] == hashlib.sha256(evil_cubin).hexdigest()
    assert seal.read(os.path.join(root, victim)).producer.get("proven") is False
    assert quarantined(root) == []


def test_an_unprovable_entry_is_a_miss(tmp_path, reference):
    """No ptxas here assembles the PTX (its .version names a release nobody has): not used, quarantined."""
    root = str(tmp_path / "cache")
    out = compile_jobs(root, guarded=False)
    victim = out["add_sm90"]["id"]
    p = os.path.join(root, victim, "add_kernel.ptx")
    with open(p) as f:
        text = f.read()
    assert ".version 8." in text
    with open(p, "w") as f:
        f.write(text.replace(".version 8.", ".version 19.", 1))
    pr = proof.prove_many([os.path.join(root, victim)])[os.path.join(root, victim)]
    assert pr.state == proof.UNPROVEN and pr.code == "unverifiable", pr
    again = compile_jobs(root)
    assert again["add_sm90"]["cubin"] == reference["add_sm90"]["cubin"]
    assert [(r.entry_id, r.reason) for r in quarantined(root)] == [(victim, "unverifiable")]


def test_sweep_proves_in_parallel_and_prints_one_line(tmp_path, evil_cubin):
    tree = str(tmp_path / "triton" / "0")
    out = compile_jobs(tree, guarded=False)
    victim = out["add_sm90"]["id"]
    substitute(tree, victim, evil_cubin)
    warnings, counts = sweep.sweep([tree])
    assert counts["quarantined"] == 1 and not os.path.exists(os.path.join(tree, victim))
    assert counts["proofs"].proven == 2 and counts["proofs"].refuted == 1
    summary = [w for w in warnings if w.startswith("proved ")]
    assert len(summary) == 1 and "proved 2 of 3 unsealed Triton kernels" in summary[0], warnings
    assert "1 refuted" in summary[0] and "JITWARDEN_PROVE=0" in summary[0]
    assert (
        sum("quarantined Triton cache entry" in w and "not-reproducible" in w for w in warnings)
        == 1
    )
    for lab in ("add_b256_sm90", "sub_sm90"):
        assert seal.read(os.path.join(tree, out[lab]["id"])).producer.get("proven")
    again_w, again = sweep.sweep([tree])  # sealed now: nothing is proven twice
    assert "proofs" not in again and again_w == []


def test_an_entry_changed_after_its_proof_is_not_sealed(tmp_path, evil_cubin):
    """The seal covers exactly the bytes the rebuild proved; a change in between is proven again."""
    root = str(tmp_path / "cache")
    out = compile_jobs(root, jobs=ADD, guarded=False)
    path = os.path.join(root, out["add_sm90"]["id"])
    proof.prove_ahead([path])
    substitute(root, out["add_sm90"]["id"], evil_cubin)  # after the proof, before the seal
    names = [n for n in os.listdir(path) if not n.startswith(".jitwarden")]
    why = proof.admit(path, names, None, {})
    assert why is not None and why[0] == "not-reproducible", why
    assert seal.read(path) is None


def test_summary_line():
    assert proof.ProofCounts(proven=0).summary() is None
    line = proof.ProofCounts(proven=211, refuted=1, unproven=0, seconds=1.234, jobs=16).summary()
    assert (
        line.startswith("proved 211 of 212 unsealed Triton kernels")
        and "1.23 s on 16 cores" in line
    )
    assert "1 not proven" in line and "\n" not in line
    assert json.dumps(proof.ProofCounts(proven=3, seconds=0.1, jobs=2).summary())


def test_prove_setting():
    assert proof.enabled({}) and proof.enabled({"JITWARDEN_PROVE": "1"})
    for off in ("0", "off", "false", "No"):
        assert not proof.enabled({"JITWARDEN_PROVE": off})


def test_doctor_reports_the_settings_that_accept_risk(isolated_env, tmp_path):
    from tests.helpers.maint import cli

    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "triton"))
    on = json.loads(cli("doctor", "--format", "json", env=env).stdout)
    assert not [p for p in on["problems"] if p["code"] in ("proofs-off", "torch-hooks")], on[
        "problems"
    ]
    off = json.loads(
        cli(
            "doctor",
            "--format",
            "json",
            env=dict(env, JITWARDEN_PROVE="0", JITWARDEN_TORCH_HOOKS="0"),
        ).stdout
    )
    codes = {p["code"]: p for p in off["problems"]}
    assert "JITWARDEN_PROVE=0" in codes["proofs-off"]["message"] and codes["proofs-off"][
        "fix"
    ].startswith("unset")
    assert "JITWARDEN_TORCH_HOOKS=0" in codes["torch-hooks"]["message"]
    table = cli("doctor", env=dict(env, JITWARDEN_PROVE="0")).stdout
    assert "proofs-off" in table and "Traceback" not in table


def test_activation_prints_one_proof_line_for_all_the_trees_it_sweeps(tmp_path, evil_cubin):
    """Under JITWARDEN_PARTITION=0 activation sweeps the user's Triton dir and Inductor's own tree: one line for both."""
    from jitwarden.runtime import activation
    from tests.helpers.guarded import clean_env

    env = clean_env(tmp_path)
    env.update(
        JITWARDEN_PARTITION="0",
        TRITON_CACHE_DIR=str(tmp_path / "triton"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
        JITWARDEN_PROVE_WAIT="1",  # proofs before the start
        JITWARDEN_TORCH_HOOKS="0",
    )  # no check as kernels load: activation sweeps the trees
    rec = activation.activate(env=dict(env), quiet=True)
    if "TORCHINDUCTOR_CACHE_DIR" not in rec.skipped:
        pytest.skip(f"torch is not installed here: {rec.skipped}")
    out = compile_jobs(env["TRITON_CACHE_DIR"], guarded=False)
    compile_jobs(str(tmp_path / "inductor" / "triton" / "0"), jobs=ADD, guarded=False)
    substitute(env["TRITON_CACHE_DIR"], out["add_sm90"]["id"], evil_cubin)
    rec = activation.activate(env=dict(env), quiet=True)
    lines = [w for w in rec.warnings if w.startswith("proved ")]
    assert len(lines) == 1 and lines[0].startswith("proved 3 of 4 unsealed Triton kernels"), (
        rec.warnings
    )
    assert sum("quarantined Triton cache entry" in w for w in rec.warnings) == 1


def test_each_proof_is_handed_over_as_it_ends_and_a_failing_handler_is_raised_after_all(
    tmp_path, evil_cubin
):
    """The sweep seals an entry while the other proofs run: every entry reaches the handler once, with its proof."""
    root = str(tmp_path / "cache")
    out = compile_jobs(root, guarded=False)
    substitute(root, out["add_sm90"]["id"], evil_cubin)
    paths = [os.path.join(root, out[k]["id"]) for k in ("add_sm90", "add_b256_sm90", "sub_sm90")]
    seen = []
    proofs = proof.prove_many(paths, jobs=2, on_proof=lambda p, pr: seen.append((p, pr)))
    assert sorted(p for p, _ in seen) == sorted(paths) and dict(seen) == proofs
    assert [proofs[p].state for p in paths] == [proof.REFUTED, proof.PROVEN, proof.PROVEN]
    calls = []

    def handler(p, pr):
        calls.append(p)
        raise RuntimeError(f"handler failed on {os.path.basename(p)}")

    with pytest.raises(RuntimeError, match="handler failed"):
        proof.prove_many(paths, jobs=2, on_proof=handler)
    assert sorted(calls) == sorted(paths)  # the others were still proven and handed over


def test_ptxas_identities_come_from_the_fingerprint_memo(tmp_path):
    """A warm start does not run ``ptxas --version`` nor hash ptxas again for its proofs."""
    from jitwarden.env import fingerprint, ptxas

    env = dict(os.environ, JITWARDEN_HOME=str(tmp_path / "home"))
    fingerprint.of_host(env=env)  # the persistent memo, as activation's slow path writes it
    selected = [p for _role, p in ptxas.selected(env)]
    if not selected:
        pytest.skip("no ptxas here")
    ptxas._MEMO.clear()
    proof._warm_ptxas(env)
    keys = {ptxas.stat_key(os.path.realpath(p), os.stat(os.path.realpath(p))) for p in selected}
    assert keys <= set(ptxas._MEMO)
