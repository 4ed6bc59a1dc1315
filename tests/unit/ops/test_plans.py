"""Typed plans (ops/plans.py): each is decided by a pure function and carried out by its execute().

Real directories and the real quarantine; the clean and prune commands' own tests
(tests/unit/cli/) run the same plans through the CLI.
"""

from __future__ import annotations

import os

import pytest

from jitwarden.ops import plans
from jitwarden.ops.plans import PartitionFacts
from jitwarden.store import quarantine as q


def entry(root, name, data=b"x" * 100):
    d = root / name
    d.mkdir(parents=True)
    (d / "k.cubin").write_bytes(data)
    return str(d)


def quarantined(tmp_path, names):
    root = tmp_path / "root"
    for n in names:
        q.move(entry(root, n), "corrupt", ("test",), root=str(root), entry_id=n, kind="triton")
    return str(root), q.list_root(str(root))


def test_restore_plan_names_conflicts_and_refuses_them_without_replace(tmp_path):
    root, recs = quarantined(tmp_path, ["a", "b"])
    entry(tmp_path / "root", "b", b"rebuilt")  # b was rebuilt since it was quarantined
    plan = plans.plan_restore(recs)
    assert {r.entry_id for r in plan.blocked} == {"b"}
    assert [d["replaces"] for d in sorted(plan.to_json(), key=lambda d: d["to"])] == [False, True]
    with pytest.raises(plans.PlanError) as exc:
        plan.execute()
    assert exc.value.done == 0
    assert os.path.exists(os.path.join(root, "b", "k.cubin")) and not os.path.exists(
        os.path.join(root, "a")
    )


def test_restore_plan_with_replace_puts_every_entry_back_and_quarantines_what_was_there(tmp_path):
    root, recs = quarantined(tmp_path, ["a", "b"])
    entry(tmp_path / "root", "b", b"rebuilt")
    done = plans.plan_restore(recs, replace=True).execute()
    assert sorted(done) == sorted(r.id for r in recs)
    assert open(os.path.join(root, "b", "k.cubin"), "rb").read() == b"x" * 100
    assert [r.entry_id for r in q.list_root(root)] == ["b"]  # the rebuilt one, now in quarantine


def test_empty_plan_deletes_the_chosen_and_only_those_older_than_the_cutoff(tmp_path):
    root, recs = quarantined(tmp_path, ["a", "b"])
    old = recs[0]
    now = max(r.quarantined_at for r in recs) + 100
    assert plans.plan_empty(recs, ids_given=False, older_than=1000, now=now).records == ()
    plan = plans.plan_empty([old], ids_given=True)
    assert plan.bytes == old.bytes and plan.slots == ()
    assert plan.execute() == [old.id]
    assert [r.id for r in q.list_root(root)] == [r.id for r in recs[1:]]


def test_prune_plan_never_removes_the_current_partition_even_when_told(tmp_path):
    base = tmp_path / "base"
    parts = [
        PartitionFacts(
            base=str(base),
            path=entry(base / "jitwarden-v1", d),
            digest=d,
            last_used=1.0,
            bytes=100,
            current=d == "cur",
        )
        for d in ("cur", "old")
    ]
    plan = plans.plan_prune(parts, keep=1, now=10.0, current="cur")
    assert [a.partition.digest for a in plan.actions] == ["old"] and plan.bytes == 100
    forged = plans.PrunePlan(tuple(plans.PruneAction(p, "forged") for p in parts), current="cur")
    outcomes = {o.path.rsplit("/", 1)[1]: o.status for o in forged.execute()}
    assert outcomes == {"cur": "skipped", "old": "deleted"}
    assert os.path.isdir(parts[0].path) and not os.path.exists(parts[1].path)


def test_clean_plan_acts_only_on_what_is_still_selected_when_judged_again(tmp_path):
    root = tmp_path / "root"
    acts = tuple(
        plans.Action(
            kind="triton",
            root=str(root),
            id=n,
            path=entry(root, n),
            type="kernel",
            bytes=100,
            mtime=1.0,
            reasons=("corrupt",),
            details=("t",),
        )
        for n in ("a", "b")
    )
    sel = plans.selection(now=10.0)
    plan = plans.CleanPlan(acts, sel)
    outcomes = plan.execute(
        replan=lambda: plans.CleanPlan(acts[:1], sel)
    )  # b healed since the plan was shown
    assert {(o.path.rsplit("/", 1)[1], o.status) for o in outcomes} == {
        ("a", "quarantined"),
        ("b", "skipped"),
    }
    assert os.path.exists(acts[1].path) and not os.path.exists(acts[0].path)
    assert [r.entry_id for r in q.list_root(str(root))] == ["a"]
