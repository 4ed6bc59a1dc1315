"""Results on stdout, a closed pipe is no error, one meaning of ``-q``, every exit status listed (issue 34, item 9)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from jitwarden.model import errors
from tests.helpers.maint import cli
from tests.helpers.paths import REPO, SRC


def test_quarantine_restore_and_empty_print_their_result_on_stdout(cache):
    root, recs = cache
    assert cli("clean", "--all", "-y", root).returncode == 0
    p = cli("quarantine", "restore", recs["add_sm90"]["id"][:12], "--root", root, "-y", "-q")
    assert p.returncode == 0 and p.stdout.splitlines()[-1] == "restored 1" and p.stderr == "", p
    p = cli("quarantine", "empty", "--root", root, "-y", "-q")
    assert (
        p.returncode == 0 and re.search(r"^deleted \d+$", p.stdout, re.MULTILINE) and p.stderr == ""
    ), p


@pytest.mark.parametrize(
    "args",
    [["ls"], ["ls", "--ids"], ["verify", "--all"], ["verify", "--format", "json"], ["status"]],
)
def test_a_reader_that_leaves_is_no_error(cache, args):
    """``jitwarden ls | head -1`` exited 1, the "errors found" status: rich's answer to a closed pipe."""
    root, _ = cache
    env = dict(os.environ, PYTHONPATH=SRC)
    cmd = " ".join([sys.executable, "-m", "jitwarden", *args, "--target", "90", root])
    p = subprocess.run(
        ["bash", "-c", f"{cmd} | true; echo rc=${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.stdout.strip() == "rc=0" and "Error" not in p.stderr, (p.stdout, p.stderr)


def test_verify_quiet_prints_the_findings_only(cache):
    """``verify -q`` printed what ``verify`` prints; it now keeps the entries with findings, not the footer."""
    root, recs = cache
    loud = cli("verify", "--target", "90", root)
    quiet = cli("verify", "--target", "90", "-q", root)
    assert loud.returncode == quiet.returncode == 0 and "entries ·" in loud.stdout
    assert quiet.stdout == "" and quiet.stderr == ""  # a sound cache: nothing to say
    cubin = os.path.join(recs["add_sm90"]["path"], "add_kernel.cubin")
    with open(cubin, "r+b") as f:
        f.truncate(100)
    loud = cli("verify", "--target", "90", root)
    quiet = cli("verify", "--target", "90", "-q", root)
    assert loud.returncode == quiet.returncode == 1
    # the rows (whose AGE may have ticked between the two runs), not the footer
    lines = loud.stdout.splitlines()
    # the summary line, then its notes
    footer = next(i for i, line in enumerate(lines) if "entries ·" in line)
    assert len(quiet.stdout.splitlines()) == footer
    assert "entries ·" not in quiet.stdout
    assert recs["add_sm90"]["id"][:12] in quiet.stdout and "corrupt" in quiet.stdout


def test_every_exit_status_is_documented():
    """Every status of model/errors.ExitStatus (4, ``import``'s other environment, included) is in
    commands.md's table, and so is every EXIT_* alias."""
    with open(os.path.join(REPO, "docs", "commands.md")) as f:
        doc = f.read()
    table = {int(c) for c in re.findall(r"^\| (\d+) \|", doc, re.MULTILINE)}
    codes = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
    assert codes <= table, table
    assert {int(s) for s in errors.ExitStatus} <= table, table
