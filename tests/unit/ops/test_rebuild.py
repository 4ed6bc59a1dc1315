"""``verify --rebuild`` on real Triton caches compiled on the CPU, with real ptxas (no mocks)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from jitwarden.adapters import triton as tri
from jitwarden.env import ptxas
from jitwarden.formats import cubin_compare, elf
from jitwarden.model.entries import Judge
from jitwarden.ops import rebuild
from tests.helpers import kernels

BIN = ptxas.triton_bin_dir()
PTXAS = os.path.join(BIN, "ptxas")
PTXAS_BW = os.path.join(BIN, "ptxas-blackwell")
CUDA13 = "/usr/local/cuda-13.0/bin/ptxas"


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("rebuild")
    root = str(base / "cache")
    manifest = kernels.build_cache(root)
    # Two env-var variants Triton feeds to ptxas: -g --opt-level 0, and -lineinfo -suppress-debug-info.
    one = [j for j in kernels.jobs_for(archs=(90,)) if j["variant"] == "add"]
    extra = {}
    for var in ("DISABLE_PTXAS_OPT", "TRITON_DISABLE_LINE_INFO"):
        r = str(base / f"cache_{var}")
        extra[var] = (r, kernels.build_cache(r, jobs=[dict(j) for j in one], env={var: "1"}))
    return root, {j["label"]: j for j in manifest}, extra


def scan(root):
    names, _ = tri.list_entry_names(root)
    return [tri.inspect_entry(root, n, Judge()) for n in names]


def verify(root, jobs=2, extra_ptxas=(), keep_dir=None, **kw):
    opts = rebuild.RebuildOptions(jobs=jobs, extra_ptxas=tuple(extra_ptxas), keep_dir=keep_dir)
    return rebuild.verify_entries(scan(root), opts, **kw)


def copy(built, tmp_path, name="c"):
    root, manifest, _ = built
    dst = str(tmp_path / name)
    shutil.copytree(root, dst, symlinks=True)
    return dst, {k: dict(v, path=os.path.join(dst, v["id"])) for k, v in manifest.items()}


def cubin_path(job):
    return os.path.join(job["path"], f"{job['name']}.cubin")


def ptx_path(job):
    return os.path.join(job["path"], f"{job['name']}.ptx")


# ---------------------------------------------------------------- clean caches


def test_every_clean_entry_verifies_with_the_ptxas_triton_picks(built):
    root, manifest, _ = built
    res = verify(root)
    assert len(res) == len(manifest) == 24
    by_path = {j["path"]: j for j in manifest.values()}
    for path, r in res.items():
        job = by_path[path]
        assert r.verdict == "verified", (job["label"], r.message)
        assert r.findings == ()
        assert r.ptxas == (PTXAS_BW if job["arch"] >= 100 else PTXAS), job["label"]
    archs = {by_path[p]["arch"] for p in res}
    variants = {by_path[p]["variant"] for p in res}
    assert archs == {80, 90, 120, 121}
    assert {"add_debug", "add_nofma", "matmul"} <= variants


def test_debug_true_entry_verifies(built):
    root, manifest, _ = built
    res = verify(root)
    for arch in (80, 90, 120, 121):
        job = manifest[f"add_debug_sm{arch}"]
        md = json.load(open(os.path.join(job["path"], f"{job['name']}.json")))
        assert md["debug"] is True
        assert res[job["path"]].verdict == "verified", res[job["path"]].message


@pytest.mark.parametrize(
    "var,flag", [("DISABLE_PTXAS_OPT", "-g"), ("TRITON_DISABLE_LINE_INFO", "-suppress-debug-info")]
)
def test_env_var_flags_are_reconstructed_and_verify(built, var, flag):
    _, _, extra = built
    root, man = extra[var]
    job = man[0]
    md = json.load(open(os.path.join(job["path"], f"{job['name']}.json")))
    assert var in md
    _arch, flags = rebuild.ptxas_flags(md)
    assert flag in flags
    res = verify(root)
    assert [r.verdict for r in res.values()] == ["verified"], [r.message for r in res.values()]


# ---------------------------------------------------------------- damage


@pytest.mark.parametrize("arch", [80, 90, 120])
def test_cubin_of_other_constexpr_is_not_reproducible(built, tmp_path, arch):
    root, man = copy(built, tmp_path)
    shutil.copyfile(cubin_path(man[f"add_b256_sm{arch}"]), cubin_path(man[f"add_sm{arch}"]))
    res = verify(root)
    r = res[man[f"add_sm{arch}"]["path"]]
    assert r.verdict == "not-reproducible", r.message
    assert [f.code for f in r.findings] == ["not-reproducible"]
    assert r.findings[0].severity.name == "ERROR"
    assert "same release as the entry's producer" in r.message
    assert "first difference in" in r.message
    others = [x for p, x in res.items() if p != man[f"add_sm{arch}"]["path"]]
    assert all(x.verdict == "verified" for x in others)


@pytest.mark.parametrize("label", ["matmul_sm90", "add_sm121", "add_debug_sm80"])
def test_one_flipped_byte_in_code_is_not_reproducible(built, tmp_path, label):
    root, man = copy(built, tmp_path)
    job = man[label]
    data = bytearray(open(cubin_path(job), "rb").read())
    text = elf.parse(bytes(data)).section(f".text.{job['name']}")
    off = text.offset + text.size // 2
    data[off] ^= 0x10
    open(cubin_path(job), "wb").write(data)
    assert (
        elf.parse(bytes(data)).section(f".text.{job['name']}").size == text.size
    )  # still a valid ELF
    r = verify(root)[job["path"]]
    assert r.verdict == "not-reproducible", r.message
    assert f".text.{job['name']}" in r.message
    assert f"{off:#x}" in r.message


def _blackwell_cubin_over_sm90(man):
    job = man["add_sm90"]
    md = json.load(open(os.path.join(job["path"], f"{job['name']}.json")))
    _arch, flags = rebuild.ptxas_flags(md)
    out = cubin_path(job) + ".bw"
    subprocess.run([PTXAS_BW, *flags, ptx_path(job), "-o", out], check=True, capture_output=True)
    assert open(out, "rb").read() != open(cubin_path(job), "rb").read()
    os.replace(out, cubin_path(job))
    return job


def test_cubin_from_other_bundled_ptxas_is_never_verified(built, tmp_path):
    root, man = copy(built, tmp_path)
    job = _blackwell_cubin_over_sm90(man)
    # Default machine search finds ptxas-blackwell as "another ptxas on this machine": stale.
    r = verify(root)[job["path"]]
    assert r.verdict != "verified"
    assert r.verdict == "stale", r.message
    assert r.ptxas == PTXAS_BW
    assert PTXAS in r.message  # names the one this environment would use
    # Even when ptxas-blackwell is passed as an environment ptxas for *other* archs, it does not verify sm_90
    # unless the user says it is used: with no machine candidates it is not reproducible.
    r = verify(root, machine_ptxas=[])[job["path"]]
    assert r.verdict == "not-reproducible", r.message


def test_keep_leaves_both_cubins(built, tmp_path):
    root, man = copy(built, tmp_path)
    job = man["sub_sm90"]
    shutil.copyfile(cubin_path(man["add_sm90"]), cubin_path(job))
    keep = str(tmp_path / "keep" / "sub")
    r = verify(root, keep_dir=keep)[job["path"]]
    assert r.verdict == "not-reproducible"
    cached = os.path.join(keep, f"{job['id']}.{job['name']}.cached.cubin")
    rebuilt = os.path.join(keep, f"{job['id']}.{job['name']}.rebuilt.cubin")
    assert open(cached, "rb").read() == open(cubin_path(job), "rb").read()
    # The rebuild is the genuine sub_kernel (debug line table aside: it stamps the source's mtime).
    assert cubin_compare.compare(
        open(rebuilt, "rb").read(), open(cubin_path(built[1]["sub_sm90"]), "rb").read()
    ).equal
    assert "nvdisasm" in r.message and cached in r.message
    assert sorted(os.listdir(keep)) == sorted([os.path.basename(cached), os.path.basename(rebuilt)])


def test_keep_never_writes_through_a_planted_symlink(built, tmp_path):
    """A shared --keep dir (``/tmp/keep``): another user's symlink where the kept cubin's temporary file
    goes must not redirect the write (it used to be ``<name>.tmp<pid>``, opened following links)."""
    root, man = copy(built, tmp_path)
    job = man["sub_sm90"]
    shutil.copyfile(cubin_path(man["add_sm90"]), cubin_path(job))
    keep = tmp_path / "keep"
    keep.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"not yours")
    for kind in ("cached", "rebuilt"):
        os.symlink(victim, keep / f"{job['id']}.{job['name']}.{kind}.cubin.tmp{os.getpid()}")
    r = verify(root, keep_dir=str(keep))[job["path"]]
    assert r.verdict == "not-reproducible"
    assert victim.read_bytes() == b"not yours"
    cached = keep / f"{job['id']}.{job['name']}.cached.cubin"
    assert not cached.is_symlink() and cached.read_bytes() == open(cubin_path(job), "rb").read()


# ---------------------------------------------------------------- unverifiable


def test_ptx_every_candidate_rejects_is_unverifiable(built, tmp_path):
    root, man = copy(built, tmp_path)
    job = man["add_sm90"]
    ptx = open(ptx_path(job)).read()
    open(ptx_path(job), "w").write(ptx.replace(".version 8.7", ".version 9.9", 1))
    r = verify(root)[job["path"]]
    assert r.verdict == "unverifiable", r.message
    assert [f.code for f in r.findings] == ["unverifiable"]
    assert "can assemble" in r.message and "9.9" in r.message


def test_missing_ptx_is_unverifiable(built, tmp_path):
    root, man = copy(built, tmp_path)
    job = man["matmul_sm120"]
    os.unlink(ptx_path(job))
    r = verify(root)[job["path"]]
    assert r.verdict == "unverifiable"
    assert "no PTX" in r.message


@pytest.mark.parametrize("which", ["cubin", "ptx"])
def test_an_input_of_gigabytes_is_unverifiable_unread(built, tmp_path, which):
    """A forged sparse cubin or PTX of gigabytes: refused from its size (a rebuild reads at most 256 MiB of
    either), never read into memory; before, the rebuild read all of it (1.8 GB: 19 s, 1.9 GB of memory)."""
    import tracemalloc

    root, man = copy(built, tmp_path)
    job = man["add_sm90"]
    os.truncate(cubin_path(job) if which == "cubin" else ptx_path(job), 3 << 30)
    tracemalloc.start()
    try:
        r = verify(root, jobs=1)[job["path"]]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20
    assert r.verdict == "unverifiable"
    assert "larger than the 256 MiB a rebuild reads" in r.message


@pytest.mark.skipif(
    not os.access(CUDA13, os.X_OK), reason="needs a CUDA 13 ptxas at /usr/local/cuda-13.0"
)
def test_ptx_90_from_another_toolchain(built, tmp_path):
    """An Inductor-like entry: assembled by a CUDA 13 ptxas (PTX .version 9.0), which Triton's 12.8 rejects."""
    root = str(tmp_path / "c13")
    jobs = [j for j in kernels.jobs_for(archs=(90,)) if j["variant"] in ("add", "add_debug")]
    man = kernels.build_cache(root, jobs=jobs, env={"TRITON_PTXAS_PATH": CUDA13})
    paths = [j["path"] for j in man]
    # Used by this environment (TRITON_PTXAS_PATH, as Inductor sets it): verified.
    env = dict(os.environ, TRITON_PTXAS_PATH=CUDA13)
    res = verify(root, env=env)
    assert [res[p].verdict for p in paths] == ["verified"] * 2, [r.message for r in res.values()]
    assert all(res[p].ptxas == CUDA13 for p in paths)
    # Given with --ptxas: verified.
    res = verify(root, extra_ptxas=[CUDA13], machine_ptxas=[])
    assert [res[p].verdict for p in paths] == ["verified"] * 2
    # Only on the machine: stale.
    res = verify(root, machine_ptxas=[CUDA13])
    assert [res[p].verdict for p in paths] == ["stale"] * 2
    # Nowhere: Triton's 12.8 rejects PTX 9.0 -> unverifiable, never not-reproducible.
    res = verify(root, machine_ptxas=[])
    for p in paths:
        assert res[p].verdict == "unverifiable", res[p].message
        assert "Unsupported .version 9.0" in res[p].message


