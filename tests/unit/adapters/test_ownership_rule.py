"""One ownership rule for every cache kind, on real files, judged by the CLI run as the cache's owner.

The rule (``adapters.base.ownership_findings``): an item of an entry is ``unsafe`` when someone who is
neither the cache root's owner nor root can change it: world-writable, or owned by another user.
Root-owned files are not flagged (sudo-run workloads leave them; root can rewrite any cache anyway).
A root that root owns is held to it too: a file there owned by ``nobody`` lets nobody rewrite what root loads.

Each kind gets a small cache of real artifacts (Triton kernels compiled on the CPU, the H200 Inductor and
ComputeCache captures, g++ shared objects), handed to ``nobody``; the CLI runs as nobody through ``setpriv``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

import pytest

from jitwarden import adapters
from jitwarden.model import kinds
from jitwarden.model.entries import Judge
from tests.helpers import kernels
from tests.helpers import otherkinds as ok
from tests.helpers.paths import DATA, SRC

NOBODY, OTHER = 65534, 4343
KINDS = kinds.NAMES

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root (to hand files to other users) and setpriv (to act as one)",
)


def _kernel_dir(d: str, cubin: str) -> None:
    os.makedirs(d)
    with open(os.path.join(d, "kernel.cu"), "w") as f:
        f.write("// real kernel source stand-in\n#include <cuda.h>\n")
    shutil.copy(cubin, os.path.join(d, "kernel.cubin"))


@pytest.fixture(scope="module")
def trees(built_cache, tmp_path_factory):
    """{kind: (root, entry id, file in that entry)}: one small cache per kind, built from real artifacts."""
    src, manifest = built_cache
    base = str(tmp_path_factory.mktemp("kinds"))
    rec = next(r for r in manifest if r["arch"] == 90)
    cubin = os.path.join(src, rec["id"], f"{rec['name']}.cubin")
    so = ok.gxx_so(os.path.join(base, "gxx"), "norm")
    out = {}

    tri = os.path.join(base, "triton")
    os.makedirs(tri)
    shutil.copytree(os.path.join(src, rec["id"]), os.path.join(tri, rec["id"]))
    out["triton"] = (tri, rec["id"], f"{rec['id']}/{rec['name']}.cubin")

    with tarfile.open(os.path.join(DATA, "h200_inductor_cache.tgz")) as t:
        t.extractall(os.path.join(base, "ind"), filter="data")
    ind = os.path.join(base, "ind", "ind")
    fx = next(
        f"fxgraph/{s}/{k}"
        for s in sorted(os.listdir(os.path.join(ind, "fxgraph")))
        for k in sorted(os.listdir(os.path.join(ind, "fxgraph", s)))
    )
    out["inductor"] = (ind, fx, f"{fx}/{min(os.listdir(os.path.join(ind, fx)))}")

    vl = os.path.join(base, "vllm")
    os.makedirs(os.path.join(vl, "torch_compile_cache"))  # what marks a vLLM root
    _kernel_dir(os.path.join(vl, "deep_gemm", "cache", "kernel.add.0123456789abcdef"), cubin)
    out["vllm"] = (
        vl,
        "deep_gemm/cache/kernel.add.0123456789abcdef",
        "deep_gemm/cache/kernel.add.0123456789abcdef/kernel.cubin",
    )

    cc = os.path.join(base, "ComputeCache")
    shutil.copytree(os.path.join(DATA, "cuda_compute_h200", "ComputeCache"), cc)
    name = next(
        f"{a}/{b}/{c}"
        for a in sorted(os.listdir(cc))
        if os.path.isdir(os.path.join(cc, a))
        for b in sorted(os.listdir(os.path.join(cc, a)))
        for c in sorted(os.listdir(os.path.join(cc, a, b)))
    )
    out["cuda-compute"] = (cc, name, name)

    fi = os.path.join(base, "flashinfer")
    op = os.path.join(fi, "0.7.4", "90a", "cached_ops", "norm")
    os.makedirs(op)
    shutil.copy(so["so"], os.path.join(op, "norm.so"))
    with open(os.path.join(op, "build.ninja"), "w") as f:
        f.write("cuda_cflags = -gencode=arch=compute_90a,code=sm_90a\ndefault norm.so\n")
    out["flashinfer"] = (fi, "0.7.4/90a/cached_ops/norm", "0.7.4/90a/cached_ops/norm/norm.so")

    dg = os.path.join(base, "deepgemm")
    _kernel_dir(os.path.join(dg, "cache", "kernel.add.0123456789abcdef"), cubin)
    out["deepgemm"] = (
        dg,
        "cache/kernel.add.0123456789abcdef",
        "cache/kernel.add.0123456789abcdef/kernel.cubin",
    )

    te = os.path.join(base, "torch_extensions")
    bd = os.path.join(te, f"py{sys.version_info[0]}{sys.version_info[1]}_cpu", "norm")
    os.makedirs(bd)
    shutil.copy(so["so"], os.path.join(bd, "norm.so"))
    shutil.copy(so["o"], os.path.join(bd, "norm.o"))
    out["torch-ext"] = (
        te,
        os.path.relpath(bd, te),
        os.path.relpath(os.path.join(bd, "norm.so"), te),
    )
    for kind, tar, name in (
        (
            "jax",
            "jax_cache",
            "jit_f_add-1cf5a0029ee6ef98074c80757aa1e8d1b56240a338b8fb62c93c9e3286e738a8-cache",
        ),
        ("cupy", "cupy_cache", "1f073b36c7dc0c08f88e0dfc36bd6c0501f42343.cubin"),
    ):
        with tarfile.open(os.path.join(DATA, "real", "jax_cupy", f"{tar}.tar.xz")) as t:
            t.extractall(base, filter="data")
        out[kind] = (os.path.join(base, tar), name, name)
    with tarfile.open(os.path.join(DATA, "real", "jax_cupy", "numba_cache.tar.xz")) as t:
        t.extractall(base, filter="data")
    nbc = "numba_src_a0b4d7817057cd1fd30682c0564032fc52b99b16/jwkern.add-3.py312.1.nbc"
    out["numba"] = (os.path.join(base, "numba_cache"), nbc, nbc)
    assert sorted(out) == sorted(KINDS)
    return out


@pytest.fixture
def owned_by(trees):
    """``owned_by(kind, uid) -> (root, entry id, file)``: a copy of the kind's cache, every item given to ``uid``,
    under a directory ``nobody`` can reach (root reads everything; nobody does not)."""
    made = []

    def make(kind: str, uid: int):
        src, entry, victim = trees[kind]
        base = tempfile.mkdtemp(prefix="jw-owner-")
        made.append(base)
        os.chmod(base, 0o755)
        root = os.path.join(base, "cache")
        kernels.copy_cache(src, root)  # Triton's group files follow the copy; other kinds have none
        for d, dirs, files in os.walk(root):
            for n in dirs + files:
                os.lchown(os.path.join(d, n), uid, uid)
        os.lchown(root, uid, uid)
        return root, entry, victim

    yield make
    for b in made:
        shutil.rmtree(b)


def verify_as_nobody(kind: str, root: str) -> dict:
    home = tempfile.mkdtemp(prefix="jw-owner-home-")
    try:
        os.chown(home, NOBODY, NOBODY)
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": home,
            "PYTHONPATH": SRC,
            "XDG_CACHE_HOME": os.path.join(home, ".cache"),
        }
        p = subprocess.run(
            [
                "setpriv",
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                sys.executable,
                "-m",
                "jitwarden",
                "verify",
                "--format",
                "json",
                "--kind",
                kind,
                "--target",
                "90",
                root,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
            cwd="/",
        )
    finally:
        shutil.rmtree(home)
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    return json.loads(p.stdout)


def unsafe(doc, entry: str) -> list[str]:
    (e,) = [e for e in doc["entries"] if e["id"] == entry]
    return [f["message"] for f in e["findings"] if f["code"] == "unsafe"]


@needs_root
@pytest.mark.parametrize("kind", KINDS)
def test_a_root_owned_file_in_a_users_cache_is_no_alarm_another_users_is(kind, owned_by):
    root, entry, victim = owned_by(kind, NOBODY)
    os.lchown(os.path.join(root, victim), 0, 0)  # what a sudo-run workload leaves behind
    doc = verify_as_nobody(kind, root)
    assert doc["caches"][0]["findings"] == [] and unsafe(doc, entry) == []
    os.lchown(
        os.path.join(root, victim), OTHER, OTHER
    )  # a user who can now rewrite what nobody loads
    doc = verify_as_nobody(kind, root)
    name = os.path.relpath(victim, entry) if victim != entry else os.path.basename(victim)
    assert unsafe(doc, entry) == [f"{name} is owned by uid {OTHER}, not by you (uid {NOBODY})"]
    assert doc["summary"]["errors"] == 1


@needs_root
@pytest.mark.parametrize(
    "kind", [k for k in KINDS if k not in ("cuda-compute", "jax", "cupy", "numba")]
)  # single-file entries
def test_an_entry_directory_owned_by_another_user_is_unsafe_by_root_not(kind, owned_by):
    root, entry, _victim = owned_by(kind, NOBODY)
    os.lchown(os.path.join(root, entry), 0, 0)
    assert unsafe(verify_as_nobody(kind, root), entry) == []
    os.lchown(os.path.join(root, entry), OTHER, OTHER)
    (msg,) = unsafe(verify_as_nobody(kind, root), entry)
    assert msg.endswith(f"directory is owned by uid {OTHER}, not by you (uid {NOBODY})")


@needs_root
@pytest.mark.parametrize("kind", KINDS)
def test_roots_own_cache_is_held_to_the_rule_too(kind, owned_by):
    # A file nobody owns in root's cache: nobody can rewrite what root loads.
    root, entry, victim = owned_by(kind, 0)
    a = adapters.get(kind)
    j = Judge(target_arch=90, host_machine="x86_64")
    assert [f.code for f in a.inspect_entry(root, entry, j, 0).findings if f.code == "unsafe"] == []
    os.lchown(os.path.join(root, victim), NOBODY, NOBODY)
    assert [
        f.message for f in a.inspect_entry(root, entry, j, 0).findings if f.code == "unsafe"
    ] == [
        f"{os.path.relpath(victim, entry) if victim != entry else os.path.basename(victim)} is owned by uid {NOBODY}, "
        "not by you (uid 0)"
    ]


@needs_root
@pytest.mark.parametrize("kind", KINDS)
def test_a_world_writable_file_is_unsafe_whoever_owns_it(kind, owned_by):
    root, entry, victim = owned_by(kind, 0)
    os.chmod(os.path.join(root, victim), 0o666)
    (msg,) = [
        f.message
        for f in adapters.get(kind).inspect_entry(root, entry, Judge(target_arch=90), 0).findings
        if f.code == "unsafe"
    ]
    assert msg.endswith("is world-writable (mode 666)")


def test_every_adapter_is_a_cache_adapter():
    for kind in KINDS:
        a = adapters.get(kind)
        assert isinstance(a, adapters.CacheAdapter) and kind == a.KIND
