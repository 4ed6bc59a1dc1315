"""Issue 34, item 10: the smaller things a new user trips over, each run as the user ran it."""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest

from jitwarden.runtime import setaside
from jitwarden.store import partition
from jitwarden.store import quarantine as q
from tests.helpers import kernels
from tests.helpers.maint import cli, damage_everything, file_of
from tests.unit.cli.test_render import run_pty


def test_prune_names_the_orphan_age_rule_that_kept_an_old_partition(cache):
    """A partition unused for 40 days but written to a minute ago is kept by --orphan-age: prune says so."""
    root, recs = cache
    path = partition.path_for(root, "c" * 16)
    partition.ensure(path, "c" * 16, "another environment", "triton", now=time.time() - 40 * 86400)
    shutil.copytree(recs["add_sm90"]["path"], os.path.join(path, recs["add_sm90"]["id"]))
    p = cli("prune", "--older-than", "30d", "-y", root)
    assert p.returncode == 0, p.stderr
    assert "nothing to prune: 1 partition of other environments kept" in p.stdout, p.stdout
    assert "--orphan-age (1h)" in p.stdout
    p = cli("prune", "--older-than", "30d", "--orphan-age", "0", "-y", root)
    assert p.returncode == 0 and "pruned 1 partition," in p.stdout, p.stdout + p.stderr


def test_not_reproducible_is_one_short_line_with_its_evidence_on_request(cache, evil_cubin):
    root, recs = cache
    with open(file_of(recs["add_sm90"], "cubin"), "wb") as f:
        f.write(evil_cubin)
    args = ("verify", "--rebuild", "--target", "90", "--kind", "triton", recs["add_sm90"]["path"])
    doc = json.loads(cli(*args, "--format", "json").stdout)
    (f,) = [f for e in doc["entries"] for f in e["findings"] if f["code"] == "not-reproducible"]
    assert len(f["message"]) < 160, f["message"]
    assert len(f["detail"]) > len(f["message"]) and "ptxas" in f["detail"]
    short, long_ = cli(*args), cli(*args, "--long")
    assert f["message"] in short.stdout and f["detail"] not in short.stdout
    assert f["detail"] in long_.stdout


def test_the_runtime_line_is_short_and_the_record_keeps_everything(tmp_path):
    entry = tmp_path / "cache" / ("A" * 52)
    entry.mkdir(parents=True)
    (entry / "x.cubin").write_bytes(b"x")
    details = ["no ptxas reproduces the cubin: " + "evidence " * 100]
    rec = q.move(str(entry), "not-reproducible", details, root=str(tmp_path / "cache"))
    line = setaside.line(rec, "Triton cache entry", "not-reproducible", details, "recompiling")
    assert len(line) < 400 and "whole: `jitwarden quarantine ls`" in line, line
    assert f"jitwarden quarantine restore {rec.id}" in line
    assert q.read(rec.path).details == tuple(details)


def test_kind_deepgemm_finds_the_deepgemm_row_ls_shows(vllm_root):
    env = dict(os.environ, VLLM_CACHE_ROOT=vllm_root)
    every = cli("ls", "--format", "json", env=env)
    shown = [e for e in json.loads(every.stdout)["entries"] if e["type"] == "deepgemm"]
    assert shown, every.stdout
    p = cli("ls", "--kind", "deepgemm", "--format", "json", env=env)
    got = json.loads(p.stdout)["entries"]
    assert p.returncode == 0 and [e["id"] for e in got] == [e["id"] for e in shown]


@pytest.mark.parametrize("cols", [60, 80])
def test_fix_commands_are_never_broken(built_cache, tmp_path, cols):
    home = tmp_path / "home"
    root = str(home / ".triton" / "cache")
    src, manifest = built_cache
    kernels.copy_cache(src, root)
    recs = {j["label"]: dict(j, path=os.path.join(root, j["id"])) for j in manifest}
    (tmp_path / "outside").mkdir()
    damage_everything(root, recs, str(tmp_path / "outside"))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), TERM="xterm")
    piped = json.loads(cli("doctor", "--target", "90", "--format", "json", env=env).stdout)
    fixes = [p["fix"] for p in piped["problems"] if p["fix"] and p["fix"].startswith("jitwarden ")]
    assert len(fixes) >= 5
    rc, text = run_pty(["doctor", "--target", "90"], env, cols)
    lines = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", x).strip() for x in text.splitlines()]
    for fix in fixes:
        cmd = fix.split("  (", 1)[0]
        assert any(cmd in x for x in lines), (cmd, text)


@pytest.mark.parametrize(
    "verb", ["verify", "clean", "relocate", "prune", "doctor", "ls", "quarantine restore"]
)
def test_help_pages_have_examples(verb):
    p = cli(*verb.split(), "--help")
    assert p.returncode == 0 and "examples:" in p.stdout, p.stdout
    shown = [x.strip() for x in p.stdout.split("examples:", 1)[1].splitlines()]
    assert any(x.startswith(f"jitwarden {verb}") for x in shown), shown


@pytest.mark.parametrize(
    "args, want",
    [
        (("verify", "--tagret", "90"), "did you mean --target?"),
        (("clean", "--dryrun"), "did you mean --dry-run?"),
        (("quarantine", "restore", "--bach", "x"), "did you mean --batch?"),
    ],
)
def test_a_mistyped_flag_gets_a_suggestion(args, want):
    p = cli(*args)
    assert p.returncode == 2 and want in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
