"""GPU architecture names (model/arch.py): every spelling a user types to one number, a GPU that does not exist
refused, and the one rule for "does torch have cubins for this SM"."""

from __future__ import annotations

import pytest

from jitwarden.model import arch


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("sm_90a", 90),
        ("SM_90", 90),
        ("sm90", 90),
        ("compute_80", 80),
        ("90", 90),
        (" 120 ", 120),
        ("12.1", 121),
        ("9.0", 90),
        ("sm_100f", 100),
        (86, 86),
    ],
)
def test_every_spelling_gives_the_one_number(text, want):
    assert arch.parse_arch(text) == want


@pytest.mark.parametrize("text", ["", "sm_", "hopper", "sm_90x", "9", "9.0.1", "sm_9000", "-90"])
def test_what_is_not_an_architecture_is_refused_in_one_line(text):
    with pytest.raises(ValueError, match="not a GPU architecture") as exc:
        arch.parse_arch(text)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("text", ["sm_91", "99", "1.0", "12.9", "compute_999"])
def test_a_gpu_that_does_not_exist_is_refused_with_the_known_list(text):
    with pytest.raises(ValueError, match="unknown GPU architecture") as exc:
        arch.parse_arch(text)
    assert "sm_90, sm_100" in str(exc.value) and "sm_121" in str(exc.value)


def test_known_list_names_every_known_sm_once():
    listed = arch.known_list().split(", ")
    assert listed == [f"sm_{a}" for a in arch.KNOWN] and len(set(listed)) == len(listed)
    assert all(arch.parse_arch(s) == a for s, a in zip(listed, arch.KNOWN, strict=True))


@pytest.mark.parametrize(
    ("arch_list", "sm", "want"),
    [
        (["sm_80", "sm_90"], 90, True),
        (["sm_80", "sm_90a"], 90, True),
        (["sm_100f"], 100, True),
        (["sm_80", "sm_120"], 121, False),  # a neighbour does not count (the seed report's sm_121)
        (["compute_90"], 90, False),  # PTX only: no cubins
        (["sm_9"], 90, False),
        ([], 90, False),
    ],
)
def test_torch_compiled_for_counts_only_cubins_for_that_sm(arch_list, sm, want):
    assert arch.torch_compiled_for(arch_list, sm) is want


def test_the_torch_warning_names_the_list_and_the_arch_to_build_for():
    assert arch.torch_arch_warning("2.13.0", ["sm_90"], 90) is None
    msg = arch.torch_arch_warning("2.9.0", ["sm_80", "sm_120"], 121)
    assert (
        msg is not None
        and "sm_121 is not in torch 2.9.0's compiled arch list (sm_80 sm_120)" in msg
    )
    assert "TORCH_CUDA_ARCH_LIST including 12.1" in msg
    assert "(empty)" in (arch.torch_arch_warning("2.13.0", [], 90) or "")
