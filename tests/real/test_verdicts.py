"""Verdicts that say what was proven (issue 34, item 1), on real captures.

An entry with no error is ``proven`` (rebuilt from its own PTX, the code matched), ``sealed`` (unchanged since
jitwarden sealed it) or ``unproven`` (only the structural checks passed, which a flipped bit in code passes too):
never a bare ``ok``. ``--strict`` fails on unproven entries, and ``verify`` and ``doctor`` count them alike.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import tarfile

from jitwarden.cli.main import main
from jitwarden.formats import elf
from tests.helpers.paths import DATA

JAX_CUPY = os.path.join(DATA, "real", "jax_cupy")


def run(capsys, *args) -> tuple[int, dict]:
    rc = main([*args, "--format", "json"])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err, cap.err
    return rc, json.loads(cap.out)


def table(capsys, *args) -> tuple[int, str]:
    rc = main(list(args))
    cap = capsys.readouterr()
    return rc, cap.out


def by_path(doc) -> dict[str, dict]:
    return {e["path"]: e for e in doc["entries"]}


def _flip_text(cubin: str) -> None:
    """One bit of the kernel's code (``.text.<name>``) flipped: the ELF stays whole."""
    with open(cubin, "rb") as f:
        data = bytearray(f.read())
    text = next(s for s in elf.parse(bytes(data)).sections if s.name.startswith(".text."))
    data[text.offset + 16] ^= 1
    with open(cubin, "wb") as f:
        f.write(data)


def _triton_mm_by_tritons_ptxas(triton_root: str) -> list[str]:
    """Entry dirs of ``triton_mm`` kernels whose PTX (``.version 8.7``) Triton 3.6's bundled ptxas assembled,
    so the test venv's Triton rebuilds them (the ``.version 9.0`` ones need torch's CUDA 13 ptxas)."""
    out = []
    for ptx in sorted(glob.glob(os.path.join(triton_root, "*", "triton_mm.ptx"))):
        with open(ptx, "rb") as f:
            if b"\n.version 8.7\n" in f.read(4096):
                out.append(os.path.dirname(ptx))
    return out


def test_flipped_triton_mm_cubins_are_unproven_strict_fails_and_a_rebuild_finds_them(
    fresh_copy, capsys
):
    """The issue's case: three unsealed ``triton_mm`` cubins of a real max-autotune capture, one bit of
    ``.text`` flipped in each. ``verify --target 90`` said every entry ``ok``; now they are ``unproven``."""
    tree = fresh_copy("llama_autotune")
    root = os.path.join(tree, "triton")
    mm = _triton_mm_by_tritons_ptxas(root)
    flipped, good = mm[:3], mm[3]
    for d in flipped:
        _flip_text(os.path.join(d, "triton_mm.cubin"))

    rc, doc = run(capsys, "verify", "--all", "--target", "90", root)
    entries = by_path(doc)
    assert rc == 0 and doc["summary"]["errors"] == 0  # structurally whole: no finding to report
    assert {entries[d]["verdict"] for d in flipped} == {"unproven"}
    verdicts = doc["summary"]["verdicts"]
    assert verdicts == {"proven": 0, "sealed": 0, "unproven": len(doc["entries"])}, verdicts

    rc, text = table(capsys, "verify", "--all", "--target", "90", root)
    rows = [
        line
        for line in text.splitlines()
        if line[:12] in {os.path.basename(d)[:12] for d in flipped}
    ]
    assert len(rows) == 3 and all(r.rstrip().endswith("unproven") for r in rows), rows
    assert f"{len(doc['entries'])} unproven" in text and " ok" not in text, text

    rc, strict = run(capsys, "verify", "--strict", "--target", "90", root)
    assert rc == 1 and strict["summary"]["errors"] == 0

    rc, rebuilt = run(capsys, "verify", "--rebuild", "--strict", "--target", "90", *flipped, good)
    entries = by_path(rebuilt)
    assert rc == 1
    for d in flipped:
        assert [f["code"] for f in entries[d]["findings"]] == ["not-reproducible"]
        assert entries[d]["verdict"] is None
    assert entries[good]["verdict"] == "proven" and entries[good]["findings"] == []
    assert rebuilt["summary"]["verdicts"] == {"proven": 1, "sealed": 0, "unproven": 0}

    rc, proven = run(capsys, "verify", "--rebuild", "--strict", "--target", "90", good)
    assert rc == 0 and proven["summary"]["verdicts"]["proven"] == 1


