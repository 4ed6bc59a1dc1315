"""``doctor`` and ``run -v`` say which protection each installed tool gets (issue 42 item 3): the load hook when
every private function it wraps is of a shape this jitwarden knows, read from the installed source without
importing the tool; the fallback and why when one is not. Here a copy of the installed JAX and CuPy packages
(their real sources) is put first on the search path, then one function's shape is changed in the copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from jitwarden.env import interpreter
from jitwarden.runtime import hookshapes


def _copy(tmp_path, top: str, files: list[str]) -> str:
    """The installed package ``top`` with ``files`` (its real sources) only, under ``tmp_path/site``."""
    src = interpreter.package_dir(top)
    if src is None:
        pytest.skip(f"{top} not installed")
    site = tmp_path / "site"
    for rel in ["__init__.py", *files]:
        dst = site / top / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(os.path.join(src, rel), dst)
    return str(site)


def _states(site: str, env=None) -> dict[str, hookshapes.Protection]:
    from importlib.machinery import PathFinder

    def find(top):
        spec = PathFinder.find_spec(top, [site])
        return next(iter(spec.submodule_search_locations), None) if spec else None

    got = hookshapes.protection(env or {}, package_dir=find, version=lambda d: "9.9")
    return {p.tool: p for p in got}


def test_a_hook_of_a_known_shape_is_the_load_hook_and_a_changed_one_falls_back(tmp_path):
    site = _copy(tmp_path, "jax", ["_src/compiler.py", "_src/compilation_cache.py"])
    assert _states(site)["jax"] == hookshapes.Protection(
        tool="jax", version="9.9", state="load hook"
    )
    cc = os.path.join(site, "jax", "_src", "compilation_cache.py")
    with open(cc) as f:
        text = f.read()
    with open(cc, "w") as f:  # a release that renamed get_file_cache's parameter
        f.write(text.replace("def get_file_cache(path", "def get_file_cache(directory"))
    got = _states(site)["jax"]
    assert got.state == "start-up check only"
    assert got.why == "jax._src.compilation_cache.get_file_cache has no parameter path"
    cw = os.path.join(site, "jax", "_src", "compiler.py")
    with open(cc, "w") as f:
        f.write(text)
    with open(cw) as f:
        text = f.read()
    with open(
        cw, "w"
    ) as f:  # _cache_write renamed: the cache still hooked, without the compile's proof
        f.write(text.replace("def _cache_write(", "def _cache_write_v2("))
    got = _states(site)["jax"]
    assert got.state == "load hook" and "not defined" in got.why
    assert _states(site, {"JITWARDEN_LOAD_HOOKS": "0"})["jax"].state == "start-up check only"


def test_cupy_without_its_backend_is_checked_at_start_up(tmp_path):
    site = _copy(tmp_path, "cupy", ["cuda/compiler.py"])  # no _compiler_cache.py: CuPy 13's shape
    got = _states(site)["cupy"]
    assert (got.state, got.why) == (
        "start-up check only",
        "CuPy 13 and older have no cache backend",
    )


def test_doctor_and_run_say_it(tmp_path):
    site = _copy(tmp_path, "jax", ["_src/compiler.py", "_src/compilation_cache.py"])
    cc = os.path.join(site, "jax", "_src", "compilation_cache.py")
    with open(cc) as f:
        text = f.read()
    with open(cc, "w") as f:
        f.write(text.replace("def get_file_cache(path", "def get_file_cache(directory"))
    env = dict(os.environ, PYTHONPATH=site + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(
        [sys.executable, "-m", "jitwarden", "doctor", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    doc = json.loads(p.stdout)
    (jax,) = [x for x in doc["protection"] if x["tool"] == "jax"]
    assert jax["state"] == "start-up check only" and "get_file_cache" in jax["why"]
    (prob,) = [x for x in doc["problems"] if x["code"] == "unhooked" and "JAX" in x["message"]]
    assert prob["severity"] == "warn"
    p = subprocess.run(
        [sys.executable, "-m", "jitwarden", "run", "-v", "--", sys.executable, "-c", "pass"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert "jitwarden: protection: JAX " in p.stderr and "start-up check only" in p.stderr
