"""Paths named on the command line: a cache root only on evidence, a parent of roots searched, anything else refused.

``verify``, ``ls``, ``clean`` and ``doctor`` gate pods on their exit status: a directory that holds no cache
must never read as "0 with errors" (issue 23, item 1).
"""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import kernels
from tests.helpers.maint import cli, file_of


def _truncate(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


@pytest.fixture
def home_with_damage(built_cache, tmp_path):
    """A home whose ``~/.triton/cache`` is a real Triton cache with one truncated cubin: (home, damaged entry id)."""
    src, manifest = built_cache
    home = tmp_path / "home"
    cache = home / ".triton" / "cache"
    kernels.copy_cache(src, str(cache))
    rec = next(j for j in manifest if j["label"] == "add_sm90")
    _truncate(file_of(dict(rec, path=str(cache / rec["id"])), "cubin"))
    return str(home), rec["id"]


@pytest.mark.parametrize("where", [".triton", ""])
def test_a_parent_of_roots_is_searched_and_the_damage_beneath_it_found(home_with_damage, where):
    home, bad = home_with_damage
    p = cli(
        "verify", "--target", "90", "--format", "json", os.path.join(home, where) if where else home
    )
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert [c["root"] for c in doc["caches"]] == [os.path.join(home, ".triton", "cache")]
    codes = {e["id"]: [f["code"] for f in e["findings"]] for e in doc["entries"]}
    assert "corrupt" in codes[bad]
    assert "not a cache root; checking the 1 found beneath it" in p.stderr


def test_a_parent_of_roots_in_a_table_names_the_entry(home_with_damage):
    home, bad = home_with_damage
    p = cli("verify", "--target", "90", os.path.join(home, ".triton"))
    assert p.returncode == 1 and bad[:12] in p.stdout and "0 with errors" not in p.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["verify"],
        ["verify", "--target", "90"],
        ["ls"],
        ["clean", "--dry-run"],
        ["clean", "-y"],
        ["doctor"],
    ],
)
@pytest.mark.parametrize("shape", ["plain", "empty"])
def test_a_directory_with_no_cache_is_refused_in_one_line(tmp_path, command, shape):
    d = tmp_path / "photos"
    d.mkdir()
    if shape == "plain":
        for sub in ("2024", "2025/summer", "2025/summer/beach"):
            (d / sub).mkdir(parents=True)
            (d / sub / "a.jpg").write_bytes(b"\xff\xd8 not a kernel")
        (d / "notes.txt").write_text("hello\n")
    before = sorted(os.walk(d))
    p = cli(*command, str(d))
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "no cache of a known kind" in lines[0], p.stderr
    assert "0 with errors" not in p.stdout
    assert sorted(os.walk(d)) == before  # nothing was written or moved


def test_an_entry_directory_and_a_real_root_are_still_taken(cache):
    root, recs = cache
    rec = recs["add_sm90"]
    p = cli("verify", "--target", "90", "--format", "json", rec["path"])
    assert p.returncode == 0 and json.loads(p.stdout)["summary"]["entries"] == 1
    p = cli("verify", "--target", "90", "--format", "json", root)
    assert p.returncode == 0 and json.loads(p.stdout)["summary"]["entries"] == len(recs)