# ---------------------------------------------------------------- inputs, interrupts, comparison


def test_bad_options_are_refused_with_the_field_and_why(built, tmp_path):
    """The engine names the option's field and the facts; the CLI words them with its flags (tests/unit/cli/commands/test_verify.py)."""
    root, _, _ = built
    nope = str(tmp_path / "nope")
    with pytest.raises(rebuild.OptionError) as err:
        verify(root, extra_ptxas=[nope])
    assert (err.value.field, err.value.value, err.value.why) == (
        "extra_ptxas",
        nope,
        "no such file",
    )
    f = tmp_path / "notexec"
    f.write_text("x")
    with pytest.raises(rebuild.OptionError) as err:
        verify(root, extra_ptxas=[str(f)])
    assert (err.value.field, err.value.why) == ("extra_ptxas", "not executable")
    with pytest.raises(rebuild.OptionError) as err:
        verify(root, keep_dir=str(f / "sub"))
    assert err.value.field == "keep_dir" and err.value.why.startswith("cannot create: ")
    with pytest.raises(rebuild.OptionError) as err:
        verify(root, jobs=0)
    assert (err.value.field, err.value.value, err.value.why) == ("jobs", 0, "must be at least 1")
    assert "--" not in str(err.value)  # no CLI flag in the engine's words


