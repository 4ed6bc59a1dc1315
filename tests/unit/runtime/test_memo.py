"""The activation memo's warm check (``runtime/memo.py``): O(1) in the size of the environment, and still a
miss, with a new digest, for every input the fingerprint covers.

Real fingerprints in this process (real ptxas, real dist-infos on ``sys.path``). Each change is made after
the memo was written and one timestamp tick later (the kernel's file clock is coarse), and the racy window
is set to 0 so the memo trusts stats made just before the change, as it would minutes later.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from jitwarden.env import fingerprint, nvml, ptxas
from jitwarden.runtime import memo
from tests.helpers.guarded import clean_env

TICK_S = 0.05
"""Longer than the kernel's coarse file clock, so a change after the snapshot moves a timestamp."""


@pytest.fixture
def fresh(monkeypatch):
    """Stats trusted at once (no racy window), and no fingerprint left over in this process."""
    monkeypatch.setattr(memo, "RACY_NS", 0)
    monkeypatch.setattr(fingerprint, "_PROCESS_MEMO", {})
    monkeypatch.setattr(ptxas, "_MEMO", {})


def _recompute(env, **kw) -> str:
    """The digest a new process would compute now (this process's fingerprint memo forgotten)."""
    fingerprint._PROCESS_MEMO.clear()
    return memo.compute(env, **kw).digest


class _Listings:
    """Every directory ``os.listdir`` is asked for while installed."""

    def __init__(self, monkeypatch):
        self.paths: list[str] = []
        real = os.listdir

        def spy(path="."):
            self.paths.append(os.path.abspath(path))
            return real(path)

        monkeypatch.setattr(os, "listdir", spy)

    def of(self, dirs) -> list[str]:
        return [p for p in self.paths if p in {os.path.abspath(d) for d in dirs}]


