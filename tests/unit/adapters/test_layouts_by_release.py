"""Cache layouts that differ between torch 2.9-2.15 and vLLM 0.16-0.34 releases: each is judged as its release writes it.

docs/supported-versions.md has the per-release table and how each release's source was read (the
Python files of each released wheel). Where the layout is torch's, the files here are made by the
CPU torch of the venv (2.13 in the test venv, 2.11 in CI's torch leg); where it is another release's,
the fixture is built from that release's own names and formats, cited in each test.
"""

from __future__ import annotations

import json
import os
import pprint
import shutil
import subprocess
import sys
import time
import uuid
import zlib

import pytest

from jitwarden.adapters import inductor as ind
from jitwarden.adapters import triton as tri
from jitwarden.adapters import vllm as vl
from jitwarden.formats import vllm_files
from jitwarden.model.findings import Severity
from tests.helpers import inductor_real
from tests.helpers.vllm_root import AOT_NEW, ART0, ART1, PREFIX, RANK, codes, judge

pytest.importorskip("torch")

OLD = time.time() - 7200


def fields(data: bytes) -> list[bytes]:
    """The length-prefixed fields of a torch ``BytesWriter`` file (``torch/utils/_appending_byte_serializer.py``)."""
    out, i = [], 4
    while i < len(data):
        n = int.from_bytes(data[i : i + 8], "big")
        out.append(data[i + 8 : i + 8 + n])
        i += 8 + n
    return out


def bytes_writer(*parts: bytes) -> bytes:
    """``BytesWriter().write_bytes(p)`` for each part, then ``to_bytes()``: CRC32 (big-endian) of the rest first."""
    body = b"".join(len(p).to_bytes(8, "big") + p for p in parts)
    return zlib.crc32(body).to_bytes(4, "big") + body


def old(path: str) -> None:
    os.utime(path, (OLD, OLD))


@pytest.fixture
def root(vllm_root):
    return vllm_root


def as_vllm_016(root: str) -> None:
    """Rewrite the compile dir as vLLM 0.16-0.17 leave it (``vllm/compilation/backends.py``):

    ``vllm_compile_cache.py`` maps each graph straight to its handle ``(key, path)`` (0.18 wraps it in
    ``{"graph_handle", "cache_key"}``), and ``cache_key_factors.json`` holds only ``env`` and the three
    hashes (0.34 is the first to add ``config``, ``code`` and ``compiler``).
    """
    prefix = os.path.join(root, PREFIX)
    cache = {
        ((1, 8192), i, "inductor_standalone"): (k, os.path.join(prefix, k))
        for i, k in enumerate((ART0, ART1))
    }
    with open(os.path.join(prefix, "vllm_compile_cache.py"), "w") as f:
        f.write(pprint.PrettyPrinter(indent=4).pformat(cache))
    with open(os.path.join(prefix, "cache_key_factors.json"), "w") as f:
        json.dump(
            {
                "env": {"VLLM_USE_AOT_COMPILE": False},
                "config_hash": "1" * 64,
                "code_hash": "2" * 64,
                "compiler_hash": "3" * 10,
            },
            f,
            indent=2,
            sort_keys=True,
        )


def no_vllm(**kw):
    """A judge where no vLLM is installed (an init container checking a copied volume)."""
    return judge(versions=(("torch", "2.13.0"), ("flashinfer", "0.6.1")), **kw)


# ---------------------------------------------------------------- torch's standalone-compile artifacts


