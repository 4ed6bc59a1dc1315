"""Each Triton release's ptxas choice and command line (jitwarden.env.ptxas.RECIPES), checked
against the installed Triton itself; benchmarks/version_matrix.py runs the same check and
the whole rebuild/guard matrix in a venv per release (3.4 to 3.9)."""

from __future__ import annotations

import dataclasses
import os

import pytest

from jitwarden.env import ptxas
from jitwarden.ops import rebuild

BIN = ptxas.triton_bin_dir()
needs_bin = pytest.mark.skipif(
    not BIN or not os.path.exists(os.path.join(BIN, "ptxas-blackwell")),
    reason="no Triton with both bundled ptxas",
)


def test_table_agrees_with_the_installed_triton():
    assert ptxas.recipe_for(None).known, ptxas.installed_triton_version()
    assert rebuild.recipe_disagreements() == []
    # The check reads Triton's real get_ptxas and make_cubin: another release's rules disagree.
    mine = ptxas.recipe_for(None)
    other = next(
        r
        for r in ptxas.RECIPES
        if r.blackwell_from != mine.blackwell_from and r.reg_alloc != mine.reg_alloc
    )
    problems = rebuild.recipe_disagreements(recipe=other)
    assert any("the table says" in p and "sm_" in p for p in problems), problems
    assert any("--regAllocOptLevel=2" in p for p in problems), problems


def test_recipe_for_releases():
    assert [r.release for r in ptxas.RECIPES] == ["3.4", "3.5", "3.6", "3.7", "3.8", "3.9"]
    assert ptxas.recipe_for("3.9.0").binary(90) == (
        "ptxas-blackwell",
        "TRITON_PTXAS_BLACKWELL_PATH",
    )
    assert ptxas.recipe_for("3.9.0").binary(89) == ("ptxas", "TRITON_PTXAS_PATH")
    assert ptxas.recipe_for("3.6.0+git1234").binary(90)[0] == "ptxas"
    assert ptxas.recipe_for("3.6.0").binary(100)[0] == "ptxas-blackwell"
    assert ptxas.recipe_for("3.4.0").binary(121)[0] == "ptxas"
    assert ptxas.recipe_for("3.5.1").roles() == ("triton",)
    newer, older = ptxas.recipe_for("3.10.0"), ptxas.recipe_for("3.2.0")
    assert (newer.release, newer.known, older.release, older.known) == ("3.9", False, "3.4", False)
    assert ptxas.recipe_for(None) == ptxas.recipe_for(ptxas.installed_triton_version())


def _md(version, arch=90, **kw):
    return {"target": {"backend": "cuda", "arch": arch}, "triton_version": version, **kw}


@pytest.mark.parametrize(
    "version,expected",
    [
        # make_cubin of each release, read from its wheel's triton/backends/nvidia/compiler.py
        ("3.4.0", ["-lineinfo", "-v", "--opt-level", "0", "--gpu-name=sm_90a"]),
        ("3.5.0", ["-g", "-v", "--opt-level", "0", "--gpu-name=sm_90a"]),
        ("3.6.0", ["-g", "-v", "--opt-level", "0", "--gpu-name=sm_90a"]),
        ("3.7.0", ["-g", "-v", "--opt-level", "0", "--regAllocOptLevel=2", "--gpu-name=sm_90a"]),
        ("3.9.0", ["-g", "-v", "--opt-level", "0", "--regAllocOptLevel=2", "--gpu-name=sm_90a"]),
    ],
)
def test_disable_ptxas_opt_command_line_per_release(version, expected):
    assert rebuild.ptxas_flags(_md(version, DISABLE_PTXAS_OPT="1")) == (90, expected)


