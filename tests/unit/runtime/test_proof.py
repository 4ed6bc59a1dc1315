"""The proofs read the fingerprint memo (to know this environment's ptxas without hashing it again) through the
bounded, owner-checked reader: a FIFO, another user's file or a huge file there never hangs or steers activation."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "src")
_CALL = (
    "import os, sys; sys.path.insert(0, sys.argv[1]); from jitwarden.runtime import proof; "
    "proof._warm_ptxas(dict(os.environ)); print('done')"
)


def _warm(tmp_path) -> subprocess.CompletedProcess:
    env = dict(os.environ, JITWARDEN_HOME=str(tmp_path / "jw"))
    return subprocess.run(
        [sys.executable, "-c", _CALL, os.path.abspath(SRC)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_fifo_as_the_fingerprint_memo_never_hangs_the_proofs(tmp_path):
    os.makedirs(tmp_path / "jw")
    os.mkfifo(tmp_path / "jw" / "fingerprint-memo.json")
    try:
        p = _warm(tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail("reading a FIFO planted as the fingerprint memo hung")
    assert p.returncode == 0 and p.stdout.strip() == "done", p.stderr


def test_a_memo_another_user_wrote_is_not_read(tmp_path):
    from jitwarden.store.reads import read_own_json

    os.makedirs(tmp_path / "jw")
    path = tmp_path / "jw" / "fingerprint-memo.json"
    path.write_text(json.dumps({"schema": 1, "ptxas": {}}))
    assert read_own_json(str(path)) == {"schema": 1, "ptxas": {}}
    os.chmod(path, 0o666)
    with pytest.raises(PermissionError):
        read_own_json(str(path))  # world-writable: anyone could have put it there
    if os.geteuid() == 0:
        os.chmod(path, 0o644)
        os.chown(path, 4242, 4242)
        with pytest.raises(PermissionError):
            read_own_json(str(path))
    assert _warm(tmp_path).returncode == 0


def test_a_huge_or_deep_memo_is_refused_not_parsed(tmp_path):
    from jitwarden.store.reads import read_own_json

    path = tmp_path / "m.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError):
        read_own_json(str(path))
    with pytest.raises(OSError):
        read_own_json(str(path), max_bytes=1000)