def _big_site(tmp_path, n: int = 4000):
    site = tmp_path / "site"
    site.mkdir()
    for i in range(n // 2):
        (site / f"pad_{i:05d}-1.0.dist-info").mkdir()
        (site / f"pad_{i:05d}.py").write_text("")
    return site


def test_the_no_change_path_lists_no_directory(tmp_path, monkeypatch, fresh):
    site = _big_site(tmp_path)
    monkeypatch.syspath_prepend(str(site))
    env = clean_env(tmp_path)
    facts = memo.compute(env)
    assert memo.last == "stored"
    listed = _Listings(monkeypatch)
    assert memo.lookup(env) == facts and memo.last == "hit"
    assert listed.of(sys.path) == []  # nor site-packages, nor the 4,000 names beside it


def test_a_dir_that_moved_without_a_package_change_is_listed_once(tmp_path, monkeypatch, fresh):
    site = _big_site(tmp_path, 20)
    monkeypatch.syspath_prepend(str(site))
    env = clean_env(tmp_path)
    facts = memo.compute(env)
    time.sleep(TICK_S)
    (site / "unrelated-2.0.dist-info").mkdir()  # another package: nothing the fingerprint reads
    listed = _Listings(monkeypatch)
    assert memo.lookup(env) == facts and memo.last == "hit"
    assert listed.of([site]) == [str(site)]
    listed.paths.clear()
    assert memo.lookup(env) == facts and memo.last == "hit"
    assert listed.of([site]) == []  # its new stat was recorded: back to stats alone


def test_two_working_dirs_keep_their_own_entries(tmp_path, monkeypatch, fresh):
    """``''`` on sys.path is the cwd: starts in two dirs must not overwrite each other's entry (each was a
    slow path before), and a cwd holding ``torchinductor_root`` holds no torch."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    (two / "torchinductor_root").mkdir(parents=True)
    monkeypatch.syspath_prepend("")
    env = clean_env(tmp_path)
    for cwd in (one, two):
        monkeypatch.chdir(cwd)
        memo.compute(env)
    for cwd in (one, two, one):
        monkeypatch.chdir(cwd)
        assert memo.lookup(env) is not None and memo.last == "hit", memo.last


def _dist(site, name: str, version: str, record: str = "a.py,sha256=aaaa,1\n"):
    d = site / f"{name}-{version}.dist-info"
    d.mkdir()
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (d / "RECORD").write_text(record)
    return d


def _rewrite_in_place(path, data: bytes) -> None:
    """Same inode, same size, mtime set back: only ctime (which nobody can set) moves."""
    st = os.stat(path)
    assert len(data) == st.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
    )


def _swap_in(path, data: bytes) -> None:
    """Renamed over the old file: same size, same mtime, another inode."""
    st = os.stat(path)
    new = f"{path}.new"
    with open(new, "wb") as f:
        f.write(data)
    os.chmod(new, st.st_mode)
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(new, path)


def _wrapper(real: str, tag: str, size: int = 4096) -> bytes:
    """A ptxas wrapper with the real one's ``--version`` text (Triton's key would not notice it)."""
    body = f'#!/bin/sh\nexec "{real}" "$@"\n# {tag}\n'.encode()
    return body + b"#" * (size - len(body) - 1) + b"\n"


def _real_ptxas() -> str:
    path = ptxas.for_arch(90)
    if not path:
        pytest.skip("no runnable ptxas (Triton's bundled one is missing)")
    return path


def _package_upgraded_in_place(tmp_path, monkeypatch):
    site = tmp_path / "pkgs"
    site.mkdir()
    d = _dist(site, "vllm", "0.0.1")
    monkeypatch.syspath_prepend(str(site))
    # a rebuild under the same version: RECORD lists other hashes, same size, mtime set back
    return lambda: _rewrite_in_place(d / "RECORD", b"a.py,sha256=bbbb,1\n")


def _package_upgraded(tmp_path, monkeypatch):
    site = tmp_path / "pkgs"
    site.mkdir()
    d = _dist(site, "vllm", "0.0.1")
    monkeypatch.syspath_prepend(str(site))
    return lambda: os.rename(d, site / "vllm-0.0.2.dist-info")


def _named_package_installed(tmp_path, monkeypatch):
    site = tmp_path / "pkgs"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    return lambda: _dist(site, "vllm", "0.0.1")


def _ptxas_rewritten_in_place(tmp_path, monkeypatch):
    real = _real_ptxas()
    path = tmp_path / "ptxas"
    path.write_bytes(_wrapper(real, "one"))
    path.chmod(0o755)
    monkeypatch.setenv("TRITON_PTXAS_PATH", str(path))
    return lambda: _rewrite_in_place(path, _wrapper(real, "two"))


def _ptxas_swapped(tmp_path, monkeypatch):
    real = _real_ptxas()
    path = tmp_path / "ptxas"
    path.write_bytes(_wrapper(real, "one"))
    path.chmod(0o755)
    monkeypatch.setenv("TRITON_PTXAS_PATH", str(path))
    assert (
        subprocess.run([str(path), "--version"], capture_output=True).stdout
        == subprocess.run([real, "--version"], capture_output=True).stdout
    )
    return lambda: _swap_in(path, _wrapper(real, "two"))


CHANGES = {
    "package rebuilt in place, same version": _package_upgraded_in_place,
    "package upgraded": _package_upgraded,
    "a package the fingerprint names installed": _named_package_installed,
    "ptxas rewritten in place, same size and mtime": _ptxas_rewritten_in_place,
    "ptxas renamed over, same size and mtime": _ptxas_swapped,
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_every_toolchain_input_changes_the_digest_before_anything_loads(
    tmp_path, monkeypatch, fresh, change
):
    make = CHANGES[change](tmp_path, monkeypatch)
    env = clean_env(tmp_path, **{k: v for k, v in os.environ.items() if k == "TRITON_PTXAS_PATH"})
    before = memo.compute(env).digest
    assert memo.last == "stored" and memo.lookup(env) is not None
    time.sleep(TICK_S)
    make()
    assert memo.lookup(env) is None and memo.last.startswith("miss: ")
    assert _recompute(env) != before


INFO = "Model: \t\t NVIDIA H200\nBus Location: \t 0000:19:00.0\nGPU UUID: \t GPU-aaaa-1\n"
VERSION = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {v}  Mon Jan  1 00:00:00 UTC 2026\n"


def test_a_driver_update_changes_the_digest_before_anything_loads(tmp_path, monkeypatch, fresh):
    """The driver's /proc files (a fake root here) are re-read at every start. NVML is not on this
    machine: its answer is stood in for by the same files (a /proc-only answer is never memoised)."""
    root = tmp_path / "proc"
    base = root / "driver" / "nvidia"
    (base / "gpus" / "0000:19:00.0").mkdir(parents=True)
    (base / "gpus" / "0000:19:00.0" / "information").write_text(INFO)
    (base / "version").write_text(VERSION.format(v="580.65.06"))

    def as_nvml(proc_root="/proc", env=None, use_nvml=True):
        gpus, driver = nvml.read_proc(proc_root)
        return nvml.Probe("nvml", gpus, driver, "13.0")

    monkeypatch.setattr(nvml, "probe", as_nvml)
    env = clean_env(tmp_path)
    before = memo.compute(env, proc_root=str(root))
    assert memo.last == "stored" and "580.65.06" in (before.headline or "")
    assert memo.lookup(env) == before
    (base / "version").write_text(VERSION.format(v="590.10.01"))
    assert memo.lookup(env) is None and memo.last == f"miss: {base} changed"
    assert _recompute(env, proc_root=str(root)) != before.digest


def test_a_codegen_env_var_changes_the_digest_before_anything_loads(tmp_path, fresh):
    env = clean_env(tmp_path)
    before = memo.compute(env).digest
    fused = dict(env, TRITON_DEFAULT_FP_FUSION="0")
    assert memo.lookup(fused) is None and memo.last.startswith("miss: env TRITON_DEFAULT_FP")
    assert _recompute(fused) != before


def test_the_names_watched_are_what_the_fingerprint_finds():
    """A dist-info by its normalized dist name (as ``fingerprint._find_dists``), anything importable as a
    watched top-level name (as ``find_spec``); nothing that merely contains one."""
    wanted = frozenset(fingerprint.dependencies()["names"])
    found = [
        "torch",
        "torch.py",
        "torch.cpython-311-x86_64-linux-gnu.so",
        "torch-2.13.0.dist-info",
        "Torch-2.13.0.dist-info",
        "pytorch_triton-3.6.0.dist-info",
        "nvidia_cuda_nvrtc_cu12-12.8.93.dist-info",
        "triton",
    ]
    ignored = ["torchvision", "torchinductor_root", "torch_geometric-2.0.dist-info", "notes.txt"]
    assert [n for n in found if not memo._tracked(n, wanted)] == []
    assert [n for n in ignored if memo._tracked(n, wanted)] == []


def test_a_removed_working_dir_still_activates_and_memoises(tmp_path):
    """``''`` on sys.path names the cwd; a cwd removed under the process has no name, and activation
    must still partition (it did before the memo recorded the cwd by name)."""

    gone = tmp_path / "gone"
    gone.mkdir()
    probe = """
        import json, os, sys
        sys.path.insert(0, "")
        os.chdir(sys.argv[-1]); os.rmdir(sys.argv[-1])
        import jitwarden
        from jitwarden.runtime import memo
        rec = jitwarden.activate()
        print(json.dumps([rec.digest, "TRITON_CACHE_DIR" in rec.partitions, memo.last]))
    """
    env = clean_env(tmp_path)
    outs = []
    for _ in range(2):
        gone.mkdir(exist_ok=True)
        p = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(probe), str(gone)],
            env=env,
            capture_output=True,
            text=True,
        )
        assert p.returncode == 0, p.stderr
        outs.append(json.loads(p.stdout))
    assert outs[0][0] and outs[0][1] and outs[0][0] == outs[1][0]
