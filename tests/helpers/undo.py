"""Run the ``undo:`` line a command printed, through a real shell, as a user pasting it would (issue 34)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from tests.helpers.cli import Ran
from tests.helpers.paths import SRC


def undo_line(stdout: str) -> str:
    """The command of the one ``undo:`` line in ``stdout`` (fails when there is none or several)."""
    lines = [x.removeprefix("undo: ") for x in stdout.splitlines() if x.startswith("undo: ")]
    assert len(lines) == 1, stdout
    return lines[0]


def run_printed(
    stdout: str, *, cwd: str | None = None, yes: bool = True, env: dict | None = None
) -> Ran:
    """Run the printed undo command by ``bash -c`` with a ``jitwarden`` of this checkout first on PATH; ``yes``
    appends ``-y``, as a user answering the question would (no terminal here)."""
    line = undo_line(stdout)
    with tempfile.TemporaryDirectory() as bindir:
        shim = os.path.join(bindir, "jitwarden")
        with open(shim, "w") as f:
            f.write(f'#!/bin/sh\nexec "{sys.executable}" -m jitwarden "$@"\n')
        os.chmod(shim, 0o755)
        env = dict(os.environ if env is None else env)
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
        env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
        cmd = line + (" -y" if yes else "")
        p = subprocess.run(
            ["bash", "-c", cmd],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
    return Ran((cmd,), p.returncode, p.stdout, p.stderr)