def test_torch29_artifact_without_a_header_is_recognised_and_damage_still_caught(root):
    """torch 2.9's ``CompiledArtifact.save(format="binary")`` writes ``torch_key``, the key, the bytes: no header
    (``torch/_inductor/standalone_compile.py`` of 2.9.0/2.9.1, the torch vLLM 0.16 pins). 2.10 added the
    ``CacheCompiledArtifact`` header. Made here from the venv torch's real artifact, its fields re-laid as 2.9 lays them."""
    p = os.path.join(root, PREFIX, ART0)
    parts = fields(open(p, "rb").read())
    assert parts[0] == b"CacheCompiledArtifact" and len(parts) == 4  # what torch 2.10-2.15 write
    torch29 = bytes_writer(*parts[1:])
    assert vl.artifact_layout(torch29).layout == vllm_files.TORCH29_ARTIFACT
    open(p, "wb").write(torch29)
    e = vl.inspect_entry(root, PREFIX, judge(), os.getuid())
    assert e.findings == () and "torch 2.9" in e.facts.artifact_layouts
    flipped = bytearray(torch29)
    flipped[len(flipped) // 2] ^= 0x10
    open(p, "wb").write(bytes(flipped))
    assert codes(vl.inspect_entry(root, PREFIX, judge(), os.getuid())) == ["corrupt"]
    # Whole (its CRC holds) but in a layout no torch 2.9-2.15 writes: a torch jitwarden has not read, not damage.
    open(p, "wb").write(bytes_writer(b"SomeFutureArtifact", parts[1], parts[3]))
    e = vl.inspect_entry(root, PREFIX, judge(), os.getuid())
    assert codes(e) == ["unrecognised"] and e.findings[0].severity < Severity.ERROR


# ---------------------------------------------------------------- vllm_compile_cache.py, release by release


def test_vllm016_handles_are_bare_tuples_and_are_checked(root, tmp_path):
    as_vllm_016(root)
    v016 = (("torch", "2.9.1"), ("vllm", "0.16.0"))
    e = vl.inspect_entry(root, PREFIX, judge(versions=v016), os.getuid())
    assert e.findings == () and e.facts.graphs == 2
    copy = inductor_real.copy(root, str(tmp_path / "copied"))
    e = vl.inspect_entry(copy, PREFIX, judge(versions=v016), os.getuid())
    assert (
        codes(e) == ["foreign-path"] and "2 exist there" in e.findings[0].message
    )  # 0.16 opens the stored path
    os.remove(os.path.join(root, PREFIX, ART0))
    e = vl.inspect_entry(root, PREFIX, judge(versions=v016), os.getuid())
    assert codes(e) == ["incomplete"] and ART0 in e.findings[0].message


def test_vllm032_and_later_load_by_key_so_a_copied_cache_is_whole(root, tmp_path):
    """vLLM 0.32 changed ``InductorStandaloneAdaptor.load`` to open ``<prefix dir>/<key>``; 0.16-0.31 open the
    handle's stored absolute path (``vllm/compilation/compiler_interface.py``)."""
    copy = inductor_real.copy(root, str(tmp_path / "copied"))
    shutil.rmtree(root)  # the tree the stored paths name is gone, as on another machine
    assert (
        vl.inspect_entry(copy, PREFIX, judge(), os.getuid()).findings == ()
    )  # vLLM 0.34 installed
    # No vLLM here: the entry's own cache_key_factors.json (0.34's layout) names the release that reads it.
    assert vl.inspect_entry(copy, PREFIX, no_vllm(), os.getuid()).findings == ()
    e = vl.inspect_entry(copy, PREFIX, judge(versions=(("vllm", "0.31.0"),)), os.getuid())
    assert "foreign-path" in codes(e) and "0 exist there" in next(
        f.message for f in e.findings if f.code == "foreign-path"
    )
    os.remove(os.path.join(copy, PREFIX, ART0))
    e = vl.inspect_entry(copy, PREFIX, judge(), os.getuid())
    assert codes(e) == ["incomplete"] and ART0 in e.findings[0].message


def test_copied_cache_whose_reader_is_unknown_is_not_judged(root, tmp_path):
    """0.16-0.33 record no vLLM version; with no vLLM installed, a graph the two loaders disagree on is not judged."""
    as_vllm_016(root)
    copy = inductor_real.copy(root, str(tmp_path / "copied"))
    shutil.rmtree(root)
    e = vl.inspect_entry(copy, PREFIX, no_vllm(), os.getuid())
    assert codes(e) == ["unrecognised"] and "0.32 and later" in e.findings[0].message
    for a in (ART0, ART1):  # gone for both loaders: missing whichever vLLM reads it
        p = os.path.join(copy, PREFIX, a)
        shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    e = vl.inspect_entry(copy, PREFIX, no_vllm(), os.getuid())
    assert codes(e) == [
        "foreign-path"
    ]  # 0.16-0.31 would load the old tree's files; 0.32+ finds none here


def test_legacy_inductor_handles_are_found_by_fx_key_never_by_path(root):
    """vLLM's ``InductorAdaptor`` (compiler name ``inductor``) stores ``(FX key, output code path)`` and loads by
    ``FxGraphCache._lookup_graph(key)`` in ``<rank>/inductor_cache``: the path is never opened (0.16-0.34)."""
    fx = os.path.join(root, RANK, "inductor_cache", "fxgraph")
    (shard,) = os.listdir(fx)[:1]
    key = os.listdir(os.path.join(fx, shard))[0]
    cache = {
        ((1, 8192), 0, "inductor"): {
            "graph_handle": (key, "/elsewhere/ab/cabc.py"),
            "cache_key": key,
        }
    }
    with open(os.path.join(root, PREFIX, "vllm_compile_cache.py"), "w") as f:
        f.write(pprint.PrettyPrinter(indent=4).pformat(cache))
    assert vl.inspect_entry(root, PREFIX, judge(), os.getuid()).findings == ()
    shutil.rmtree(os.path.join(fx, shard, key))
    e = vl.inspect_entry(root, PREFIX, judge(), os.getuid())
    assert codes(e) == ["incomplete"] and key in e.findings[0].message


# ---------------------------------------------------------------- the AOT model and its saves


def test_aot_save_leftovers_are_orphans_never_damage(root):
    """vLLM 0.20+ saves ``model.<pid>.tmp`` and renames it (``save_aot_compiled_function``); torch 2.12+'s
    ``atomic_write_binary`` writes that through a ``tempfile`` (``tmpXXXXXXXX``). A rank dir with no ``model``
    is a save that never finished: vLLM loads nothing and compiles again."""
    rank = os.path.join(root, AOT_NEW, "rank_0_0")
    name = f"{AOT_NEW}/rank_0_0"
    os.remove(os.path.join(rank, "model"))
    for leftover in ("model.4242.tmp", "tmpk3_9az0q"):
        open(os.path.join(rank, leftover), "wb").write(b"\x80\x04\x95")
    assert vl.inspect_entry(root, name, judge(), os.getuid()).findings == ()  # being written now
    for leftover in os.listdir(rank):
        old(os.path.join(rank, leftover))
    e = vl.inspect_entry(root, name, judge(), os.getuid())
    assert codes(e) == ["orphan"] and len(e.findings) == 2
    for leftover in os.listdir(rank):
        os.remove(os.path.join(rank, leftover))
    old(rank)
    e = vl.inspect_entry(root, name, judge(), os.getuid())
    assert codes(e) == ["orphan"] and "no model file" in e.findings[0].message


# ---------------------------------------------------------------- TorchInductor inside the Triton cache dir


def test_triton_bundler_staging_dir_left_behind_is_an_orphan_not_a_copied_entry(cache):
    """``TritonBundler.read_and_emit`` (torch 2.9-2.15, ``torch/_inductor/triton_bundler.py``) writes each kernel
    dir of an FX-graph bundle to ``<triton dir>/tmp.<uuid4>``, with ``[REPLACE]`` in its JSON set to the final
    dir, then ``os.replace``s it there; when another process filled the final dir first, it logs "not empty -
    skipping!" and leaves the staging dir. Here a real entry is copied to such a name, as the bundle lays it out."""
    root, recs = cache
    rec = next(r for r in recs.values() if r.get("arch") == 90)
    staged = f"tmp.{uuid.uuid4()}"
    shutil.copytree(rec["path"], os.path.join(root, staged))
    j = judge()
    e = tri.inspect_entry(root, staged, j, os.getuid())
    assert e.type == "staging" and e.findings == ()
    for f in os.listdir(os.path.join(root, staged)):
        old(os.path.join(root, staged, f))
    assert codes(tri.inspect_entry(root, staged, judge(), os.getuid())) == ["orphan"]
    # the same files under a name Triton reads are still judged as an entry: a copied cache is foreign
    shutil.copytree(rec["path"], os.path.join(root, "B" * 52))
    assert "foreign-path" in codes(tri.inspect_entry(root, "B" * 52, judge(), os.getuid()))


# ---------------------------------------------------------------- torch's own links in the Inductor cache


CUTLASS = r"""
try:
    from torch._inductor.codegen.cutlass import utils  # torch 2.11-2.15
except ImportError:
    from torch._inductor.codegen.cuda import cutlass_utils as utils  # torch 2.9-2.10
print(utils.try_import_cutlass())
"""


def test_links_torch_makes_for_cutlass_are_not_unsafe(tmp_path):
    """``try_import_cutlass`` links CUTLASS's python packages and torch's mock modules into
    ``<cache>/torch_cutlass`` (torch 2.9-2.15). Made here by the venv's real torch, pointed at a CUTLASS dir."""
    cache = tmp_path / "torchinductor_t"
    for pkg in ("cutlass_library", "cutlass_cppgen", "cutlass", "pycute"):
        (tmp_path / "cutlass" / "python" / pkg).mkdir(parents=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "JITWARDEN_"))
    }
    env.update(
        TORCHINDUCTOR_CACHE_DIR=str(cache),
        TORCHINDUCTOR_CUTLASS_DIR=str(tmp_path / "cutlass"),
        PYTHONWARNINGS="ignore",
    )
    subprocess.run(
        [sys.executable, "-c", CUTLASS], env=env, check=True, timeout=300, capture_output=True
    )
    links = sorted(os.listdir(cache / "torch_cutlass"))
    assert len(links) == 6 and {"cuda", "pycute", "scipy"} <= set(links)
    e = ind.inspect_entry(str(cache), "torch_cutlass", judge(), os.getuid())
    assert e.type == "cutlass-links" and e.findings == () and e.facts.torch_links == 6
    os.symlink("/etc", cache / "torch_cutlass" / "evil")
    e = ind.inspect_entry(str(cache), "torch_cutlass", judge(), os.getuid())
    assert codes(e) == ["unsafe"] and "evil" in e.findings[0].message


def test_device_properties_of_every_release_are_read():
    """``DeviceProperties`` (``torch/_inductor/runtime/hints.py``) as ``triton_meta`` prints it: 2.9 has no
    ``max_threads_per_block``; 2.10-2.14 add it; 2.15 allows ``index=None``."""
    v29 = (
        b"DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor"
        b"=65536, max_threads_per_multi_processor=2048, warp_size=32)"
    )
    v210 = v29.replace(b"warp_size", b"max_threads_per_block=1024, warp_size")
    v215 = (
        v210.replace(b"index=0", b"index=None")
        .replace(b"cc=90", b"cc=121")
        .replace(b"major=9", b"major=12")
    )
    assert ind.device_props(v29) == ind.device_props(v210) == [("cuda", 90, 132)]
    assert ind.device_props(v215) == [("cuda", 121, 132)]
