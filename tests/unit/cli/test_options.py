"""Options several commands share, declared once (cli/options.py): parsed the same way by every command that
takes them, a bad value refused at parse time in one line (exit 2), a retired spelling refused naming its
replacement rather than taken with another meaning."""

from __future__ import annotations

import argparse

import pytest

from jitwarden.cli import options


def _parser(add, **kw) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jitwarden verify")
    add(p, **kw)
    return p


def _refused(capsys, p, *argv) -> str:
    with pytest.raises(SystemExit) as exc:
        p.parse_args(list(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def test_scan_arguments_parse_as_every_scanning_command_takes_them():
    p = _parser(options.add_scan_arguments)
    a = p.parse_args(
        ["/a", "/b", "--target", "sm_90", "--kind", "triton", "--kind", "jax", "--orphan-age", "5m"]
    )
    assert a.paths == ["/a", "/b"] and a.target == "sm_90" and a.kind == ["triton", "jax"]
    assert a.orphan_age == 300 and a.format == "table" and a.python is None and not a.long
    d = p.parse_args([])
    assert d.paths == [] and d.kind is None and d.orphan_age is None


def test_a_bad_format_or_age_is_refused_at_parse_time(capsys):
    p = _parser(options.add_scan_arguments)
    assert "invalid choice: 'xml'" in _refused(capsys, p, "--format", "xml")
    assert "--orphan-age" in _refused(capsys, p, "--orphan-age", "soon")


@pytest.mark.parametrize(
    ("value", "why"), [("0", "0: must be at least 1"), ("four", "'four' is not a whole number")]
)
def test_jobs_is_a_positive_whole_number(capsys, value, why):
    p = _parser(options.add_rebuild_arguments)
    assert why in _refused(capsys, p, "--jobs", value)
    assert p.parse_args(["-j", "3"]).jobs == 3


def test_the_retired_keep_is_refused_naming_keep_cubins(capsys):
    p = _parser(options.add_rebuild_arguments)
    for argv in (["--keep", "/tmp/x"], ["--keep"]):
        line = _refused(capsys, p, *argv)
        assert line.endswith(
            "--keep: renamed --keep-cubins DIR (where to leave the cubins of kernels that differ)"
        )
    assert "--keep " not in p.format_help()  # hidden from help
    a = p.parse_args(["--rebuild", "--ptxas", "/p1", "--ptxas", "/p2", "--keep-cubins", "/d"])
    assert a.rebuild and a.ptxas == ["/p1", "/p2"] and a.keep_cubins == "/d"


def test_a_command_that_always_rebuilds_has_no_rebuild_flag(capsys):
    p = _parser(options.add_rebuild_arguments, always=True)
    assert p.parse_args([]).rebuild is True
    assert "unrecognized arguments: --rebuild" in _refused(capsys, p, "--rebuild")


def test_action_arguments_with_and_without_purge():
    plain = _parser(options.add_action_arguments)
    a = plain.parse_args(["--dry-run", "-y", "--lock-timeout", "1h"])
    assert a.dry_run and a.yes and a.lock_timeout == 3600 and a.purge is False
    p = _parser(options.add_action_arguments, purge=True)
    assert p.parse_args(["--purge"]).purge is True


def test_examples_end_the_help_as_written():
    p = _parser(options.add_format_argument)
    options.examples(p, "jitwarden verify --all  judge every entry", "jitwarden verify -q  quiet")
    assert p.format_help().endswith(
        "examples:\n  jitwarden verify --all  judge every entry\n  jitwarden verify -q  quiet\n"
    )
