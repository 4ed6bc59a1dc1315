"""numba-cuda's cache files (formats/numbacache.py) read from the real cache captured on the H200
(tests/data/real/jax_cupy/numba_cache.tar.xz: kernels ``add`` and ``sub`` of module ``jwkern``, sm_90)."""

from __future__ import annotations

import glob
import os
import pickle

import pytest

from jitwarden.formats import numbacache
from tests.unit.adapters.test_cupy import unpack


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, bytes]:
    root = unpack("numba_cache", tmp_path_factory.mktemp("numba"))
    out = {}
    for p in glob.glob(os.path.join(root, "*", "*")):
        with open(p, "rb") as f:
            out[os.path.basename(p)] = f.read()
    return out


@pytest.mark.parametrize("fn", ["add-3", "sub-8"])
def test_an_index_lists_its_data_file_numba_version_and_sm(files, fn):
    got = numbacache.parse_index(files[f"jwkern.{fn}.py312.nbi"])
    assert (got.problem, got.unknown) == (None, None)
    assert got.numba_version == "0.68.0"
    assert got.data_files == (f"jwkern.{fn}.py312.1.nbc",)
    assert got.compute_capabilities == (90,)


@pytest.mark.parametrize(("fn", "name"), [("add-3", "add"), ("sub-8", "sub")])
def test_a_data_file_names_its_kernel_and_its_cubins_sm(files, fn, name):
    got = numbacache.parse_data(files[f"jwkern.{fn}.py312.1.nbc"])
    assert (got.problem, got.unknown) == (None, None)
    assert got.function == ("jwkern", name)
    assert got.mangled is not None and got.mangled.startswith(f"_ZN6jwkern3{name}")
    assert got.cubin_sm == 90


def test_a_cut_pickle_is_damage_numba_cannot_read(files):
    nbi = files["jwkern.add-3.py312.nbi"]
    nbc = files["jwkern.add-3.py312.1.nbc"]
    got = numbacache.parse_index(nbi[: len(nbi) // 2])
    assert got.problem and "index pickle does not parse" in got.problem
    got = numbacache.parse_data(nbc[: len(nbc) // 2])
    assert got.problem and "data pickle does not parse" in got.problem


def test_another_shape_is_not_understood_not_damage():
    got = numbacache.parse_data(pickle.dumps({"not": "numba-cuda"}))
    assert got.problem is None and "not judged" in (got.unknown or "")
    got = numbacache.parse_data(pickle.dumps(("cooperative", {"other": 1})))
    assert got.problem is None and got.unknown == "no kernel name in the data pickle"
    got = numbacache.parse_index(pickle.dumps("0.68.0") + pickle.dumps({"no": "files"}))
    assert got.problem is None and got.unknown == "an index listing no .nbc data file"
    assert got.numba_version == "0.68.0"


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("_ZN6jwkern3addB2v1E", ("jwkern", "add")),
        ("_ZN1a2bc3defE", ("a", "bc", "def")),
        ("_Z3addPf", ()),  # not a nested name
        ("add", ()),
        ("_ZN9short", ()),  # a length past the end
    ],
)
def test_demangle_gives_the_nested_name_parts(name, parts):
    assert numbacache.demangle(name) == parts
