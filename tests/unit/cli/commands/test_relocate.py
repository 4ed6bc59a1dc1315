"""A moved cache is not foreign, ``--rebuild`` still judges it, and ``relocate`` makes it hit again (issue 34, item 3).

Triton's group files hold absolute paths. A copied tree whose origin is gone names paths that exist nowhere:
Triton drops the group and recompiles (``moved``, a warning), unlike a copy whose origin still exists, which
Triton loads from (``foreign-path``, an error). ``relocate`` rebuilds the moved kernels and points the proven
ones at their own files, undoably.
"""

from __future__ import annotations

import json
import os
import shutil

from tests.helpers import kernels
from tests.helpers.maint import cli, file_of, snapshot
from tests.helpers.undo import run_printed
from tests.real import corpus

JOBS = kernels.jobs_for(archs=(90,), variants=kernels.VARIANTS[:3])


def codes(root: str, *args) -> dict[str, list[str]]:
    p = cli("verify", "--format", "json", "--all", "--target", "90", *args, root)
    assert p.returncode in (0, 1), p.stderr
    return {e["id"]: [f["code"] for f in e["findings"]] for e in json.loads(p.stdout)["entries"]}


def groups(root: str) -> dict[str, bytes]:
    return {k: v for k, v in snapshot(root).items() if "/__grp__" in k and "quarantine" not in k}


def test_a_real_capture_moved_here_is_a_warning_rebuilt_and_relocated(tmp_path):
    """The H200 capture unpacked as is: its groups name /root/out/work/..., which does not exist here."""
    tree = corpus.unpack("triton_plain", str(tmp_path), relocated=False)
    root = os.path.join(tree, "triton")
    p = cli("verify", "--format", "json", "--target", "90", root)
    doc = json.loads(p.stdout)
    kernels_ = [e for e in doc["entries"] if e["type"] == "kernel"]
    assert p.returncode == 0 and kernels_, (
        p.stderr
    )  # a warning: nothing the tool would load is wrong
    assert all([f["code"] for f in e["findings"]] == ["moved"] for e in kernels_)
    assert "/root/out/work/triton_plain/triton/" in kernels_[0]["findings"][0]["message"]
    # --rebuild still judges them: every kernel rebuilt, none skipped as "nothing to rebuild"
    p = cli("verify", "--rebuild", "--target", "90", root)
    assert f"rebuilt {len(kernels_)} kernels: {len(kernels_)} verified" in p.stdout, p.stdout
    before = groups(root)
    p = cli("relocate", "--target", "90", "-y", root)
    assert p.returncode == 0, p.stderr
    assert f"relocated {len(kernels_)}, skipped 0" in p.stdout
    assert all(c in ([], ["foreign-arch"]) for c in codes(root).values())
    for k, v in groups(root).items():
        assert v[2].decode().count(root + "/") == 7, (
            k
        )  # every child path names the entry's own file
    # the printed undo line, run as printed, puts every old group file back byte for byte
    undo = run_printed(p.stdout)
    assert undo.returncode == 0, undo.stderr
    assert groups(root) == before
    assert {c for cs in codes(root).values() for c in cs} == {"moved"}


def test_a_copied_cache_hits_in_triton_again_after_relocate(tmp_path):
    """Real Triton compiles: the copy misses while its groups name the gone tree, and hits after relocate."""
    first = str(tmp_path / "first")
    built = kernels.build_cache(first, JOBS)
    assert all(j["cache_hit"] is False for j in built)
    moved, control = str(tmp_path / "moved"), str(tmp_path / "control")
    shutil.copytree(first, moved)
    shutil.copytree(first, control)
    assert {c for cs in codes(moved).values() for c in cs} == {"foreign-path"}  # `first` exists
    shutil.rmtree(first)
    assert {c for cs in codes(moved).values() for c in cs} == {"moved"}
    # without relocate, Triton drops the dead groups and recompiles
    assert [j["cache_hit"] for j in kernels.build_cache(control, JOBS)] == [False] * len(JOBS)
    p = cli("relocate", "--target", "90", "-y", moved)
    assert p.returncode == 0 and f"relocated {len(JOBS)}" in p.stdout, p.stdout + p.stderr
    again = kernels.build_cache(moved, JOBS)
    assert [j["cache_hit"] for j in again] == [True] * len(JOBS)
    assert [j["hash"] for j in again] == [j["hash"] for j in built]


def test_relocate_proves_first_and_leaves_what_does_not_rebuild(tmp_path, evil_cubin):
    first = str(tmp_path / "first")
    built = {j["label"]: j for j in kernels.build_cache(first, JOBS)}
    moved = str(tmp_path / "moved")
    shutil.copytree(first, moved)
    shutil.rmtree(first)
    rec = dict(built["add_sm90"], path=os.path.join(moved, built["add_sm90"]["id"]))
    with open(file_of(rec, "cubin"), "wb") as f:  # another kernel's code under add_kernel's key
        f.write(evil_cubin)
    before = snapshot(moved)
    p = cli("relocate", "--target", "90", "--dry-run", moved)
    assert p.returncode == 0, p.stderr
    assert f"keep {rec['id'][:12]} as it is: has not-reproducible" in p.stdout
    assert snapshot(moved) == before  # --dry-run changes nothing
    p = cli("relocate", "--target", "90", "-y", "--format", "json", moved)
    doc = json.loads(p.stdout)
    assert {d["id"] for d in doc["done"]} == {built[k]["id"] for k in built if k != "add_sm90"}
    assert [k["id"] for k in doc["kept"]] == [rec["id"]] and doc["batch"]
    left = codes(moved)
    assert left[rec["id"]] == ["moved"]
    assert all(c == [] for i, c in left.items() if i != rec["id"])


