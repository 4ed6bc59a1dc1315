"""Guards on what TorchInductor restores mid-run (jitwarden.runtime.guards.inductor), on the real CPU torch.

Inductor on the CPU makes C++ kernels, so the Triton side is driven through torch's own
``TritonBundler``: ``collect()`` bundles real Triton kernel directories (compiled on the CPU for
sm_90, one with a same-named substituted cubin), exactly as an FX-graph cache entry carries them,
and ``read_and_emit()`` restores them, as on every FX-graph-cache hit (local, remote, AOT).
FX-graph and AOTAutograd pickles come from a real ``torch.compile`` on the CPU.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from jitwarden.model.layout import SEAL_FILE
from jitwarden.store import quarantine, seal
from tests.helpers.guarded import SRC, clean_env, compile_jobs, substitute

pytest.importorskip("torch")

BUNDLE = textwrap.dedent(
    """
    import json, os, pickle, sys
    if os.environ.get("JW_INSTALL_FIRST") == "1":
        from jitwarden.runtime import guards
        guards.install_torch()  # before torch is imported: the finder patches it on import
    import torch
    from torch._inductor import config
    from torch._inductor.triton_bundler import TritonBundler
    if os.environ.get("JW_INSTALL_FIRST") == "0":
        from jitwarden.runtime import guards
        guards.install_torch()  # torch already imported: patched now
    config.bundle_triton_into_fx_graph_cache = True
    guarded = bool(getattr(TritonBundler.read_and_emit, "__jitwarden__", False))
    # What Inductor does when it writes an FX-graph entry: bundle the kernels it compiled ...
    os.environ["TRITON_CACHE_DIR"] = os.environ["JW_SRC"]
    TritonBundler.begin_compile()
    for h in json.loads(os.environ["JW_HASHES"]):
        TritonBundler.put(h, 0)
    bundle, _ = TritonBundler.collect()
    blob = pickle.dumps(bundle)
    # ... and on a hit, in another cache dir: restore them.
    os.environ["TRITON_CACHE_DIR"] = os.environ["JW_DST"]
    if os.environ.get("JW_WAITING_FILE"):  # a test that acts as the background prover starts it once the hook waits
        from jitwarden.runtime import hiding
        real_wait_for = hiding.wait_for

        def wait_for(*args, **kwargs):  # the real wait, made visible to the test: the file, then the wait itself
            open(os.environ["JW_WAITING_FILE"], "w").close()
            return real_wait_for(*args, **kwargs)

        hiding.wait_for = wait_for
    meta = TritonBundler.read_and_emit(pickle.loads(blob))
    print(json.dumps({"guarded": guarded, "restored": sorted(meta.cached_kernel_names)}))
    """
)


def restore(src, dst, hashes, install="1", extra=None):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "JITWARDEN_"))
    }
    env.update(
        JW_SRC=src,
        JW_DST=dst,
        JW_HASHES=json.dumps(hashes),
        JW_INSTALL_FIRST=install,
        PYTHONPATH=SRC,
        PYTHONWARNINGS="ignore",
        **(extra or {}),
    )
    p = subprocess.run(
        [sys.executable, "-c", BUNDLE], env=env, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


@pytest.fixture(scope="module")
def stock(tmp_path_factory):
    """A stock (unsealed) Triton cache of add, add_b256 and sub for sm_90."""
    root = str(tmp_path_factory.mktemp("stock") / "cache")
    out = compile_jobs(root, guarded=False)
    return root, {k: v for k, v in out.items() if k != "_stderr"}


def _copy(stock, tmp_path):
    import shutil

    root, out = stock
    dst = str(tmp_path / "src")
    shutil.copytree(root, dst)
    return dst, out


@pytest.mark.parametrize("install", ["1", "0"], ids=["before-torch-import", "after-torch-import"])
def test_bundle_with_a_substituted_kernel_restores_only_proven_kernels(
    stock, tmp_path, evil_cubin, install
):
    src, out = _copy(stock, tmp_path)
    substitute(src, out["add_sm90"]["id"], evil_cubin)
    dst = str(tmp_path / "dst")
    hashes = [out[k]["id"] for k in ("add_sm90", "add_b256_sm90", "sub_sm90")]
    res, err = restore(src, dst, hashes, install)
    assert res["guarded"] is True
    assert (
        res["restored"] == []
    )  # the hook put the proven ones in place itself; torch wrote nothing
    assert not os.path.exists(os.path.join(dst, out["add_sm90"]["id"]))
    for k in ("add_b256_sm90", "sub_sm90"):
        path = os.path.join(dst, out[k]["id"])
        s = seal.read(path)
        assert s is not None and s.producer.get("proven") and s.producer.get("by") == "bundle"
        assert seal.check(path, s) == []
        with open(glob.glob(os.path.join(path, "*.cubin"))[0], "rb") as f:
            import hashlib

            assert (
                hashlib.sha256(f.read()).hexdigest() == out[k]["cubin"]
            )  # byte-identical to the stock compile
    recs = quarantine.list_root(dst)
    assert [(r.entry_id, r.reason, r.by) for r in recs] == [
        (out["add_sm90"]["id"], "not-reproducible", "torch-hook")
    ]
    assert err.count("quarantined Triton kernel") == 1
    assert not any(n.startswith("tmp.") for n in os.listdir(dst))  # no staging dir left behind
    # Later compiles of the refused kernel go through the guard and give the real cubin.
    again = compile_jobs(dst)
    assert again["add_sm90"]["cubin"] == out["add_sm90"]["cubin"]


def test_a_guarded_compiles_bundle_restores_into_an_empty_cache_proven_and_sealed_afresh(tmp_path):
    """A bundle from a guarded compile carries each kernel's seal (TritonBundler takes every file of the dir).
    Restored where the kernel dirs are missing (a node that never compiled them, or a kernel quarantined
    since), each is proven and placed, sealed afresh by this hook: the carried seal is never written nor
    trusted, and is no reason to refuse. Found on the H200: after a tampered kernel was quarantined, every
    later warm start proved its bundled copy, refused it ("unverifiable: ... reproduced byte for byte") and
    set it aside again."""
    src = str(tmp_path / "guarded")
    out = {k: v for k, v in compile_jobs(src, guarded=True).items() if k != "_stderr"}
    hashes = [out[k]["id"] for k in ("add_sm90", "sub_sm90")]
    for h in hashes:
        assert seal.read(os.path.join(src, h)) is not None  # what the bundle carries
    # A forged seal carried by the bundle changes nothing either: the staged files are proven, then sealed here.
    with open(os.path.join(src, hashes[1], ".jitwarden-seal.json"), "w") as f:
        f.write('{"schema": 1, "files": {"x": {"sha256": "00", "size": 1}}}')
    dst = str(tmp_path / "dst")
    res, err = restore(src, dst, hashes, "1")
    assert res["guarded"] is True and res["restored"] == []  # placed by the hook
    assert "quarantined" not in err and quarantine.list_root(dst) == []
    for h in hashes:
        s = seal.read(os.path.join(dst, h))
        assert s.producer.get("by") == "bundle" and s.producer.get("proven")
        assert seal.check(os.path.join(dst, h), s) == []
    res, err = restore(
        src, dst, hashes, "1"
    )  # the next start: in place and sealed, nothing proven again
    assert "quarantined" not in err and quarantine.list_root(dst) == []


def test_without_the_hook_the_substitute_is_restored(stock, tmp_path, evil_cubin):
    """The path exists: torch writes the substituted cubin where its static launcher loads it."""
    import hashlib

    src, out = _copy(stock, tmp_path)
    substitute(src, out["add_sm90"]["id"], evil_cubin)
    dst = str(tmp_path / "dst")
    res, _ = restore(src, dst, [out["add_sm90"]["id"]], "1", {"JITWARDEN_TORCH_HOOKS": "0"})
    assert res["guarded"] is False and res["restored"] == ["add_kernel"]
    with open(os.path.join(dst, out["add_sm90"]["id"], "add_kernel.cubin"), "rb") as f:
        assert f.read() == evil_cubin
    assert hashlib.sha256(evil_cubin).hexdigest() != out["add_sm90"]["cubin"]


def test_an_unsealed_directory_already_on_disk_is_proven_before_torch_uses_it(
    stock, tmp_path, evil_cubin
):
    """torch skips a directory that exists; the hook proves it (here: a substitute left by an unguarded process)."""
    import shutil

    src, out = _copy(stock, tmp_path)
    dst = str(tmp_path / "dst")
    os.makedirs(dst)
    victim, good = out["add_sm90"]["id"], out["sub_sm90"]["id"]
    for e in (victim, good):
        shutil.copytree(os.path.join(src, e), os.path.join(dst, e))
    substitute(dst, victim, evil_cubin)
    res, err = restore(src, dst, [victim, good], "1")
    assert not os.path.exists(os.path.join(dst, victim))
    assert seal.read(os.path.join(dst, good)).producer.get("proven")
    assert [r.reason for r in quarantine.list_root(dst)] == ["not-reproducible"]


FX = textwrap.dedent(
    """
    import json, os, sys
    from jitwarden.runtime import guards
    guards.install_torch()
    import torch
    torch.manual_seed(0)
    x = torch.randn(8, 8); y = torch.randn(8, 8)
    def f(x, y):
        return torch.relu(x @ y + 1).sum(dim=-1) * 2
    got = torch.compile(f)(x, y)
    print(json.dumps({"ok": bool(torch.allclose(got, f(x, y))), "hooks": guards.torch_status()}))
    """
)


def _fx(cache):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "JITWARDEN_"))
    }
    env.update(
        TORCHINDUCTOR_CACHE_DIR=cache,
        TORCHINDUCTOR_COMPILE_THREADS="1",
        PYTHONPATH=SRC,
        PYTHONWARNINGS="ignore",
    )
    p = subprocess.run(
        [sys.executable, "-c", FX], env=env, capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def _pickle_dirs(cache, kind):
    return [d for d in glob.glob(os.path.join(cache, kind, "*", "*")) if os.path.isdir(d)]


def test_fx_and_aotautograd_pickles_are_sealed_when_written_and_checked_before_read(tmp_path):
    cache = str(tmp_path / "inductor")
    res, _ = _fx(cache)
    assert res["ok"] and set(res["hooks"].values()) == {"guarded"}, res
    fx, aot = (
        _pickle_dirs(cache, "fxgraph"),
        [x for x in glob.glob(os.path.join(cache, "aotautograd", "*")) if os.path.isdir(x)],
    )
    assert fx and aot
    for d in fx + aot:
        s = seal.read(d)
        names = [n for n in os.listdir(d) if not n.startswith(".")]
        assert s is not None and sorted(s.files) == sorted(names), (d, names)
        assert seal.check(d, s) == []
    # pickle.loads ignores bytes after STOP: torch alone would load these as if nothing happened.
    # AOTAutograd keeps its pickles one level shallower (<cache>/aotautograd/<key>/) than FX graphs.
    victims = [
        next(os.path.join(d, n) for n in os.listdir(d) if not n.startswith("."))
        for d in (fx[0], aot[0])
    ]
    for v in victims:
        with open(v, "ab") as f:
            f.write(b"tampered")
    res, err = _fx(cache)
    assert res["ok"]
    assert err.count("quarantined TorchInductor cache pickle") == 2, err[-2000:]
    assert "quarantined TorchInductor cache pickle aotautograd/" in err
    recs = quarantine.list_root(cache)
    assert (
        sorted((r.root, r.reason, r.kind) for r in recs) == [(cache, "corrupt", "inductor")] * 2
    ), recs
    for v in victims:
        d = os.path.dirname(v)
        assert seal.check(d, seal.read(d)) == [] and [
            n for n in os.listdir(d) if not n.startswith(".")
        ]  # rewritten, sealed
        assert os.path.exists(os.path.join(d, SEAL_FILE))


def test_doctor_names_a_torch_whose_loaders_cannot_be_wrapped(tmp_path, monkeypatch):
    """A copy of this torch's own sources with the bundler's loader renamed: doctor says what and how to turn it off."""
    import shutil

    from jitwarden.runtime import hookshapes

    real = hookshapes._torch_dir()
    assert hookshapes.doctor_warnings({}) == []  # this torch: every wrapper attaches
    fake = tmp_path / "torch"
    for rel, _needles in hookshapes._SHAPES.values():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(os.path.join(real, rel), fake / rel)
    p = fake / "_inductor" / "triton_bundler.py"
    p.write_text(p.read_text().replace("def read_and_emit(", "def read_and_emit_v2("))
    monkeypatch.setattr(hookshapes, "_torch_dir", lambda: str(fake))
    (w,) = hookshapes.doctor_warnings({})
    assert w[0] == "torch-hooks" and "triton_bundler.py (no def read_and_emit(" in w[1]
    assert "TORCHINDUCTOR_BUNDLE_TRITON_INTO_FX_GRAPH_CACHE=0" in w[2]
    raw = hookshapes.doctor_warnings({"TORCHINDUCTOR_KEEP_STATIC_CUBIN_RAW": "1"})
    assert any("KEEP_STATIC_CUBIN_RAW" in t for _k, t, _f in raw)


def test_jitwarden_run_installs_the_hooks_in_the_command_and_keeps_the_users_sitecustomize(
    stock, tmp_path, evil_cubin
):
    """``jitwarden run`` activates, then execs: the command's own interpreter installs the hooks at start-up."""
    src, out = _copy(stock, tmp_path)
    substitute(src, out["add_sm90"]["id"], evil_cubin)
    dst = str(tmp_path / "dst")
    mine = tmp_path / "usersite"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text("import os\nos.environ['JW_USER_SITE_RAN'] = '1'\n")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "JITWARDEN_"))
    }
    env.update(
        JW_SRC=src,
        JW_DST=dst,
        JW_HASHES=json.dumps([out["add_sm90"]["id"], out["sub_sm90"]["id"]]),
        JW_INSTALL_FIRST="",
        PYTHONPATH=os.pathsep.join([SRC, str(mine)]),
        PYTHONWARNINGS="ignore",
        HOME=str(tmp_path / "home"),
        XDG_CACHE_HOME=str(tmp_path / "home" / ".cache"),
    )
    script = BUNDLE.replace(
        'print(json.dumps({"guarded"',
        'print(json.dumps({"user_site": os.environ.get("JW_USER_SITE_RAN"), "guarded"',
    )
    p = subprocess.run(
        [sys.executable, "-m", "jitwarden", "run", "--", sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["guarded"] is True and res["user_site"] == "1"
    assert not os.path.exists(os.path.join(dst, out["add_sm90"]["id"]))
    assert seal.read(os.path.join(dst, out["sub_sm90"]["id"])).producer.get("proven")


def test_activate_and_the_vllm_plugin_install_the_hooks(tmp_path):
    """activate() before torch is imported (import hook), and the vLLM plugin after (patched at once)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "JITWARDEN_"))
    }
    env.update(
        PYTHONPATH=SRC,
        PYTHONWARNINGS="ignore",
        HOME=str(tmp_path),
        XDG_CACHE_HOME=str(tmp_path / ".cache"),
    )
    probe = (
        "import json, sys\nfrom torch._inductor.triton_bundler import TritonBundler\n"
        "from torch._inductor.codecache import GuardedCache\n"
        "print(json.dumps([getattr(TritonBundler.read_and_emit, '__jitwarden__', False), "
        "getattr(GuardedCache.iterate_over_candidates, '__jitwarden__', False), 'torch' in sys.modules]))"
    )
    for pre in (
        "import jitwarden; jitwarden.activate()\n",
        "import torch\nfrom jitwarden.runtime import vllm_plugin; vllm_plugin.register()\n",
        "import os; os.environ['JITWARDEN_TORCH_HOOKS'] = '0'\nimport jitwarden; jitwarden.activate()\n",
    ):
        p = subprocess.run(
            [sys.executable, "-c", pre + probe],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 0, p.stderr[-2000:]
        got = json.loads(p.stdout.strip().splitlines()[-1])
        assert got == ([False, False, True] if "HOOKS" in pre else [True, True, True]), (pre, got)


def test_a_pickle_flipped_in_place_is_caught_even_after_the_seal_is_touched(tmp_path):
    """Same size, then a ``chmod`` of the seal: its ctime moves past the pickle's, yet the pickle is rehashed."""
    cache = str(tmp_path / "inductor")
    res, _ = _fx(cache)
    assert res["ok"]
    d = _pickle_dirs(cache, "fxgraph")[0]
    victim = next(os.path.join(d, n) for n in os.listdir(d) if not n.startswith("."))
    with open(victim, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0xFF
    with open(victim, "wb") as f:
        f.write(data)
    time.sleep(
        0.05
    )  # past the file system's coarse clock tick: the seal's ctime lands after the pickle's
    os.chmod(os.path.join(d, SEAL_FILE), 0o644)
    res, err = _fx(cache)
    assert res["ok"] and err.count("quarantined TorchInductor cache pickle") == 1, err[-2000:]


# ---- the static launcher's own loads: each kernel checked as Inductor is about to load it ------------

STATIC = textwrap.dedent(
    '''
    import json, os, sys, types
    sys.path.insert(0, os.environ["JW_KERNEL_DIR"])
    from jitwarden.runtime import guards
    from jitwarden.runtime.guards import inductor
    guards.install_torch()  # before torch: patched as torch imports its code cache
    import triton
    from triton.compiler import ASTSource
    from triton.backends.compiler import GPUTarget
    import torch._inductor.codecache as cc
    from torch._inductor.runtime.static_triton_launcher import StaticallyLaunchedCudaKernel
    from torch._inductor.runtime.triton_heuristics import StaticTritonCompileResult
    import jw_test_kernels as K
    job = json.loads(os.environ["JW_JOB"])
    src = ASTSource(fn=getattr(K, job["kernel"]), signature=job["signature"], constexprs=job["constexprs"])
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=job["options"])  # through the guard

    def future():
        """What an FX-graph-cache hit hands AsyncCompile: a pickled static autotuner (no cubin path yet)."""
        k._cubin_path = ""
        sk = StaticallyLaunchedCudaKernel(k)
        sk.cubin_path = None
        r = StaticTritonCompileResult(sk, triton.Config({}), {"device": 0, "device_type": "cuda"}, {})
        f = cc.StaticAutotunerFuture(types.SimpleNamespace(compile_results=[r]))
        f.reload_kernel_from_src = lambda: Recompiled()
        return f, r

    class Recompiled:
        """The autotuner AsyncCompile builds from the kernel's source on a miss."""
        def precompile(self, warm_cache_only):
            self.compiled = not warm_cache_only

    out = {"status": guards.torch_status().get("static launcher")}
    f, r = future()
    r.reload_cubin_path()
    cached = out["cubin_path"] = r.kernel.cubin_path  # Inductor's own reload_cubin_path names the cache's file
    sealed = open(cached, "rb").read()
    out["good_loadable"] = inductor._loadable(f.static_autotuner)
    served = out["served"] = r.kernel.cubin_path  # what the launcher will read: a private copy of the sealed bytes
    with open(cached, "r+b") as fh:  # damage it after it was checked: the swap between check and load
        fh.seek(3000); b = fh.read(1); fh.seek(3000); fh.write(bytes([b[0] ^ 1]))
    out["served_is_sealed"] = open(served, "rb").read() == sealed
    f, r = future()
    got = f.result()
    out["damaged"] = type(got).__name__ + ":" + str(getattr(got, "compiled", None))
    f, r = future()  # the entry is gone now: its cubin cannot be found
    out["missing"] = type(f.result()).__name__
    print(json.dumps(out))
    '''
)


def test_the_static_launcher_gets_only_checked_kernels_and_a_damaged_one_is_recompiled(tmp_path):
    from tests.helpers.guarded import ADD, clean_env, kernel_dir

    tree = tmp_path / "triton"
    env = clean_env(
        tmp_path,
        TRITON_CACHE_DIR=str(tree),
        TRITON_CACHE_MANAGER="jitwarden.guard:GuardedCacheManager",
        JW_KERNEL_DIR=kernel_dir(),
        JW_JOB=json.dumps(ADD[0]),
    )
    p = subprocess.run(
        [sys.executable, "-c", STATIC], env=env, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["status"] == "guarded" and out["good_loadable"] is True
    entry = os.path.basename(os.path.dirname(out["cubin_path"]))
    assert os.path.dirname(os.path.dirname(out["cubin_path"])) == str(tree)
    assert not out["served"].startswith(str(tree)) and out["served"].endswith(".add_kernel.cubin")
    assert out["served_is_sealed"]  # a swap after the check never reaches the launcher
    assert (
        out["damaged"] == "Recompiled:True"
    )  # compiled from source through the guard, never loaded
    assert out["missing"] == "Recompiled"
    (rec,) = quarantine.list_root(str(tree))
    assert rec.entry_id == entry and rec.reason == "corrupt"
    assert "as TorchInductor was about to load it" in p.stderr, p.stderr[-2000:]


def test_a_torch_module_of_another_shape_is_left_alone_with_one_warning(tmp_path):
    """A torch whose bundler module lacks what the wrapper knows, imported after install (the post-import finder
    runtime/postimport shares with the JAX and CuPy hooks): the module imports as it is, status says why in
    torch's words, and one warning points at doctor."""
    pkg = tmp_path / "torch" / "_inductor"
    pkg.mkdir(parents=True)
    for f in (tmp_path / "torch" / "__init__.py", pkg / "__init__.py"):
        f.write_text("")
    (pkg / "triton_bundler.py").write_text("LOADED = True\n")
    code = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from jitwarden.runtime import guards
        before = guards.install_torch()["torch._inductor.triton_bundler"]
        import torch._inductor.triton_bundler as b
        print(json.dumps([before, b.LOADED, guards.torch_status()["torch._inductor.triton_bundler"]]))
        """
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=clean_env(tmp_path),
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    before, loaded, after = json.loads(p.stdout)
    assert before == "waiting for import" and loaded is True
    assert after.startswith(
        "not guarded: this torch's torch._inductor.triton_bundler is not the shape jitwarden knows (AttributeError"
    )
    assert p.stderr.count("`jitwarden doctor` says more") == 1, p.stderr
