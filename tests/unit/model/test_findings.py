"""The fixed finding vocabulary (model/findings.py, design.md §3): an error only where there is evidence of damage,
what is not understood never more than info, every printed fix a command the CLI takes, one JSON shape."""

from __future__ import annotations

import shlex

import pytest

from jitwarden.cli.main import build_parser
from jitwarden.model.findings import CATALOG, CODES, Finding, Severity, worst


def test_the_vocabulary_and_its_severities():
    assert {c: str(s) for c, s in CODES.items()} == {
        "corrupt": "error",
        "mismatch": "error",
        "foreign-path": "error",
        "incomplete": "error",
        "not-reproducible": "error",
        "unsafe": "error",
        "unreadable": "error",
        "foreign-arch": "info",
        "stale": "warn",
        "moved": "warn",
        "orphan": "warn",
        "unverifiable": "warn",
        "unrecognised": "info",
    }
    assert "Never damage" in CATALOG["unrecognised"].meaning


def test_nothing_is_removed_for_what_was_not_checked():
    assert CATALOG["unrecognised"].fix is None and CATALOG["unverifiable"].fix is None
    assert all(
        k.fix for c, k in CATALOG.items() if k.severity is Severity.ERROR and c != "unreadable"
    )
    assert CATALOG["unreadable"].fix is None  # not damage: its fix is a chmod, never a clean


@pytest.mark.parametrize("code", [c for c, k in CATALOG.items() if k.fix])
def test_every_fix_is_a_command_the_cli_parses(code):
    argv = shlex.split(CATALOG[code].fix)
    assert argv[0] == "jitwarden"
    args = build_parser(argv[1:]).parse_args(argv[1:])
    assert args.command == argv[1]
    if "--code" in argv:
        assert argv[argv.index("--code") + 1] == code  # the fix clears that finding, not another


def test_a_findings_json_and_the_worst_of_several():
    plain = Finding("stale", "built by Triton 3.5")
    long = Finding("not-reproducible", "differs in .text", detail="ptxas 12.8: 3 sections differ")
    assert plain.to_json() == {
        "code": "stale",
        "severity": "warn",
        "message": "built by Triton 3.5",
    }
    assert long.to_json()["detail"] == "ptxas 12.8: 3 sections differ"
    assert worst([plain, long, Finding("unrecognised", "x")]) is Severity.ERROR
    assert worst([Finding("foreign-arch", "sm_80")]) is Severity.INFO
    assert worst([]) is None
    with pytest.raises(KeyError):
        _ = Finding("damaged", "not a code").severity
