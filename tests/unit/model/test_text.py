"""model/text.py: the one parser of ages and sizes, and the one writer of sizes, ages, names and counts."""

from __future__ import annotations

import argparse
import math
import os

import pytest

from jitwarden.cli.main import main
from jitwarden.model.text import (
    age_arg,
    display,
    human_age,
    human_duration,
    human_size,
    parse_age,
    parse_size,
    plural,
    size_arg,
)

DAY = 86400


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("7d", 7 * DAY),
        ("12h", 12 * 3600),
        ("30m", 1800),
        ("90s", 90),
        ("2w", 14 * DAY),
        ("1.5h", 5400),
        ("0", 0),
        (" 3 days ", 3 * DAY),
        ("1 week", 7 * DAY),
        ("45 min", 2700),
        ("10 SECONDS", 10),
        ("2H", 7200),
    ],
)
def test_parse_age_reads_every_unit_and_spelling(text, seconds):
    assert parse_age(text) == seconds


@pytest.mark.parametrize(
    "text, why",
    [
        ("7", "an age needs a unit (7s, 7m, 7h, 7d or 7w)"),
        ("-1d", "-1d: an age cannot be negative"),
        ("7y", "'7y' is not an age (use e.g. 7d, 12h, 30m, 90s)"),
        ("", "'' is not an age"),
        ("inf", "'inf' is not an age"),
        ("nan", "'nan' is not an age"),
        ("1d2h", "'1d2h' is not an age"),
    ],
)
def test_parse_age_refuses_with_a_one_line_reason(text, why):
    with pytest.raises(ValueError) as err:
        parse_age(text)
    assert why in str(err.value) and "\n" not in str(err.value)


def test_a_bare_number_takes_the_documented_unit_only_where_one_is_documented():
    assert parse_age("10", bare_unit="s") == 10  # JITWARDEN_ORPHAN_AGE is a number of seconds
    assert parse_age("2", bare_unit="h") == 7200
    assert parse_age("10m", bare_unit="s") == 600  # a unit given wins
    assert parse_age("0", bare_unit=None) == 0.0  # zero needs no unit anywhere


@pytest.mark.parametrize(
    "text, n",
    [
        ("500M", 500 << 20),
        ("2G", 2 << 30),
        ("1.5GiB", int(1.5 * (1 << 30))),
        ("100k", 100 << 10),
        ("42", 42),
        ("1T", 1 << 40),
        ("10 mb", 10 << 20),
        ("7b", 7),
        (" 3KiB ", 3 << 10),
    ],
)
def test_parse_size_binary_units_and_bare_bytes(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["", "abc", "-5", "5X", "5 M B", "1e3"])
def test_parse_size_refuses_what_is_not_a_size(text):
    with pytest.raises(ValueError, match="is not a size"):
        parse_size(text)


@pytest.mark.parametrize(
    "n, shown",
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (5 << 20, "5.0 MiB"),
        (5 << 30, "5.0 GiB"),
        (3 << 40, "3.0 TiB"),
        (2048 << 40, "2048.0 TiB"),
    ],
)
def test_human_size(n, shown):
    assert human_size(n) == shown


@pytest.mark.parametrize(
    "seconds, shown",
    [
        (0, "0s"),
        (59.9, "59s"),
        (60, "1m"),
        (3599, "59m"),
        (3600, "1h"),
        (DAY - 1, "23h"),
        (DAY, "1d"),
        (1.9 * DAY, "1d"),
        (400 * DAY, "400d"),
        (-5, "0s"),
        (math.inf, "-"),
        (math.nan, "-"),
    ],
)
def test_human_duration_is_the_largest_whole_unit_rounded_down(seconds, shown):
    assert human_duration(seconds) == shown


def test_a_written_age_reads_back_as_the_same_age():
    for text in ("7d", "12h", "30m", "45s", "0s"):
        assert human_duration(parse_age(text)) == text


def test_human_age_of_a_time_stamp():
    assert human_age(1_000_000.0, now=1_000_090.0) == "1m"
    assert human_age(1_000_000.0, now=1_000_000.0 + 3 * DAY) == "3d"
    assert human_age(2_000_000.0, now=1_000_000.0) == "0s"  # a file from the future
    assert human_age(0) == "-" and human_age(None) == "-"  # unknown, not "55 years"


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("add_kernel", "add_kernel"),
        ("a\nb", "a\\nb"),
        ("tab\there", "tab\\there"),
        ("esc\x1b[31mred", "esc\\x1b[31mred"),
        ("bell\x07", "bell\\x07"),
        (
            os.fsdecode(b"bad\xffbyte"),
            "bad\\xffbyte",
        ),  # an undecodable file name, as os.listdir returns it
        (b"raw\xfebytes", "raw\\xfebytes"),
        ("ключ-κλειδί-鍵", "ключ-κλειδί-鍵"),  # printable text of any script is kept
        (
            "evil[/bold] [red]x",
            "evil[/bold] [red]x",
        ),  # markup is the renderer's business: kept as it is
        ("zero\u200bwidth", "zero\\u200bwidth"),
    ],
)
def test_display_makes_any_name_one_printable_line(raw, shown):
    assert display(raw) == shown
    assert display(raw).isprintable()


@pytest.mark.parametrize(
    "n, word, many, shown",
    [
        (1, "entry", None, "1 entry"),
        (2, "entry", None, "2 entries"),
        (0, "entry", None, "0 entries"),
        (1, "kernel", None, "1 kernel"),
        (3, "day", None, "3 days"),
        (2, "key", None, "2 keys"),
        (2, "quarantined entry", "quarantined entries", "2 quarantined entries"),
        (1, "check", "checks!", "1 check"),
    ],
)
def test_plural(n, word, many, shown):
    assert plural(n, word, many) == shown


def test_argparse_types_turn_a_bad_value_into_one_line():
    assert age_arg("7d") == 7 * DAY and size_arg("2G") == 2 << 30
    with pytest.raises(argparse.ArgumentTypeError, match="an age needs a unit"):
        age_arg("7")
    with pytest.raises(argparse.ArgumentTypeError, match="is not a size"):
        size_arg("lots")


def test_a_bad_age_on_the_command_line_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["prune", "--older-than", "7"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.strip().splitlines() == [
        "jitwarden prune: error: --older-than: 7: an age needs a unit (7s, 7m, 7h, 7d or 7w)"
    ]
