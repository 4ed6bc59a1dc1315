"""``ops/budget`` (issue 45, item 1): the census of real captures and the pure plan over it."""

from __future__ import annotations

import os
import tarfile

import pytest

from jitwarden.model.entries import CacheRoot
from jitwarden.ops import budget as jb
from jitwarden.store import uselog
from tests.helpers.paths import DATA


def _item(id_, size, t=None, *, kind="triton", live=False, unreadable=None, inodes=1):
    return jb.Item(
        kind=kind,
        root="/r",
        id=id_,
        path=f"/r/{id_}",
        bytes=size,
        inodes=inodes,
        last_used=t,
        used_by="log" if t is not None else "none",
        live=live,
        unreadable=unreadable,
    )


def _census(*items):
    return jb.Census(roots=(), units=tuple(jb.Unit(items=(i,)) for i in items))


def test_least_recently_used_go_first_never_served_before_any_served():
    cen = _census(
        _item("new", 10, 300.0),
        _item("old", 10, 100.0),
        _item("never", 10),
        _item("mid", 10, 200.0),
    )
    plan = jb.plan_budget(cen, jb.Budget(max_bytes=20))
    assert [u.head.id for u in plan.evict] == ["never", "old"] and plan.fits
    assert plan.after["triton"].bytes == 20 and plan.before["triton"].entries == 4


def test_entries_a_live_process_holds_and_unreadable_ones_are_never_evicted():
    cen = _census(
        _item("held", 50, 1.0, live=True),
        _item("unknown", 50, unreadable="cannot list: permission denied"),
        _item("a", 10, 5.0),
    )
    plan = jb.plan_budget(cen, jb.Budget(max_bytes=0))
    assert [u.head.id for u in plan.evict] == ["a"]
    assert len(plan.pinned) == 1 and len(plan.unknown) == 1 and not plan.fits


def test_the_inode_budget_counts_files_and_directories():
    cen = _census(_item("a", 1, 1.0, inodes=9), _item("b", 1, 2.0, inodes=9))
    plan = jb.plan_budget(cen, jb.Budget(max_inodes=10))
    assert [u.head.id for u in plan.evict] == ["a"]
    assert jb.plan_budget(cen, jb.Budget(max_inodes=18)).evict == ()


def test_a_unit_is_as_recent_as_its_newest_member():
    u = jb.Unit(items=(_item("fx", 1, 50.0, kind="inductor"), _item("k", 1, 400.0)))
    cen = jb.Census(roots=(), units=(u, jb.Unit(items=(_item("x", 2, 100.0),))))
    assert [v.head.id for v in jb.plan_budget(cen, jb.Budget(max_bytes=2)).evict] == ["x"]


@pytest.fixture
def h200_inductor(tmp_path):
    with tarfile.open(os.path.join(DATA, "h200_inductor_cache.tgz")) as t:
        t.extractall(tmp_path, filter="data")
    ind = str(tmp_path / "ind")
    return (
        CacheRoot(kind="inductor", path=ind, source="cli"),
        CacheRoot(kind="triton", path=os.path.join(ind, "triton", "0"), source="cli"),
    )


def test_an_fx_graph_goes_with_the_triton_kernels_it_names(h200_inductor):
    """The H200 capture: one FX graph names 1 kernel, the other 3 (read from their pickles' kernel_hash)."""
    cen = jb.census(h200_inductor)
    fx = {u.head.id: u for u in cen.units if u.head.id.startswith("fxgraph/")}
    assert len(fx) == 2
    named = sorted(len([i for i in u.items if i.kind == "triton"]) for u in fx.values())
    assert named == [1, 3], {k: [i.id for i in u.items] for k, u in fx.items()}
    lone = [u for u in cen.units if u.head.kind == "triton"]
    assert len(lone) == 1  # the one kernel no graph names stands alone
    assert sum(len(u.items) for u in cen.units) == len(cen.units) + 4


