"""The conventions users bring from pip, uv, gh and hf (issue 23, item 10): ``-V``, one ``-q``, completion,
"did you mean", one meaning per flag, one JSON shape for plans, a command that says where caches live, and
``clean --all``. Every command runs as a user runs it: ``python -m jitwarden`` in a child process, on real
Triton caches compiled on the CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from jitwarden import __version__
from tests.helpers.maint import cli, snapshot

PLAN_FIELDS = ["id", "kind", "root", "path", "bytes", "why"]
DONE_FIELDS = ["id", "path", "status", "why", "bytes", "quarantine_id"]


@pytest.fixture
def env(isolated_env, tmp_path):
    e = dict(os.environ)
    e["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    return e


def one_line_error(p, *words):
    assert p.returncode == 2, (p.stdout, p.stderr)
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


def test_dash_v_and_version():
    for flag in ("-V", "--version"):
        p = cli(flag)
        assert p.returncode == 0 and p.stdout.strip() == f"jitwarden {__version__}", p.stderr


def test_did_you_mean_for_an_unknown_verb():
    one_line_error(cli("docter"), "unknown command 'docter'", "did you mean `jitwarden doctor`")
    one_line_error(cli("quarantin", "ls"), "did you mean `jitwarden quarantine`")
    one_line_error(
        cli("frobnicate"), "unknown command 'frobnicate'", "doctor"
    )  # nothing close: the list


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_script_is_generated_for_every_command(shell):
    p = cli("completion", shell)
    assert p.returncode == 0, p.stderr
    script = p.stdout
    for word in (
        "doctor",
        "quarantine",
        "restore",
        "--keep-last",
        "--keep-cubins",
        "--format",
        "completion",
        "push",
        "pull",
    ):
        assert word in script, word
    binary = shutil.which(shell)
    if binary and shell != "fish":  # the script parses in its shell
        check = subprocess.run([binary, "-n"], input=script, text=True, capture_output=True)
        assert check.returncode == 0, check.stderr
    one_line_error(cli("completion", "tcsh"), "completion")


QUIET = [
    "doctor",
    "status",
    "ls",
    "verify",
    "clean",
    "prune",
    "fingerprint",
    "dir",
    "canary",
    "keygen",
    "export",
    "import",
    "push",
    "pull",
    "metrics",
    "run",
    "quarantine ls",
    "quarantine restore",
    "quarantine empty",
    "quarantine purge",
]


@pytest.mark.parametrize("command", QUIET)
def test_quiet_is_offered_with_one_meaning_everywhere(command):
    p = cli(*command.split(), "--help")
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())
    assert "-q, --quiet" in text, text
    if command != "run":
        assert "errors and questions only on stderr" in text


def test_quiet_keeps_errors_and_drops_notes(env, cache):
    root, recs = cache
    loud = cli("clean", root, "--target", "90", "--foreign-arch", "--dry-run", env=env)
    assert loud.returncode == 0 and "dry run: nothing changed" in loud.stderr
    quiet = cli("clean", root, "--target", "90", "--foreign-arch", "--dry-run", "-q", env=env)
    assert (
        quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == loud.stdout
    )  # the result unchanged
    one_line_error(cli("clean", root, "--older-than", "7", "-q", env=env), "an age needs a unit")
    # -q never asks a question whose plan it may have hidden.
    one_line_error(
        cli("clean", root, "--target", "90", "--foreign-arch", "-q", env=env), "-q never asks"
    )
    # `ls` ids only has its own name.
    ids = cli("ls", root, "--ids", env=env)
    assert ids.returncode == 0 and sorted(ids.stdout.split()) == sorted(
        r["id"] for r in recs.values()
    )


def test_the_three_keeps_have_their_own_names_and_the_old_one_says_which(env, cache, tmp_path):
    root, _ = cache
    one_line_error(cli("prune", "--keep", "2", env=env), "--keep-last N")
    one_line_error(
        cli("verify", "--rebuild", "--keep", str(tmp_path / "k"), root, env=env),
        "--keep-cubins DIR",
    )
    one_line_error(
        cli("clean", "--rebuild", "--keep", str(tmp_path / "k"), root, env=env), "--keep-cubins DIR"
    )
    one_line_error(cli("canary", "--keep", env=env), "--keep-cache")
    one_line_error(
        cli("verify", "--keep-cubins", str(tmp_path / "k"), root, env=env),
        "--keep-cubins needs --rebuild",
    )
    p = cli("prune", "--keep-last", "1", "--dry-run", root, env=env)
    assert p.returncode == 0, p.stderr
    assert not (tmp_path / "k").exists()


def test_flags_that_conflict_or_do_nothing_are_refused(env, cache):
    root, _ = cache
    one_line_error(
        cli("prune", "--purge", "--keep-quarantined", "--keep-last", "1", root, env=env),
        "--purge",
        "--keep-quarantined",
    )
    one_line_error(
        cli("prune", "--purge", "--older-than", "1d", root, env=env), "prune already deletes"
    )
    one_line_error(cli("clean", root, "--all", "--stale", env=env), "--all", "--stale")
    one_line_error(cli("quarantine", "empty", "--all", "SOMEID", env=env), "--all and IDs conflict")


def test_purge_is_empty_with_the_same_rules(env, cache):
    root, recs = cache
    assert cli("clean", root, "--target", "90", "--foreign-arch", "-y", env=env).returncode == 0
    plans = []
    for verb in ("empty", "purge"):
        p = cli("quarantine", verb, "--root", root, "--dry-run", "--format", "json", env=env)
        assert p.returncode == 0, (
            p.stderr
        )  # no ids: every entry, for both (purge used to demand --all)
        doc = json.loads(p.stdout)
        assert doc["command"] == "quarantine empty"
        plans.append(doc["plan"])
    assert plans[0] == plans[1] and len(plans[0]) == sum(r["arch"] != 90 for r in recs.values())


def _shapes(doc):
    assert doc["schema"] == 2 and not any(w.startswith("-") for w in doc["command"].split()), doc[
        "command"
    ]
    assert isinstance(doc["plan"], list) and isinstance(doc["done"], list)
    for rec in doc["plan"]:
        assert list(rec)[:6] == PLAN_FIELDS, rec
    for rec in doc["done"]:
        assert list(rec)[:6] == DONE_FIELDS and isinstance(rec, dict), rec


def test_one_json_shape_for_plan_done_and_command(env, cache, tmp_path):
    root, recs = cache
    j = ("--format", "json")
    clean = json.loads(
        cli("clean", root, "--target", "90", "--foreign-arch", "-y", *j, env=env).stdout
    )
    _shapes(clean)
    assert clean["command"] == "clean" and clean["plan"] and clean["done"]
    assert clean["selection"]["codes"] == ["foreign-arch"] and clean["by_reason"]
    assert {d["status"] for d in clean["done"]} == {"quarantined"}
    one = clean["done"][0]["quarantine_id"]
    restore = json.loads(
        cli("quarantine", "restore", one, "--root", root, "-y", *j, env=env).stdout
    )
    _shapes(restore)
    assert [d["status"] for d in restore["done"]] == ["restored"] and restore["done"][0][
        "quarantine_id"
    ] == one
    empty = json.loads(cli("quarantine", "empty", "--root", root, "-y", *j, env=env).stdout)
    _shapes(empty)
    assert {d["status"] for d in empty["done"]} == {"deleted"} and len(empty["done"]) == len(
        clean["done"]
    ) - 1
    base = tmp_path / "parts"
    (base / "jitwarden-v1" / ("a" * 16)).mkdir(parents=True)
    prune = json.loads(
        cli(
            "prune", str(base), "--older-than", "0", "--orphan-age", "0", "--dry-run", *j, env=env
        ).stdout
    )
    _shapes(prune)
    assert (
        prune["plan"]
        and prune["plan"][0]["id"] == "a" * 16
        and prune["plan"][0]["kind"] == "partition"
    )
    for args, mode in ((("verify", root), "quick"), (("doctor", root), "quick")):
        doc = json.loads(cli(*args, *j, env=env).stdout)
        assert doc["command"] == args[0] and doc["mode"] == mode and doc["schema"] == 2
    # The fingerprint's own schema no longer overrides the envelope's; --diff still reads a saved one.
    fp = cli("fingerprint", *j, env=env)
    doc = json.loads(fp.stdout)
    assert doc["schema"] == 2 and doc["fingerprint_schema"] == 1 and doc["command"] == "fingerprint"
    saved = tmp_path / "fp.json"
    saved.write_text(fp.stdout)
    diff = json.loads(cli("fingerprint", "--diff", str(saved), *j, env=env).stdout)
    assert diff["command"] == "fingerprint" and diff["mode"] == "diff" and diff["identical"] is True


def test_dir_prints_where_each_cache_lives(env, tmp_path):
    p = cli("dir", env=env)
    assert p.returncode == 0, p.stderr
    kinds = [
        l.split()[0]
        for l in p.stdout.splitlines()[1:]
        if l and not l.startswith((" ", "partition:"))
    ]
    for k in ("triton", "inductor", "vllm", "cuda-compute", "torch-ext", "jitwarden"):
        assert k in kinds, p.stdout
    assert cli("dir", "triton", env=env).stdout.splitlines()[0] == env["TRITON_CACHE_DIR"]
    doc = json.loads(cli("dir", "--format", "json", env=env).stdout)
    tri = next(d for d in doc["dirs"] if d["kind"] == "triton")
    assert tri == {
        "kind": "triton",
        "path": env["TRITON_CACHE_DIR"],
        "source": "TRITON_CACHE_DIR",
        "exists": False,
        "partition": os.path.join(
            env["TRITON_CACHE_DIR"], "jitwarden-v1", doc["fingerprint_digest"]
        ),
        "partition_exists": False,
    }
    ind = cli("dir", "inductor", env=dict(env, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind")))
    assert ind.stdout.split() == [str(tmp_path / "ind")]
    one_line_error(cli("dir", "bogus", env=env), "unknown cache kind 'bogus'")


def test_clean_all_moves_every_entry_aside_and_restore_brings_them_back(env, cache):
    root, recs = cache
    before = snapshot(root)
    dry = cli("clean", root, "--all", "--dry-run", env=env)
    assert (
        dry.returncode == 0
        and f"plan: {len(recs)} entries" in dry.stdout
        and "every entry" in dry.stdout
    )
    assert snapshot(root) == before
    one_line_error(
        cli("clean", root, "--all", env=env), "pass -y"
    )  # no terminal: asks for -y, moves nothing
    p = cli("clean", root, "--all", "-y", env=env)
    assert p.returncode == 0, p.stderr
    assert f"quarantined {len(recs)} " in p.stdout
    assert [
        n for n in os.listdir(root) if not n.startswith(("jitwarden-quarantine", ".jitwarden"))
    ] == []
    ids = [r["id"] for r in recs.values()]
    assert cli("quarantine", "restore", *ids, "--root", root, "-y", env=env).returncode == 0
    after = {
        k: v
        for k, v in snapshot(root).items()
        if not k.startswith(("jitwarden-quarantine", ".jitwarden"))
    }
    assert after == {k: v for k, v in before.items() if not k.startswith(".jitwarden")}


def test_help_says_what_clean_and_empty_touch():
    clean = " ".join(cli("clean", "--help").stdout.split())
    assert "only those: sound entries stay" in clean and "--all moves every entry" in clean
    assert "quarantine empty" in clean
    empty = " ".join(cli("quarantine", "empty", "--help").stdout.split())
    assert (
        "only the quarantine" in " ".join(cli("quarantine", "--help").stdout.split())
        or "only the quarantine" in empty
    )
