"""Names holding terminal escape sequences or rich markup reach the terminal escaped, never raw,
and never crash a table."""

from __future__ import annotations

import json
import os
import shutil

from jitwarden.model.layout import is_reserved
from jitwarden.store import quarantine as q
from tests.adversarial.adv import clean_failure, jw, truncate_cubin

ESC_NAMES = [
    "\x1b[2Jclear",
    "\x1b]0;pwned\x07title",
    "evil[/bold]",
    "[red]x[/red]",
    "bell\x07\x9bc",
]


def _entries(root):
    return sorted(n for n in os.listdir(root) if not is_reserved(n))


def assert_no_raw_escapes(p):
    clean_failure(p)
    for stream in (p.stdout, p.stderr):
        assert "\x1b" not in stream and "\x07" not in stream and "\x9b" not in stream, repr(
            stream[-2000:]
        )
    assert "MarkupError" not in p.stderr


def test_entry_and_file_names_with_escapes(acache, env):
    root, recs = acache
    src = recs["add_sm90"]["path"]
    for n in ESC_NAMES:
        shutil.copytree(src, os.path.join(root, n))
        truncate_cubin(os.path.join(root, n))
    with open(os.path.join(recs["sub_sm90"]["path"], "\x1b[2Jstray.bin"), "wb") as f:
        f.write(b"x")
    for args in (
        ("ls", root, "--target", "90"),
        ("ls", root, "--target", "90", "--long"),
        ("verify", root, "--target", "90"),
        ("doctor", root, "--target", "90"),
        ("clean", root, "--target", "90", "--dry-run"),
        ("status",),
    ):
        assert_no_raw_escapes(jw(*args, env=env))
    names = _entries(root)
    p = jw("clean", root, "--target", "90", "-y", env=env)
    assert_no_raw_escapes(p)
    assert_no_raw_escapes(jw("quarantine", "ls", "--root", root, env=env))
    assert_no_raw_escapes(jw("quarantine", "ls", "--root", root, "--long", env=env))
    ids = [r.id for r in q.list_root(root)]
    assert ids and set(_entries(root)) < set(names), ids  # clean took entries
    assert_no_raw_escapes(jw("quarantine", "restore", *ids, "--root", root, "-y", env=env))
    assert _entries(root) == names  # each back under its own name


def test_kernel_named_like_rich_markup(acache, env):
    root, recs = acache
    e = recs["add_sm90"]
    md = os.path.join(e["path"], f"{e['name']}.json")
    with open(md) as f:
        doc = json.load(f)
    doc["name"] = "evil[/bold]\x1b[2J"
    with open(md, "w") as f:
        json.dump(doc, f)
    for args in (
        ("ls", root, "--target", "90"),
        ("verify", root, "--target", "90"),
        ("verify", root, "--target", "90", "--long"),
        ("clean", root, "--target", "90", "--dry-run"),
    ):
        assert_no_raw_escapes(jw(*args, env=env))
