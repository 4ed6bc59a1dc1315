"""Fingerprint partitions (store/partition.py): ``<root>/jitwarden-v1/<digest>/`` made and recorded, its last use
rewritten at most once a minute, refused where it is not ours to use, its record read as untrusted input."""

from __future__ import annotations

import json
import os
import sys

import pytest

from jitwarden.model.layout import PARTITION_INFO, PARTITIONS_DIR
from jitwarden.store import partition

NOBODY = 65534


def test_a_partition_path_and_its_parts():
    p = partition.path_for("/c/triton", "abc123")
    assert p == f"/c/triton/{PARTITIONS_DIR}/abc123"
    assert partition.split(p + "/") == ("/c/triton", "abc123")
    assert partition.digest_of(p) == "abc123" and partition.base_of(p) == "/c/triton"
    assert partition.split("/c/triton") is None and partition.digest_of("/c/triton") is None
    assert partition.base_of("/c/triton") == "/c/triton"  # never a partition inside a partition


def test_ensure_makes_and_records_it_then_touches_at_most_once_a_minute(tmp_path):
    p = partition.path_for(str(tmp_path), "d1")
    first = partition.ensure(
        p, "d1", "sm_90 triton 3.6", "triton", now=1000.0, python="/v/bin/python"
    )
    assert os.path.isdir(p) and oct(os.stat(p).st_mode & 0o777) == oct(0o755)
    assert first == partition.read_info(p)
    assert (
        first.digest,
        first.headline,
        first.created,
        first.last_used,
        first.kinds,
        first.python,
    ) == (
        "d1",
        "sm_90 triton 3.6",
        1000.0,
        1000.0,
        ("triton",),
        "/v/bin/python",
    )
    same = partition.ensure(p, "d1", None, "triton", now=1030.0, python="/v/bin/python")
    assert same.last_used == 1000.0  # within the minute: a read, no write
    later = partition.ensure(p, "d1", None, "inductor", now=1030.0, python="/v/bin/python")
    assert (
        later.kinds == ("inductor", "triton") and later.last_used == 1030.0
    )  # a new kind is recorded at once
    assert later.headline == "sm_90 triton 3.6" and later.created == 1000.0
    other = partition.ensure(p, "d1", None, "triton", now=1031.0)
    assert other.python == sys.executable  # another environment uses it: said at once
    assert partition.list_partitions(str(tmp_path)) == [(p, other)]


@pytest.mark.parametrize(
    "doc",
    [
        "not json",
        "[1, 2]",
        '{"headline": "no digest"}',
        '{"digest": "d", "kinds": "triton"}',
        '{"digest": "d", "kinds": [1]}',
        '{"digest": "d", "created": "yesterday"}',
        '{"digest": "d", "last_used": 1e999999}',  # infinity: "in use forever", never pruned
        '{"digest": "d", "created": -1e999999}',
    ],
)
def test_a_damaged_record_is_no_record(tmp_path, doc):
    p = partition.path_for(str(tmp_path), "d")
    os.makedirs(p)
    (tmp_path / PARTITIONS_DIR / "d" / PARTITION_INFO).write_text(doc)
    assert partition.read_info(p) is None
    assert partition.list_partitions(str(tmp_path)) == [(p, None)]
    info = partition.ensure(p, "d", None, "triton", now=5.0)  # and it is written anew
    assert partition.read_info(p) == info


def test_a_record_of_other_types_keeps_only_what_it_can_trust(tmp_path):
    p = partition.path_for(str(tmp_path), "d")
    os.makedirs(p)
    doc = {"digest": "d", "headline": 7, "python": ["x"], "created": None, "last_used": 2}
    (tmp_path / PARTITIONS_DIR / "d" / PARTITION_INFO).write_text(json.dumps(doc))
    info = partition.read_info(p)
    assert info is not None and (info.headline, info.python, info.created, info.last_used) == (
        None,
        None,
        0.0,
        2.0,
    )


def test_a_partition_not_ours_to_use_is_refused(tmp_path):
    base = tmp_path / "shared"
    os.makedirs(base / PARTITIONS_DIR / "d")
    p = str(base / PARTITIONS_DIR / "d")
    assert partition.unusable(p) is None
    os.chmod(base / PARTITIONS_DIR, 0o777)
    assert partition.unusable(p) == f"{base / PARTITIONS_DIR} is world-writable"
    with pytest.raises(OSError, match="world-writable"):
        partition.ensure(p, "d", None, "triton")
    os.chmod(base / PARTITIONS_DIR, 0o755)
    for d in (base / PARTITIONS_DIR, p):
        os.chown(d, NOBODY, NOBODY)
    # another uid's partition proves nothing to root either (issue 32: no exemption for root)
    assert partition.unusable(p) == f"{base / PARTITIONS_DIR} belongs to uid {NOBODY}"
    assert partition.unusable(p, uid=1000) == f"{base / PARTITIONS_DIR} belongs to uid {NOBODY}"
    real = tmp_path / "elsewhere"
    real.mkdir()
    link_base = tmp_path / "linked"
    os.makedirs(link_base / PARTITIONS_DIR)
    os.symlink(real, link_base / PARTITIONS_DIR / "d")
    assert partition.unusable(str(link_base / PARTITIONS_DIR / "d")).endswith("is a symlink")
    assert partition.unusable(str(tmp_path / "missing" / "d")).endswith("No such file or directory")


def test_a_linked_partitions_dir_is_never_followed(tmp_path):
    real = tmp_path / "victim"
    real.mkdir()
    base = tmp_path / "root"
    base.mkdir()
    os.symlink(real, base / PARTITIONS_DIR)
    with pytest.raises(OSError):
        partition.ensure(partition.path_for(str(base), "d"), "d", None, "triton")
    assert os.listdir(real) == []
