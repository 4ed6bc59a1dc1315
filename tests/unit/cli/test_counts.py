"""Counts say what they count (issue 34, item 7): doctor's bracket counted findings ("corrupt 4") where its lines
counted entries ("corrupt: 3 entries"), and its JSON had ``"entries": []`` where its summary said 51."""

from __future__ import annotations

import json
import os

from jitwarden.cli.main import main


def _truncate(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(40)


def _doctor(capsys, *args) -> tuple[int, str]:
    rc = main(["doctor", *args])
    return rc, capsys.readouterr().out


def test_the_bracket_and_the_lines_count_entries(cache, capsys):
    """One entry with two truncated files is two ``corrupt`` findings and one entry: every count of entries
    says 1, and the JSON keeps the findings' count under its own name (``by_code``)."""
    root, records = cache
    victim = records["add_sm90"]["path"]
    for f in os.listdir(victim):
        if f.endswith((".cubin", ".ptx")):
            _truncate(os.path.join(victim, f))
    rc, doc = _doctor(capsys, "--format", "json", "--target", "90", root)
    doc = json.loads(doc)
    s = doc["summary"]
    assert rc == 1 and s["by_code"]["corrupt"] == 2 and s["entries_by_code"]["corrupt"] == 1, s
    corrupt = next(p for p in doc["problems"] if p["code"] == "corrupt")
    assert corrupt["count"] == 1 and corrupt["message"].startswith("1 entry "), corrupt

    rc, text = _doctor(capsys, "--target", "90", root)
    flat = " ".join(text.split())
    assert "entries by code: corrupt 1" in flat and "corrupt 2" not in flat, text
    assert "corrupt: 1 entry " in flat, text


def test_doctor_json_says_it_omits_the_entries_its_summary_counts(cache, capsys):
    root, _records = cache
    rc, doc = _doctor(capsys, "--format", "json", "--target", "90", root)
    doc = json.loads(doc)
    n = doc["summary"]["entries"]
    assert n > 0 and doc["entries"] == []
    assert doc["entries_omitted"] == {"count": n, "see": "jitwarden verify --all --format json"}
    main(["verify", "--all", "--format", "json", "--target", "90", root])
    listed = json.loads(capsys.readouterr().out)
    assert len(listed["entries"]) == n == listed["summary"]["entries"]
