"""Helpers of the adversarial suite: the tally, tree hashes, the CLI with a timeout (a run past it is a hang)."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys

import pytest

TALLY = {"cases": 0, "kills": 0, "races": 0, "hangs": 0, "data lost": 0}
TIMEOUT_S = 30

def tree_hash(path: str) -> dict:
    """relpath -> (type, mode, sha256 or link target) of everything under ``path``; never follows links."""
    out = {}
    for d, dirs, files in os.walk(path):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", st.st_mode)
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    out[rel] = ("file", st.st_mode, hashlib.sha256(f.read()).hexdigest())
            else:
                out[rel] = ("other", st.st_mode)
    return out


def jw(*args, env, timeout=TIMEOUT_S):
    """Run the CLI; a run past ``timeout`` is a hang: counted, and the test fails."""
    try:
        return subprocess.run([sys.executable, "-m", "jitwarden", *args], env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        TALLY["hangs"] += 1
        pytest.fail(f"hang: jitwarden {' '.join(args)} ran past {timeout}s")


def clean_failure(p, code=None):
    """One clear line: no traceback, no internal error; ``code`` when given."""
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr.lower(), p.stderr
    assert p.returncode != 3, p.stderr
    if code is not None:
        assert p.returncode == code, (p.returncode, p.stdout, p.stderr)


def truncate_cubin(entry: str) -> None:
    cub = next(os.path.join(entry, n) for n in os.listdir(entry) if n.endswith(".cubin"))
    with open(cub, "rb") as f:
        data = f.read()
    with open(cub, "wb") as f:
        f.write(data[: len(data) // 2])
