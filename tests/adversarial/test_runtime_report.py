"""``doctor`` and ``status`` never say "all good" while protection is reduced or a killed deletion left trash."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers.guarded import JOBS, compile_jobs
from tests.helpers.maint import cli

SETTINGS = {
    "JITWARDEN_DISABLE": "1",
    "JITWARDEN_PARTITION": "0",
    "JITWARDEN_SWEEP": "0",
    "TRITON_CACHE_MANAGER": "mypkg.cache:MyManager",
}


@pytest.fixture
def rt_env(isolated_env, tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith("JITWARDEN_")}
    e["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    return e


def test_nothing_reduced_nothing_reported(rt_env):
    p = cli("doctor", env=rt_env)
    # On this CPU torch the torch-arch start-up check cannot run, so doctor says that instead of "all good".
    assert p.returncode == 0 and "no problem at warning or error level" in p.stdout
    assert "reduced protection" not in p.stdout.lower()
    assert json.loads(cli("status", "--format", "json", env=rt_env).stdout)["protection"] == []


@pytest.mark.parametrize("var", sorted(SETTINGS))
def test_each_setting_that_reduces_protection_is_reported_with_why_and_how_to_undo(rt_env, var):
    env = dict(rt_env, **{var: SETTINGS[var]})
    p = cli("doctor", env=env)
    assert p.returncode == 0, p.stderr  # a warning, not an error: nothing is damaged
    text = " ".join(p.stdout.split())
    assert "all good" not in text
    assert f"reduced-protection: {var}={SETTINGS[var]}:" in text and f"fix: unset {var}" in text
    doc = json.loads(cli("doctor", "--format", "json", env=env).stdout)
    (prob,) = [q for q in doc["problems"] if q["code"] == "reduced-protection"]
    assert prob["severity"] == "warn" and prob["fix"] == f"unset {var}" and var in prob["message"]
    s = cli("status", env=env)
    assert f"reduced protection {var}={SETTINGS[var]}" in " ".join(s.stdout.split())
    (note,) = json.loads(cli("status", "--format", "json", env=env).stdout)["protection"]
    assert note["what"] == f"{var}={SETTINGS[var]}" and note["fix"] == f"unset {var}"


def test_trash_a_killed_deletion_left_is_shown_with_its_size_and_fix(rt_env, tmp_path):
    root = rt_env["TRITON_CACHE_DIR"]
    compile_jobs(root, jobs=JOBS[:1])
    # What `quarantine empty` leaves when killed between renaming a slot into the trash and removing it.
    slot = os.path.join(root, ".jitwarden-trash", "20250101T000000-ABCDEF")
    os.makedirs(os.path.join(slot, "entry"))
    with open(os.path.join(slot, "entry", "k.cubin"), "wb") as f:
        f.write(b"\0" * 123_456)
    p = cli("doctor", env=rt_env)
    text = " ".join(p.stdout.split())
    assert "all good" not in text and "trash:" in text and "in 1 file(s)" in text
    assert "fix: jitwarden quarantine empty" in text
    doc = json.loads(cli("status", "--format", "json", env=rt_env).stdout)
    (note,) = [n for n in doc["protection"] if n["kind"] == "trash"]
    assert note["bytes"] == 123_456 and note["what"] == root
    assert "leftover trash" in cli("status", env=rt_env).stdout
