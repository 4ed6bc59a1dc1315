"""Damage nobody planned for: random files of real caches of every kind broken at random, the scanner must hold.

For each real tree (Triton kernels compiled here, a TorchInductor cache and a driver ComputeCache
captured on the H200, a TorchInductor cache made by the CPU torch), files are picked at random
(a fixed seed: a failure reproduces) and truncated, emptied, overwritten with noise, bit-flipped,
replaced by a directory or by a symlink out of the root. ``jitwarden verify`` must answer every
time: exit 0 or 1 with its JSON, no internal error, and every entry still reported.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tarfile

import pytest

from jitwarden.cli.main import main
from jitwarden.model.layout import is_reserved
from tests.helpers import inductor_real, kernels
from tests.helpers.maint import snapshot
from tests.helpers.paths import DATA

DAMAGES = ("truncate", "empty", "noise", "flip", "dir", "symlink", "append")


def _damage(path: str, how: str, rng: random.Random, outside: str) -> None:
    size = os.path.getsize(path)
    if how == "truncate":
        os.truncate(path, rng.randrange(0, max(size, 1)))
    elif how == "empty":
        os.truncate(path, 0)
    elif how == "noise":
        with open(path, "wb") as f:
            f.write(rng.randbytes(max(size, 16)))
    elif how == "flip":
        with open(path, "r+b") as f:
            for _ in range(8):
                if size:
                    pos = rng.randrange(size)
                    f.seek(pos)
                    b = f.read(1)
                    f.seek(pos)
                    f.write(bytes([b[0] ^ (1 << rng.randrange(8))]))
    elif how == "dir":
        os.unlink(path)
        os.mkdir(path)
        open(os.path.join(path, "x"), "w").close()
    elif how == "symlink":
        os.unlink(path)
        os.symlink(outside, path)
    elif how == "append":
        with open(path, "ab") as f:
            f.write(rng.randbytes(64))


def _files(root: str) -> list[str]:
    return sorted(
        os.path.join(d, n)
        for d, _s, fs in os.walk(root)
        for n in fs
        if not os.path.islink(os.path.join(d, n))
    )


def _verify(capsys, root: str) -> tuple[int, dict]:
    rc = main(["verify", "--format", "json", "--target", "90", "--all", root])
    cap = capsys.readouterr()
    assert "internal error" not in cap.err and "Traceback" not in cap.err, cap.err
    doc = json.loads(cap.out)
    assert rc == (1 if doc["summary"]["errors"] else 0), (
        cap.err
    )  # exit 1 exactly when an error-level finding is shown
    return rc, doc


def _trees(tmp_path, built_cache, inductor_cpu):
    src, _manifest = built_cache
    out = {"triton": kernels.copy_cache(src, str(tmp_path / "triton"))}
    with tarfile.open(os.path.join(DATA, "h200_inductor_cache.tgz")) as t:
        t.extractall(
            tmp_path / "h200", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {})
        )
    out["h200-inductor"] = str(tmp_path / "h200" / "ind")
    out["h200-inductor-triton"] = str(tmp_path / "h200" / "ind" / "triton" / "0")
    out["cuda-compute"] = shutil.copytree(
        os.path.join(DATA, "cuda_compute_h200", "ComputeCache"), tmp_path / "cc"
    )
    out["cpu-inductor"] = inductor_real.copy(inductor_cpu["inductor"], str(tmp_path / "cpu-ind"))
    return {k: str(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def inductor_cpu(tmp_path_factory):
    return inductor_real.shared(tmp_path_factory)


@pytest.mark.parametrize("seed", range(int(os.environ.get("JW_FUZZ_SEEDS", "3"))))
def test_random_damage_never_breaks_the_scanner(tmp_path, capsys, built_cache, inductor_cpu, seed):
    rng = random.Random(seed)
    outside = tmp_path / "outside.txt"
    outside.write_text("not a cache file\n")
    for label, root in _trees(tmp_path, built_cache, inductor_cpu).items():
        _rc, before = _verify(capsys, root)
        n_before = len(before["entries"])
        victims = rng.sample(
            _files(root), min(int(os.environ.get("JW_FUZZ_FILES", "6")), len(_files(root)))
        )
        for path in victims:
            _damage(path, rng.choice(DAMAGES), rng, str(outside))
        _rc, after = _verify(capsys, root)
        assert len(after["entries"]) >= n_before, (label, n_before, len(after["entries"]))
        # clean takes every error entry aside, restore brings each back byte for byte
        damaged = _cache_only(snapshot(root))
        assert main(["clean", "--target", "90", "-y", "--format", "json", root]) == 0, label
        capsys.readouterr()
        rc, cleaned = _verify(capsys, root)
        assert rc == 0 and cleaned["summary"]["errors"] == 0, (label, cleaned["summary"])
        assert _restore_each(root, capsys), label
        capsys.readouterr()
        assert _cache_only(snapshot(root)) == damaged, label
        assert outside.read_text() == "not a cache file\n"


def _cache_only(snap: dict) -> dict:
    """The cache's own files: jitwarden's lock, quarantine and trash are not part of it."""
    return {k: v for k, v in snap.items() if not any(is_reserved(part) for part in k.split(os.sep))}


def _restore_each(root: str, capsys) -> bool:
    """``quarantine restore`` of every quarantined entry of ``root``, one id at a time."""
    main(["quarantine", "ls", "--format", "json", "--root", root])
    ids = [r["id"] for r in json.loads(capsys.readouterr().out)["quarantined"]]
    return not ids or main(["quarantine", "restore", *ids, "-y", "--root", root]) == 0
