"""``verify`` checks the seals of FX-graph and AOTAutograd pickles, in an Inductor cache and inside vLLM's
(issue 23, item 4): the pickles are real, written and sealed by a guarded ``torch.compile`` (the torch hooks)."""

from __future__ import annotations

import glob
import json
import os
import shutil

import pytest

from tests.helpers.maint import cli
from tests.unit.runtime.test_torchhooks import _fx

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def sealed_inductor(tmp_path_factory):
    """A real Inductor cache whose FX-graph and AOTAutograd pickles the torch hooks sealed when torch wrote them."""
    cache = str(tmp_path_factory.mktemp("sealed") / "inductor")
    res, _ = _fx(cache)
    assert res["ok"] and set(res["hooks"].values()) == {"guarded"}, res
    return cache


def _pickles(cache: str, group: str) -> list[str]:
    pattern = (
        os.path.join(cache, "fxgraph", "*", "*", "*")
        if group == "fxgraph"
        else os.path.join(cache, group, "*", "*")
    )
    return sorted(
        p
        for p in glob.glob(pattern)
        if os.path.isfile(p) and not os.path.basename(p).startswith(".")
    )


def _flip(path: str) -> None:
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        data[len(data) // 2] ^= 0x01
        f.seek(0)
        f.write(data)


def _verify(*args):
    p = cli("verify", "--format", "json", *args)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


def _codes(doc, needle: str) -> list[tuple[str, str]]:
    return [
        (f["code"], f["message"])
        for e in doc["entries"]
        if needle in e["id"]
        for f in e["findings"]
    ]


@pytest.mark.parametrize("group", ["fxgraph", "aotautograd"])
def test_a_byte_flipped_in_a_sealed_pickle_is_found_by_verify(sealed_inductor, tmp_path, group):
    cache = str(tmp_path / "inductor")
    shutil.copytree(sealed_inductor, cache, symlinks=True)
    rc, doc = _verify("--kind", "inductor", cache)
    assert rc == 0 and doc["summary"]["errors"] == 0, doc["summary"]
    victim = _pickles(cache, group)[0]
    _flip(victim)  # same size, same framing: only the seal can tell
    rc, doc = _verify("--kind", "inductor", cache)
    assert rc == 1, doc["summary"]
    found = _codes(doc, os.path.basename(os.path.dirname(victim)))
    assert ("corrupt", f"{os.path.basename(victim)} does not match its sealed sha256") in found, (
        found
    )


def test_a_sealed_pickle_in_vllm_s_inductor_cache_is_checked(sealed_inductor, tmp_path):
    root = tmp_path / "vllm"
    nested = root / "torch_compile_cache" / "3f9c0a1b2d" / "rank_0_0" / "inductor_cache"
    shutil.copytree(sealed_inductor, str(nested), symlinks=True)
    rc, doc = _verify("--kind", "vllm", str(root))
    assert rc == 0 and doc["summary"]["entries"] > 0, doc["summary"]
    victim = _pickles(str(nested), "fxgraph")[0]
    _flip(victim)
    rc, doc = _verify("--kind", "vllm", str(root))
    assert rc == 1
    assert any(
        c == "corrupt" and "sealed sha256" in m
        for c, m in _codes(doc, os.path.basename(os.path.dirname(victim)))
    )


def test_sealed_pickles_are_sealed_not_unproven(sealed_inductor):
    """Pickles that match the seal the torch hooks wrote are ``sealed`` (issue 34, item 1): a verdict says what
    vouches for them, and an unsealed one is ``unproven``."""
    _rc, doc = _verify("--all", sealed_inductor)
    by_type = {}
    for e in doc["entries"]:
        by_type.setdefault(e["type"], set()).add(e["verdict"])
    assert by_type["fxgraph"] == {"sealed"} and by_type["aotautograd"] == {"sealed"}, by_type
