"""The fingerprint layer on real binaries and real files: Triton's bundled ptxas, a
wrapper around it, fake /proc trees, a torch read without importing it, the CLI (torch's own facts:
test_torchinfo.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest

from jitwarden.env import fingerprint as fpm
from jitwarden.env import nvml, ptxas
from jitwarden.env.fingerprint_diff import diff
from jitwarden.env.nvml import Gpu
from tests.helpers.cli import jw as run_cli
from tests.helpers.otherkinds import elf_with_section
from tests.helpers.paths import REPO as ROOT

BUNDLED = ptxas.triton_bin_dir()
REAL_PTXAS = os.path.join(BUNDLED, "ptxas") if BUNDLED else None
needs_ptxas = pytest.mark.skipif(
    not REAL_PTXAS or not os.path.exists(REAL_PTXAS), reason="no Triton-bundled ptxas"
)


def _nvml_loads() -> bool:
    import ctypes

    try:
        ctypes.CDLL(nvml.NVML_LIB)
        return True
    except OSError:
        return False


NVML_PRESENT = _nvml_loads()


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if k not in fpm.CODEGEN_ENV_VARS}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["JITWARDEN_HOME"] = str(tmp_path / "jwhome")
    env["PYTHONPATH"] = os.path.join(ROOT, "src")
    env.update(extra)
    return env


def _wrapper(tmp_path) -> str:
    d = tmp_path / "wrap"
    d.mkdir(exist_ok=True)
    w = d / "ptxas"
    w.write_text(f'#!/bin/sh\nexec "{REAL_PTXAS}" "$@"\n')
    w.chmod(0o755)
    return str(w)


# --- ptxas --------------------------------------------------------------------------


def test_parse_version_and_can_target():
    assert ptxas.parse_version("Cuda compilation tools, release 12.8, V12.8.93\nBuild x") == (
        "12.8",
        "V12.8.93",
    )
    assert ptxas.parse_version("garbage") == (None, None)
    info = ptxas.PtxasInfo(
        path="p",
        realpath="p",
        version_text="",
        release="12.8",
        build="V12.8.93",
        sha256="0" * 64,
        size=1,
    )
    assert ptxas.can_target(info, 90) is True
    assert ptxas.can_target(info, 120) is True
    assert ptxas.can_target(info, 121) is False
    assert ptxas.can_target(info, 110) is False
    assert ptxas.can_target(dataclasses.replace(info, release="13.0"), 110) is True
    assert ptxas.can_target(info, 42) is None
    assert ptxas.can_target(dataclasses.replace(info, release=None), 90) is None


@needs_ptxas
def test_inspect_real_ptxas_and_memo(tmp_path):
    memo: dict = {}
    info = ptxas.inspect(REAL_PTXAS, memo)
    assert info is not None and info.release and info.build and info.build.startswith("V")
    assert info.size == os.path.getsize(REAL_PTXAS) and len(info.sha256) == 64
    assert len(memo) == 1 and list(memo.values())[0]["sha256"] == info.sha256
    assert ptxas.inspect(str(tmp_path / "missing")) is None
    notexec = tmp_path / "ptxas"
    notexec.write_text("#!/bin/sh\necho hi\n")
    assert ptxas.inspect(str(notexec)) is None  # not executable
    notexec.chmod(0o755)
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\nexit 3\n")
    failing.chmod(0o755)
    assert ptxas.inspect(str(failing)) is None


@needs_ptxas
def test_selection_mirrors_triton(tmp_path):
    env = {"PATH": os.environ.get("PATH", "")}
    assert ptxas.for_arch(90, env) == REAL_PTXAS
    assert ptxas.for_arch(100, env) == os.path.join(BUNDLED, "ptxas-blackwell")
    # an override that does not run falls back to the bundled one, as Triton's knobs do
    assert ptxas.for_arch(90, {"TRITON_PTXAS_PATH": str(tmp_path / "nope")}) == REAL_PTXAS
    w = _wrapper(tmp_path)
    assert ptxas.for_arch(90, {"TRITON_PTXAS_PATH": w}) == w
    roles = dict(ptxas.selected({"TRITON_PTXAS_PATH": w}))
    assert roles["triton"] == w and "inductor" not in roles
    cands = ptxas.machine_candidates(env)
    assert REAL_PTXAS in cands
    assert len({os.path.realpath(c) for c in cands}) == len(cands)


@needs_ptxas
def test_wrapper_with_same_version_changes_digest(tmp_path):
    memo = str(tmp_path / "memo.json")
    w = _wrapper(tmp_path)
    base_env = _env(tmp_path)
    a = fpm.of_host(env=base_env, memo_path=memo)
    a2 = fpm.of_host(env=base_env, memo_path=memo, use_memo=False)
    b = fpm.of_host(env={**base_env, "TRITON_PTXAS_PATH": w}, memo_path=memo)
    ia, ib = a.ptxas_for("triton"), b.ptxas_for("triton")
    assert ia.version_text == ib.version_text  # what Triton's cache key sees: identical
    assert ia.sha256 != ib.sha256
    assert a.digest == a2.digest
    assert a.digest != b.digest
    comps = {c.component: c for c in diff(a, b)}
    assert "ptxas[triton].sha256" in comps
    assert "same version" in comps["ptxas[triton].sha256"].why


# --- memo ---------------------------------------------------------------------------


def _of_host_in_subprocess(
    tmp_path, memo_path, code="print(json.dumps(f.of_host(memo_path=m).to_json()))"
):
    prog = f"import json, jitwarden.env.fingerprint as f; m={memo_path!r}; {code}"
    r = subprocess.run(
        [sys.executable, "-c", prog],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


@needs_ptxas
def test_warm_of_host_is_served_from_memo(tmp_path):
    memo_path = str(tmp_path / "m" / "fingerprint-memo.json")
    cold = json.loads(_of_host_in_subprocess(tmp_path, memo_path))
    data = json.load(open(memo_path))
    assert data["schema"] == 1 and data["ptxas"]
    # Mark the memoised ptxas facts: a warm start that re-ran `ptxas --version` would not see the mark.
    for v in data["ptxas"].values():
        v["version_text"] = "served-from-memo"
    json.dump(data, open(memo_path, "w"))
    warm = json.loads(_of_host_in_subprocess(tmp_path, memo_path))
    assert {p["version_text"] for p in warm["toolchain"]["ptxas"]} == {"served-from-memo"}
    assert cold["packages"] == warm["packages"]


@pytest.mark.parametrize(
    "garbage",
    [
        "{{{ not json",
        '{"schema": 1, "ptxas": {"k": "bad"}, "records": [1], "gpu": 3}',
        '{"schema": 99}',
        "[]",
    ],
)
@needs_ptxas
def test_garbage_memo_is_ignored_and_rewritten(tmp_path, garbage):
    memo_path = tmp_path / "fingerprint-memo.json"
    memo_path.write_text(garbage)
    fp = fpm.of_host(env=_env(tmp_path), memo_path=str(memo_path))
    assert fp.ptxas_for("triton") is not None
    data = json.loads(memo_path.read_text())
    assert data["schema"] == 1 and any(
        isinstance(v, dict) and "sha256" in v for v in data["ptxas"].values()
    )


def test_unwritable_memo_never_raises(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    fp = fpm.of_host(env=_env(tmp_path), memo_path=str(blocker / "sub" / "memo.json"))
    assert fp.digest


def test_memo_dir_precedence(tmp_path):
    assert fpm.memo_dir({"JITWARDEN_HOME": "/a", "XDG_CACHE_HOME": "/b"}) == "/a"
    assert fpm.memo_dir({"XDG_CACHE_HOME": "/b"}) == "/b/jitwarden"
    assert fpm.memo_dir({}).endswith(os.path.join(".cache", "jitwarden"))


# --- GPU facts ----------------------------------------------------------------------

INFO = """Model: \t\t NVIDIA H200
IRQ:   \t\t 123
GPU UUID: \t GPU-{uuid}
Video BIOS: \t 96.00.99.00.01
Bus Type: \t PCIe
DMA Size: \t 52 bits
Bus Location: \t {bus}
Device Minor: \t {minor}
"""
VERSION = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Sun Jul 27 06:54:38 UTC 2025\nGCC version:  gcc version 13.3.0\n"
)


def _fake_proc(tmp_path) -> str:
    root = tmp_path / "proc"
    base = root / "driver" / "nvidia"
    for minor, (bus, uuid) in enumerate([("0000:9a:00.0", "bbbb-2"), ("0000:19:00.0", "aaaa-1")]):
        d = base / "gpus" / bus
        d.mkdir(parents=True)
        (d / "information").write_text(INFO.format(uuid=uuid, bus=bus, minor=minor))
    (base / "version").write_text(VERSION)
    return str(root)


def test_proc_parsing(tmp_path):
    assert nvml.parse_driver_version(VERSION) == "580.65.06"
    assert (
        nvml.parse_driver_version(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar"
        )
        == "550.54.15"
    )
    gpus, driver = nvml.read_proc(_fake_proc(tmp_path))
    assert driver == "580.65.06"
    assert [g.pci_bus_id for g in gpus] == ["0000:19:00.0", "0000:9a:00.0"]  # PCI order, like NVML
    assert gpus[0] == Gpu(0, "NVIDIA H200", None, "GPU-aaaa-1", "0000:19:00.0")
    assert nvml.read_proc(str(tmp_path / "empty")) is None


def test_visible_devices_filter():
    gpus = (
        Gpu(0, "A", (9, 0), "GPU-aaaa", None),
        Gpu(1, "B", (9, 0), "GPU-bbbb", None),
        Gpu(2, "C", (9, 0), "GPU-cccc", None),
    )
    assert nvml.filter_visible(gpus, None) == gpus
    assert [g.index for g in nvml.filter_visible(gpus, "2,0")] == [2, 0]
    assert [g.index for g in nvml.filter_visible(gpus, "GPU-bbbb")] == [1]
    assert [g.index for g in nvml.filter_visible(gpus, "1,7,0")] == [
        1
    ]  # CUDA stops at the first bad entry
    assert nvml.filter_visible(gpus, "") == ()
    assert nvml.filter_visible(gpus, "-1") == ()
    assert nvml.filter_visible(gpus, "MIG-1234") == gpus


@pytest.mark.skipif(NVML_PRESENT, reason="NVML is loadable on this machine")
def test_no_nvml_falls_back_to_proc_then_none(tmp_path):
    root = _fake_proc(tmp_path)
    source, gpus, driver, cuda = nvml.query(proc_root=root, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert source == "proc" and driver == "580.65.06" and cuda is None
    assert [g.uuid for g in gpus] == ["GPU-bbbb-2"]
    assert nvml.query(proc_root=str(tmp_path / "none"), env={}) == ("none", (), None, None)
    fp = fpm.of_host(
        env=_env(tmp_path), memo_path=str(tmp_path / "m.json"), proc_root=str(tmp_path / "none")
    )
    assert fp.gpu_source == "none" and fp.gpus == () and fp.device_archs() == ()
    assert fp.headline().startswith("no GPU visible (nvml:")
    fp2 = fpm.of_host(env=_env(tmp_path), memo_path=str(tmp_path / "m.json"), proc_root=root)
    assert fp2.gpu_source == "proc" and fp2.driver_version == "580.65.06"
    assert "NVIDIA H200" in fp2.headline() and "driver 580.65.06" in fp2.headline()
    assert any(c.component == "driver" for c in diff(fp, fp2))
    assert not json.load(open(tmp_path / "m.json")).get("gpu")  # only NVML answers are memoised


# --- Fingerprint record -------------------------------------------------------------


def _fp(**kw):
    base = fpm.Fingerprint(
        gpu_source="nvml",
        gpus=(Gpu(0, "NVIDIA H200", (9, 0), "GPU-x", "0000:19:00.0"),),
        driver_version="580.65.06",
        cuda_driver_version="13.0",
        ptxas=(
            (
                "triton",
                ptxas.PtxasInfo(
                    path="/p",
                    realpath="/p",
                    version_text="release 12.8, V12.8.93",
                    release="12.8",
                    build="V12.8.93",
                    sha256="ab" * 32,
                    size=1,
                ),
            ),
        ),
        packages=(
            fpm.Package(
                name="torch",
                dist="torch",
                version="2.11.0+cu130",
                identity="cd" * 32,
                cuda="13.0",
                git_version="abc",
                arch_list=("sm_90", "sm_100"),
            ),
            fpm.Package(name="triton", dist="triton", version="3.6.0", identity="ef" * 32),
        ),
        python=(
            ("abiflags", ""),
            ("cache_tag", "cpython-311"),
            ("implementation", "cpython"),
            ("minor", "3.11"),
            ("soabi", "cpython-311-x86_64-linux-gnu"),
            ("version", "3.11.7"),
        ),
        platform=(("libc", "glibc 2.36"), ("machine", "x86_64"), ("system", "Linux")),
        env=(),
    )
    return dataclasses.replace(base, **kw)


def test_json_round_trip_and_garbage():
    a = _fp()
    assert fpm.Fingerprint.from_json(json.loads(json.dumps(a.to_json()))) == a
    assert a.to_json()["schema"] == 1 and a.to_json()["digest"] == a.digest and len(a.digest) == 16
    for bad in (None, [], {"schema": 1}, {"schema": 2}, {**a.to_json(), "gpu": {"devices": "x"}}):
        with pytest.raises(ValueError, match="fingerprint"):
            fpm.Fingerprint.from_json(bad)
    assert a.headline().startswith(
        "sm_90 NVIDIA H200 · driver 580.65.06 · torch 2.11.0+cu130 · triton 3.6.0 · ptxas 12.8 · fp "
    )


def test_digest_ignores_volatile_facts_and_diff_explains():
    a = _fp()
    same = _fp(gpus=(Gpu(3, "NVIDIA H200", (9, 0), "GPU-other", "0000:9a:00.0"),) * 2)
    assert same.digest == a.digest and diff(a, same) == []
    moved = _fp(
        ptxas=(
            (
                "triton",
                dataclasses.replace(a.ptxas[0][1], path="/elsewhere", realpath="/elsewhere"),
            ),
        )
    )
    assert moved.digest == a.digest
    b = _fp(
        gpus=(Gpu(0, "NVIDIA GB10", (12, 1), None, None),),
        env=(("TRITON_DISABLE_LINE_INFO", "1"),),
        python=tuple((k, "cpython-312" if k == "cache_tag" else v) for k, v in a.python),
    )
    assert b.digest != a.digest
    changes = {c.component: c for c in diff(a, b)}
    assert "exact compute capability" in changes["gpu.capability"].why
    assert changes["gpu.capability"].new == "sm_121"
    assert changes["env:TRITON_DISABLE_LINE_INFO"].old == "(none)"
    assert "ABI" in changes["python.cache_tag"].why
    c = _fp(
        packages=(
            fpm.Package(
                name="torch",
                dist="torch",
                version="2.11.0+cu130",
                identity="cd" * 32,
                cuda="13.0",
                git_version="abc",
                arch_list=("sm_80",),
            ),
        )
    )
    changes = {x.component: x for x in diff(a, c)}
    assert "lacks the GPU's sm_90" in changes["package:torch.arch_list"].why
    assert "package:triton" in changes
    assert any("sm_90" in w for w in c.warnings())
    assert a.warnings() == []
    old_ptxas = _fp(
        gpus=(Gpu(0, "NVIDIA GB10", (12, 1), None, None),),
        ptxas=(("triton-blackwell", dataclasses.replace(a.ptxas[0][1], path="/bw")),),
    )
    assert any("cannot target sm_121" in w for w in old_ptxas.warnings())


def test_ptxas_warning_follows_the_installed_triton_release():
    """Which ptxas runs for an arch depends on the Triton release: 3.4 runs `ptxas` for sm_121,
    3.6 `ptxas-blackwell`; 3.9 runs `ptxas-blackwell` for sm_90, 3.6 `ptxas`."""
    a = _fp()
    old = dataclasses.replace(a.ptxas[0][1], release="11.7", path="/old")
    torch = a.packages[0]
    gb10 = (Gpu(0, "NVIDIA GB10", (12, 1), None, None),)

    def fp(triton, gpus, role):
        return _fp(
            gpus=gpus,
            ptxas=((role, a.ptxas[0][1] if role == "triton" and gpus == gb10 else old),),
            packages=(
                torch,
                fpm.Package(name="triton", dist="triton", version=triton, identity="ef" * 32),
            ),
        )

    def warns(f):
        return [w for w in f.warnings() if "cannot target" in w]

    assert any("ptxas[triton]" in w and "sm_121" in w for w in warns(fp("3.4.0", gb10, "triton")))
    assert warns(fp("3.6.0", gb10, "triton")) == []  # 3.6 runs ptxas-blackwell there
    h200 = a.gpus
    assert any(
        "ptxas[triton-blackwell]" in w and "sm_90" in w
        for w in warns(fp("3.9.0", h200, "triton-blackwell"))
    )
    assert warns(fp("3.6.0", h200, "triton-blackwell")) == []  # 3.6 runs ptxas for sm_90


# --- CLI and the activation path ----------------------------------------------------


def _cli(tmp_path, *args, **env):
    return run_cli(
        "fingerprint",
        *args,
        cwd=str(tmp_path),
        env=_env(tmp_path, COLUMNS="250", **env),
        timeout=120,
        src=None,
    )


def test_cli_json_and_diff(tmp_path):
    r = _cli(tmp_path, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (
        doc["schema"] == 2
        and doc["fingerprint_schema"] == 1
        and doc["tool"]["name"] == "jitwarden"
        and len(doc["digest"]) == 16
    )
    saved = tmp_path / "a.json"
    saved.write_text(r.stdout)
    same = _cli(tmp_path, "--diff", str(saved))
    assert same.returncode == 0 and "identical" in same.stdout
    changed = _cli(tmp_path, "--diff", str(saved), TRITON_DISABLE_LINE_INFO="1")
    assert changed.returncode == 1, changed.stderr
    assert "env:TRITON_DISABLE_LINE_INFO" in changed.stdout
    as_json = _cli(
        tmp_path,
        "--diff",
        str(saved),
        "--format",
        "json",
        "--no-memo",
        TRITON_DISABLE_LINE_INFO="1",
    )
    assert as_json.returncode == 1
    assert [c["component"] for c in json.loads(as_json.stdout)["changes"]] == [
        "env:TRITON_DISABLE_LINE_INFO"
    ]


def test_cli_table_without_gpu(tmp_path):
    r = _cli(tmp_path)
    assert r.returncode == 0, r.stderr
    assert "digest" in r.stdout and "python" in r.stdout
    if not NVML_PRESENT and not os.path.isdir("/proc/driver/nvidia"):
        assert "no GPU visible" in r.stdout


@pytest.mark.parametrize("content", [None, "not json at all", '{"schema": 1, "gpu": {}}', "[1, 2]"])
def test_cli_diff_bad_file_is_usage_error(tmp_path, content):
    path = tmp_path / "other.json"
    if content is not None:
        path.write_text(content)
    r = _cli(tmp_path, "--diff", str(path))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert str(path) in r.stderr


def test_activation_path_stays_stdlib_only(tmp_path):
    prog = (
        "import sys, jitwarden.env.fingerprint as f; fp = f.of_host(); fp.headline(); fp.to_json(); "
        "bad = [m for m in ('torch', 'triton', 'rich', 'numpy') if m in sys.modules]; "
        "assert not bad, bad; print('ok')"
    )
    r = subprocess.run(
        [sys.executable, "-c", prog],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def _fake_torch_site(tmp_path) -> str:
    """A site dir holding a torch the fingerprint must read without importing: version.py,
    a dist-info RECORD, lib/libtorch_python.so with its arch flags, and bin/ptxas."""
    site = tmp_path / "site"
    pkg = site / "torch"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "bin").mkdir()
    (pkg / "__init__.py").write_text(
        "raise RuntimeError('torch must not be imported by the fingerprint')\n"
    )
    (pkg / "version.py").write_text(
        "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\ngit_version = '0123abcd'\n"
    )
    (pkg / "lib" / "libtorch_python.so").write_bytes(
        elf_with_section(b".rodata", b"\0sm_80 sm_90a compute_90\0")
    )
    shutil.copy(_wrapper(tmp_path), pkg / "bin" / "ptxas")
    dist = site / "torch-2.11.0+cu130.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0+cu130\n")
    (dist / "RECORD").write_text("torch/__init__.py,sha256=abc,10\n")
    return str(site)


@needs_ptxas
def test_fake_torch_is_read_without_import(tmp_path):
    site = _fake_torch_site(tmp_path)
    prog = (
        "import json, sys, jitwarden.env.fingerprint as f; fp = f.of_host(); "
        "assert 'torch' not in sys.modules; print(json.dumps(fp.to_json()))"
    )
    env = _env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src"), site])
    r = subprocess.run(
        [sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    torch = next(p for p in doc["packages"] if p["name"] == "torch")
    assert (
        torch["version"] == "2.11.0+cu130"
        and torch["cuda"] == "13.0"
        and torch["git_version"] == "0123abcd"
    )
    assert torch["arch_list"] == ["sm_80", "compute_90", "sm_90"]
    assert len(torch["identity"]) == 64
    roles = {p["role"]: p for p in doc["toolchain"]["ptxas"]}
    assert roles["inductor"]["path"] == os.path.join(site, "torch", "bin", "ptxas")
    # Inductor hands torch's ptxas to Triton only when the user did not choose one
    env["TRITON_PTXAS_PATH"] = REAL_PTXAS
    r = subprocess.run(
        [sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "inductor" not in {p["role"] for p in json.loads(r.stdout)["toolchain"]["ptxas"]}
