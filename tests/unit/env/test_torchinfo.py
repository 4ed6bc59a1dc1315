"""Facts about the installed torch read from its files without importing it (env/torchinfo.py): version.py
parsed without exec, the compiled arch list taken from libtorch_python.so's .rodata, synthetic and compiled."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from jitwarden.env import torchinfo
from jitwarden.formats import elf
from tests.helpers.otherkinds import elf_with_section


def test_parse_torch_version_py():
    text = (
        "__version__ = '2.11.0+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\n"
        "git_version = 'deadbeef'\nhip: Optional[str] = None\n"
    )
    v = torchinfo.parse_version_py(text)
    assert v["cuda"] == "13.0" and v["git_version"] == "deadbeef" and v["hip"] is None
    assert torchinfo.parse_version_py("cuda = None\n")["cuda"] is None
    assert torchinfo.parse_version_py('cuda = "12.8"\n')["cuda"] == "12.8"
    assert torchinfo.normalize_arches(["sm_90a", "compute_90", "sm_100", "sm_90", "junk"]) == (
        "compute_90",
        "sm_90",
        "sm_100",
    )


FLAGS_RODATA = b"\x01\x02junk\0sm_90\0another string sm_80 sm_90\0sm_75 sm_80 sm_86 sm_90 sm_100 sm_120\0tail\0"


def test_arch_flags_from_rodata_of_synthetic_elf(tmp_path):
    lib = tmp_path / "libtorch_python.so"
    lib.write_bytes(elf_with_section(b".rodata", FLAGS_RODATA))
    # The whole flags string, not a lone token nor a token run inside another sentence.
    assert torchinfo.arch_flags(str(lib)) == (
        "sm_75",
        "sm_80",
        "sm_86",
        "sm_90",
        "sm_100",
        "sm_120",
    )
    with open(lib, "rb") as f:
        assert set(elf.file_sections(f)) == {".rodata", ".shstrtab"}
    other = tmp_path / "libother.so"
    other.write_bytes(elf_with_section(b".data", FLAGS_RODATA))
    assert torchinfo.arch_flags(str(other)) is None
    assert torchinfo.arch_flags(str(tmp_path / "missing.so")) is None
    (tmp_path / "notelf").write_bytes(b"hello" * 20)
    assert torchinfo.arch_flags(str(tmp_path / "notelf")) is None
    (tmp_path / "truncated.so").write_bytes(lib.read_bytes()[:70])
    assert torchinfo.arch_flags(str(tmp_path / "truncated.so")) is None


@pytest.mark.skipif(not shutil.which("cc"), reason="no C compiler")
def test_arch_flags_from_a_compiled_library(tmp_path):
    # How torch embeds it: C10_STRINGIZE(CUDA_ARCH_FLAGS) becomes a string literal in .rodata.
    src = tmp_path / "m.c"
    src.write_text(
        "#define S(x) #x\n#define STR(x) S(x)\nconst char *arch_flags(void) { return STR(FLAGS); }\n"
        'const char *other(void) { return "compute sm_90 is great"; }\n'
    )
    lib = tmp_path / "libtorch_python.so"
    subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", "-DFLAGS=sm_80 sm_90 sm_120", "-o", str(lib), str(src)],
        check=True,
    )
    assert torchinfo.arch_flags(str(lib)) == ("sm_80", "sm_90", "sm_120")


def test_arch_list_is_memoised_by_the_librarys_stat(tmp_path):
    lib = tmp_path / "torch" / "lib" / "libtorch_python.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(elf_with_section(b".rodata", b"\0sm_80 sm_90a compute_90\0"))
    memo: dict = {}
    assert torchinfo.arch_list(str(tmp_path / "torch"), memo) == ("sm_80", "compute_90", "sm_90")
    ((key, value),) = memo.items()
    assert key.startswith(f"flags|{lib}|") and value == ["sm_80", "compute_90", "sm_90"]
    memo[key] = ["sm_100"]  # the same stat: the memo answers, the library is not read again
    assert torchinfo.arch_list(str(tmp_path / "torch"), memo) == ("sm_100",)
    lib.write_bytes(elf_with_section(b".rodata", b"\0no flags here\0"))  # a new size: read again
    memo2: dict = {}
    got = torchinfo.arch_list(str(tmp_path / "torch"), memo2)
    assert list(memo2.values()) == ["unreadable"]  # not read again at every start
    # then this process's torch is asked, if imported (a CPU build: None)
    assert got is None or all(a.startswith(("sm_", "compute_")) for a in got)