def test_the_use_log_orders_the_units_it_names(h200_inductor):
    ind, tri = h200_inductor
    cen = jb.census(h200_inductor)
    fx_ids = sorted(u.head.id for u in cen.units if u.head.id.startswith("fxgraph/"))
    uselog.used(ind.path, fx_ids[0])
    cen = jb.census(h200_inductor)
    by_id = {u.head.id: u for u in cen.units}
    assert by_id[fx_ids[0]].last_used is not None and by_id[fx_ids[1]].last_used is None
    assert by_id[fx_ids[0]].live  # this process still lives: pinned
    plan = jb.plan_budget(cen, jb.Budget(max_bytes=0))
    assert fx_ids[0] not in {u.head.id for u in plan.evict}
    assert fx_ids[1] in {u.head.id for u in plan.evict}


def test_a_jax_entry_goes_with_its_atime_and_is_as_recent_as_jax_says(tmp_path):
    with tarfile.open(os.path.join(DATA, "real", "jax_cupy", "jax_cache.tar.xz")) as t:
        t.extractall(tmp_path, filter="data")
    root = tmp_path / "jax_cache"
    caches = sorted(n for n in os.listdir(root) if n.endswith("-cache"))
    for n, name in enumerate(
        caches[:3]
    ):  # as JAX writes it with jax_compilation_cache_max_size set
        (root / (name[: -len("cache")] + "atime")).write_bytes(
            ((n + 1) * 10**18).to_bytes(8, "little")
        )
    cen = jb.census([CacheRoot(kind="jax", path=str(root), source="cli")])
    units = {u.head.id: u for u in cen.units}
    u = units[caches[2]]
    assert [i.id for i in u.items] == [caches[2], caches[2][: -len("cache")] + "atime"]
    assert u.last_used == 3e9 and u.head.used_by == "jax-atime"
    plan = jb.plan_budget(cen, jb.Budget(max_bytes=cen.bytes - 1))
    assert plan.evict[0].head.id not in caches[:3]  # one JAX never recorded a use of goes first
    served = [v for v in jb.plan_budget(cen, jb.Budget(max_bytes=0)).evict if v.last_used]
    assert [v.head.id for v in served] == caches[:3]


def test_budget_of_reads_the_command_line_before_the_environment():
    env = {"JITWARDEN_BUDGET": "1G", "JITWARDEN_BUDGET_INODES": "7"}
    assert jb.budget_of("2G", None, env) == jb.Budget(max_bytes=2 << 30, max_inodes=7)
    assert jb.budget_of(None, "3", env) == jb.Budget(max_bytes=1 << 30, max_inodes=3)
    from jitwarden.model.errors import UsageError

    for size, inodes, e in (("lots", None, {}), (None, "x", {}), (None, None, {})):
        with pytest.raises(UsageError):
            jb.budget_of(size, inodes, e)


def test_census_of_a_root_with_nothing_there(tmp_path):
    cen = jb.census([CacheRoot(kind="triton", path=str(tmp_path / "gone"), source="cli")])
    assert cen.units == () and cen.problems


def test_an_entry_whose_lock_a_process_holds_is_skipped_whole(h200_inductor):
    import fcntl

    from jitwarden.model.layout import ENTRY_LOCK_FILE
    from jitwarden.store import entrylock

    cen = jb.census(h200_inductor)
    plan = jb.plan_budget(cen, jb.Budget(max_bytes=0))
    fx = next(u for u in plan.evict if len(u.items) == 4)  # the FX graph and its three kernels
    kernel = next(i for i in fx.items if i.kind == "triton")
    fd = entrylock.lock(kernel.path, ENTRY_LOCK_FILE, fcntl.LOCK_SH)  # a guard verifying it now
    try:
        outcomes = plan.execute(
            replan=lambda: (jb.plan_budget(c := jb.census(cen.roots), plan.budget), c)
        )
    finally:
        entrylock.unlock(fd)
    skipped = {o.path for o in outcomes if o.status == "skipped"}
    assert kernel.path in skipped and all(os.path.exists(i.path) for i in fx.items)
    others = [u for u in plan.evict if u is not fx]
    assert others and not any(os.path.exists(i.path) for u in others for i in u.items)


def test_the_torch_hook_logs_the_fx_graph_it_checks_before_inductor_loads_it(h200_inductor):
    from jitwarden.runtime.guards import inductor

    ind, _tri = h200_inductor
    fx_id = next(
        u.head.id for u in jb.census(h200_inductor).units if u.head.id.startswith("fxgraph/")
    )
    inductor.check_pickles(os.path.join(ind.path, fx_id))
    assert fx_id in uselog.read(ind.path).last
