"""The one way tests run ``jitwarden <verb>``: a fresh interpreter (the default) or this process.

A fresh interpreter is what users run (start-up, imports, exit status); in this process is for
tests that only need the CLI's logic (fast: not ``slow``, see tests/helpers/slow.py). Either way
the answer is a :class:`Ran`. A run past ``timeout`` is a hang: ``on_hang`` is called (a tally),
then the test fails, naming the command.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import subprocess
import sys

import pytest

from tests.helpers.paths import SRC


@dataclasses.dataclass(frozen=True)
class Ran:
    """What a run gave: exit status and both streams (also unpacks as ``rc, out, err``)."""

    args: tuple
    returncode: int
    stdout: str
    stderr: str

    def __iter__(self):
        return iter((self.returncode, self.stdout, self.stderr))


@contextlib.contextmanager
def environ(env: dict):
    """``os.environ`` is ``env`` inside the block, and what it was after."""
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(old)


def jw(
    *args,
    env: dict | None = None,
    timeout: float = 300,
    in_process: bool = False,
    prefix=(),
    cwd=None,
    src: str | None = SRC,
    user=None,
    on_hang=None,
) -> Ran:
    """Run ``jitwarden ARGS`` under ``env`` (default: this process's environment).

    ``prefix``: words before the interpreter (e.g. ``setpriv``); ``user``: run as that user; ``src``: the
    jitwarden sources put first on PYTHONPATH (None: keep the environment's own, e.g. another checkout).
    """
    args = tuple(str(a) if not isinstance(a, (str, bytes)) else a for a in args)
    e = dict(os.environ if env is None else env)
    if src:
        e["PYTHONPATH"] = src + os.pathsep + e.get("PYTHONPATH", "")
    if in_process:
        from jitwarden.cli import main as cli

        out, err = io.StringIO(), io.StringIO()
        with environ(e), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(list(args))
        return Ran(args, rc, out.getvalue(), err.getvalue())
    try:
        p = subprocess.run(
            [*prefix, sys.executable, "-m", "jitwarden", *args],
            env=e,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            user=user,
        )
    except subprocess.TimeoutExpired:
        if on_hang is not None:
            on_hang()
        pytest.fail(f"hang: jitwarden {' '.join(map(str, args))} ran past {timeout}s")
    return Ran(args, p.returncode, p.stdout, p.stderr)
