"""A one-test run for tests/unit/test_sandbox.py: writes where ``JW_PROBE_WRITE`` says (a path outside the
sandbox, as a careless test would), or nothing."""

from __future__ import annotations

import os


def test_probe():
    target = os.environ.get("JW_PROBE_WRITE")
    if target:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as f:
            f.write("written by a test\n")
