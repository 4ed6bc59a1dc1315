"""Helpers of the adversarial suite: the tally, tree hashes, the CLI with a timeout (a run past it is a hang)."""

from __future__ import annotations

import hashlib
import os
import re
import stat

from tests.helpers.cli import jw as run_cli

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
    """Run the CLI (the one runner, with the environment's own PYTHONPATH); a run past ``timeout`` is a hang:
    counted, and the test fails."""
    return run_cli(*args, env=env, timeout=timeout, src=None, on_hang=_hang)


def _hang():
    TALLY["hangs"] += 1


ERROR_LINE = re.compile(r"^jitwarden[^\n:]*: (internal )?error\b", re.MULTILINE)


def clean_failure(p, code=None):
    """An exit users can act on: 0, 1, 2 or 4 (4: ``import`` of a bundle built for another environment), a
    refusal (2) said in exactly one error line, no traceback, no internal error; ``code`` when given."""
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr.lower(), p.stderr
    assert p.returncode in (0, 1, 2, 4), (p.returncode, p.stdout[-500:], p.stderr)
    if p.returncode == 2:
        assert len(ERROR_LINE.findall(p.stderr)) == 1, p.stderr
    if code is not None:
        assert p.returncode == code, (p.returncode, p.stdout, p.stderr)


def truncate_cubin(entry: str) -> None:
    cub = next(os.path.join(entry, n) for n in os.listdir(entry) if n.endswith(".cubin"))
    with open(cub, "rb") as f:
        data = f.read()
    with open(cub, "wb") as f:
        f.write(data[: len(data) // 2])
