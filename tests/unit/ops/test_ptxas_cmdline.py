"""The ptxas command line a Triton release ran for a cache entry (ops/ptxas_cmdline.py): ``make_cubin``'s flags
rebuilt from metadata, ``ptx_options`` only through the allow-list (the metadata is untrusted), and the CUDA release
that should have, and did, assemble a cubin, checked against each other on real Triton caches."""

from __future__ import annotations

import glob
import os

import pytest

from jitwarden.formats import ptx
from jitwarden.ops import ptxas_cmdline


def test_flags_match_triton_make_cubin():
    md = {
        "target": {"backend": "cuda", "arch": 90},
        "enable_fp_fusion": False,
        "ptx_options": "--maxrregcount 64",
    }
    assert ptxas_cmdline.ptxas_flags(md) == (
        90,
        ["-lineinfo", "--fmad=false", "-v", "--maxrregcount", "64", "--gpu-name=sm_90a"],
    )
    md = {"target": {"arch": 80}, "DISABLE_PTXAS_OPT": "true"}
    assert ptxas_cmdline.ptxas_flags(md) == (
        80,
        ["-g", "-v", "--opt-level", "0", "--gpu-name=sm_80"],
    )
    md = {"target": {"arch": 120}, "TRITON_DISABLE_LINE_INFO": "1", "DISABLE_PTXAS_OPT": "1"}
    assert ptxas_cmdline.ptxas_flags(md)[1][:2] == ["-lineinfo", "-suppress-debug-info"]
    assert ptxas_cmdline.releases_for_ptx("8.7") == {"12.8"}
    assert ptxas_cmdline.releases_for_ptx("9.0") == {"13.0"}
    assert ptxas_cmdline.releases_for_ptx("8.5") == {"12.5", "12.6"}


def test_the_release_a_cubin_names_is_the_one_its_ptx_version_pairs_with(cache):
    _root, records = cache
    for rec in records.values():
        (cubin,) = glob.glob(os.path.join(rec["path"], "*.cubin"))
        (text,) = glob.glob(os.path.join(rec["path"], "*.ptx"))
        with open(text, "rb") as f:
            version = ptx.parse_header(f.read(4096)).version
        with open(cubin, "rb") as f:
            release, _build = ptxas_cmdline.cubin_producer(f.read())
        assert release is not None and release in ptxas_cmdline.releases_for_ptx(version), rec[
            "label"
        ]


@pytest.mark.parametrize("data", [b"", b"\x7fELF" + b"\0" * 10, b"not an elf at all" * 10])
def test_what_names_no_producer_gives_none(data):
    assert ptxas_cmdline.cubin_producer(data) == (None, None)


@pytest.mark.parametrize("version", [None, "", "8", "x.y", "1.0"])
def test_a_ptx_version_no_release_pairs_with_gives_none(version):
    assert ptxas_cmdline.releases_for_ptx(version) == frozenset()


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (
            "--maxrregcount 40 -O3 --def-load-cache=cg",
            ["--maxrregcount", "40", "-O3", "--def-load-cache=cg"],
        ),
        ("-v  -lineinfo", ["-v", "", "-lineinfo"]),  # split on single spaces, as Triton splits it
        ("--fmad=false -dlcm cs", ["--fmad=false", "-dlcm", "cs"]),
        ("-O 2", ["-O", "2"]),
    ],
)
def test_allow_listed_options_pass_as_triton_splits_them(text, want):
    assert ptxas_cmdline.allowed_ptx_options(text) == want


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("--options-file /tmp/evil", "'--options-file', not an option Triton passes to ptxas"),
        ("-o /etc/passwd", "'-o', not an option"),
        ("--gpu-name=sm_80", "'--gpu-name=sm_80', not an option"),
        ("--maxrregcount", "ends with '--maxrregcount' and no value"),
        ("--maxrregcount 99999", "gives '--maxrregcount' the value '99999'"),
        ("-O9", "gives '-O' the value '9'"),
        ("--fmad=maybe", "gives '--fmad' the value 'maybe'"),
        ("--def-load-cache=" + "x" * 100, "the value '" + "x" * 40 + "…'"),
    ],
)
def test_anything_else_is_refused_naming_the_token(text, why):
    with pytest.raises(ptxas_cmdline.RefusedOption) as exc:
        ptxas_cmdline.allowed_ptx_options(text)
    assert why in str(exc.value) and "\n" not in str(exc.value)


def test_metadata_without_an_arch_or_with_options_not_a_string_is_refused():
    with pytest.raises(ValueError, match="no integer target arch"):
        ptxas_cmdline.ptxas_flags({"target": {"backend": "cuda"}})
    with pytest.raises(ptxas_cmdline.RefusedOption, match="ptx_options is a list"):
        ptxas_cmdline.ptxas_flags({"target": {"arch": 90}, "ptx_options": ["-v"]})
