"""numba adapter on the REAL numba-cuda cache captured on the H200 (``tests/data/real/jax_cupy/numba_cache.tar.xz``).

numba-cuda 0.30.4 (numba 0.68.0, numpy 2.2.6 carried: numpy 2.5 breaks its import), ``NUMBA_CACHE_DIR`` set:
``@cuda.jit(cache=True)`` kernels ``add`` and ``sub`` of module ``jwkern``. With ``sub``'s ``.nbc`` copied over
``add``'s, stock numba-cuda returned x-y for add (3.0 where 7.0 was expected). See JAX_CUPY.md.
"""

from __future__ import annotations

import os
import shutil
import tarfile

import pytest

from jitwarden import adapters
from jitwarden.adapters import numba_cuda as nb
from tests.helpers import otherkinds as ok
from tests.helpers.paths import DATA

REAL = os.path.join(DATA, "real", "jax_cupy")
SUB = "numba_src_a0b4d7817057cd1fd30682c0564032fc52b99b16"
ADD_NBC, SUB_NBC = f"{SUB}/jwkern.add-3.py312.1.nbc", f"{SUB}/jwkern.sub-8.py312.1.nbc"
ADD_NBI = f"{SUB}/jwkern.add-3.py312.nbi"


@pytest.fixture
def cache(tmp_path):
    with tarfile.open(os.path.join(REAL, "numba_cache.tar.xz")) as t:
        t.extractall(str(tmp_path), filter="data")
    return str(tmp_path / "numba_cache")


def bad(doc) -> dict[str, list[str]]:
    return {k: v for k, v in ok.codes(doc).items() if v}


def test_real_cache_has_no_false_alarm(cache, capsys):
    rc, doc = ok.verify(capsys, cache, "--target", "90", "--all")
    assert rc == 0 and doc["caches"][0]["kind"] == "numba" and bad(doc) == {}
    by = {e["id"]: e for e in doc["entries"]}
    assert sorted(by) == sorted([ADD_NBC, SUB_NBC, ADD_NBI, f"{SUB}/jwkern.sub-8.py312.nbi"])
    assert by[ADD_NBC]["cubin_sm"] == 90 and by[ADD_NBC]["extra"]["mangled"].startswith(
        "_ZN6jwkern3addB2v"
    )
    assert by[ADD_NBI]["extra"]["numba_version"] == "0.68.0" and by[ADD_NBI]["extra"][
        "compute_capabilities"
    ] == [90]


def test_another_functions_data_under_a_key_is_a_mismatch(cache, capsys):
    """The captured attack: sub's .nbc over add's, which stock numba-cuda ran as x-y."""
    shutil.copyfile(os.path.join(cache, SUB_NBC), os.path.join(cache, ADD_NBC))
    rc, doc = ok.verify(capsys, cache, "--target", "90")
    assert rc == 1 and bad(doc) == {ADD_NBC: ["mismatch"]}


@pytest.mark.parametrize("rel", [ADD_NBC, ADD_NBI])
def test_a_truncated_pickle_is_corrupt(cache, capsys, rel):
    p = os.path.join(cache, rel)
    with open(p, "rb") as f:
        data = f.read()
    with open(p, "wb") as f:
        f.write(data[: len(data) - 40])
    rc, doc = ok.verify(capsys, cache, "--target", "90")
    assert rc == 1 and bad(doc) == {rel: ["corrupt"]}


def test_a_missing_data_file_and_another_gpu(cache, capsys):
    os.remove(os.path.join(cache, ADD_NBC))
    rc, doc = ok.verify(capsys, cache, "--target", "90")
    assert rc == 1 and bad(doc) == {ADD_NBI: ["incomplete"]}
    rc, doc = ok.verify(capsys, cache, "--target", "80")
    assert bad(doc)[SUB_NBC] == ["foreign-arch"] and bad(doc)[f"{SUB}/jwkern.sub-8.py312.nbi"] == [
        "foreign-arch"
    ]


def test_roots_as_numba_finds_them(cache, tmp_path):
    assert [r.path for r in nb.discover_roots({"NUMBA_CACHE_DIR": cache})] == [cache]
    assert (
        nb.discover_roots({"HOME": str(tmp_path)}) == []
    )  # numba's default is beside each source file
    assert (
        adapters.kind_of_path(cache) == "numba"
        and adapters.kind_of_path(os.path.join(cache, SUB)) == "numba"
    )


def test_data_of_another_shape_is_not_judged(cache, capsys):
    """CPU numba writes .nbc files of another shape under the same names: not understood, never a mismatch."""
    import pickle

    with open(os.path.join(cache, ADD_NBC), "wb") as f:
        f.write(pickle.dumps(({"name": "_ZN6jwkern3subB2v1"}, b"library"), protocol=4))
    rc, doc = ok.verify(capsys, cache, "--target", "90", "--all")
    assert rc == 0 and bad(doc) == {ADD_NBC: ["unrecognised"]}