def test_sanitizer_opt_level_from_3_8():
    plain = ["-lineinfo", "-v", "--regAllocOptLevel=2"]
    san = plain + ["--opt-level", "1", "--gpu-name=sm_100a"]
    assert rebuild.ptxas_flags(_md("3.7.0", 100, instrumentation_mode="consan"))[1] == plain + [
        "--gpu-name=sm_100a"
    ]
    assert rebuild.ptxas_flags(_md("3.8.0", 100, instrumentation_mode="consan"))[1] == san
    assert (
        rebuild.ptxas_flags(_md("3.8.0", 100, instrumentation_mode="fpsan_x"))[1] == san
    )  # 3.8: substring
    assert (
        rebuild.ptxas_flags(_md("3.9.0", 100, instrumentation_mode="iisan,fpsan"))[1] == san
    )  # 3.9: names
    assert rebuild.ptxas_flags(_md("3.9.0", 100, instrumentation_mode="fpsan_x"))[1] == plain + [
        "--gpu-name=sm_100a"
    ]
    # user options come first, Triton's own --opt-level 1 after them
    assert rebuild.ptxas_flags(
        _md("3.9.0", 100, instrumentation_mode="consan", ptx_options="--maxrregcount=64")
    )[1] == plain + ["--maxrregcount=64", "--opt-level", "1", "--gpu-name=sm_100a"]


@needs_bin
def test_ptxas_choice_per_release():
    env = {"PATH": os.environ.get("PATH", "")}
    pt, bw = os.path.join(BIN, "ptxas"), os.path.join(BIN, "ptxas-blackwell")
    r34, r36, r39 = (ptxas.recipe_for(v) for v in ("3.4.0", "3.6.0", "3.9.0"))
    assert [ptxas.for_arch(a, env, recipe=r34) for a in (80, 90, 100, 120)] == [pt, pt, pt, pt]
    assert [ptxas.for_arch(a, env, recipe=r36) for a in (80, 90, 100, 120)] == [pt, pt, bw, bw]
    assert [ptxas.for_arch(a, env, recipe=r39) for a in (80, 90, 100, 120)] == [pt, bw, bw, bw]
    # 3.4 has no ptxas-blackwell knob: TRITON_PTXAS_BLACKWELL_PATH changes nothing there
    assert ptxas.for_arch(120, {"TRITON_PTXAS_BLACKWELL_PATH": bw}, recipe=r34) == pt
    assert [r for r, _ in ptxas.selected(env, recipe=r34)] == ["triton"]
    assert [r for r, _ in ptxas.selected(env, recipe=r39)] == ["triton", "triton-blackwell"]


def test_unknown_release_recipe_is_nearest_but_flagged():
    r = ptxas.recipe_for("4.0.0")
    assert dataclasses.replace(r, known=True) == ptxas.RECIPES[-1] and not r.known


def test_startup_ptxas_check_follows_the_release():
    from jitwarden.env.fingerprint import Fingerprint, Package
    from jitwarden.env.nvml import Gpu
    from jitwarden.runtime import startup_checks

    def fp(triton, role):
        info = ptxas.PtxasInfo(
            path="/opt/ptxas",
            realpath="/opt/ptxas",
            version_text="release 11.7",
            release="11.7",
            build=None,
            sha256="0" * 64,
            size=1,
        )
        return Fingerprint(
            gpu_source="nvml",
            gpus=(Gpu(0, "NVIDIA H200", (9, 0), None, None),),
            driver_version="580.1",
            cuda_driver_version="13.0",
            ptxas=((role, info),),
            packages=(Package(name="triton", dist="triton", version=triton, identity=None),),
            python=(),
            platform=(),
            env=(),
        )

    ws = startup_checks.ptxas_target(fp("3.9.0", "triton-blackwell"))
    assert (
        len(ws) == 1 and "cannot target sm_90" in ws[0] and "TRITON_PTXAS_BLACKWELL_PATH" in ws[0]
    )
    assert (
        startup_checks.ptxas_target(fp("3.6.0", "triton-blackwell")) == []
    )  # 3.6 runs ptxas for sm_90
    ws = startup_checks.ptxas_target(fp("3.6.0", "triton"))
    assert len(ws) == 1 and "TRITON_PTXAS_PATH" in ws[0]
