"""What a warm ``import jitwarden; jitwarden.activate()`` imports: a count, not a time (issue 35).

Every guarded Python pays for each module it imports (vLLM: once per rank), so the warm path's set is
bounded here; a module added to it must be worth its cost, and the bound raised on purpose.
"""

from __future__ import annotations

import json

from tests.helpers.guarded import clean_env, py

WARM_MODULES_MAX = 36
"""jitwarden modules a warm activation imports with torch installed (hooks, sweep check, partitions).
Raised on purpose, each time for a module that does a job on this path: 23 at issue 35; the disk layer split
by concern (issue 36: one fsutil became six small modules), env.interpreter (issue 34: the memo is keyed by
the workload's interpreter), runtime.flathooks (now runtime.guards: every guard installed, none imported) and runtime.postimport (issue 33: JAX's and CuPy's load hooks),
runtime.say (issue 36: the one logger), store.trust (issue 32: the one trust rule, asked of every root),
model.errors (an env error carries its exit status) and runtime.record (issue 44: ``run --record``'s switch, read
once from the environment; a hit then costs a tuple append) and model.kinds (issue 46: every kind's row, which
activation partitions by; about a millisecond, no import of its own). model.bounds is read by the hooks where they
read a file, not at import."""

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
