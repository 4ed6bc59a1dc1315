"""Root discovery follows Triton's and TorchInductor's own rules, and status/ls find them."""

from __future__ import annotations

import json
import os

from jitwarden.adapters import triton as tri
from jitwarden.adapters import triton_judge
from jitwarden.cli.main import main
from jitwarden.env import locations
from tests.helpers import kernels


def test_triton_precedence():
    assert locations.triton_cache_dir({"TRITON_CACHE_DIR": "/a", "TRITON_HOME": "/h"}) == (
        "/a",
        "TRITON_CACHE_DIR",
    )
    assert locations.triton_cache_dir({"TRITON_HOME": "/h"}) == ("/h/.triton/cache", "TRITON_HOME")
    path, source = locations.triton_cache_dir({})
    assert path == os.path.join(os.path.expanduser("~"), ".triton", "cache") and source == "default"


def test_inductor_dir_defaults_to_tmp_per_user():
    assert locations.inductor_cache_dir({"TORCHINDUCTOR_CACHE_DIR": "/x"}) == "/x"
    assert os.path.basename(locations.inductor_cache_dir({})).startswith("torchinductor_")


def test_discovers_default_inductor_and_vllm_roots(
    isolated_env, tmp_path, monkeypatch, built_cache
):
    src, manifest = built_cache
    triton_root = isolated_env / ".triton" / "cache"
    kernels.copy_cache(src, str(triton_root))
    ind = tmp_path / "inductor" / "triton" / "0"
    kernels.copy_cache(src, str(ind))
    vllm = tmp_path / "vllm"
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(vllm))
    vroot = vllm / "torch_compile_cache" / "abc123" / "rank_0_0" / "inductor_cache" / "triton" / "0"
    kernels.copy_cache(src, str(vroot))
    flat = (
        vllm / "torch_compile_cache" / "def456" / "rank_0_0" / "triton_cache"
    )  # vLLM's own TRITON_CACHE_DIR
    kernels.copy_cache(src, str(flat))
    roots = tri.discover_roots(os.environ)
    assert [(r.path, r.source) for r in roots] == [
        (str(triton_root), "default"),
        (str(ind), "inductor"),
        (str(vroot), "vllm"),
        (str(flat), "vllm"),
    ]


def test_inductor_dir_without_a_user_name_is_torchs_uid_fallback(monkeypatch):
    import pwd

    from jitwarden.env import locations

    def no_user(uid):
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", no_user)
    assert (
        locations.inductor_cache_dir({"TMPDIR": "/tmp"}) == f"/tmp/torchinductor_uid_{os.getuid()}"
    )


