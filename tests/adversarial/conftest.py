"""Fixtures of the adversarial suite: a small real cache, an "outside" tree whose every byte is
checked after each test, a private environment, and the suite's tally printed at the end of the run."""

from __future__ import annotations

import os

import pytest

from tests.adversarial.adv import TALLY, tree_hash
from tests.helpers import kernels
from tests.helpers.maint import SRC


@pytest.fixture(scope="session")
def small_cache(tmp_path_factory):
    """A real Triton cache of four sm_90 kernels, compiled once for the suite."""
    root = str(tmp_path_factory.mktemp("adv") / "cache")
    jobs = kernels.jobs_for(archs=(90,), variants=kernels.VARIANTS[:4])
    return root, kernels.build_cache(root, jobs)


@pytest.fixture
def acache(small_cache, tmp_path):
    """A private copy of the small cache: (root, {label: job with its path})."""
    src, built = small_cache
    dst = kernels.copy_cache(src, str(tmp_path / "cache"))
    return dst, {j["label"]: dict(j, path=os.path.join(dst, j["id"])) for j in built}


@pytest.fixture
def outside(tmp_path):
    """A directory outside every cache root, full of files and subdirectories; checked byte for byte at the end."""
    top = tmp_path / "outside"
    for sub in ("", "a", "a/b", "c"):
        (top / sub).mkdir(parents=True, exist_ok=True)
        for i in range(2):
            (top / sub / f"precious{i}.txt").write_bytes(f"outside {sub} {i}\n".encode() * 10)
    before = tree_hash(str(top))
    yield str(top)
    if tree_hash(str(top)) != before:
        TALLY["data lost"] += 1
        pytest.fail("data outside the cache root changed")


@pytest.fixture(autouse=True)
def _count_case():
    TALLY["cases"] += 1
    yield


@pytest.fixture
def env(tmp_path):
    """A private environment: own HOME, no cache variables from the caller."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    e = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "VLLM_", "JITWARDEN_", "CUDA_CACHE"))
    }
    e.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
        TRITON_CACHE_DIR=str(tmp_path / "triton-default"),
    )
    src = os.environ.get(
        "JW_ADV_SRC", SRC
    )  # another checkout's src/, to run the suite against it (before/after)
    e["PYTHONPATH"] = src + os.pathsep + e.get("PYTHONPATH", "")
    return e


def pytest_terminal_summary(terminalreporter):
    if TALLY["cases"]:
        terminalreporter.write_line(
            "adversarial suite: " + ", ".join(f"{k} {v}" for k, v in TALLY.items())
        )
    from tests.adversarial import matrix

    if matrix.RESULTS:
        terminalreporter.write_line(matrix.summary())
