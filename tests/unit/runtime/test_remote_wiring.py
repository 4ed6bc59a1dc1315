"""Activation's fleet hook (runtime/remote_wiring.py): ``JITWARDEN_REMOTE`` wires the guarded remote cache only where
it stays guarded and namespaced (the guard in effect, Triton partitioned, a redis:// URL), and says why it is off
otherwise; TorchInductor's Redis caches, which nothing can guard, are named when they are on."""

from __future__ import annotations

import pytest

from jitwarden.model.settings import GUARD_MANAGER, REMOTE_BACKEND, REMOTE_MANAGER
from jitwarden.runtime import remote_wiring

URL = "redis://cache.internal:6379/0"
PARTITIONED = {"TRITON_CACHE_DIR": "/c/triton/jitwarden-v1/abc"}


def _wire(env, manager=GUARD_MANAGER, partitions=PARTITIONED):
    changes: dict = {}
    warnings: list = []
    got = remote_wiring.wire(env, manager, GUARD_MANAGER, changes, dict(partitions), warnings)
    return got, changes, warnings


def test_no_remote_changes_nothing():
    assert _wire({}) == (GUARD_MANAGER, {}, [])


@pytest.mark.parametrize("url", [URL, "valkey://v:6379"])
def test_a_remote_under_the_guard_and_a_partition_is_wired(url):
    got, changes, warnings = _wire({"JITWARDEN_REMOTE": url})
    assert got == REMOTE_MANAGER and warnings == []
    assert changes == {
        "TRITON_CACHE_MANAGER": REMOTE_MANAGER,
        "TRITON_REMOTE_CACHE_BACKEND": REMOTE_BACKEND,
    }


def test_a_child_inherits_the_wiring_and_keeps_it():
    env = {
        "JITWARDEN_REMOTE": URL,
        "TRITON_CACHE_MANAGER": REMOTE_MANAGER,
        "TRITON_REMOTE_CACHE_BACKEND": REMOTE_BACKEND,
    }
    changes = {
        "TRITON_CACHE_MANAGER": GUARD_MANAGER
    }  # what activation had planned before the remote
    warnings: list = []
    got = remote_wiring.wire(env, REMOTE_MANAGER, GUARD_MANAGER, changes, PARTITIONED, warnings)
    assert got == REMOTE_MANAGER and changes == {} and warnings == []


@pytest.mark.parametrize(
    ("env", "manager", "partitions", "why"),
    [
        (
            {"JITWARDEN_REMOTE": URL},
            "mypkg:MyManager",
            PARTITIONED,
            "TRITON_CACHE_MANAGER=mypkg:MyManager is kept",
        ),
        ({"JITWARDEN_REMOTE": URL}, GUARD_MANAGER, {}, "not partitioned by fingerprint"),
        (
            {"JITWARDEN_REMOTE": "http://cache:6379"},
            GUARD_MANAGER,
            PARTITIONED,
            "is not a redis:// URL",
        ),
    ],
)
def test_otherwise_the_remote_is_off_and_says_why(env, manager, partitions, why):
    got, changes, warnings = _wire(env, manager, partitions)
    assert got == manager and changes == {}
    (line,) = warnings
    assert why in line and "the remote cache is off" in line


def test_inductors_remote_caches_are_named_unguarded():
    assert remote_wiring.unguarded({}) == []
    assert remote_wiring.unguarded({"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "0"}) == []
    (one,) = remote_wiring.unguarded({"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1"})
    assert one.startswith("TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE is on: ") and "unguarded" in one
    env = dict.fromkeys(remote_wiring.INDUCTOR_REMOTE, "true")
    (all_,) = remote_wiring.unguarded(env)
    assert all_.startswith(", ".join(remote_wiring.INDUCTOR_REMOTE) + " are on: ")
    _got, _changes, warnings = _wire(env)  # said at every activation, remote or not
    assert warnings == [all_]
