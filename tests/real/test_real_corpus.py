"""No false alarm on real caches, and damage in them still caught.

Seven captures of the stock stack on an H200 (``corpus.py``): Llama and BERT under max-autotune
(``triton_mm`` templates, written without a final newline), Llama and Mixtral (MoE) in default mode,
FlexAttention with a dynamic GPT-2, plain Triton kernels, and a ComputeCache written by cuDNN SDPA
(nvJitLink: NVVM IR in, PTX or cubin out), CuPy (a PTX ``RawModule``: the driver's PTX JIT; an
``ElementwiseKernel``: nvJitLink) and a PTX-only ``load_inline`` extension, with its build directory.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from jitwarden.cli.main import main
from tests.real import corpus

NAMES = corpus.names()


def verify(capsys, *args) -> tuple[int, dict]:
    rc = main(["verify", "--format", "json", "--all", *args])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err, cap.err
    doc = json.loads(cap.out)
    assert rc == (1 if doc["summary"]["errors"] else 0), (
        cap.err
    )  # exit 1 exactly when an error-level finding is shown
    return rc, doc


def loud(doc: dict) -> list[tuple[str, str, str]]:
    """(entry, code, message) of every finding at warn or error level."""
    return [
        (e["id"], f["code"], f["message"])
        for e in doc["entries"]
        for f in e["findings"]
        if f["severity"] in ("warn", "error")
    ] + [
        (c["root"], f["code"], f["message"])
        for c in doc["caches"]
        for f in c["findings"]
        if f["severity"] in ("warn", "error")
    ]


def test_the_corpus_is_all_there():
    assert sorted(corpus.facts()["workloads"]) == NAMES and len(NAMES) == 7


@pytest.mark.parametrize("name", NAMES)
def test_no_false_alarm_at_target_90(name, unpacked, capture_driver, capsys):
    """``verify --target 90`` in this environment: not a warning on any cache but the torch extension's build,
    which is judged against this Python (see the next tests)."""
    tree = unpacked[name]
    roots = [r for r in corpus.roots(tree) if not r.endswith("torch_extensions")]
    rc, doc = verify(capsys, "--target", "90", *roots)
    assert loud(doc) == [] and rc == 0
    assert len(doc["entries"]) > 0


@pytest.mark.parametrize("name", NAMES)
def test_no_false_alarm_judged_as_the_capture_machine(name, unpacked, capture_driver):
    """Judged as the H200 that wrote them (torch 2.11+cu130, Python 3.12, its driver's JIT stamp): nothing at all
    at warn or error level, and nothing unrecognised."""
    report = corpus.scan_tree(unpacked[name], corpus.facts_judge(90))
    found = [(e.id, f.code, f.message) for e in report.entries for f in e.findings]
    assert [x for x in found if x[1] != "foreign-arch"] == [], found
    assert all(c.findings == () for c in report.caches)


def test_the_extension_is_stale_for_another_python(unpacked, capsys):
    """Evidence, not a false alarm: its build.ninja compiles against Python 3.12 headers; this is another Python."""
    import sys

    rc, doc = verify(
        capsys, "--target", "90", os.path.join(unpacked["compute_cache"], "torch_extensions")
    )
    codes = [f["code"] for e in doc["entries"] for f in e["findings"]]
    if sys.version_info[:2] == (3, 12):
        assert codes == []
    else:
        assert codes == ["stale"] and "Python 3.12" in doc["entries"][0]["findings"][0]["message"]


def test_unrelocated_copy_is_moved_not_foreign(tmp_path, capsys):
    """The captures' group files name /root/out/work/<name>/triton/..., which does not exist here: Triton drops
    those groups and recompiles, so a copy elsewhere is ``moved`` (a warning), not ``foreign-path``."""
    tree = corpus.unpack("triton_plain", str(tmp_path), relocated=False)
    rc, doc = verify(capsys, "--target", "90", os.path.join(tree, "triton"))
    kernels = [e for e in doc["entries"] if e["type"] == "kernel"]
    assert kernels and all([f["code"] for f in e["findings"]] == ["moved"] for e in kernels)
    assert rc == 0
    assert "/root/out/work/triton_plain/triton/" in kernels[0]["findings"][0]["message"]


def test_compute_cache_flavours_are_each_recognised(unpacked, capture_driver, capsys):
    """Every entry of every capture's ComputeCache is read to the end: the driver's PTX JIT or nvJitLink."""
    seen = {}
    for name in NAMES:
        rc, doc = verify(capsys, "--target", "90", os.path.join(unpacked[name], "ComputeCache"))
        for e in doc["entries"]:
            x = e["extra"]
            seen[(x["producer"], x["input"], x["output"])] = x["jit_date"]
            assert e["findings"] == []
    assert seen == {
        ("driver-jit", "ptx", "cubin"): "Apr 29 2026",
        ("nvjitlink", "nvvm-ir", "cubin"): "Aug 20 2025",
        ("nvjitlink", "nvvm-ir", "ptx"): "Aug 20 2025",
    }


def test_a_driver_upgrade_makes_only_the_drivers_entries_stale(
    unpacked, tmp_path, monkeypatch, capsys
):
    """Another JIT compiler stamp: the driver's PTX JIT entries are stale; nvJitLink's date says nothing."""
    from jitwarden.adapters import cuda_compute as cc

    monkeypatch.setenv(
        "JITWARDEN_LIBCUDA", corpus.driver_stand_in(str(tmp_path / "drv"), b"Jan 12 2027")
    )
    cc.reset_driver_evidence()
    try:
        rc, doc = verify(
            capsys, "--target", "90", os.path.join(unpacked["compute_cache"], "ComputeCache")
        )
    finally:
        cc.reset_driver_evidence()
    for e in doc["entries"]:
        codes = [f["code"] for f in e["findings"]]
        assert codes == (["stale"] if e["extra"]["producer"] == "driver-jit" else []), (
            e["id"],
            codes,
        )
    assert sum(1 for e in doc["entries"] if e["extra"]["producer"] == "driver-jit") == 3 and rc == 0


# ---------------------------------------------------------------- damage in real caches is still caught


def _flip(path: str, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x01]))


def _cut_mid_line(path: str) -> None:
    """Cut a text file in the middle of a line about half-way through (never on a line boundary)."""
    data = open(path, "rb").read()
    half = len(data) // 2
    while data[half - 1 : half + 1].count(b"\n") or data[half - 1 : half].isspace():
        half += 1
    open(path, "wb").write(data[:half])


def _files(tree: str, pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return sorted(
        os.path.join(d, f)
        for d, _s, fs in os.walk(tree)
        for f in fs
        if rx.search(os.path.relpath(os.path.join(d, f), tree))
    )


def _codes_by_path(doc: dict) -> dict[str, set[str]]:
    return {e["path"]: {f["code"] for f in e["findings"]} for e in doc["entries"]}


def _entry_of(codes: dict[str, set[str]], path: str) -> set[str]:
    hit = [p for p in codes if path == p or path.startswith(p.rstrip("/") + "/")]
    assert hit, path
    return codes[max(hit, key=len)]


@pytest.mark.parametrize("name", NAMES)
def test_damage_in_each_capture_is_caught(name, fresh_copy, capture_driver, capsys):
    """Per capture, one of each damage the format gives evidence of; every one caught at error level."""
    tree = fresh_copy(name)
    damaged: list[tuple[str, str]] = []
    cubins = _files(tree, r"^triton/[^/]+/[^/]+\.cubin$")
    metas = [
        p
        for p in _files(tree, r"^triton/[^/]+/[^/]+\.json$")
        if "__grp__" not in p and os.path.exists(p[: -len(".json")] + ".cubin")
    ]
    if len(cubins) >= 2:
        os.truncate(cubins[0], os.path.getsize(cubins[0]) // 2)
        damaged.append((cubins[0], "corrupt"))
        os.remove(cubins[1])  # a file the group lists
        damaged.append((cubins[1], "incomplete"))
    if metas:
        victim = next(
            m for m in metas if os.path.dirname(m) not in {os.path.dirname(c) for c in cubins[:2]}
        )
        _cut_mid_line(victim) if open(victim, "rb").read().count(b"\n") > 2 else os.truncate(
            victim, os.path.getsize(victim) // 2
        )
        damaged.append((victim, "corrupt"))
    sources = [
        p
        for p in _files(tree, r"^inductor/[a-z0-9_]{2}/[^/]+\.py$")
        if b"@triton.jit" in open(p, "rb").read()
    ]
    if sources:  # cut inside its triton_meta={...}: a source that stops mid-statement
        data = open(sources[0], "rb").read()
        open(sources[0], "wb").write(data[: data.index(b"triton_meta=") + 40])
        damaged.append((sources[0], "corrupt"))
    pickles = _files(tree, r"^inductor/fxgraph/")
    if pickles:
        os.truncate(pickles[0], os.path.getsize(pickles[0]) - 7)
        damaged.append((pickles[0], "corrupt"))
    configs = _files(tree, r"^inductor/[a-z0-9_]{2}/[^/]+\.best_config$")
    if configs:
        os.truncate(configs[0], os.path.getsize(configs[0]) - 3)
        damaged.append((configs[0], "corrupt"))
    cc_entries = _files(tree, r"^ComputeCache/[0-9a-f]/[0-9a-f]/[0-9a-f]{14}$")
    for i, path in enumerate(cc_entries[:3]):
        size = os.path.getsize(path)
        _flip(
            path, [size - 1, 40, size // 2][i]
        )  # the output's last byte, the key's stamp, the middle
        damaged.append((path, "corrupt"))
    if len(cc_entries) > 3:
        os.truncate(cc_entries[3], os.path.getsize(cc_entries[3]) - 100)
        damaged.append((cc_entries[3], "corrupt"))
    ext = _files(tree, r"^torch_extensions/.*\.so$") + _files(tree, r"^triton/[^/]+/[^/]+\.so$")
    if ext:
        os.truncate(ext[0], os.path.getsize(ext[0]) // 3)
        damaged.append((ext[0], "corrupt"))
    assert len(damaged) >= 4, name
    rc, doc = verify(capsys, "--target", "90", *corpus.roots(tree))
    codes = _codes_by_path(doc)
    missed = [
        (os.path.relpath(p, tree), want, sorted(_entry_of(codes, p)))
        for p, want in damaged
        if want not in _entry_of(codes, p)
    ]
    assert missed == [] and rc == 1
    # and nothing else was hurt: the entries not damaged stay quiet at error level
    hurt = {
        e["path"] for e in doc["entries"] if any(f["severity"] == "error" for f in e["findings"])
    }
    touched = {p for p in codes for d, _w in damaged if d == p or d.startswith(p.rstrip("/") + "/")}
    assert hurt == touched


def test_a_flipped_bit_in_a_plain_triton_cubin_is_caught_by_a_rebuild(fresh_copy, capsys):
    """No seal in a stock cache: a flip in code passes the structure checks; re-assembling the PTX with the
    Triton 3.6 bundled ptxas that built it does not give the same code."""
    from jitwarden.formats import elf

    tree = fresh_copy("triton_plain")
    cubin = next(p for p in _files(tree, r"^triton/[^/]+/add\.cubin$"))
    data = open(cubin, "rb").read()
    text = next(s for s in elf.parse(data).sections if s.name.startswith(".text."))
    _flip(cubin, text.offset + 16)
    rc, doc = verify(capsys, "--target", "90", os.path.join(tree, "triton"))
    assert rc == 0  # structurally whole
    rc, doc = verify(capsys, "--target", "90", "--rebuild", os.path.join(tree, "triton"))
    codes = _codes_by_path(doc)
    assert codes[os.path.dirname(cubin)] == {"not-reproducible"} and rc == 1
    assert [p for p, c in codes.items() if c - {"foreign-arch"}] == [os.path.dirname(cubin)]
