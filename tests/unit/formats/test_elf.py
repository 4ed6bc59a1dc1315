"""formats/elf.py is the one ELF reader: its header-only path, whole-file parse and seek-based
section table agree on real cubins (Triton, built by ``triton.compile``) and a real host library."""

from __future__ import annotations

import _socket
import glob
import io
import os

import pytest

from jitwarden.formats import elf


@pytest.fixture(scope="module")
def cubins(built_cache):
    root, manifest = built_cache
    out = []
    for job in manifest:
        for path in glob.glob(os.path.join(root, job["id"], "*.cubin")):
            with open(path, "rb") as f:
                out.append((job, f.read()))
    assert out, "the built cache holds no cubin"
    return out


def test_head_agrees_with_whole_parse_on_real_cubins(cubins):
    for job, data in cubins:
        whole = elf.parse(data)
        head = elf.parse_head(data[: elf.HEADER_SIZE], len(data))
        assert head.problem is None
        assert (head.machine, head.abi_version, head.flags) == (
            whole.machine,
            whole.abi_version,
            whole.flags,
        )
        assert head.machine_name == whole.machine_name == "cuda"
        assert head.sm == elf.cubin_sm(whole) == job["arch"]


def test_truncated_cubin_has_the_same_reason_both_ways(cubins):
    _job, data = cubins[0]
    cut = data[: len(data) // 2]
    with pytest.raises(elf.ElfError) as exc:
        elf.parse(cut)
    head = elf.parse_head(cut[: elf.HEADER_SIZE], len(cut))
    assert (
        head.problem
        == str(exc.value)
        == f"section table ends past the file ({len(cut)} bytes): truncated"
    )
    assert head.sm is None


@pytest.mark.parametrize(
    "data, why",
    [
        (b"hello" * 20, "no ELF magic"),
        (b"\x7fELF", "4 bytes is shorter than an ELF header"),
        (b"\x7fELF\x01\x01" + bytes(58), "not a 64-bit little-endian ELF file"),
    ],
)
def test_not_elf64_has_the_same_reason_both_ways(data, why):
    with pytest.raises(elf.ElfError, match=why):
        elf.parse(data)
    head = elf.parse_head(data, len(data))
    assert head.problem == why and head.machine is None and head.sm is None


def _table(e: elf.Elf) -> dict:
    return {s.name: (s.offset, s.size) for s in e.sections if s.name and s.type != elf.SHT_NOBITS}


def test_seek_reader_agrees_with_whole_parse(cubins):
    with open(_socket.__file__, "rb") as f:
        host = f.read()
        assert elf.file_sections(f) == _table(elf.parse(host))
    assert ".text" in _table(elf.parse(host))
    assert (
        elf.parse_head(host[: elf.HEADER_SIZE], len(host)).machine_name
        == elf.parse(host).machine_name
    )
    for _job, data in cubins:
        assert elf.file_sections(io.BytesIO(data)) == _table(elf.parse(data))


def test_seek_reader_refuses_what_is_no_elf():
    assert elf.file_sections(io.BytesIO(b"hello" * 20)) is None
    assert elf.file_sections(io.BytesIO(b"\x7fELF\x02\x01")) is None
