"""The real vLLM plugin loader activates jitwarden (vLLM installed with --no-deps, CPU torch).

Needs a Python where ``import vllm`` works: this interpreter, or the one named by
``JW_VLLM_PYTHON`` (CI builds a throwaway venv: see the README / .ci/run). Skipped otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.guarded import clean_env

MANAGER = "jitwarden.guard:GuardedCacheManager"


def _vllm_python() -> str | None:
    for cand in (sys.executable, os.environ.get("JW_VLLM_PYTHON")):
        if cand and os.path.exists(cand):
            ok = (
                subprocess.run(
                    [cand, "-c", "import vllm.plugins, jitwarden.runtime.vllm_plugin"],
                    capture_output=True,
                    timeout=120,
                ).returncode
                == 0
            )
            if ok:
                return cand
    return None


VLLM_PY = _vllm_python()
pytestmark = pytest.mark.skipif(
    VLLM_PY is None,
    reason="vllm is not importable here and JW_VLLM_PYTHON names no "
    "Python with vllm + jitwarden (pip install --no-deps vllm==0.34.0 torch==2.13.0 packaging)",
)

_LOAD = textwrap.dedent(
    """
    import json, logging, os, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    logging.getLogger("vllm").setLevel(logging.INFO)
    import torch  # vLLM runs general plugins after torch import
    import vllm.plugins
    vllm.plugins.load_general_plugins()
    print(json.dumps({k: os.environ.get(k) for k in ("TRITON_CACHE_DIR", "TRITON_CACHE_MANAGER", "VLLM_CACHE_ROOT",
                                                     "TORCHINDUCTOR_CACHE_DIR")}
                     | {"cuda_initialized": torch.cuda.is_initialized()}))
    """
)


def load(env: dict) -> tuple[dict, str]:
    env = dict(env)
    env.pop("PYTHONPATH", None)  # jitwarden comes from the vLLM venv's own install (entry points)
    proc = subprocess.run(
        [VLLM_PY, "-c", _LOAD], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_load_general_plugins_activates_jitwarden(tmp_path):
    env = clean_env(tmp_path, VLLM_PLUGINS="jitwarden")
    got, err = load(env)
    home = env["HOME"]
    assert got["TRITON_CACHE_DIR"].startswith(
        os.path.join(home, ".triton", "cache", "jitwarden-v1") + os.sep
    )
    assert got["TRITON_CACHE_MANAGER"] == MANAGER
    assert got["VLLM_CACHE_ROOT"].startswith(
        os.path.join(home, ".cache", "vllm", "jitwarden-v1") + os.sep
    )
    assert got["TORCHINDUCTOR_CACHE_DIR"].startswith(
        str(tmp_path / "inductor" / "jitwarden-v1") + os.sep
    )
    digest = os.path.basename(got["TRITON_CACHE_DIR"])
    assert f"kernel caches partitioned by fingerprint {digest}" in err
    assert got["cuda_initialized"] is False


def test_vllm_plugins_filter_is_honoured(tmp_path):
    got, _ = load(clean_env(tmp_path, VLLM_PLUGINS="some_other_plugin"))
    assert got["TRITON_CACHE_DIR"] is None and got["TRITON_CACHE_MANAGER"] is None


def test_broken_environment_still_lets_vllm_start(tmp_path):
    # Unwritable home (a path under /dev/null can never be created, even by root), no GPU, garbage memo.
    memo = tmp_path / "memo"
    memo.mkdir()
    (memo / "fingerprint-memo.json").write_text("\x00garbage{{{")
    env = clean_env(
        tmp_path,
        VLLM_PLUGINS="jitwarden",
        HOME="/dev/null/home",
        XDG_CACHE_HOME="/dev/null/cache",
        TORCHINDUCTOR_CACHE_DIR="/dev/null/inductor",
        CUDA_VISIBLE_DEVICES="",
    )
    got, err = load(env)
    assert got["TRITON_CACHE_MANAGER"] == MANAGER  # the guard still goes in
    # Nothing of the user's is usable: activation fails closed into a fresh private partition of ours
    # (never the unusable base, never left unpartitioned), owned by us and closed to others.
    private = got["TRITON_CACHE_DIR"]
    assert private and "jitwarden-v1" in private and not private.startswith("/dev/null")
    st = os.stat(private.split("/roots/")[0])
    assert st.st_uid == os.getuid() and st.st_mode & 0o022 == 0
    assert "refusing cache root" in err
    env = clean_env(tmp_path, VLLM_PLUGINS="jitwarden", JITWARDEN_HOME=str(memo))
    got, err = load(env)
    assert got["TRITON_CACHE_MANAGER"] == MANAGER and "jitwarden-v1" in got["TRITON_CACHE_DIR"]
