"""Fixtures for the corpus of real H200 caches: each capture unpacked once per session, copied per test."""

from __future__ import annotations

import shutil

import pytest

from tests.real import corpus


@pytest.fixture(scope="session")
def unpacked(tmp_path_factory):
    """{name: relocated tree} of every capture, unpacked once (read-only use)."""
    base = tmp_path_factory.mktemp("real")
    return {n: corpus.unpack(n, str(base)) for n in corpus.names()}


@pytest.fixture
def fresh_copy(unpacked, tmp_path):
    """A private copy of one capture, relocated to its new place: ``fresh_copy(name) -> tree``."""

    def make(name: str) -> str:
        dst = str(tmp_path / name)
        shutil.copytree(unpacked[name], dst, symlinks=True)
        corpus.relocate(dst, unpacked[name])
        return dst

    return make


@pytest.fixture
def capture_driver(tmp_path, monkeypatch):
    """The capture machine's driver evidence (JIT compiler built Apr 29 2026), through JITWARDEN_LIBCUDA."""
    from jitwarden.adapters import cuda_compute as cc

    lib = corpus.driver_stand_in(str(tmp_path / "driver"))
    monkeypatch.setenv("JITWARDEN_LIBCUDA", lib)
    cc.reset_driver_evidence()
    yield lib
    cc.reset_driver_evidence()
