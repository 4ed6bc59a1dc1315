"""Issue 44: an FX graph that compiles again in every start because its key holds a random value, named with
the input that changed, on real CPU ``torch.compile`` starts under ``jitwarden run --record``.

The planted cause is pytorch PR #194451's: a custom post-grad pass whose ``uuid()`` is new in every process
(a nonce), which torch hashes into every FX graph's key. The same function, the same inputs: the key alone
changes, and Inductor compiles the graph again each start."""

from __future__ import annotations

import json
import sys

from tests.helpers import guarded
from tests.helpers.cli import jw
from tests.helpers.nonce import WORKLOAD


def _start(env, name, **extra):
    r = jw(
        "run",
        "--record",
        name,
        "--",
        sys.executable,
        "-c",
        WORKLOAD,
        env=dict(env, TORCHINDUCTOR_FX_GRAPH_CACHE="1", **extra),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def _always_miss(env, kind):
    r = jw("doctor", "--format", "json", env=env)
    doc = json.loads(r.stdout)
    return [
        p for p in doc["problems"] if p["code"] == "always-miss" and f": {kind}: " in p["message"]
    ]


def test_a_random_value_in_an_fx_graph_key_is_named(tmp_path):
    env = guarded.clean_env(tmp_path)
    for _ in range(3):
        _start(env, "nonce", JW_NONCE="1")
    (p,) = _always_miss(env, "inductor")
    msg = p["message"]
    assert msg.startswith("nonce: inductor: graph 1 compiled 3 times in 3 starts: "), msg
    assert "its key holds a value that is new in every start" in msg, msg
    assert "only post_grad_custom_post_pass differs" in msg, msg
    assert "(the same graph, the same inputs)" in msg, msg
    assert "uuid()" in p["fix"], p
    assert (
        _always_miss(env, "aot") == []
    )  # AOTAutograd's key holds the graph's: one line, the inductor one


def test_a_stable_torch_workload_has_no_graph_always_miss(tmp_path):
    env = guarded.clean_env(tmp_path)
    _start(env, "stable")
    _start(env, "stable")
    assert _always_miss(env, "inductor") == []
    assert _always_miss(env, "aot") == []
