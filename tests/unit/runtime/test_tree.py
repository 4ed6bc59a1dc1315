"""What a Triton cache tree holds (runtime/tree.py), listed on a real cache: entry dirs without links, our own
names or writes in flight, and the unsealed kernels a start-up proves before anything loads them."""

from __future__ import annotations

import os

from jitwarden.model.layout import PARTITIONS_DIR, QUARANTINE_DIR, SEAL_FILE
from jitwarden.runtime import tree


def test_entry_names_are_the_real_entries_and_nothing_else(cache, tmp_path):
    root, records = cache
    ids = sorted(r["id"] for r in records.values())
    assert sorted(tree.entry_names(root)) == ids
    os.mkdir(os.path.join(root, "tmp.pid_42_abc"))  # Triton's write in flight
    os.mkdir(os.path.join(root, QUARANTINE_DIR))
    os.mkdir(os.path.join(root, PARTITIONS_DIR))
    os.mkdir(os.path.join(root, ".jitwarden-stage"))
    os.symlink(tmp_path, os.path.join(root, "ELSEWHERE"))  # a link is never an entry of this tree
    with open(os.path.join(root, "stray"), "w") as f:
        f.write("x")
    assert sorted(tree.entry_names(root)) == ids
    assert tree.entry_names(str(tmp_path / "missing")) == []


def test_files_are_an_entrys_own_regular_files(cache):
    _root, records = cache
    path = next(iter(records.values()))["path"]
    own = sorted(n for n in os.listdir(path))
    assert tree.files(path) == own and any(n.endswith(".cubin") for n in own)
    with open(os.path.join(path, SEAL_FILE), "w") as f:
        f.write("{}")
    os.symlink("/etc/passwd", os.path.join(path, "linked.json"))
    os.mkdir(os.path.join(path, "sub"))
    assert tree.files(path) == own


def test_unsealed_kernels_are_entries_with_a_cubin_and_no_seal(cache, tmp_path):
    root, records = cache
    paths = sorted(r["path"] for r in records.values())
    assert sorted(tree.unsealed_kernels([root])) == paths
    sealed, cubinless = paths[0], paths[1]
    with open(os.path.join(sealed, SEAL_FILE), "w") as f:
        f.write("{}")
    for n in os.listdir(cubinless):
        if n.endswith(".cubin"):
            os.unlink(os.path.join(cubinless, n))
    assert sorted(tree.unsealed_kernels([root, str(tmp_path / "missing")])) == paths[2:]


def test_tree_roots_of_each_kind_of_partition(tmp_path):
    ind = tmp_path / "inductor"
    for d in ("triton/0", "triton/1"):
        (ind / d).mkdir(parents=True)
    rank = tmp_path / "vllm" / "torch_compile_cache" / "h1" / "rank_0_0"
    (rank / "triton_cache").mkdir(parents=True)
    (rank / "inductor_cache" / "triton" / "0").mkdir(parents=True)
    assert tree.tree_roots("inductor", str(ind)) == [str(ind / "triton/0"), str(ind / "triton/1")]
    assert tree.tree_roots("vllm", str(tmp_path / "vllm")) == [
        str(rank / "triton_cache"),
        str(rank / "inductor_cache" / "triton" / "0"),
    ]
    assert tree.tree_roots("triton", str(tmp_path)) == [
        str(tmp_path)
    ]  # a Triton partition is a tree itself
    assert tree.tree_roots("cupy", str(tmp_path)) == []  # no Triton tree in a CuPy root
