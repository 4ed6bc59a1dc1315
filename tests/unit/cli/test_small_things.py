"""Small things a new user tripped over (issue 23, item 11): footers that count what is shown, sizes in KiB,
refusals worded for people, JSON on every exit, docs naming paths that exist, a benchmark that reports a
ratio instead of failing on a loaded machine."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from tests.helpers.fleet import jw, node_env
from tests.helpers.maint import cli
from tests.helpers.paths import BENCHMARKS, DOCS, REPO
from tests.unit.ops.test_bundle import fleet, node_b  # noqa: F401 - the module's fixture: a real signed bundle


def test_ls_footer_counts_the_entries_shown(isolated_env, cache):
    root, recs = cache
    p = cli("ls", root, "--target", "90", "--name", "matmul*")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    rows = [l for l in lines[1:-1] if l.strip()]
    shown = sum(r["name"] == "matmul_kernel" for r in recs.values())
    assert len(rows) == shown
    assert lines[-1].startswith(f"{shown} of {len(recs)} entries shown"), lines[-1]
    # Unfiltered, the footer counts them all, as before.
    full = cli("ls", root, "--target", "90").stdout.splitlines()[-1]
    assert full.startswith(f"{len(recs)} entries ·"), full


def test_export_reports_sizes_as_every_other_command_does(fleet):  # noqa: F811
    rc, out, err = jw(fleet["env_a"], "export", "-o", str(fleet["base"] / "again.tar"))
    assert rc == 0, err
    assert re.search(r"\d+ entries, \d+(\.\d)? (B|KiB|MiB), fingerprint", out), out
    assert " bytes of cache" not in out


def test_an_import_refusal_names_machines_not_probe_notes(fleet, tmp_path):  # noqa: F811
    env_b = node_b(fleet, tmp_path, TORCHINDUCTOR_FREEZING="1")
    rc, out, err = jw(env_b, "import", fleet["bundle"])
    assert rc == 4 and "not installed: built for" in err, err
    assert "no GPU visible" not in err and "nvml:" not in err, err
    assert "built for no GPU · torch" in err and "this node is no GPU · torch" in err, err


def test_the_trust_hint_names_the_real_directory(fleet, tmp_path):  # noqa: F811
    env_b = node_env(str(tmp_path / "b"))
    rc, _, err = jw(env_b, "import", fleet["bundle"])
    assert rc == 1 and "none are configured" in err, err
    assert "<config>" not in err
    assert str(tmp_path / "b" / ".config" / "jitwarden" / "trusted-keys") in err, err


def test_canary_prints_json_on_exit_2(isolated_env):
    p = cli("canary", "--format", "json")
    assert p.returncode == 2  # the CPU torch here: no CUDA GPU
    doc = json.loads(p.stdout)
    assert (
        doc["command"] == "canary"
        and doc["ok"] is False
        and doc["exit"] == 2
        and "CUDA" in doc["error"]
    )
    assert len(p.stderr.strip().splitlines()) == 1
    # Every command, the same way: a usage error under --format json is still one JSON document on stdout.
    p = cli("verify", "--target", "sm_999", "--format", "json")
    assert p.returncode == 2 and json.loads(p.stdout)["error"].startswith(
        "unknown GPU architecture"
    )


def test_development_doc_names_the_venv_ci_makes():
    text = open(os.path.join(DOCS, "development.md"), encoding="utf-8").read()
    ci = open(os.path.join(REPO, ".ci", "run"), encoding="utf-8").read()
    made = set(re.findall(r"python3 -m venv (\.venv[\w-]*)", ci))
    named = re.findall(r"(\.venv[\w-]*)/bin/([\w-]+)", text)
    assert named
    for venv, tool in named:
        assert venv in made, (
            f"docs/development.md names {venv}/bin/{tool}; .ci/run makes {sorted(made)}"
        )
        here = os.path.join(sys.prefix, "bin", tool)
        if os.path.basename(sys.prefix) == venv:  # the suite runs in that venv: the tool is there
            assert os.path.exists(here), here


def test_bench_activate_reports_ratios_from_one_run_and_never_fails_on_load(isolated_env):
    p = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "bench_activate.py"), "--runs", "3"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "src")),
    )
    assert p.returncode == 0, p.stderr
    assert "FAIL" not in p.stdout and "PASS" not in p.stdout
    assert re.search(r"warm memo .* = +\d+\.\d\dx python's start", p.stdout), p.stdout
    assert re.search(r"cold \(no memo\) .* = +\d+\.\d\dx python's start", p.stdout), p.stdout
