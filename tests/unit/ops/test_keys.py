"""Key files read through the bounded regular-file reader (issue 21): a FIFO as the signing key, as a trusted
key or among ``trusted-keys/*.pub`` is refused at once, and a secret key others may read is refused like
``ssh`` refuses one. The cases that used to hang run the CLI in a child process with a time limit."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

pytest.importorskip("cryptography", reason="keys need the [fleet] extra (cryptography)")

from tests.helpers.fleet import jw, node_env


def _cli(env, *argv, timeout=60):
    p = subprocess.run(
        [sys.executable, "-m", "jitwarden", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return p.returncode, p.stdout, p.stderr


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def env(tmp_path):
    return node_env(str(tmp_path / "home"))


def test_a_fifo_as_the_signing_key_is_refused_at_once(env, tmp_path):
    fifo = tmp_path / "signing-key"
    os.mkfifo(fifo)
    rc, _, err = _cli(env, "export", "-o", str(tmp_path / "b.tar"), "--key", str(fifo))
    assert rc == 2 and "not a regular file (a FIFO)" in _one_line(err), err


def test_a_fifo_as_the_trusted_key_is_refused_at_once(env, tmp_path):
    fifo = tmp_path / "trusted.pub"
    os.mkfifo(fifo)
    junk = tmp_path / "b.tar"
    junk.write_bytes(b"x" * 1024)
    rc, _, err = _cli(dict(env, JITWARDEN_TRUSTED_KEYS=str(fifo)), "import", str(junk))
    assert rc == 2 and "not a regular file (a FIFO)" in _one_line(err), err


def test_a_fifo_among_the_trusted_keys_dir_is_refused_at_once(env, tmp_path):
    d = tmp_path / "home" / ".config" / "jitwarden" / "trusted-keys"
    d.mkdir(parents=True)
    os.mkfifo(d / "evil.pub")
    junk = tmp_path / "b.tar"
    junk.write_bytes(b"x" * 1024)
    rc, _, err = _cli(env, "import", str(junk))
    assert (
        rc == 2
        and "evil.pub: cannot read trusted key: not a regular file (a FIFO)" in _one_line(err)
    ), err


def test_the_remote_cache_reads_trusted_keys_without_blocking(env, tmp_path):
    """The workload's remote cache loads its trusted keys through ops/keys: a FIFO is an error, not a wait."""
    d = tmp_path / "keys"
    d.mkdir()
    os.mkfifo(d / "a.pub")
    code = (
        "from jitwarden.ops import keys\n"
        f"try:\n    keys.load_trusted({{'JITWARDEN_TRUSTED_KEYS': {str(d)!r}}})\n"
        "except keys.KeyError_ as e:\n    print(e)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert "a.pub: cannot read trusted key: not a regular file (a FIFO)" in p.stdout, (
        p.stdout + p.stderr
    )


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_secret_key_others_may_read_is_refused_with_the_fix(env, tmp_path, mode):
    key = tmp_path / "k"
    rc, _, err = jw(env, "keygen", "-o", str(key))
    assert rc == 0, err
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    os.chmod(key, mode)
    rc, _, err = jw(env, "export", "-o", str(tmp_path / "b.tar"), "--key", str(key))
    line = _one_line(err)
    assert rc == 2 and f"run `chmod 600 {key}`" in line and f"mode {mode:04o}" in line, err
    assert "pass --unsigned" not in line
    assert not os.path.exists(tmp_path / "b.tar")
    os.chmod(
        key, 0o600
    )  # fixed as told: the key is used again (nothing to export here: exit 1, not a key error)
    rc, _, err = jw(env, "export", "-o", str(tmp_path / "b.tar"), "--key", str(key))
    assert rc == 1 and "chmod" not in err, err