def test_nothing_moved_is_nothing_to_relocate(cache):
    root, _ = cache
    p = cli("relocate", "--target", "90", "-y", root)
    assert p.returncode == 0 and "nothing to relocate" in p.stdout, p.stdout + p.stderr
    assert not os.path.exists(os.path.join(root, "jitwarden-quarantine"))


def test_the_relocate_undo_line_needs_no_tilde_and_works_from_another_directory(tmp_path):
    first = str(tmp_path / "first")
    kernels.build_cache(first, JOBS[:1])
    moved = str(tmp_path / "a dir with spaces")
    shutil.copytree(first, moved)
    shutil.rmtree(first)
    p = cli("relocate", "--target", "90", "-y", moved)
    line = next(x for x in p.stdout.splitlines() if x.startswith("undo: "))
    assert "~" not in line and "…" not in line and "--replace" in line
    assert run_printed(p.stdout, cwd="/").returncode == 0


def test_a_sealed_entry_is_relocated_unsealed_never_with_a_broken_seal(tmp_path):
    """A seal covers the group file: relocate sets the seal aside with it (the guard proves and seals the entry
    again on first use), so verify finds no seal that contradicts the entry."""
    from tests.helpers.guarded import compile_jobs

    first, moved = str(tmp_path / "first"), str(tmp_path / "moved")
    compile_jobs(first, guarded=True)  # sealed by the guard as it wrote them
    shutil.copytree(first, moved)
    shutil.rmtree(first)  # the tree the groups (and the seals' bytes) name is gone
    found = codes(moved)
    assert {c for cs in found.values() for c in cs} == {"moved"}, found
    before = snapshot(moved)
    p = cli("relocate", "--target", "90", "-y", moved)
    assert p.returncode == 0 and f"relocated {len(found)}," in p.stdout, p.stdout + p.stderr
    doc = json.loads(cli("verify", "--format", "json", "--all", "--target", "90", moved).stdout)
    assert all(e["findings"] == [] for e in doc["entries"]), doc["entries"]
    assert not any(
        e["sealed"] for e in doc["entries"]
    )  # proven here, sealed by the guard on first use
    assert run_printed(p.stdout).returncode == 0
    after = {
        k: v for k, v in snapshot(moved).items() if not k.startswith(("jitwarden-q", ".jitwarden-"))
    }
    assert after == before


def test_a_child_mapped_to_another_name_is_a_mismatch_kept_before_any_rebuild(tmp_path):
    """Issue 47: a moved group mapping ``add_kernel.cubin`` to ``<gone>/<id>/evil.cubin`` (a file planted in the
    entry) was "proven by a rebuild" (of add_kernel.cubin) and pointed at evil.cubin. It is a mismatch, named as
    such, kept before any rebuild, and nothing of that entry is written."""
    import pytest

    first = str(tmp_path / "first")
    built = kernels.build_cache(first, JOBS)
    moved = str(tmp_path / "moved")
    shutil.copytree(first, moved)
    shutil.rmtree(first)
    victim = built[0]["id"]
    entry = os.path.join(moved, victim)
    gname = next(n for n in os.listdir(entry) if n.startswith("__grp__"))
    with open(os.path.join(entry, gname)) as f:
        doc = json.load(f)
    cubin = next(k for k in doc["child_paths"] if k.endswith(".cubin"))
    shutil.copy(os.path.join(entry, cubin), os.path.join(entry, "evil.cubin"))
    doc["child_paths"][cubin] = os.path.join(first, victim, "evil.cubin")
    with open(os.path.join(entry, gname), "w") as f:
        json.dump(doc, f)
    found = codes(moved)
    assert "mismatch" in found[victim], found[victim]
    before = snapshot(moved)
    p = cli("relocate", "--target", "90", "-y", "--format", "json", moved)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    kept = {k["id"]: k["why"] for k in out["kept"]}
    assert "mismatch" in kept[victim], kept
    assert victim not in {d["id"] for d in out["done"]}
    assert len(out["done"]) == len(JOBS) - 1
    mine = [k for k in before if k.startswith(victim + "/")]
    assert len(mine) > 5
    after = snapshot(moved)
    assert {k: after.get(k) for k in mine} == {k: before[k] for k in mine}
    from jitwarden.adapters import triton as tri

    with pytest.raises(tri.ChildMismatch, match=f"{cubin} points to a file named evil.cubin"):
        tri.relocated_group(doc, entry, set(os.listdir(entry)))
