"""Caches judged against the environment that writes them, and ``run`` into another environment's Python
(issue 34, item 2), with real second venvs: one holding Triton 3.4.0 (``pip install --no-deps``), one bare.

jitwarden beside another Triton than the workload's called a live cache ``stale`` and offered ``clean --stale``;
``jitwarden run -- /other/venv/bin/python`` crashed the workload at its first compile (ModuleNotFoundError:
``TRITON_CACHE_MANAGER`` named a module that Python could not import).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers.cli import jw

TRITON_OTHER = "3.4.0"


def _venv(path: str, *packages: str) -> str:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", path], check=True)
    if packages:
        p = subprocess.run(
            [sys.executable, "-m", "pip", "--python", f"{path}/bin/python", "install", "-q"]
            + ["--no-deps", *packages],
            capture_output=True,
            text=True,
        )
        if p.returncode != 0:
            why = f"pip install {' '.join(packages)} failed: {p.stderr[-500:]}"
            if os.environ.get("CI"):
                pytest.fail(why)  # CI must run these against a real second Triton, never skip them
            pytest.skip(why)
    return os.path.join(path, "bin", "python")


@pytest.fixture(scope="module")
def triton_venv(tmp_path_factory):
    """The Python of a real venv holding Triton 3.4.0 and nothing of jitwarden's (not even pip)."""
    return _venv(str(tmp_path_factory.mktemp("venvs") / "t34"), f"triton=={TRITON_OTHER}")


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory):
    """The Python of a venv of the standard library alone."""
    return _venv(str(tmp_path_factory.mktemp("venvs") / "bare"))


def _env(home, **kw) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), **kw)
    return env


def doctor(env, *args) -> tuple[int, dict]:
    p = jw("doctor", "--format", "json", *args, env=env, src=None)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


# ---------------------------------------------------------------- --python, JITWARDEN_PYTHON


def test_a_cache_of_another_triton_is_another_environments_not_dead_weight(
    cache, triton_venv, tmp_path
):
    """Judged against a Triton other than the one that wrote every entry (the issue: jitwarden's Triton 3.9
    beside a Triton 3.6 cache), doctor says whose the cache most likely is and offers no ``clean --stale``."""
    root, _records = cache
    env = _env(tmp_path)
    _rc, doc = doctor(env, "--python", triton_venv, "--target", "90", root)
    assert doc["environment"]["source"] == "--python"
    assert doc["environment"]["python"] == triton_venv
    assert doc["environment"]["packages"].get("triton") == TRITON_OTHER
    probs = {p["code"]: p for p in doc["problems"]}
    assert "stale" not in probs and "other-environment" in probs, probs
    line = probs["other-environment"]
    assert line["count"] == doc["summary"]["by_code"]["stale"] == doc["summary"]["entries"]
    assert "Triton 3.6.0" in line["message"] and f"Triton {TRITON_OTHER}" in line["message"]
    assert all("clean --stale" not in (p["fix"] or "") for p in doc["problems"]), doc["problems"]
    assert "--python" in line["fix"]

    # Asked for by hand, `clean --stale` still plans them, but says first whose they most likely are.
    p = jw(
        "clean",
        "--stale",
        "--dry-run",
        "--python",
        triton_venv,
        "--target",
        "90",
        root,
        env=env,
        src=None,
    )
    assert p.returncode == 0, p.stderr
    assert "most likely another environment's cache" in p.stderr and "Triton 3.6.0" in p.stderr, (
        p.stderr
    )
    assert "doctor --python" in p.stderr and os.path.isdir(root)  # a dry run: nothing moved

    # The same cache judged against the environment that wrote it (the test venv: Triton 3.6.0) is not stale.
    _rc, own = doctor(env, "--python", sys.executable, "--target", "90", root)
    assert own["environment"]["packages"].get("triton") == "3.6.0"
    assert "stale" not in own["summary"]["by_code"]
    assert not {"stale", "other-environment"} & {p["code"] for p in own["problems"]}

    # JITWARDEN_PYTHON names it as --python does; --python wins over it.
    _rc, by_setting = doctor(_env(tmp_path, JITWARDEN_PYTHON=triton_venv), "--target", "90", root)
    assert by_setting["environment"]["source"] == "JITWARDEN_PYTHON"
    assert by_setting["summary"] == doc["summary"]
    _rc, wins = doctor(
        _env(tmp_path, JITWARDEN_PYTHON=triton_venv),
        "--python",
        sys.executable,
        "--target",
        "90",
        root,
    )
    assert wins["environment"]["source"] == "--python" and "stale" not in wins["summary"]["by_code"]


def test_the_verdict_names_the_environment_and_a_venv_dir_is_taken(cache, triton_venv, tmp_path):
    root, _records = cache
    venv_dir = os.path.dirname(os.path.dirname(triton_venv))
    p = jw("verify", "--python", venv_dir, "--target", "90", root, env=_env(tmp_path), src=None)
    assert p.returncode == 0, p.stderr
    assert f"and Triton {TRITON_OTHER} of {venv_dir} (--python)" in " ".join(p.stdout.split()), (
        p.stdout
    )
    p = jw("verify", "--target", "90", root, env=_env(tmp_path), src=None)
    assert "sm_90 (cli) and Triton 3.6.0 of jitwarden's own Python" in " ".join(p.stdout.split())