def test_ctrl_c_removes_temp_dir_and_propagates(built, tmp_path, monkeypatch):
    root, _ = copy(built, tmp_path)
    tdir = tmp_path / "tmp"
    tdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tdir))

    def progress(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        verify(root, progress=progress, jobs=2)
    assert os.listdir(tdir) == []
    # And after a normal run as well.
    verify(root, jobs=2)
    assert os.listdir(tdir) == []


def test_same_ptx_is_assembled_once(built, tmp_path):
    root, man = copy(built, tmp_path)
    src = man["matmul_sm80"]["path"]
    for i in range(3):
        shutil.copytree(src, os.path.join(root, f"DUP{i}"))
    st = {}
    res = verify(root, stats=st)
    assert len(res) == 27 and all(r.verdict == "verified" for r in res.values())
    assert st["ptxas_runs"] == 24


def test_compare_ignores_only_debug_sections(built):
    _, man, _ = built
    data = open(cubin_path(man["add_debug_sm120"]), "rb").read()
    e = elf.parse(data)
    for name, ignored in (
        (".debug_line", True),
        (".nv_debug_ptx_txt", True),
        (".nv.merc.debug_line", True),
        (f".nv.info.{man['add_debug_sm120']['name']}", False),
        (f".nv.constant0.{man['add_debug_sm120']['name']}", False),
        (f".nv.capmerc.text.{man['add_debug_sm120']['name']}", False),
    ):
        s = e.section(name)
        assert s is not None and s.size > 0, name
        mod = bytearray(data)
        mod[s.offset + s.size - 1] ^= 1
        c = cubin_compare.compare(data, bytes(mod))
        assert not c.identical
        assert c.equal is ignored, (name, c)
        if not ignored:
            assert name in c.summary()
    # A different toolchain stamp in the ELF header is a difference.
    mod = bytearray(data)
    mod[20] += 1
    assert not cubin_compare.compare(data, bytes(mod)).equal


# ---------------------------------------------------------------- nondeterministic ptxas


def _ctrl_variants(built, label="matmul_sm90"):
    """A real cubin and two 'attempts' differing in one byte of .text, as a nondeterministic ptxas gives.

    On the H200 two runs of one ptxas differed at .text offset 0x72: byte 2 of the upper 8-byte
    word of an instruction, where Hopper keeps scheduling-control bits.
    """
    _, man, _ = built
    job = man[label]
    data = open(cubin_path(job), "rb").read()
    text = elf.parse(data).section(f".text.{job['name']}")
    assert text.size >= 0x200
    ctrl = text.offset + 0x72
    a, b = bytearray(data), bytearray(data)
    a[ctrl] ^= 0x01
    b[ctrl] ^= 0x02
    return job, data, text, ctrl, bytes(a), bytes(b)


def test_attempts_one_equal_to_cached_reproduces(built):
    _job, data, _text, _ctrl, a, b = _ctrl_variants(built)
    j = cubin_compare.judge_attempts(a, [b, a])
    assert j.verdict == "reproduced" and j.matched == 1 and j.distinct == 2
    # The genuine output among the attempts, too.
    assert cubin_compare.judge_attempts(data, [a, b, data]).matched == 2


def test_attempts_vary_where_cached_differs_is_unverifiable(built):
    _job, data, text, ctrl, a, b = _ctrl_variants(built)
    # The cached cubin is a third value at the byte that varies between runs: not proven either way.
    j = cubin_compare.judge_attempts(data, [a, b, a, b, a])
    assert j.verdict == "varies-confined", j.reason
    assert (j.distinct, j.attempts, j.differing_bytes, j.varying_bytes) == (2, 5, 1, 1)
    assert "2 distinct results in 5 attempts, none identical" in j.reason
    assert "confined to bytes that vary between runs" in j.reason


def test_attempts_vary_but_cached_differs_where_they_agree_is_not_reproducible(built):
    job, data, text, ctrl, a, b = _ctrl_variants(built)
    info = elf.parse(data).section(f".nv.info.{job['name']}")
    # A flipped byte in a section every attempt reproduces byte for byte: damage.
    for tamper_base in (a, data):
        t = bytearray(tamper_base)
        off = info.offset + info.size - 1
        t[off] ^= 0x10
        j = cubin_compare.judge_attempts(bytes(t), [a, b, a, b, a])
        assert j.verdict == "varies-differs", j.reason
        assert j.first_section == info.name and j.first_offset == off - info.offset
        assert "where all 5 same-layout attempts agree" in j.reason
    # A flipped byte elsewhere in .text, a section this ptxas writes differently from run to run:
    # a few runs do not sample every output of such a ptxas, so it is no evidence either way.
    t = bytearray(data)
    off = text.offset + text.size // 2
    assert off != ctrl
    t[off] ^= 0x10
    j = cubin_compare.judge_attempts(bytes(t), [a, b, a, b, a])
    assert j.verdict == "varies-confined", j.reason
    assert (
        f"all in sections this ptxas does not reproduce from run to run ({text.name})" in j.reason
    )
    # The same kernel with another constexpr: other layout, differs structurally.
    _, man, _ = built
    other = open(cubin_path(man["matmul_sm90"]), "rb").read()
    _j2, d2, _t2, _c2, a2, b2 = _ctrl_variants(built, "add_sm90")
    j = cubin_compare.judge_attempts(other, [a2, b2])
    assert j.verdict == "varies-differs"


def test_deterministic_attempts_that_differ(built):
    _job, data, _text, _ctrl, a, _b = _ctrl_variants(built)
    j = cubin_compare.judge_attempts(data, [a] * 5)
    assert j.verdict == "differs" and j.distinct == 1 and "same output in all 5 runs" in j.reason
    # Differences only in ignored (debug-only) sections do not count as distinct outputs.
    _, man, _ = built
    dbg = open(cubin_path(man["add_debug_sm90"]), "rb").read()
    s = elf.parse(dbg).section(".debug_line")
    m = bytearray(dbg)
    m[s.offset + s.size - 1] ^= 1
    assert cubin_compare.judge_attempts(dbg, [bytes(m)]).verdict == "reproduced"


def test_deterministic_candidate_runs_once_per_entry_and_retries_only_on_mismatch(built, tmp_path):
    root, man = copy(built, tmp_path)
    st = {}
    res = verify(root, stats=st, machine_ptxas=[])
    assert all(r.verdict == "verified" for r in res.values())
    assert st["ptxas_runs"] == len(res) == 24 and st["ptxas_retries"] == 0
    # One damaged entry: its (deterministic) producer ptxas gets PTXAS_RETRIES more runs, and only it.
    job = man["add_sm90"]
    data = bytearray(open(cubin_path(job), "rb").read())
    text = elf.parse(bytes(data)).section(f".text.{job['name']}")
    data[text.offset + text.size // 2] ^= 0x10
    open(cubin_path(job), "wb").write(data)
    st = {}
    res = verify(root, stats=st, machine_ptxas=[])
    r = res[job["path"]]
    assert r.verdict == "not-reproducible", r.message
    assert f"gave the same output in all {1 + rebuild.PTXAS_RETRIES} runs" in r.message
    assert st["ptxas_retries"] == rebuild.PTXAS_RETRIES
    assert st["ptxas_runs"] == 24 + rebuild.PTXAS_RETRIES


def test_engine_keeps_every_output_and_matches_a_later_run(built, tmp_path, monkeypatch):
    """The engine path: a real ptxas whose first output differs from the cached cubin, a later one equal.

    A wrapper (a real ptxas, no mock of its output) alternates its result by flipping the
    H200's varying control byte on odd runs, the way the nondeterministic 12.8 ptxas behaved.
    """
    root, man = copy(built, tmp_path)
    job = man["add_sm90"]
    text = elf.parse(open(cubin_path(job), "rb").read()).section(f".text.{job['name']}")
    counter = tmp_path / "runs"
    wrapper = tmp_path / "ptxas-flaky"
    wrapper.write_text(f"""#!{sys.executable}
import os, subprocess, sys
r = subprocess.run([{PTXAS!r}, *sys.argv[1:]])
if "-o" not in sys.argv:  # --version
    sys.exit(r.returncode)
n = int(open({str(counter)!r}).read() or 0) if os.path.exists({str(counter)!r}) else 0
open({str(counter)!r}, "w").write(str(n + 1))
if r.returncode == 0 and n % 2 == 0:
    out = sys.argv[sys.argv.index("-o") + 1]
    d = bytearray(open(out, "rb").read())
    d[{text.offset + 0x72}] ^= 1
    open(out, "wb").write(d)
sys.exit(r.returncode)
""")
    wrapper.chmod(0o755)
    only = str(tmp_path / "only")
    os.makedirs(only)
    shutil.copytree(job["path"], os.path.join(only, job["id"]))
    env = dict(os.environ, TRITON_PTXAS_PATH=str(wrapper))
    st = {}
    r = rebuild.verify_entries(
        scan(only), rebuild.RebuildOptions(jobs=1), env=env, machine_ptxas=[], stats=st
    )[os.path.join(only, job["id"])]
    assert r.verdict == "verified", r.message
    assert r.ptxas == str(wrapper)
    assert (
        "output varies between runs for this kernel: run 2 matched after 1 differing run(s)"
        in r.message
    )
    assert st["ptxas_runs"] == 2 and st["ptxas_retries"] == 1
    # A cached cubin equal to neither output, differing only at that byte: unverifiable, never an error.
    c = bytearray(open(cubin_path(job), "rb").read())
    c[text.offset + 0x72] ^= 2
    open(os.path.join(only, job["id"], f"{job['name']}.cubin"), "wb").write(c)
    counter.unlink()
    r = rebuild.verify_entries(
        scan(only), rebuild.RebuildOptions(jobs=1), env=env, machine_ptxas=[]
    )[os.path.join(only, job["id"])]
    assert r.verdict == "unverifiable", r.message
    assert (
        f"2 distinct results in {1 + rebuild.PTXAS_RETRIES} attempts, none identical" in r.message
    )
    # And a flipped byte in a section ptxas reproduces every time: not-reproducible even though ptxas varies.
    c = bytearray(open(cubin_path(job), "rb").read())
    info = elf.parse(bytes(c)).section(f".nv.info.{job['name']}")
    c[info.offset + info.size - 1] ^= 0x10
    open(os.path.join(only, job["id"], f"{job['name']}.cubin"), "wb").write(c)
    counter.unlink()
    r = rebuild.verify_entries(
        scan(only), rebuild.RebuildOptions(jobs=1), env=env, machine_ptxas=[]
    )[os.path.join(only, job["id"])]
    assert r.verdict == "not-reproducible", r.message
    assert "same-layout attempts agree" in r.message


def test_older_metadata_layout_is_rebuilt_the_same_way(built, tmp_path):
    """A list-shaped target (``[backend, arch, warp]``) is read like the 3.x dict."""
    root, recs = copy(built, tmp_path)
    rec = recs["add_sm90"]
    p = os.path.join(rec["path"], f"{rec['name']}.json")
    md = json.load(open(p))
    md["target"] = ["cuda", 90, 32]
    json.dump(md, open(p, "w"))
    res = verify(root)[rec["path"]]
    assert res.verdict == "verified", res.message


# ---------------------------------------------------------------- untrusted ptx_options


def _set_md(rec, **kw):
    p = os.path.join(rec["path"], f"{rec['name']}.json")
    md = json.load(open(p))
    md.update(kw)
    json.dump(md, open(p, "w"))


@pytest.mark.parametrize(
    "opts",
    [
        "--options-file {secret}",
        "-optf {secret}",
        "--maxrregcount=32 --options-file={secret}",
        "--output-file {secret}",
        "--maxrregcount {secret}",
        "--fmad=false; cat {secret}",
    ],
)
def test_ptx_options_outside_the_allow_list_never_reach_ptxas(built, tmp_path, opts):
    """Issue 12: `--options-file /etc/shadow` in a cache's metadata printed the file's lines into the report."""
    root, man = copy(built, tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("root:SECRET-HASH-jw:19000:0:99999:7:::\n")
    rec = man["add_sm90"]
    _set_md(rec, ptx_options=opts.format(secret=secret))
    only = str(tmp_path / "only")
    os.makedirs(only)
    shutil.copytree(rec["path"], os.path.join(only, rec["id"]))
    kernels.copy_cache(only, str(tmp_path / "alone"))  # group file pointing into the copy
    only = str(tmp_path / "alone")
    st = {}
    r = rebuild.verify_entries(
        scan(only), rebuild.RebuildOptions(jobs=1), machine_ptxas=[], stats=st
    )[os.path.join(only, rec["id"])]
    assert r.verdict == "unverifiable", r.message
    assert "it was not run" in r.message and "SECRET" not in r.message
    assert st["ptxas_runs"] == 0
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "jitwarden",
            "verify",
            "--rebuild",
            "--target",
            "sm_90",
            "--format",
            "json",
            only,
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr  # unverifiable is a warning, never an error
    assert "SECRET" not in out.stdout + out.stderr
    codes = [f["code"] for e in json.loads(out.stdout)["entries"] for f in e["findings"]]
    assert codes == ["unverifiable"]


def test_allow_listed_ptx_options_are_passed_as_triton_passed_them(tmp_path):
    """A real kernel compiled with PTXAS_OPTIONS-style ptx_options verifies with the same options."""
    job = dict(
        kernels.jobs_for(archs=(90,), variants=[kernels.VARIANTS[0]])[0],
        options={"ptx_options": "--maxrregcount 40 -O3 --def-load-cache=cg"},
    )
    root = str(tmp_path / "cache")
    rec = kernels.build_cache(root, jobs=[job])[0]
    md = json.load(open(os.path.join(rec["path"], f"{rec['name']}.json")))
    assert md["ptx_options"] == "--maxrregcount 40 -O3 --def-load-cache=cg"
    assert rebuild.allowed_ptx_options(md["ptx_options"]) == [
        "--maxrregcount",
        "40",
        "-O3",
        "--def-load-cache=cg",
    ]
    r = verify(root)[rec["path"]]
    assert r.verdict == "verified", r.message
    # and the options matter: without them the same PTX assembles into another cubin
    _arch, flags = rebuild.ptxas_flags(dict(md, ptx_options=None))
    out = str(tmp_path / "plain.cubin")
    subprocess.run([PTXAS, *flags, ptx_path(rec), "-o", out], check=True, capture_output=True)
    assert not cubin_compare.compare(
        open(cubin_path(rec), "rb").read(), open(out, "rb").read()
    ).equal


def test_unknown_triton_release_never_gets_an_error(built, tmp_path):
    """Damage under a Triton release whose command line we do not know: unverifiable, not an error."""
    root, man = copy(built, tmp_path)
    rec = man["add_sm90"]
    _set_md(rec, triton_version="3.99.0")
    data = bytearray(open(cubin_path(rec), "rb").read())
    text = elf.parse(bytes(data)).section(f".text.{rec['name']}")
    data[text.offset + text.size // 2] ^= 0x10
    open(cubin_path(rec), "wb").write(data)
    r = verify(root, machine_ptxas=[])[rec["path"]]
    assert r.verdict == "unverifiable", r.message
    assert "Triton 3.99.0, whose ptxas command line jitwarden does not know" in r.message
