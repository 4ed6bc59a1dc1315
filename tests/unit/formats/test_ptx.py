"""PTX header facts (formats/ptx.py) read from the PTX that ``triton.compile`` writes for each SM, and from heads
that lack them: a missing fact is None, never a guess."""

from __future__ import annotations

import glob
import os

import pytest

from jitwarden.formats import ptx


def test_every_real_ptx_names_its_target_sm_and_its_one_kernel(cache):
    _root, records = cache
    seen = set()
    for rec in records.values():
        (path,) = glob.glob(os.path.join(rec["path"], "*.ptx"))
        with open(path, "rb") as f:
            hdr = ptx.parse_header(f.read(4096))
        assert hdr.version is not None and hdr.version[0].isdigit()
        assert hdr.target is not None and hdr.target.startswith(f"sm_{rec['arch']}")
        assert hdr.target_arch == rec["arch"]
        assert hdr.entries == (rec["kernel"],)
        seen.add(rec["arch"])
    assert seen == {80, 90, 120, 121}


@pytest.mark.parametrize(
    ("head", "version", "target", "arch", "entries"),
    [
        (b"", None, None, None, ()),
        (b"// no header at all\n", None, None, None, ()),
        (b".version 8.7\n.target sm_90a\n", "8.7", "sm_90a", 90, ()),
        (b"  .version 7.0\n  .target compute_80\n", "7.0", "compute_80", None, ()),  # not an SM
        (b".target sm_\n", None, "sm_", None, ()),
        (
            b".visible .entry k$1(\n) {}\n.entry _Z3addPf()\n.entryx\n",
            None,
            None,
            None,
            ("k$1", "_Z3addPf"),
        ),
    ],
)
def test_a_head_gives_the_facts_it_has_and_none_it_lacks(head, version, target, arch, entries):
    hdr = ptx.parse_header(head)
    assert (hdr.version, hdr.target, hdr.target_arch, hdr.entries) == (
        version,
        target,
        arch,
        entries,
    )


def test_only_a_line_starting_with_the_directive_counts():
    hdr = ptx.parse_header(b"// .version 1.0 .target sm_10\n.version 8.0\n.target sm_80\n")
    assert (hdr.version, hdr.target_arch) == ("8.0", 80)
