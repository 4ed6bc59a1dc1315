"""The suite's sandbox (tests/conftest.py): no test touches the real home or a default location, and a run
that does fails (issue 23, item 2)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

from jitwarden.env import locations
from jitwarden.model import kinds
from jitwarden.model.layout import ROOT_LOCK_FILE
from jitwarden.store import locks, paths

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src", "jitwarden")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PLACE = re.compile(
    r"^(?:[A-Z][A-Z0-9]*_)+(?:DIR|HOME|ROOT|BASE|KEYS|KEY|CACHE_PATH)$|^(?:HOME|TMPDIR|TEMP|TMP)$"
)
READ_ONLY = {
    "CUDA_HOME",
    "TRITON_PTXAS_PATH",
    "TRITON_PTXAS_BLACKWELL_PATH",
    "TRITON_LIBDEVICE_PATH",
    "JITWARDEN_LIBCUDA",
    "JITWARDEN_SEAL_KEY",
}
"""Variables naming a program, a library or a key file jitwarden reads, never a place anything is written
(the sandbox leaves them unset: a test that wants a team seal key sets it)."""


def _names_in_src() -> set[str]:
    names = set()
    for d, _, files in os.walk(SRC):
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(d, f), encoding="utf-8") as fh:
                    tree = ast.parse(fh.read())
                names |= {
                    n.value
                    for n in ast.walk(tree)
                    if isinstance(n, ast.Constant)
                    and isinstance(n.value, str)
                    and PLACE.match(n.value)
                }
    return names


def test_every_location_variable_the_code_names_is_in_the_table():
    listed = {v for v, _ in locations.LOCATION_VARS}
    missing = _names_in_src() - listed - READ_ONLY
    assert not missing, (
        f"add these to env/locations.py LOCATION_VARS (the sandbox is built from it): {missing}"
    )


def test_a_test_sees_only_its_sandbox():
    env = dict(os.environ)
    base = os.path.dirname(
        os.path.dirname(env["HOME"])
    )  # the session's sandbox: jw-sandbox-*/<test>/home
    assert os.path.basename(base).startswith("jw-sandbox-")
    for var in ("HOME", "TMPDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR"):
        assert env[var].startswith(base + os.sep), (var, env[var])
    assert not [
        k for k in env if k.startswith(("JITWARDEN_", "TRITON_", "TORCHINDUCTOR_", "VLLM_"))
    ]
    for kind in (k.name for k in kinds.partitioned(kinds.DIR)):
        assert locations.default_base(kind, env).startswith(base + os.sep), kind
    assert paths.memo_dir().startswith(base + os.sep)


def test_the_memo_dir_of_an_environment_is_in_that_environment_s_home(tmp_path):
    # The registry of quarantined roots and the memo follow the HOME of the env they are asked about,
    # never the calling process's (a command given another env wrote into the caller's home).
    other = str(tmp_path / "elsewhere")
    assert paths.memo_dir({"HOME": other}) == os.path.join(other, ".cache", "jitwarden")
    assert os.environ["HOME"] != other


def test_a_lock_file_names_no_pid_once_released(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    lock = str(root / ROOT_LOCK_FILE)
    with locks.hold([str(root)]):
        assert locks.holder(lock) == str(os.getpid())
    assert locks.holder(lock) == "?" and os.path.getsize(lock) == 0


def _probe(tmp_path, write: str | None):
    home = tmp_path / "realhome"
    (home / ".triton" / "cache").mkdir(parents=True)
    (tmp_path / "t").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env.update(HOME=str(home), TMPDIR=str(tmp_path / "t"), XDG_CACHE_HOME=str(home / ".cache"))
    if write:
        env["JW_PROBE_WRITE"] = str(home / write)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            os.path.join("tests", "helpers", "sandbox_probe.py"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_run_that_writes_into_the_real_home_fails(tmp_path):
    """The run fails, on a line of its own (never glued to pytest's ``[100%]``), naming the file (issue 46)."""
    rel = ".triton/cache/ABCDEFGHIJKLMNOPQRSTUVWXYZ234567ABCDEFGHIJKLMNOPQRST/x.cubin"
    p = _probe(tmp_path, rel)
    lines = p.stdout.splitlines()
    assert p.returncode != 0, p.stdout
    assert any(
        ln.startswith("the test run failed:") and "default cache location changed" in ln
        for ln in lines
    ), p.stdout
    assert f"  {tmp_path / 'realhome' / rel} (added)" in lines, p.stdout
    assert not any("[100%]" in ln and "the test run" in ln for ln in lines), p.stdout
    assert "1 passed" in p.stdout  # the test itself passed: the session-end check failed the run


def test_a_run_that_stays_in_its_sandbox_passes(tmp_path):
    p = _probe(tmp_path, None)
    assert p.returncode == 0, p.stdout + p.stderr
