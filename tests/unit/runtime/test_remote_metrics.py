"""``jitwarden metrics``: the Prometheus textfile after real remote traffic, a rejected value and a verify."""

from __future__ import annotations

import os
import re

import pytest

pytest.importorskip(
    "cryptography", reason="the remote cache signs values: needs the [fleet] extra (cryptography)"
)

from jitwarden.runtime import remote
from tests.helpers.fleet import build, jw, node, triton_partition

_LINE = re.compile(r'^[a-z_]+(\{([a-z_]+="(\\.|[^"\\])*",?)*\})? -?[0-9][0-9.e+-]*$')


def parse(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-z_]+ .+$", line), line
            continue
        assert _LINE.match(line), line
        key, value = line.rsplit(" ", 1)
        out[key] = float(value)
    return out


def test_metrics_after_remote_traffic_a_reject_and_a_verify(tmp_path, server, keypair):
    w = node(tmp_path, "builder", server, keypair, "writer")
    part_w, built = build(w)
    rec = built[0]
    key = remote.redis_key(
        os.path.basename(part_w), rec["id"], f"{remote.ENTRY_PREFIX}{rec['name']}.json"
    )
    good = server.call("GET", key)
    server.call("SET", key, good[:-1] + bytes([good[-1] ^ 1]))  # one flipped byte
    r = node(tmp_path, "reader", server, keypair)
    part_r, _ = build(r)
    rc, _, err = jw(r, "verify", part_r)
    assert rc == 0, err
    d = tmp_path / "textfile"
    d.mkdir()
    rc, _, err = jw(r, "metrics", "--textfile-dir", str(d))
    assert rc == 0, err
    assert sorted(os.listdir(d)) == ["jitwarden.prom"]  # written atomically, no temp file left
    m = parse((d / "jitwarden.prom").read_text())
    assert m['jitwarden_remote_rejects_total{reason="digest"}'] == 1
    assert m['jitwarden_remote_requests_total{result="hit"}'] >= 1
    assert m['jitwarden_local_lookups_total{result="miss"}'] == len(built)
    digest = os.path.basename(triton_partition(r))
    part = [
        k for k in m if k.startswith("jitwarden_partition_bytes{") and f'partition="{digest}"' in k
    ]
    assert part and 'current="1"' in part[0] and 'kind="triton"' in part[0]
    assert m[part[0]] == sum(
        os.lstat(os.path.join(dp, f)).st_size for dp, _d, fs in os.walk(part_r) for f in fs
    )
    assert (
        m["jitwarden_last_verify_errors"] == 0 and m["jitwarden_last_verify_timestamp_seconds"] > 0
    )
    rc, out, _ = jw(w, "metrics")
    mw = parse(out)
    assert mw["jitwarden_remote_puts_total"] == len(built) and not [k for k in mw if "rejects" in k]


def test_doctor_says_inductor_remote_caches_are_unguarded(tmp_path):
    import json

    from tests.helpers.fleet import node_env

    env = node_env(str(tmp_path / "n"), TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE="1")
    rc, out, err = jw(env, "doctor", "--format", "json")
    assert rc == 0, err
    probs = [p for p in json.loads(out)["problems"] if p["code"] == "remote-unguarded"]
    assert len(probs) == 1 and "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE is on" in probs[0]["message"]
    rc, out, _ = jw(node_env(str(tmp_path / "m")), "doctor", "--format", "json")
    assert not [p for p in json.loads(out)["problems"] if p["code"] == "remote-unguarded"]
