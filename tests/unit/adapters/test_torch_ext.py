"""torch-ext adapter on a REAL ``torch.utils.cpp_extension.load`` build, copied into every layout and damaged.

Layout and precedence followed: torch 2.13 ``torch/utils/cpp_extension.py`` (``_get_build_directory``:
``$TORCH_EXTENSIONS_DIR/<name>`` when set, else ``get_default_build_root()/py<XY><abiflags>_<cuZZZ|cpu>/<name>``;
``_jit_compile``: ``<name>_v<N>`` module names and the ``lock`` FileBaton in the build dir),
``torch/_appdirs.py`` (``user_cache_dir``: ``$XDG_CACHE_HOME`` or ``~/.cache``),
``torch/utils/_cpp_extension_versioner.py`` (in-process version bumps).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from jitwarden.adapters import torch_ext
from tests.helpers import otherkinds as ok
from tests.helpers.paths import DATA
from tests.helpers.paths import SRC as SRC_DIR

SRC = textwrap.dedent(
    """
    #include <torch/extension.h>
    int64_t jw_add(int64_t a, int64_t b) { return a + b; }
    PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add", &jw_add); }
    """
)
PY = f"py{sys.version_info[0]}{sys.version_info[1]}"


@pytest.fixture(scope="session")
def real_ext(tmp_path_factory):
    """One real build: ``TORCH_EXTENSIONS_DIR=<tmp>/ext``, ``load(name='jwext')``; returns the build dir."""
    base = tmp_path_factory.mktemp("torchext")
    src = base / "jwext.cpp"
    src.write_text(SRC)
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(base / "ext"))
    code = (
        "from torch.utils.cpp_extension import load\n"
        f"m = load(name='jwext', sources=[{str(src)!r}])\n"
        "assert m.add(2, 3) == 5\nprint(m.__file__)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    build = base / "ext" / "jwext"
    assert (build / "jwext.so").is_file() and (build / "build.ninja").is_file()
    return str(build)


@pytest.fixture
def tagged(real_ext, tmp_path):
    """A default-layout root ``torch_extensions/py<XY>_cpu/jwext`` holding a copy of the real build."""
    root = tmp_path / "torch_extensions"
    ok.copytree(real_ext, str(root / f"{PY}_cpu" / "jwext"))
    return str(root)


def _rewrite_ninja(build_dir: str, old: str, new: str) -> None:
    p = os.path.join(build_dir, "build.ninja")
    text = open(p).read()
    assert old in text
    open(p, "w").write(text.replace(old, new))


def test_real_build_in_torch_extensions_dir_is_clean(real_ext, capsys):
    root = os.path.dirname(real_ext)
    rc, doc = ok.verify(capsys, root, "--target", "90")
    assert rc == 0, doc
    assert doc["caches"][0]["kind"] == "torch-ext"
    (e,) = doc["entries"]
    assert e["id"] == "jwext" and e["type"] == "extension" and e["findings"] == []
    assert (
        e["extra"]["python"] == PY
        and e["extra"]["machine"] == "x86_64"
        and e["extra"]["modules"] == ["jwext.so"]
    )


def test_discovery_matches_torch_itself(tmp_path, monkeypatch):
    """The default root is what torch's own _get_build_directory picks, for XDG_CACHE_HOME and for HOME."""
    for xdg in (str(tmp_path / "xdg"), None):
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("TORCH_EXTENSIONS_DIR", "XDG_CACHE_HOME")
        }
        env["HOME"] = str(tmp_path / "home")
        if xdg:
            env["XDG_CACHE_HOME"] = xdg
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "from torch.utils.cpp_extension import _get_build_directory as g;"
                "print(g('probe', False))",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        torch_dir = out.stdout.strip().splitlines()[-1]
        roots = torch_ext.discover_roots(env)
        assert [r.source for r in roots] == ["default"]
        assert (
            os.path.join(roots[0].path, os.path.basename(os.path.dirname(torch_dir)), "probe")
            == torch_dir
        )
        assert os.path.basename(os.path.dirname(torch_dir)) == f"{PY}_cpu"


