"""What a warm ``import jitwarden; jitwarden.activate()`` imports: a count, not a time (issue 35).

Every guarded Python pays for each module it imports (vLLM: once per rank), so the warm path's set is
bounded here; a module added to it must be worth its cost, and the bound raised on purpose.
"""

from __future__ import annotations

import json

from tests.helpers.guarded import clean_env, py

WARM_MODULES_MAX = 29
"""jitwarden modules a warm activation imports with torch installed (hooks, sweep check, partitions);
28 since the disk layer was split by concern (issue 36: one fsutil became six small modules); 29 with
env.interpreter (issue 34: the memo is keyed by the workload's interpreter)."""

PROBE = """
import json, sys
before = set(sys.modules)
import jitwarden
jitwarden.activate()
from jitwarden.runtime import memo
new = sorted(set(sys.modules) - before)
print(json.dumps({"memo": memo.last, "jitwarden": [m for m in new if m.startswith("jitwarden")],
                  "other": [m for m in new if not m.startswith("jitwarden")]}))
"""


def test_a_warm_activation_imports_a_bounded_set_of_modules(tmp_path):
    env = clean_env(tmp_path)
    cold = py(PROBE, dict(env))
    assert cold.returncode == 0, cold.stderr
    warm = json.loads(py(PROBE, dict(env)).stdout)
    assert warm["memo"] == "hit"
    assert len(warm["jitwarden"]) <= WARM_MODULES_MAX, warm["jitwarden"]
    heavy = {"dataclasses", "inspect", "ctypes", "hashlib", "subprocess", "argparse", "logging"}
    assert heavy.isdisjoint(warm["other"]), sorted(heavy & set(warm["other"]))
    assert not [
        m for m in warm["jitwarden"] if m.startswith(("jitwarden.env.fingerprint", "jitwarden.cli"))
    ]
