"""Every transcript in README.md and docs/ is what the tool prints now (docs/transcripts.py --check)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.paths import REPO


def test_transcripts_have_not_drifted():
    pytest.importorskip("triton")  # the scenarios compile real kernels
    p = subprocess.run(
        [sys.executable, os.path.join(REPO, "docs", "transcripts.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert p.returncode == 0, p.stderr + "\nrun `python docs/transcripts.py` and review the diff"


def test_every_block_in_the_docs_is_fenced_and_generated():
    sys.path.insert(0, os.path.join(REPO, "docs"))
    import transcripts

    names = [n for f in transcripts.FILES for n, _ in transcripts.blocks(os.path.join(REPO, f))]
    assert len(names) == len(set(names)) >= 6
    # No hand-written terminal transcript outside a generated block.
    for f in transcripts.FILES:
        text = open(os.path.join(REPO, f), encoding="utf-8").read()
        outside = transcripts.BLOCK.sub("", text)
        assert "```console" not in outside, (
            f"{f}: a console block that docs/transcripts.py does not make"
        )