def test_discovery_torch_extensions_dir_first(tmp_path):
    env = {"HOME": str(tmp_path / "home"), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    os.makedirs(tmp_path / "ext")
    assert [(r.path, r.source) for r in torch_ext.discover_roots(env)] == [
        (str(tmp_path / "ext"), "TORCH_EXTENSIONS_DIR")
    ]
    os.makedirs(tmp_path / "home" / ".cache" / "torch_extensions")
    assert [r.source for r in torch_ext.discover_roots(env)] == ["TORCH_EXTENSIONS_DIR", "default"]
    assert torch_ext.discover_roots({"HOME": str(tmp_path / "nohome")}) == []


def test_tagged_layout_and_stale_tags(tagged, capsys):
    """Another Python (build.ninja really compiled against it) and another accelerator tag are stale, never read."""
    other_py = os.path.join(tagged, "py310_cpu", "jwext")
    ok.copytree(os.path.join(tagged, f"{PY}_cpu", "jwext"), other_py)
    _rewrite_ninja(other_py, f"python{sys.version_info[0]}.{sys.version_info[1]}", "python3.10")
    ok.copytree(
        os.path.join(tagged, f"{PY}_cpu", "jwext"), os.path.join(tagged, f"{PY}_cu128", "jwext")
    )
    rc, doc = ok.verify(capsys, tagged, "--target", "90")
    c = ok.codes(doc)
    assert c == {
        f"{PY}_cpu/jwext": [],
        "py310_cpu/jwext": ["stale"],
        f"{PY}_cu128/jwext": ["stale"],
    }, c
    assert rc == 0


def test_build_ninja_contradicting_its_tag_is_mismatch(tagged, capsys):
    d = os.path.join(tagged, f"{PY}_cpu", "jwext")
    _rewrite_ninja(d, f"python{sys.version_info[0]}.{sys.version_info[1]}", "python3.9")
    rc, doc = ok.verify(capsys, tagged)
    assert ok.codes(doc)[f"{PY}_cpu/jwext"] == ["mismatch"] and rc == 1


def test_truncated_so_is_corrupt(tagged, capsys):
    ok.truncate(os.path.join(tagged, f"{PY}_cpu", "jwext", "jwext.so"))
    rc, doc = ok.verify(capsys, tagged)
    assert ok.codes(doc)[f"{PY}_cpu/jwext"] == ["corrupt"] and rc == 1


def test_so_for_another_cpu(tagged, capsys):
    """A build of another CPU (module and objects) is foreign-arch; a module whose objects differ is a mismatch."""
    d = os.path.join(tagged, f"{PY}_cpu", "jwext")
    ok.set_machine(os.path.join(d, "jwext.so"), ok.EM_AARCH64)
    rc, doc = ok.verify(capsys, tagged)
    assert ok.codes(doc)[f"{PY}_cpu/jwext"] == ["foreign-arch", "mismatch"] and rc == 1
    ok.set_machine(os.path.join(d, "jwext.o"), ok.EM_AARCH64)
    rc, doc = ok.verify(capsys, tagged)
    assert ok.codes(doc)[f"{PY}_cpu/jwext"] == ["foreign-arch"] and rc == 0


def test_half_built_dir_is_incomplete_only_when_old(tagged, capsys):
    d = os.path.join(tagged, f"{PY}_cpu", "jwext")
    os.remove(os.path.join(d, "jwext.so"))
    rc, doc = ok.verify(capsys, tagged)
    assert ok.codes(doc)[f"{PY}_cpu/jwext"] == [] and doc["entries"][0]["type"] == "building"
    ok.set_age(d, 7200)
    rc, doc = ok.verify(capsys, tagged)
    assert ok.codes(doc)[f"{PY}_cpu/jwext"] == ["incomplete"] and rc == 1


def test_left_lock_is_orphan_only_when_old(tagged, capsys):
    d = os.path.join(tagged, f"{PY}_cpu", "jwext")
    open(os.path.join(d, "lock"), "w").close()
    rc, doc = ok.verify(capsys, tagged)
    assert ok.codes(doc)[f"{PY}_cpu/jwext"] == []
    ok.set_age(os.path.join(d, "lock"), 7200)
    rc, doc = ok.verify(capsys, tagged)
    assert ok.codes(doc)[f"{PY}_cpu/jwext"] == ["orphan"] and rc == 0


def test_versioned_module_name_is_own(tagged, capsys):
    """``_jit_compile`` renames the module ``<name>_v1`` in the same build dir when inputs change in one process."""
    d = os.path.join(tagged, f"{PY}_cpu", "jwext")
    os.rename(os.path.join(d, "jwext.so"), os.path.join(d, "jwext_v1.so"))
    rc, doc = ok.verify(capsys, tagged)
    assert ok.codes(doc)[f"{PY}_cpu/jwext"] == [] and doc["entries"][0]["extra"]["modules"] == [
        "jwext_v1.so"
    ]


def test_unsafe_file_and_symlink(tagged, tmp_path, capsys):
    d = os.path.join(tagged, f"{PY}_cpu", "jwext")
    os.chmod(os.path.join(d, "jwext.so"), 0o777)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(str(tmp_path / "elsewhere"), os.path.join(tagged, f"{PY}_cpu", "evil"))
    rc, doc = ok.verify(capsys, tagged)
    c = ok.codes(doc)
    assert c[f"{PY}_cpu/jwext"] == ["unsafe"] and c[f"{PY}_cpu/evil"] == ["unsafe"] and rc == 1


def test_clean_quarantines_stale_and_broken_builds(tagged):
    ok.copytree(
        os.path.join(tagged, f"{PY}_cpu", "jwext"), os.path.join(tagged, "py310_cpu", "jwext")
    )
    ok.truncate(os.path.join(tagged, f"{PY}_cpu", "jwext", "jwext.so"))
    plan, outcomes = ok.clean_codes(tagged, "torch-ext", ("stale", "corrupt", "mismatch"))
    assert sorted(a.id for a in plan.actions) == sorted([f"{PY}_cpu/jwext", "py310_cpu/jwext"])
    assert {o.status for o in outcomes} == {"quarantined"}
    assert not os.path.exists(os.path.join(tagged, "py310_cpu", "jwext"))
    from jitwarden.store import quarantine

    assert len(quarantine.list_root(tagged)) == 2
    plan, _ = ok.clean_codes(tagged, "torch-ext", ("stale", "corrupt", "mismatch"))
    assert plan.actions == ()


def _home_with_all_kinds(real_ext, tmp_path, isolated_env, monkeypatch) -> dict[str, str]:
    """One home with all four caches at their default places, one clean entry each; returns their entry dirs."""
    import shutil

    home = str(isolated_env)
    for k in (
        "TORCH_EXTENSIONS_DIR",
        "CUDA_CACHE_PATH",
        "DG_JIT_CACHE_DIR",
        "DG_CACHE_DIR",
        "FLASHINFER_WORKSPACE_BASE",
    ):
        monkeypatch.delenv(k, raising=False)
    ok.copytree(real_ext, os.path.join(home, ".cache", "torch_extensions", f"{PY}_cpu", "jwext"))
    cc = os.path.join(home, ".nv", "ComputeCache")
    os.makedirs(os.path.join(cc, "4", "c"))
    open(os.path.join(cc, "index"), "wb").write(os.urandom(256))
    real = os.path.join(DATA, "cuda_compute_h200", "ComputeCache")
    shutil.copy(
        os.path.join(real, "2", "4", "aca7d279b8280d"),
        os.path.join(cc, "4", "c", "5e6f7a8b9c0d1e2f"),
    )
    arts = ok.triton_artifacts(str(tmp_path / "arts"), (90,))
    dg = os.path.join(
        home, ".deep_gemm", "cache", "kernel.sm90_gemm.00112233445566778899aabbccddeeff"
    )
    os.makedirs(dg)
    open(os.path.join(dg, "kernel.cu"), "w").write("// DeepGEMM kernel\n")
    shutil.copy(arts[90]["cubin"], os.path.join(dg, "kernel.cubin"))
    op = os.path.join(home, ".cache", "flashinfer", "0.7.4", "90a", "cached_ops", "norm")
    os.makedirs(op)
    shutil.copy(os.path.join(real_ext, "jwext.so"), os.path.join(op, "norm.so"))

    return {
        "torch-ext": os.path.join(home, ".cache", "torch_extensions", f"{PY}_cpu", "jwext"),
        "cuda-compute": os.path.join(cc, "4", "c", "5e6f7a8b9c0d1e2f"),
        "deepgemm": dg,
        "flashinfer": op,
    }


def test_ls_verify_status_list_every_kind_on_a_machine_that_has_them(
    real_ext, tmp_path, capsys, isolated_env, monkeypatch
):
    """One home with all four caches at their default places: ls, verify and status name each kind."""
    from jitwarden.cli.main import main

    dirs = _home_with_all_kinds(real_ext, tmp_path, isolated_env, monkeypatch)
    dg = dirs["deepgemm"]
    assert main(["ls", "--format", "json", "--target", "90"]) == 0
    doc = json.loads(capsys.readouterr().out)
    kinds = {c["kind"]: c for c in doc["caches"]}
    assert {"cuda-compute", "flashinfer", "deepgemm", "torch-ext"} <= set(kinds)
    ids = {(e["kind"], e["id"]) for e in doc["entries"]}
    assert {
        ("cuda-compute", "4/c/5e6f7a8b9c0d1e2f"),
        ("flashinfer", "0.7.4/90a/cached_ops/norm"),
        ("deepgemm", "cache/" + os.path.basename(dg)),
        ("torch-ext", f"{PY}_cpu/jwext"),
    } <= ids
    assert all(
        not e["findings"]
        for e in doc["entries"]
        if e["kind"] != "triton" and e["kind"] != "inductor"
    )
    assert main(["verify", "--target", "90"]) == 0
    capsys.readouterr()
    assert main(["status"]) == 0
    status = capsys.readouterr().out
    for kind in ("cuda-compute", "flashinfer", "deepgemm", "torch-ext"):
        assert kind in status


def test_doctor_and_clean_on_every_kind(real_ext, tmp_path, capsys, isolated_env, monkeypatch):
    """doctor names each kind; clean -y quarantines one broken entry of each and leaves the good ones."""
    from jitwarden.cli.main import main
    from jitwarden.store import quarantine

    dirs = _home_with_all_kinds(real_ext, tmp_path, isolated_env, monkeypatch)
    assert (
        main(["doctor", "--target", "90"]) == 0
    )  # every kind sound (as verify says in the test above)
    doctor = capsys.readouterr().out
    for kind in dirs:
        assert kind in doctor
    broken = {}
    for kind, d in dirs.items():  # a second entry of each kind, cut short
        copy = {
            "torch-ext": os.path.join(os.path.dirname(d), "jwextx"),
            "deepgemm": d[:-1] + "0",
        }.get(kind, d + "x")
        if os.path.isdir(d):
            ok.copytree(d, copy)
        else:
            import shutil

            shutil.copy(d, copy)
        victim = {
            "torch-ext": os.path.join(copy, "jwext.so"),
            "cuda-compute": copy,
            "deepgemm": os.path.join(copy, "kernel.cubin"),
            "flashinfer": os.path.join(copy, "norm.so"),
        }[kind]
        if kind == "torch-ext":
            os.rename(os.path.join(copy, "jwext.so"), os.path.join(copy, "jwextx.so"))
            victim = os.path.join(copy, "jwextx.so")
        if kind == "flashinfer":
            os.rename(os.path.join(copy, "norm.so"), os.path.join(copy, "normx.so"))
            victim = os.path.join(copy, "normx.so")
        ok.truncate(victim, 0.3)
        broken[kind] = copy
    assert main(["clean", "--target", "90", "-y"]) == 0
    capsys.readouterr()
    for kind, copy in broken.items():
        assert not os.path.exists(copy), kind
        assert os.path.exists(dirs[kind]), kind
    roots = {
        os.path.join(isolated_env, ".cache", "torch_extensions"),
        os.path.join(isolated_env, ".nv", "ComputeCache"),
        os.path.join(isolated_env, ".deep_gemm"),
        os.path.join(isolated_env, ".cache", "flashinfer"),
    }
    assert sum(len(quarantine.list_root(r)) for r in roots) == 4
    assert main(["verify", "--target", "90"]) == 0


def test_activation_partitions_torch_extensions_and_the_scanner_finds_the_partition(
    real_ext, tmp_path
):
    """Extension builds carry no GPU identity in torch's key: under jitwarden each fingerprint builds its own."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "TORCH_EXTENSIONS", "JITWARDEN_", "XDG_"))
    }
    env.update(HOME=str(home), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind"), PYTHONPATH=SRC_DIR)
    where = subprocess.run(
        [
            sys.executable,
            "-m",
            "jitwarden",
            "run",
            "--",
            sys.executable,
            "-c",
            "from torch.utils.cpp_extension import _get_build_directory as g; print(g('jwext', False))",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert where.returncode == 0, where.stderr
    build_dir = where.stdout.strip().splitlines()[-1]
    base = os.path.realpath(home / ".cache" / "torch_extensions")
    assert build_dir.startswith(os.path.join(base, "jitwarden-v1") + os.sep) and build_dir.endswith(
        os.sep + "jwext"
    )
    import shutil

    shutil.copytree(
        real_ext, build_dir, dirs_exist_ok=True
    )  # what that build would leave there (torch made the dir)
    ls = subprocess.run(
        [sys.executable, "-m", "jitwarden", "ls", "--kind", "torch-ext", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    doc = json.loads(ls.stdout)
    (e,) = doc["entries"]
    assert e["path"] == build_dir and e["findings"] == []
    (c,) = [c for c in doc["caches"] if c["entries"]]
    assert c["partition"] == os.path.basename(os.path.dirname(build_dir)) and c["current"] is True


def test_root_test_of_a_large_other_cache_holds_a_bounded_number_of_subdirs(tmp_path):
    """Asked whether a Triton root of 10,000s of entry dirs is a torch-extensions root (``verify PATH`` asks every
    kind), the answer holds the root's names once (the listing every adapter shares), never one DirEntry per
    entry dir, and looks into at most 64 subdirs."""
    import tracemalloc

    for i in range(3000):
        (tmp_path / f"{i:052d}").mkdir()
    tracemalloc.start()
    try:
        assert torch_ext.looks_like_root(str(tmp_path)) is False
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3000 * 150, peak  # the names, ~120 bytes each; 3000 DirEntry objects held: ~1 MB
    (tmp_path / f"{7:052d}" / "build.ninja").write_text("rule cxx\n")
    assert torch_ext.looks_like_root(str(tmp_path)) is (
        f"{7:052d}" in [e.name for e in list(os.scandir(tmp_path))[:64]]
    )
    (tmp_path / "py311_cu128").mkdir()
    assert torch_ext.looks_like_root(str(tmp_path)) is True
