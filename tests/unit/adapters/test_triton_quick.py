"""The quick path of a Triton entry (``triton_quick.quick_entry``, issue 43): an entry as Triton writes it is judged
without the survey's and the reader's records between the reads and the rules. What a user relies on: it
gives the very entry the general path gives (``judge_facts`` of ``read_entry``: every finding, in order, and
every fact), on real kernels of every arch, judged against any target and Triton; and it takes no entry it
was not written for: each damage of each file, a link, a FIFO, another's file, a temporary, a launcher, a
seal (good or tampered) gives the general path's entry, so no finding is lost."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from jitwarden.adapters import triton, triton_judge, triton_quick, triton_read
from jitwarden.model.entries import Judge
from jitwarden.store import seal

JUDGES = (
    Judge(target_arch=90, host_machine="x86_64"),
    Judge(target_arch=80, host_machine="x86_64", triton_version="0.0.1"),
    Judge(host_machine="x86_64", check_seals=False),
)


def _general(root: str, name: str, j: Judge, uid=None):
    return triton_judge.judge_facts(
        root, triton_read.read_entry(root, name, check_seal=j.check_seals), j, uid
    )


def _kernels(cache) -> list[str]:
    root, records = cache
    return [r["path"] for r in records.values() if os.path.isdir(r["path"])]


def test_real_kernels_take_the_quick_path_and_get_the_general_paths_entry(cache):
    uid = os.geteuid()
    paths = _kernels(cache)
    assert paths
    for path in paths:
        root, name = os.path.split(path)
        for j in JUDGES:
            quick = triton_quick.quick_entry(root, name, j, uid)
            assert quick is not None, name
            assert quick == _general(root, name, j, uid)
    # Judged against another target and Triton, the same rules find the same things.
    root, name = os.path.split(paths[0])
    codes = {f.code for f in triton_quick.quick_entry(root, name, JUDGES[1], uid).findings}
    assert "stale" in codes


def _one(cache, tmp_path, tag: str) -> tuple[str, str, dict[str, str]]:
    """A fresh copy of one sm_90 kernel entry in its own root: (root, name, its files by suffix)."""
    _root, records = cache
    src = next(r["path"] for r in records.values() if r.get("arch") == 90)
    root = tmp_path / tag
    root.mkdir()
    dst = os.path.join(root, os.path.basename(src))
    shutil.copytree(src, dst, symlinks=True)
    names = sorted(os.listdir(dst))
    by = {
        "group": next(n for n in names if n.startswith("__grp__")),
        "cubin": next(n for n in names if n.endswith(".cubin")),
        "ptx": next(n for n in names if n.endswith(".ptx")),
        "ttir": next(n for n in names if n.endswith(".ttir")),
    }
    by["metadata"] = by["group"][len("__grp__") :]
    gpath = os.path.join(dst, by["group"])
    with open(gpath) as f:
        doc = triton.relocated_group(json.load(f), dst, set(names))
    with open(gpath, "w") as f:  # its children at home, as Triton wrote them there: a clean entry
        json.dump(doc, f)
    return str(root), os.path.basename(src), by


def _noise(p: str) -> None:
    with open(p, "r+b") as f:
        f.seek(os.path.getsize(p) // 2)
        f.write(b"\x00garbage\xff" * 4)


def _cut(p: str) -> None:
    os.truncate(p, os.path.getsize(p) // 3)


def _to_fifo(p: str) -> None:
    os.unlink(p)
    os.mkfifo(p)


def _to_link(p: str) -> None:
    os.unlink(p)
    os.symlink("/etc/hostname", p)


def _to_dir(p: str) -> None:
    os.unlink(p)
    os.mkdir(p)


DAMAGES = {
    "noise": _noise,
    "cut": _cut,
    "empty": lambda p: os.truncate(p, 0),
    "gone": os.unlink,
    "fifo": _to_fifo,
    "link": _to_link,
    "dir": _to_dir,
    "world-writable": lambda p: os.chmod(p, 0o666),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("part", ["group", "metadata", "cubin", "ptx", "ttir"])
def test_each_damage_of_each_file_gets_the_general_paths_entry(cache, tmp_path, part, damage):
    root, name, by = _one(cache, tmp_path, "r")
    uid = os.geteuid()
    # The intact entry is taken by the quick path.
    assert triton_quick.quick_entry(root, name, JUDGES[0], uid) is not None
    DAMAGES[damage](os.path.join(root, name, by[part]))
    for j in JUDGES:
        got = triton.inspect_entry(root, name, j, uid)
        assert got == _general(root, name, j, uid)


@pytest.mark.parametrize(
    "change",
    [
        "tmp-file",
        "launcher",
        "second-group",
        "subdir",
        "seal",
        "tampered-seal",
        "another-owner",
        "world-writable-dir",
    ],
)
def test_what_the_quick_path_was_not_written_for_goes_the_general_way(cache, tmp_path, change):
    root, name, by = _one(cache, tmp_path, "r")
    entry = os.path.join(root, name)
    uid = os.geteuid()
    before = triton_quick.quick_entry(root, name, JUDGES[0], uid)
    assert before is not None and not before.findings  # a clean entry, taken by the quick path
    if change == "tmp-file":
        shutil.copy(os.path.join(entry, by["cubin"]), os.path.join(entry, "x.cubin.tmp.pid_12_ab"))
        os.utime(os.path.join(entry, "x.cubin.tmp.pid_12_ab"), (1, 1))
    elif change == "launcher":
        shutil.copy(os.path.join(entry, by["cubin"]), os.path.join(entry, "launcher.so"))
    elif change == "second-group":
        shutil.copy(os.path.join(entry, by["group"]), os.path.join(entry, "__grp__other.json"))
    elif change == "subdir":
        os.mkdir(os.path.join(entry, "tmp.pid_1_x"))
    elif change in ("seal", "tampered-seal"):
        seal.write(entry, seal.compute(entry, sorted(os.listdir(entry))))
        if change == "tampered-seal":
            _noise(os.path.join(entry, by["ttir"]))
    elif change == "another-owner":  # a file another user can rewrite (as root; CI runs as root)
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(os.path.join(entry, by["ttir"]), 12345, 12345)
    elif change == "world-writable-dir":
        os.chmod(entry, 0o777)
    quick = triton_quick.quick_entry(root, name, JUDGES[0], uid)
    for j in JUDGES:
        assert triton.inspect_entry(root, name, j, uid) == _general(root, name, j, uid)
    if change == "seal":  # a sealed entry as Triton wrote it takes the quick path, and is sealed
        assert quick is not None and quick.sealed and not quick.findings
    elif change == "tampered-seal":
        assert quick is not None and {f.code for f in quick.findings} >= {"corrupt"}
    else:
        assert quick is None