def test_doctor_and_verify_count_the_same_verdicts(fresh_copy, capsys):
    tree = fresh_copy("bert_autotune")
    root = os.path.join(tree, "triton")
    rc_v, v = run(capsys, "verify", "--target", "90", root)
    rc_d, d = run(capsys, "doctor", "--target", "90", root)
    assert v["summary"] == d["summary"] and rc_v == rc_d == 0
    probs = {p["code"]: p for p in d["problems"]}
    assert probs["unproven"]["count"] == v["summary"]["verdicts"]["unproven"] > 0
    assert "--rebuild" in probs["unproven"]["fix"]
    rc_v, _ = run(capsys, "verify", "--strict", "--target", "90", root)
    rc_d, _ = run(capsys, "doctor", "--strict", "--target", "90", root)
    assert rc_v == rc_d == 1
    rc, text = table(capsys, "doctor", "--strict", "--target", "90", root)
    assert rc == 1 and "all good" not in text and "unproven entries under --strict" in text


def test_a_sealed_tree_is_sealed_and_passes_strict(sealed_tree, capsys):
    """Kernels the guard sealed are ``sealed`` (unchanged since): ``--strict`` passes; one changed is corrupt."""
    rc, doc = run(capsys, "verify", "--all", "--strict", "--target", "90", sealed_tree)
    v = doc["summary"]["verdicts"]
    assert rc == 0 and v["sealed"] > 0 and v["unproven"] == 0 and v["proven"] == 0, v


def _unpack(name: str, dest) -> str:
    with tarfile.open(os.path.join(JAX_CUPY, f"{name}.tar.xz")) as t:
        t.extractall(str(dest), filter="data")
    return os.path.join(str(dest), name)


def test_a_swapped_cupy_entry_is_unproven_not_ok(tmp_path, capsys):
    """CuPy's header checks the body, not the key: ``sub``'s file over ``add``'s passes (stock CuPy returned
    x-y). Structure alone vouches for it: unproven, and ``--strict`` fails."""
    root = _unpack("cupy_swapped", tmp_path)
    rc, doc = run(capsys, "verify", "--all", "--target", "90", root)
    sound = [e for e in doc["entries"] if not any(f["severity"] == "error" for f in e["findings"])]
    assert sound and {e["verdict"] for e in sound} == {"unproven"}
    assert run(capsys, "verify", "--strict", "--target", "90", root)[0] == 1


def test_numba_entries_are_unproven(tmp_path, capsys):
    root = _unpack("numba_cache", tmp_path)
    rc, doc = run(capsys, "verify", "--all", "--target", "90", root)
    assert rc == 0 and doc["summary"]["verdicts"]["unproven"] > 0
    assert {e["verdict"] for e in doc["entries"]} <= {"unproven", None}
    rc, text = table(capsys, "verify", "--all", "--target", "90", root)
    assert "unproven" in text and " ok\n" not in text


def test_a_flipped_deepgemm_cubin_is_unproven(tmp_path, capsys):
    """DeepGEMM keeps a cubin beside its source and nothing to prove it by: a flipped bit is unproven."""
    from tests.helpers import otherkinds as ok

    arts = ok.triton_artifacts(str(tmp_path / "arts"), (90,))
    d = tmp_path / ".deep_gemm" / "cache" / "kernel.add.0123456789abcdef"
    d.mkdir(parents=True)
    (d / "kernel.cu").write_text("// kernel\n")
    shutil.copy(arts[90]["cubin"], d / "kernel.cubin")
    (tmp_path / ".deep_gemm" / "tmp").mkdir()
    _flip_text(str(d / "kernel.cubin"))
    root = str(tmp_path / ".deep_gemm")
    rc, doc = run(capsys, "verify", "--all", "--target", "90", root)
    assert rc == 0 and doc["caches"][0]["kind"] == "deepgemm"
    assert [e["verdict"] for e in doc["entries"]] == ["unproven"], doc["entries"]
    assert run(capsys, "verify", "--strict", "--target", "90", root)[0] == 1
