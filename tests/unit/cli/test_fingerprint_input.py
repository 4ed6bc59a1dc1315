"""``jitwarden fingerprint --diff FILE`` reads FILE through the bounded reader (issue 21): a FIFO is refused at
once, deep JSON is a clean refusal, and a link the user names is followed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers.fleet import jw, node_env


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "fp.json"
    os.mkfifo(fifo)
    p = subprocess.run(
        [sys.executable, "-m", "jitwarden", "fingerprint", "--diff", str(fifo)],
        env=node_env(str(tmp_path / "h")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "not a regular file (a FIFO)" in _one_line(p.stderr), p.stderr


def test_deep_json_is_a_usage_error_not_an_internal_one(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    rc, _, err = jw(node_env(str(tmp_path / "h")), "fingerprint", "--diff", str(deep))
    assert rc == 2 and "nested deeper than" in _one_line(err), err


def test_a_saved_fingerprint_behind_a_link_is_compared(tmp_path):
    env = node_env(str(tmp_path / "h"))
    rc, out, err = jw(env, "fingerprint", "--format", "json")
    assert rc == 0, err
    saved = tmp_path / "saved.json"
    saved.write_text(out)
    os.symlink(saved, tmp_path / "link.json")
    rc, out, err = jw(env, "fingerprint", "--diff", str(tmp_path / "link.json"), "--format", "json")
    assert rc == 0 and json.loads(out)["identical"], err
