"""Numbers and text read out of cache files are bounded before Python converts them: a forged file holding a
5,000-digit SM, compute capability or version (past the 4,300 digits ``int()`` converts) or non-UTF-8 bytes in a
quoted field is read as no match, never as an exception that ended the whole scan with exit 3 (found by attacking
the readers: ``verify --quick`` over one such Inductor file printed "internal error: ValueError: Exceeds the limit
(4300 digits)"). And should any reader still raise, the scan reports that entry ``unrecognised`` and goes on.
"""

from __future__ import annotations

import json
import os

from jitwarden.adapters import inductor_blobs, vllm
from jitwarden.adapters.torch_ext import parse_ninja
from jitwarden.cli.main import main
from jitwarden.formats import numbacache, ptx

HUGE = "9" * 5000


def test_a_ptx_target_of_5000_digits_is_no_sm():
    hdr = ptx.parse_header(f".version 8.7\n.target sm_{HUGE}\n.address_size 64\n".encode())
    assert hdr.target_arch is None
    assert ptx.parse_header(b".version 8.7\n.target sm_90a\n").target_arch == 90


def test_device_properties_with_forged_numbers_or_bytes_are_read_without_raising():
    base = b"DeviceProperties(type='cuda', index=0, multi_processor_count=%s, cc=%s, major=9)"
    assert inductor_blobs.device_props(base % (b"132", b"90")) == [("cuda", 90, 132)]
    assert inductor_blobs.device_props(base % (HUGE.encode(), b"90")) == []
    assert inductor_blobs.device_props(base % (b"132", HUGE.encode())) == []
    props = inductor_blobs.device_props(base % (b"132", b"'\xff\xfe'"))
    assert len(props) == 1 and props[0][0] == "cuda" and isinstance(props[0][1], str)


def test_versions_and_ninja_targets_of_5000_digits_are_unknown():
    assert vllm.vllm_release(f"{HUGE}.1.0") is None and vllm.vllm_release("0.34.0") == (0, 34)
    facts = parse_ninja(
        f"cuda_cflags = -gencode=arch=compute_90,code=sm_{HUGE} -gencode=arch=compute_90,code=sm_90\n"
        f"nvcc_flags = --generate-code=arch=compute_90,code=[sm_{HUGE}]\n"
    )
    assert facts["sm"] == (90,)


def test_a_numba_mangled_length_of_5000_digits_is_no_name():
    assert numbacache.demangle(f"_ZN{HUGE}abc") == ()
    assert numbacache.demangle("_ZN6jwkern3addB2v1E")[:2] == ("jwkern", "add")


def test_verify_over_a_forged_inductor_file_exits_cleanly(tmp_path, isolated_env, capsys):
    root = tmp_path / "ind"
    (root / "fxgraph").mkdir(parents=True)
    (root / "ab").mkdir()
    (root / "ab" / "cabforged.py").write_text(
        "import triton\n@triton.jit\ndef k(x):\n    pass\ntriton_meta={'device': DeviceProperties(type='cuda', index=0, "
        f"multi_processor_count=132, cc={HUGE}, major=9)}}\n"
    )
    rc = main(["verify", "--quick", "--format", "json", str(root)])
    doc = json.loads(capsys.readouterr().out)
    assert rc in (0, 1) and doc["summary"]["errors"] == 0
    (entry,) = [e for e in doc["entries"] if e["id"] == "ab/cabforged.py"]
    assert [f["code"] for f in entry["findings"]] == [
        "unrecognised"
    ]  # its GPU not read: said, not damage


def test_an_error_of_jitwarden_while_judging_one_entry_is_that_entrys_finding(
    built_cache, tmp_path, isolated_env, capsys, monkeypatch
):
    """The net under every adapter: one entry whose judging raises (here forced) is reported, the rest judged."""
    from jitwarden.adapters import triton
    from tests.helpers import kernels

    src, manifest = built_cache
    root = kernels.copy_cache(src, str(tmp_path / "cache"))
    victim = manifest[0]["id"]
    real, stamped = triton.inspect_entry, triton.MEMO.judge_stamped

    def raising(judge):
        def inspect(r, name, *a, **kw):
            if name == victim:
                raise ValueError("a reader met bytes it was not written for")
            return judge(r, name, *a, **kw)

        return inspect

    monkeypatch.setattr(triton, "inspect_entry", raising(real))  # the adapter's judge
    monkeypatch.setattr(triton.MEMO, "judge_stamped", raising(stamped))  # and the scan memo's
    rc = main(["verify", "--quick", "--format", "json", "--target", "90", root])
    doc = json.loads(capsys.readouterr().out)
    assert rc in (0, 1)
    by_id = {e["id"]: e for e in doc["entries"]}
    assert len(by_id) == len(os.listdir(root))
    f = by_id[victim]["findings"]
    assert [x["code"] for x in f] == ["unrecognised"] and "ValueError: a reader met bytes" in f[0][
        "message"
    ]
    assert any(e["findings"] == [] for e in doc["entries"])  # the others judged as ever
