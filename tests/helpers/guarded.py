"""Real guarded Triton compiles shared by the runtime, CLI and adversarial tests.

Every compile runs in a fresh interpreter with ``TRITON_CACHE_MANAGER`` set exactly as activation
sets it (see ARCHITECTURE.md, "Activation"); nothing here mocks Triton or ptxas.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

from jitwarden.adapters import triton as adapter
from jitwarden.model.entries import Judge
from jitwarden.model.findings import Severity
from jitwarden.store import quarantine, seal
from tests.helpers import kernels
from tests.helpers.paths import SRC

MANAGER = "jitwarden.guard:GuardedCacheManager"
JOBS = kernels.jobs_for(archs=(90,), variants=kernels.VARIANTS[:3])  # add, add_b256, sub

DRIVER = textwrap.dedent(
    """
    import hashlib, json, os, sys
    sys.path.insert(0, os.environ["JW_KERNEL_DIR"])
    import triton
    from triton.compiler import ASTSource
    from triton.backends.compiler import GPUTarget
    import jw_test_kernels as K
    out = {}
    for job in json.loads(os.environ["JW_JOBS"]):
        src = ASTSource(fn=getattr(K, job["kernel"]), signature=job["signature"], constexprs=job["constexprs"])
        k = triton.compile(src, target=GPUTarget("cuda", job["arch"], 32), options=job["options"])
        out[job["label"]] = {"cubin": hashlib.sha256(k.asm["cubin"]).hexdigest(),
                             "id": __import__("base64").b32encode(bytes.fromhex(k.metadata.hash)).decode().rstrip("=")}
    print(json.dumps(out))
    """
)


def kernel_dir() -> str:
    """One fixed home for the kernel source: its path is in the cubin's line info (not in Triton's key)."""
    import tempfile

    kdir = os.path.join(tempfile.gettempdir(), f"jw-guard-kernels-{os.getuid()}")
    os.makedirs(kdir, exist_ok=True)
    path = os.path.join(kdir, "jw_test_kernels.py")
    if not os.path.exists(path) or open(path).read() != kernels.KERNEL_SOURCE:
        with open(path + ".tmp", "w") as f:
            f.write(kernels.KERNEL_SOURCE)
        os.replace(path + ".tmp", path)
    return kdir


def compile_jobs(
    cache_dir: str, jobs=JOBS, guarded: bool = True, extra_env: dict | None = None
) -> dict:
    """Compile ``jobs`` into ``cache_dir`` in a fresh interpreter: {label: {cubin sha256, entry id}}."""
    kdir = kernel_dir()
    env = dict(os.environ)
    env.pop("TRITON_CACHE_MANAGER", None)
    env.update(
        {
            "TRITON_CACHE_DIR": cache_dir,
            "JW_KERNEL_DIR": kdir,
            "JW_JOBS": json.dumps(jobs),
            "PYTHONPATH": SRC + os.pathsep + env.get("PYTHONPATH", ""),
        }
    )
    if guarded:
        env["TRITON_CACHE_MANAGER"] = MANAGER
    env.update(extra_env or {})
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["_stderr"] = proc.stderr
    return out


def quarantined(root: str) -> list[quarantine.Record]:
    return quarantine.list_root(root)


def assert_sound(root: str, entry_id: str) -> None:
    """The entry is sealed, its seal holds, and the scanner's structural checks find no error."""
    path = os.path.join(root, entry_id)
    s = seal.read(path)
    assert s is not None, f"{entry_id} is not sealed"
    assert seal.check(path, s) == []
    entry = adapter.inspect_entry(root, entry_id, Judge(host_machine=adapter.host_machine()))
    errors = [f for f in entry.findings if f.severity >= Severity.ERROR]
    assert errors == [], errors


def clean_env(tmp_path, **extra) -> dict:
    """A private environment: HOME, caches and the memo all under tmp_path."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "VLLM_", "JITWARDEN_", "XDG_"))
    }
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
        PYTHONPATH=SRC,
    )
    env.update(extra)
    same_seal_key(env)
    return env


def same_seal_key(env: dict) -> None:
    """Give ``env``'s config dir this test's seal key: the same user in another HOME, whose seals this test reads."""
    import shutil

    from jitwarden.store import sealkey

    mine = os.path.join(sealkey.config_dir(), sealkey.KEY_DIR, sealkey.KEY_FILE)
    theirs = os.path.join(sealkey.config_dir(env), sealkey.KEY_DIR, sealkey.KEY_FILE)
    if os.path.exists(mine) and not os.path.exists(theirs):
        try:
            os.makedirs(os.path.dirname(theirs), mode=0o700, exist_ok=True)
            shutil.copy2(mine, theirs)
        except OSError:
            pass  # a HOME that cannot hold one (/dev/null/home): that test's own point


def py(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# A same-named substitute: ``add_kernel`` computing x - y (the first-use attack).
ADD = [j for j in JOBS if j["label"] == "add_sm90"]
EVIL_SOURCE = kernels.KERNEL_SOURCE.replace(
    "tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m)",
    "tl.load(x + offs, mask=m) - tl.load(y + offs, mask=m)",
)


def evil_kernel_dir() -> str:
    """A module whose ``add_kernel`` subtracts: same name, same signature, other code."""
    assert EVIL_SOURCE != kernels.KERNEL_SOURCE
    kdir = os.path.join(tempfile.gettempdir(), f"jw-firstuse-evil-{os.getuid()}")
    os.makedirs(kdir, exist_ok=True)
    with open(os.path.join(kdir, "jw_test_kernels.py"), "w") as f:
        f.write(EVIL_SOURCE)
    return kdir


def substitute(root: str, entry_id: str, data: bytes) -> None:
    with open(os.path.join(root, entry_id, "add_kernel.cubin"), "wb") as f:
        f.write(data)


def files_of(path: str) -> dict:
    out = {}
    for n in sorted(os.listdir(path)):
        if not n.startswith(".jitwarden"):
            with open(os.path.join(path, n), "rb") as f:
                out[n] = f.read()
    return out


# Sealed Inductor-style trees (the sweep).
def entries(tree):
    return sorted(n for n in os.listdir(tree) if len(n) == 52)


def snapshot(tree):
    out = {}
    for n in entries(tree):
        for f in sorted(os.listdir(os.path.join(tree, n))):
            if not f.startswith(".jitwarden"):
                with open(os.path.join(tree, n, f), "rb") as fh:
                    out[(n, f)] = fh.read()
    return out


def kernel_entry(tree, name="add_kernel"):
    return next(n for n in entries(tree) if os.path.exists(os.path.join(tree, n, f"{name}.cubin")))


def flip(path, offset=3000):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