def test_triton_cache_dir_wins_and_default_is_still_listed(
    isolated_env, tmp_path, monkeypatch, built_cache, capsys
):
    src, manifest = built_cache
    custom = tmp_path / "custom"
    kernels.copy_cache(src, str(custom))
    kernels.copy_cache(src, str(isolated_env / ".triton" / "cache"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(custom))
    assert main(["status", "--format", "json", "--target", "90"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(c["root"], c["source"], c["entries"]) for c in doc["caches"]] == [
        (str(custom), "TRITON_CACHE_DIR", len(manifest)),
        (str(isolated_env / ".triton" / "cache"), "default", len(manifest)),
    ]
    assert doc["fingerprint"]["digest"] == doc["fingerprint_digest"]


def test_status_table_and_ls_table(isolated_env, built_cache, capsys):
    src, manifest = built_cache
    kernels.copy_cache(src, str(isolated_env / ".triton" / "cache"))
    assert main(["status", "--target", "90"]) == 0
    text = capsys.readouterr().out
    assert "~/.triton/cache" in text and str(len(manifest)) in text
    assert main(["ls", "--target", "90"]) == 0
    text = capsys.readouterr().out
    assert "matmul_kernel" in text and "foreign-arch" in text and "sm_121" in text


def test_no_roots_and_no_gpu_are_said_plainly(isolated_env, capsys):
    assert main(["status"]) == 0
    text = capsys.readouterr().out
    assert "no kernel cache roots found" in text
    assert main(["verify", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    if doc["target"]["source"] == "none":
        assert doc["target"]["arch"] is None


def test_partitions_and_private_roots_are_discovered(
    isolated_env, tmp_path, monkeypatch, built_cache, capsys
):
    src, manifest = built_cache
    digest = "0123456789abcdef"
    tri_part = isolated_env / ".triton" / "cache" / "jitwarden-v1" / digest
    kernels.copy_cache(src, str(tri_part))
    ind_part = tmp_path / "inductor" / "jitwarden-v1" / digest / "triton" / "0"
    kernels.copy_cache(src, str(ind_part))
    vllm = isolated_env / ".cache" / "vllm"
    v_part = (
        vllm
        / "jitwarden-v1"
        / digest
        / "torch_compile_cache"
        / "h"
        / "rank_0_0"
        / "inductor_cache"
        / "triton"
        / "0"
    )
    kernels.copy_cache(src, str(v_part))
    monkeypatch.setenv("JITWARDEN_HOME", str(tmp_path / "jwhome"))
    private = tmp_path / "jwhome" / "roots" / "triton" / "jitwarden-v1" / digest
    kernels.copy_cache(src, str(private))
    # As under activation: TRITON_CACHE_DIR names the partition itself.
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tri_part))
    found = {(r.path, r.source, r.partition) for r in tri.discover_roots(os.environ)}
    assert (str(isolated_env / ".triton" / "cache"), "TRITON_CACHE_DIR", None) in found
    assert (str(ind_part), "inductor", digest) in found
    assert (str(v_part), "vllm", digest) in found
    assert (str(tmp_path / "jwhome" / "roots" / "triton"), "private", None) in found
    assert main(["ls", "--ids", "--long"]) == 0
    listed = capsys.readouterr().out.split()
    for base in (tri_part, ind_part, v_part, private):
        assert os.path.join(str(base), manifest[0]["id"]) in listed


def test_status_lists_every_partition(isolated_env, tmp_path, monkeypatch, built_cache, capsys):
    src, manifest = built_cache
    for digest in ("aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"):
        kernels.copy_cache(src, str(isolated_env / ".triton" / "cache" / "jitwarden-v1" / digest))
    assert main(["status", "--format", "json", "--target", "90"]) == 0
    doc = json.loads(capsys.readouterr().out)
    parts = sorted((c["partition"], c["entries"]) for c in doc["caches"] if c["partition"])
    assert parts == [("aaaaaaaaaaaaaaaa", len(manifest)), ("bbbbbbbbbbbbbbbb", len(manifest))]


def test_status_marks_this_environments_partition(isolated_env, built_cache, capsys):
    from jitwarden.env import fingerprint

    src, manifest = built_cache
    mine = fingerprint.of_host().digest
    for digest in (mine, "bbbbbbbbbbbbbbbb"):
        kernels.copy_cache(src, str(isolated_env / ".triton" / "cache" / "jitwarden-v1" / digest))
    assert main(["status", "--format", "json", "--target", "90"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {c["partition"]: c["current"] for c in doc["caches"] if c["partition"]} == {
        mine: True,
        "bbbbbbbbbbbbbbbb": False,
    }
    assert main(["status", "--target", "90"]) == 0
    text = capsys.readouterr().out
    assert f"jitwarden-v1/{mine} *" in text and "bbbbbbbbbbbbbbbb *" not in text


def test_status_counts_quarantined_entries(isolated_env, built_cache, capsys):
    from jitwarden.store import quarantine

    src, manifest = built_cache
    root = isolated_env / ".triton" / "cache"
    kernels.copy_cache(src, str(root))
    quarantine.move(str(root / manifest[0]["id"]), "corrupt", ["test"], by="test")
    assert main(["status", "--format", "json", "--target", "90"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (cache,) = doc["caches"]
    assert cache["quarantined"] == 1 and cache["entries"] == len(manifest) - 1
    assert main(["status", "--target", "90"]) == 0
    assert "QUAR" in capsys.readouterr().out


def test_a_root_named_on_the_command_line_is_listed_once_for_every_kind(tmp_path, monkeypatch):
    """``verify PATH`` asks every kind whether PATH is its root; a Triton root of 10,000s of entry dirs is listed
    once for all of them (each listing of such a root costs ~8 ms), and the answer is still Triton's."""
    from jitwarden.ops.roots import roots_from_paths

    root = tmp_path / "cache"
    for i in range(300):
        (root / triton_judge.entry_id_for_hash(f"{i:064x}")).mkdir(parents=True)
    listed = []
    for name in ("scandir", "listdir"):  # every way a directory is listed

        def counted(p=".", real=getattr(os, name)):  # noqa: B008 (binds this loop's function)
            if isinstance(p, (str, os.PathLike)):
                listed.append(os.fspath(p))
            return real(p)

        monkeypatch.setattr(os, name, counted)
    ((r, only),) = roots_from_paths([str(root)])
    assert (r.kind, r.path, only) == ("triton", str(root), None)
    assert listed.count(str(root)) == 1, listed


def test_telling_a_root_of_files_stats_none_of_them(tmp_path, monkeypatch):
    """A root of 10,000s of files (JAX's, CuPy's) is told by every kind from its one listing: the types come
    with the listing, so no kind stats the root's items one by one (10,000 stats cost more than the listing)."""
    from jitwarden import adapters

    root = tmp_path / "jax"
    root.mkdir()
    for i in range(300):
        (root / f"mod-{i:064x}-cache").write_bytes(b"")
    stats = []
    for name in ("stat", "lstat"):

        def counted(p, *a, real=getattr(os, name), **k):  # noqa: B008 (binds this loop's function)
            if os.path.basename(os.fspath(p)).startswith("mod-"):  # one of the root's items
                stats.append(os.fspath(p))
            return real(p, *a, **k)

        monkeypatch.setattr(os, name, counted)
    assert adapters.kind_of_path(str(root)) == "jax"
    assert stats == []