@pytest.mark.parametrize(
    "given,why",
    [
        ("/nonexistent/bin/python", "no such file"),
        ("notes.txt", "not executable"),
        ("/bin/true", "not a Python jitwarden can ask"),
    ],
)
def test_a_python_that_cannot_be_asked_is_one_line_and_exit_2(given, why, tmp_path):
    if not given.startswith("/"):  # a plain file, mode 0644
        (tmp_path / given).write_text("not a program\n")
        given = str(tmp_path / given)
    p = jw("verify", "--python", given, env=_env(tmp_path), src=None)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and why in p.stderr and "Traceback" not in p.stderr, p.stderr


# ---------------------------------------------------------------- run -- ANOTHER_PYTHON

COMPILE = r"""
import json, os, sys
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)

src = ASTSource(add_kernel, {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32"}, constexprs={"BLOCK": 128})
k = triton.compile(src, target=GPUTarget("cuda", 90, 32))
import triton.knobs as knobs
print(json.dumps({"manager": f"{knobs.cache.manager_class.__module__}.{knobs.cache.manager_class.__name__}",
                  "dir": os.environ.get("TRITON_CACHE_DIR"), "hash": k.hash,
                  "foreign": sorted({m.split(".")[0] for m in sys.modules} & {"rich", "orjson", "shtab"})}))
"""


def _run(env, *cmd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jitwarden", "run", "--", *cmd],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_run_into_a_venv_with_triton_but_no_jitwarden_compiles_guarded(triton_venv, tmp_path):
    """The workload's own Triton 3.4 compiles through jitwarden's guard, imported from jitwarden's install
    alone, into a partition of that venv's fingerprint; the entry is sealed."""
    script = tmp_path / "compile.py"
    script.write_text(COMPILE)
    env = _env(tmp_path)
    p = _run(env, triton_venv, str(script))
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["manager"] == "jitwarden.runtime.guards.triton.GuardedCacheManager", out
    assert out["foreign"] == [], out  # jitwarden's dependencies stay out of the workload's way
    part = out["dir"]
    assert "/jitwarden-v1/" in part and part.startswith(str(tmp_path)), part
    with open(os.path.join(part, ".jitwarden-partition.json")) as f:
        info = json.load(f)
    # that venv's fingerprint, not jitwarden's, and the partition records the Python that writes it
    assert f"triton {TRITON_OTHER}" in info["headline"] and info["python"] == triton_venv, info
    entries = [e for e in os.listdir(part) if not e.startswith(".")]
    assert len(entries) == 1
    assert os.path.isfile(os.path.join(part, entries[0], ".jitwarden-seal.json"))

    # A console script of that venv (its #! line names its Python) is recognised the same way.
    tool = tmp_path / "tool"
    tool.write_text(f"#!{triton_venv}\n" + COMPILE)
    tool.chmod(0o755)
    p = _run(env, str(tool))
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1])["dir"] == part

    # jitwarden's own doctor (Triton 3.6.0) sees that partition as that venv's, and names its Python.
    _rc, doc = doctor(env, "--target", "90")
    probs = {p["code"]: p for p in doc["problems"]}
    assert "other-environment" in probs and "stale" not in probs, probs
    assert probs["other-environment"]["fix"].startswith(f"jitwarden doctor --python {triton_venv}")
    assert all("clean --stale" not in (p["fix"] or "") for p in doc["problems"])
    _rc, theirs = doctor(env, "--python", triton_venv, "--target", "90")
    assert "stale" not in theirs["summary"]["by_code"], theirs["summary"]

    # The activation memo keeps each interpreter's facts apart: jitwarden's own Python gets its own partition.
    p = _run(env, sys.executable, "-c", "import os; print(os.environ['TRITON_CACHE_DIR'])")
    assert p.returncode == 0 and p.stdout.strip() != part, (p.stdout, p.stderr)


def test_run_into_a_bare_venv_can_import_only_jitwarden(bare_venv, tmp_path):
    code = (
        "import json, os, importlib.util as u; import jitwarden.runtime.guards.inductor; "
        "print(json.dumps({'m': os.environ.get('TRITON_CACHE_MANAGER'), "
        "'rich': u.find_spec('rich') is not None, 'orjson': u.find_spec('orjson') is not None}))"
    )
    p = _run(_env(tmp_path), bare_venv, "-c", code)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out == {"m": "jitwarden.guard:GuardedCacheManager", "rich": False, "orjson": False}


def _old_python() -> str | None:
    """A Python older than jitwarden supports, on PATH or in pyenv's versions (none: the test is skipped)."""
    import glob

    found = sorted(glob.glob(os.path.expanduser("~root/.pyenv/versions/3.[89].*/bin/python")))
    found += [shutil.which(n) for n in ("python3.9", "python3.8")]
    return next((f for f in found if f and "/shims/" not in f), None)


def test_run_into_a_python_that_cannot_import_jitwarden_leaves_it_alone(tmp_path):
    old = _old_python()
    if old is None:
        pytest.skip("no Python 3.9 or 3.8 on this machine")
    code = "import os; print(os.environ.get('TRITON_CACHE_MANAGER'), os.environ.get('TRITON_CACHE_DIR'))"
    p = _run(_env(tmp_path), old, "-c", code)
    assert p.returncode == 0 and p.stdout.split() == ["None", "None"], (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot import jitwarden" in lines[0], p.stderr
    assert "not partitioned, not guarded" in lines[0]
