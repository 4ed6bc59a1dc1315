"""The layer contracts of ARCHITECTURE.md, checked by import-linter over the real package.

The contracts live in pyproject.toml; this runs ``lint-imports`` on the tree as it is, and on a
copy with one upward import planted, so a broken contract is seen to fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.helpers.paths import REPO, SRC

LINT = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def lint(src_dir: str, cwd: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=src_dir)
    return subprocess.run(
        [LINT, "--no-cache", os.path.join(cwd, "pyproject.toml")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_layer_contract_is_kept():
    proc = lint(SRC, REPO)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " 0 broken" in proc.stdout
    assert "kept" in proc.stdout


def test_an_upward_import_breaks_the_layers_contract(tmp_path):
    """model/ importing the CLI is reported, naming the offending import."""
    src = tmp_path / "src"
    shutil.copytree(
        os.path.join(SRC, "jitwarden"),
        src / "jitwarden",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(os.path.join(REPO, "pyproject.toml"), tmp_path / "pyproject.toml")
    text = src / "jitwarden" / "model" / "text.py"
    text.write_text(text.read_text() + "\nfrom jitwarden.cli import render  # planted\n")
    proc = lint(str(src), str(tmp_path))
    assert proc.returncode == 1, proc.stdout[-4000:]
    assert "jitwarden.model.text -> jitwarden.cli.render" in proc.stdout
