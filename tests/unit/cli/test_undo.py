"""Every ``undo:`` line runs as printed (issue 34, item 4).

``clean`` over two roots printed ``undo: jitwarden quarantine restore AD5UNI6GKBQ5 …``: cut, refused ("names 2
quarantined entries") and, with ``--root '~/.triton/cache'``, not a directory when pasted. Each run now has a
batch id recorded with every entry it quarantines; the line names it (and ``--root`` where restore would not
find a root by itself), whole, with paths a shell takes. Each test pastes the line into ``bash -c``.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import kernels
from tests.helpers.maint import cli, snapshot
from tests.helpers.undo import run_printed, undo_line

JOBS = kernels.jobs_for(archs=(90,), variants=kernels.VARIANTS[:3])


@pytest.fixture(scope="module")
def small_cache(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("small") / "cache")
    return root, kernels.build_cache(root, JOBS)


def _entries(root: str) -> dict:
    """The tree without what jitwarden itself keeps in a root (its quarantine, its lock file)."""
    return {
        k: v
        for k, v in snapshot(root).items()
        if not k.startswith(("jitwarden-quarantine", ".jitwarden-"))
    }


def _damaged_copy(src: tuple, dst: str) -> str:
    """A copy of the small cache at ``dst`` (its groups pointed there) with every cubin cut in half."""
    root, built = src
    kernels.copy_cache(root, dst)
    for j in built:
        p = os.path.join(dst, j["id"], f"{j['name']}.cubin")
        data = open(p, "rb").read()
        open(p, "wb").write(data[: len(data) // 2])
    return dst


def test_clean_over_two_roots_is_undone_by_its_printed_line(small_cache, tmp_path):
    a = _damaged_copy(small_cache, str(tmp_path / "a" / "cache"))
    b = _damaged_copy(small_cache, os.path.join(os.environ["HOME"], ".triton", "cache"))
    before = _entries(a), _entries(b)
    p = cli("clean", "--target", "90", "-y", a, b)
    assert p.returncode == 0 and f"quarantined {2 * len(JOBS)}" in p.stdout, p.stdout + p.stderr
    line = undo_line(p.stdout)
    assert "…" not in line and "~" not in line and "--batch clean-" in line
    undo = run_printed(p.stdout, cwd="/")
    assert undo.returncode == 0, undo.stderr
    assert f"restored {2 * len(JOBS)}" in undo.stdout
    for root, snap in zip((a, b), before):
        assert _entries(root) == snap


def test_a_root_restore_cannot_find_by_itself_is_named_quoted(small_cache, tmp_path):
    """With nowhere to note the root (JITWARDEN_HOME unusable), the line names it with --root, quoted."""
    root = _damaged_copy(small_cache, str(tmp_path / "a dir with spaces" / "cache"))
    before = _entries(root)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    env = dict(os.environ, JITWARDEN_HOME=str(blocker / "home"))
    p = cli("clean", "--target", "90", "-y", root, env=env)
    assert p.returncode == 0, p.stderr
    line = undo_line(p.stdout)
    assert f"--root '{root}'" in line, line
    assert run_printed(p.stdout, env=env).returncode == 0
    assert _entries(root) == before


def test_clean_all_has_a_one_command_undo(small_cache, tmp_path):
    root = str(tmp_path / "cache")
    kernels.copy_cache(small_cache[0], root)
    before = _entries(root)
    p = cli("clean", "--all", "-y", root)
    assert p.returncode == 0 and _entries(root) == {}, p.stderr
    assert run_printed(p.stdout).returncode == 0
    assert _entries(root) == before


def test_restore_all_of_a_root_and_batch_in_json(small_cache, tmp_path):
    root = str(tmp_path / "cache")
    kernels.copy_cache(small_cache[0], root)
    p = cli("clean", "--all", "-y", "--format", "json", root)
    batch = json.loads(p.stdout)["batch"]
    assert batch and batch.startswith("clean-")
    recs = json.loads(cli("quarantine", "ls", "--format", "json", "--root", root).stdout)
    assert {r["batch"] for r in recs["quarantined"]} == {batch}
    p = cli("quarantine", "restore", "--all", "--root", root, "-y")
    assert p.returncode == 0 and f"restored {len(JOBS)}" in p.stdout, p.stdout + p.stderr
    assert {k for k in _entries(root) if "/" not in k} == {j["id"] for j in small_cache[1]}


@pytest.mark.parametrize(
    "args",
    [(), ("SOMEID", "--batch", "x"), ("--all", "--batch", "x"), ("--batch", "clean-nosuch")],
)
def test_restore_needs_exactly_one_way_to_name_entries(args):
    p = cli("quarantine", "restore", *args, "-y")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "Traceback" not in p.stderr


def test_prune_keep_quarantined_is_undone_by_its_printed_line(small_cache, tmp_path):
    import time

    from jitwarden.store import partition

    root = str(tmp_path / "cache")
    kernels.copy_cache(small_cache[0], root)
    old = partition.path_for(root, "d" * 16)
    partition.ensure(old, "d" * 16, "another environment", "triton", now=time.time() - 40 * 86400)
    kernels.copy_cache(small_cache[0], os.path.join(old, "copy"))
    before = _entries(old)
    p = cli("prune", "--older-than", "30d", "--orphan-age", "0", "--keep-quarantined", "-y", root)
    assert p.returncode == 0 and "pruned 1 partition," in p.stdout, p.stdout + p.stderr
    assert not os.path.exists(old)
    assert "--batch prune-" in undo_line(p.stdout)
    assert run_printed(p.stdout).returncode == 0
    assert _entries(old) == before
