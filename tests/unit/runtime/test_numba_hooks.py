"""numba-cuda's kernel cache under the load hook (runtime/guards/numba.py): numba-cuda's real ``IndexDataCacheFile``
(its ``.nbi`` index and ``.nbc`` data files, as ``@cuda.jit(cache=True)`` writes them beside the source), patched as
``_boot`` patches it. No GPU here, so the data saved are plain picklable values instead of kernels: the class
writes, reads and unpickles them the same way. A swapped ``.nbc`` is what the H200 capture showed stock numba-cuda
run as x-y (tests/data/real/jax_cupy/JAX_CUPY.md).
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

from jitwarden.runtime import flatseal
from jitwarden.runtime.guards import numba as numba_guard

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("numba") is None or importlib.util.find_spec("numba.cuda") is None,
    reason="numba-cuda not installed",
)
METHODS = ("_load_index", "_load_data", "_save_index", "_save_data")


@pytest.fixture
def caching(monkeypatch):
    from numba.cuda.core import caching as mod

    for m in METHODS:  # restored after the test: the patch is process-wide
        monkeypatch.setattr(mod.IndexDataCacheFile, m, getattr(mod.IndexDataCacheFile, m))
    return mod


def _files(mod, d, base):
    return mod.IndexDataCacheFile(str(d), base, ("stamp", 1))


def test_written_under_the_hook_sealed_and_served(caching, tmp_path):
    numba_guard.patch(caching)
    add = _files(caching, tmp_path, "jwkern.add-3.py311")
    add.save(("sig", "cc90"), {"op": "add"})
    assert set(flatseal.sealed_files(str(tmp_path))) == {
        "jwkern.add-3.py311.nbi",
        "jwkern.add-3.py311.1.nbc",
    }
    assert add.load(("sig", "cc90")) == {"op": "add"}


def test_a_swapped_data_file_is_never_unpickled(caching, tmp_path, recwarn):
    numba_guard.patch(caching)
    add = _files(caching, tmp_path, "jwkern.add-3.py311")
    sub = _files(caching, tmp_path, "jwkern.sub-7.py311")
    add.save(("sig", "cc90"), {"op": "add"})
    sub.save(("sig", "cc90"), {"op": "sub"})
    shutil.copyfile(tmp_path / "jwkern.sub-7.py311.1.nbc", tmp_path / "jwkern.add-3.py311.1.nbc")
    assert add.load(("sig", "cc90")) is None  # a miss: numba compiles add again
    assert "quarantined numba-cuda cache entry jwkern.add-3.py311.1.nbc" in str(recwarn[0].message)
    add.save(("sig", "cc90"), {"op": "add"})
    assert add.load(("sig", "cc90")) == {"op": "add"}


def test_a_stock_written_cache_is_compiled_again_once_then_sealed(caching, tmp_path):
    stock = _files(caching, tmp_path, "jwkern.add-3.py311")
    stock.save(("sig", "cc90"), {"op": "sub"})  # written without the hook: nothing vouches for it
    assert stock.load(("sig", "cc90")) == {"op": "sub"}
    numba_guard.patch(caching)
    guarded = _files(caching, tmp_path, "jwkern.add-3.py311")
    assert guarded.load(("sig", "cc90")) is None  # never unpickled unsealed
    assert not os.path.exists(tmp_path / "jitwarden-quarantine")  # not called damage
    guarded.save(("sig", "cc90"), {"op": "add"})
    assert guarded.load(("sig", "cc90")) == {"op": "add"}


def test_the_hook_patches_numba_cudas_real_module():
    import subprocess
    import sys

    code = (
        "from jitwarden.runtime import guards, postimport\n"
        "guards.install_load_hooks()\n"
        "import numba.cuda.core.caching as c\n"
        "print(postimport.status('numba.cuda.core.caching'), c.IndexDataCacheFile._load_data.__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["guarded", "jitwarden.runtime.guards.numba"]
