"""``jitwarden run``'s own fixed cost: what its process imports before it execs the command (issue 35)."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.guarded import clean_env
from tests.helpers.paths import SRC


def _run(args, env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], env=dict(env, PYTHONPATH=SRC), capture_output=True, text=True
    )


def test_run_quiet_is_quiet_without_importing_the_renderer(tmp_path):
    """``-q`` is activation's quiet and leaves CMD's stderr alone; the CLI's stderr filter (and the renderer
    it lives in) is not loaded for a command that replaces this process."""
    env = clean_env(tmp_path, TRITON_CACHE_MANAGER="some.other:Manager")  # a start-up warning
    cmd = [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"]
    loud = _run(["-m", "jitwarden", "run", "--", *cmd], env)
    assert loud.returncode == 0 and "TRITON_CACHE_MANAGER=some.other:Manager" in loud.stderr
    quiet = _run(["-X", "importtime", "-m", "jitwarden", "run", "-q", "--", *cmd], env)
    assert quiet.returncode == 0 and quiet.stdout == "out\n"
    lines = quiet.stderr.splitlines()
    assert [ln for ln in lines if not ln.startswith("import time:")] == ["err"]
    assert not [ln for ln in lines if "jitwarden.cli.render" in ln]
