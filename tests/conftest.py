"""Shared fixtures: one real Triton cache, compiled on the CPU once per test session; the sandbox every test
runs in (its own HOME, temp dir and cache locations), and the check that the run left the caller's untouched."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile

import pytest

from jitwarden.store import sealkey
from tests.helpers import inductor_real, kernels, sandbox
from tests.helpers.fleet import Server, jw, node_env, server_binary
from tests.helpers.guarded import ADD, compile_jobs, evil_kernel_dir
from tests.helpers.vllm_root import cubin_of, make_root

pytest_plugins = ("tests.helpers.slow",)  # marks `slow` tests (tests/helpers/slow.py)


# ---- the sandbox: no test touches the real home or a default location (issue 23, item 2) -------------

_REAL: dict = {}


def pytest_configure(config):
    """Before anything runs: where the caller's caches, memo and config live, and a digest of each."""
    env = dict(os.environ)
    _REAL["places"] = sandbox.watched_places(env)
    home = env.get("HOME") or os.path.expanduser("~")
    _REAL["shallow"] = [
        home,
        os.path.join(env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")),
    ]
    _REAL["before"] = sandbox.snapshot(_REAL["places"], _REAL["shallow"])


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when anything in the caller's home or default cache locations changed while it ran (the
    lines are printed by :func:`pytest_terminal_summary`, after pytest's progress line)."""
    if "before" not in _REAL:
        return
    _REAL["changed"] = sandbox.changes(
        _REAL["before"], sandbox.snapshot(_REAL["places"], _REAL["shallow"])
    )
    if _REAL["changed"]:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    """Each file of the caller's home or default cache locations that changed during the run, in a section of
    its own: no test writes there (each has its own dirs), so a file named here was written by this run or by
    another process on this machine while it ran (its path and time say which)."""
    changed = _REAL.get("changed")
    if not changed:
        return
    terminalreporter.section("outside the sandbox", sep="=", red=True)
    terminalreporter.write_line(
        f"the test run failed: {len(changed)} item(s) of the real home or a default cache location changed "
        "while it ran:",
        red=True,
    )
    for line in changed[:20]:
        terminalreporter.write_line(f"  {line}")
    if len(changed) > 20:
        terminalreporter.write_line(f"  ... and {len(changed) - 20} more")


@pytest.fixture(scope="session", autouse=True)
def _session_sandbox():
    """Session fixtures (the shared caches, the Inductor build) run with every location inside the sandbox.

    The sandbox lies in the caller's temp dir, traversable by others (mode 755): tests that act as ``nobody``
    need to reach what they hand to it; pytest's own base dir is private (700)."""
    saved = dict(os.environ)
    top = tempfile.mkdtemp(prefix="jw-sandbox-")
    os.chmod(top, 0o755)
    _REAL["sandbox"] = top
    os.environ.clear()
    os.environ.update(sandbox.sandbox_env(os.path.join(top, "session"), saved))
    _REAL["tmp"] = os.environ["TMPDIR"]
    tempfile.tempdir = None  # recomputed from the sandboxed TMPDIR
    _REAL["seal_key"] = _seal_key_file(os.environ)
    sealkey.own_key()  # the session's seal key: every test's HOME gets a copy (_sandbox)
    yield
    os.environ.clear()
    os.environ.update(saved)
    tempfile.tempdir = None
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(autouse=True)
def _sandbox(monkeypatch):
    """Each test: its own HOME and XDG dirs (the session's sandboxed temp dir); every cache, memo and key
    location unset (so defaults fall inside them); no setting of jitwarden or of the tools it guards leaks in."""
    base = tempfile.mkdtemp(dir=_REAL["sandbox"])
    os.chmod(base, 0o755)
    # The temp dir is the session's: module fixtures compile kernels from files in it, and a kernel's line
    # info names its source path, so a temp dir per test would change the cubins they compare.
    env = sandbox.sandbox_env(base, tmpdir=_REAL["tmp"])
    for k in [k for k in os.environ if k not in env]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        if os.environ.get(k) != v:
            monkeypatch.setenv(k, v)
    # One seal key for the session, as one user has one: seals made by session and module fixtures (built in
    # the session's HOME) are this test's user's own. Tests of other users' keys give those their own HOME.
    key = _seal_key_file(env)
    os.makedirs(os.path.dirname(key), mode=0o700)
    shutil.copy2(_REAL["seal_key"], key)
    yield


def _seal_key_file(env) -> str:
    return os.path.join(sealkey.config_dir(env), sealkey.KEY_DIR, sealkey.KEY_FILE)


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


@pytest.fixture(scope="session")
def inductor_build(tmp_path_factory):
    """The real TorchInductor cache and vLLM-style artifacts the venv's CPU torch makes, once per session."""
    return inductor_real.shared(tmp_path_factory)


@pytest.fixture
def inductor_cache(inductor_build, tmp_path):
    """A private copy of the session's real TorchInductor cache (``inductor_build``), to damage at will."""
    return inductor_real.copy(inductor_build["inductor"], str(tmp_path / "inductor"))


@pytest.fixture
def vllm_root(inductor_build, built_cache, tmp_path):
    """A vLLM cache root laid out as vLLM 0.34 writes it, holding real torch artifacts (tests.helpers.vllm_root)."""
    return make_root(str(tmp_path / "vllm"), inductor_build, cubin_of(built_cache))


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


# ---- fixtures shared across folders (the guard, the sweep, first use, the fleet) ----------------


@pytest.fixture(scope="module")
def sealed_tree(tmp_path_factory):
    """An Inductor-style Triton tree, every kernel compiled and sealed through the guard."""
    d = tmp_path_factory.mktemp("ind") / "triton" / "0"
    compile_jobs(str(d), guarded=True)
    return str(d)


@pytest.fixture(scope="module")
def evil_cubin(tmp_path_factory):
    """The cubin of the subtracting ``add_kernel`` for sm_90: bytes and sha256."""
    root = str(tmp_path_factory.mktemp("evil") / "cache")
    out = compile_jobs(
        root, jobs=ADD, guarded=False, extra_env={"JW_KERNEL_DIR": evil_kernel_dir()}
    )
    with open(os.path.join(root, out["add_sm90"]["id"], "add_kernel.cubin"), "rb") as f:
        data = f.read()
    assert hashlib.sha256(data).hexdigest() == out["add_sm90"]["cubin"]
    return data


BINARY = server_binary()


@pytest.fixture
def server(tmp_path):
    if BINARY is None:
        why = "no redis-server or valkey-server on PATH (apt-get install redis-server; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(why)  # CI must run these against a real server, never skip them
        pytest.skip(why)
    s = Server(BINARY, str(tmp_path))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def keypair(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    rc, _, err = jw(node_env(str(d / "h")), "keygen", "-o", str(d / "builder"))
    assert rc == 0, err
    return str(d / "builder"), str(d / "builder.pub")
