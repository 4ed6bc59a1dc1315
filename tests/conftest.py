"""Shared fixtures: one real Triton cache, compiled on the CPU once per test session."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import kernels  # noqa: E402


@pytest.fixture(scope="session")
def built_cache(tmp_path_factory):
    """(cache dir, manifest) of every kernel variant for archs 80, 90, 120, 121."""
    root = tmp_path_factory.mktemp("built") / "cache"
    manifest = kernels.build_cache(str(root))
    return str(root), manifest


@pytest.fixture
def cache(built_cache, tmp_path):
    """A private, intact copy of the session cache: (dir, {label: record})."""
    src, manifest = built_cache
    dst = kernels.copy_cache(src, str(tmp_path / "cache"))
    records = {}
    for job in manifest:
        rec = dict(job)
        rec["path"] = os.path.join(dst, job["id"])
        records[job["label"]] = rec
    return dst, records


@pytest.fixture
def isolated_env(tmp_path, monkeypatch):
    """Point every cache and memo location into tmp_path so tests never touch the real home."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRITON_HOME", raising=False)
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    monkeypatch.delenv("JITWARDEN_HOME", raising=False)
    return home
