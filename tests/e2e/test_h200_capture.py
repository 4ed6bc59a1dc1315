"""A real TorchInductor cache captured on the H200 (torch 2.11+cu130, Triton 3.6.0, sm_90).

``tests/data/h200_inductor_cache.tgz`` is what ``benchmarks/h200_capture_inductor.py`` left in
``TORCHINDUCTOR_CACHE_DIR=/tmp/cap/ind`` (Triton kernels in ``/tmp/cap/ind/triton/0``): FX-graph and
AOTAutograd pickles, generated Triton kernel sources whose ``triton_meta`` names the device
(``cc=90``), and the Triton entries with their cubins and launcher.
"""

from __future__ import annotations

import json
import os
import tarfile

import pytest

from jitwarden.cli.main import main
from tests.helpers.paths import DATA

CAPTURE = os.path.join(DATA, "h200_inductor_cache.tgz")


@pytest.fixture
def captured(tmp_path):
    with tarfile.open(CAPTURE) as t:
        t.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return tmp_path / "ind"


def verify(capsys, *args):
    rc = main(["verify", "--format", "json", *args])
    return rc, json.loads(capsys.readouterr().out)


def test_inductor_entries_are_clean_on_the_gpu_they_were_built_for(captured, capsys):
    rc, doc = verify(capsys, "--target", "90", str(captured))
    assert rc == 0 and doc["caches"][0]["kind"] == "inductor"
    kinds = {e["type"] for e in doc["entries"]}
    assert doc["summary"]["errors"] == 0 and len(doc["entries"]) >= 8, kinds
    archs = {e["arch"] for e in doc["entries"] if e["arch"]}
    assert archs == {
        90
    }  # read from DeviceProperties(cc=90) in the kernels' triton_meta, never unpickled


def test_the_same_entries_are_foreign_on_another_gpu(captured, capsys):
    rc, doc = verify(capsys, "--target", "sm_120", str(captured))
    assert rc == 0
    foreign = [e for e in doc["entries"] if any(f["code"] == "foreign-arch" for f in e["findings"])]
    assert len(foreign) >= 5 and all(e["arch"] == 90 for e in foreign)


def test_the_captured_triton_tree_moved_here_points_back_to_the_h200s_path(captured, capsys):
    """Triton's group files hold absolute paths: a copied cache names the tree it came from, which is gone here
    (``moved``: Triton recompiles it; ``jitwarden relocate`` makes it hit again)."""
    rc, doc = verify(capsys, "--target", "90", str(captured / "triton" / "0"))
    assert rc == 0
    kernels = [e for e in doc["entries"] if e["type"] == "kernel"]
    assert kernels and all(e["cubin_sm"] == 90 for e in kernels)
    assert all([f["code"] for f in e["findings"]] == ["moved"] for e in kernels)
    assert all("/tmp/cap/ind/triton/0" in e["findings"][0]["message"] for e in kernels)


def test_kind_narrows_what_is_scanned(captured, capsys):
    both = [str(captured), str(captured / "triton" / "0")]
    rc, doc = verify(capsys, "--target", "90", "--kind", "inductor", *both)
    assert rc == 0 and {c["kind"] for c in doc["caches"]} == {"inductor"}
    rc, doc = verify(capsys, "--target", "90", "--kind", "triton", *both)
    assert rc == 0 and {e["kind"] for e in doc["entries"]} == {"triton"}
    assert main(["verify", "--kind", "nonsense", str(captured)]) == 2
