"""Shared by the fleet tests: nodes with their own HOME, the CLI run in-process, bundles built by hand."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tarfile

import kernels

GUARD = "jitwarden.guard:GuardedCacheManager"
SMALL_JOBS = [j for j in kernels.jobs_for(archs=(90,)) if j["variant"] in ("add", "sub")]


def node_env(home: str, **extra) -> dict:
    """An environment whose every cache and config lives under ``home``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "JITWARDEN_", "VLLM_"))}
    env.update(HOME=home, XDG_CACHE_HOME=os.path.join(home, ".cache"), XDG_CONFIG_HOME=os.path.join(home, ".config"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(home, "inductor"))
    env.update(extra)
    return env


@contextlib.contextmanager
def environ(env: dict):
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(old)


def jw(env: dict, *argv) -> tuple[int, str, str]:
    """Run ``jitwarden ARGV`` in this process under ``env``: (exit code, stdout, stderr)."""
    from jitwarden import cli

    out, err = io.StringIO(), io.StringIO()
    with environ(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def digest_of(env: dict) -> str:
    from jitwarden import fingerprint

    with environ(env):
        return fingerprint.collect().digest


def triton_partition(env: dict) -> str:
    from jitwarden import partition
    from jitwarden.locations import default_base

    return partition.path_for(default_base("triton", env), digest_of(env))


def build_guarded(env: dict, jobs=SMALL_JOBS) -> str:
    """Compile ``jobs`` through the guard into this node's Triton partition; the partition path."""
    part = triton_partition(env)
    kernels.build_cache(part, [dict(j) for j in jobs], env={**env, "TRITON_CACHE_MANAGER": GUARD})
    return part


def entries(part: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(part) if not n.startswith((".", "jitwarden")))
    except FileNotFoundError:
        return []


def read_bundle(path: str) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(path) as tar:
        return [(m, tar.extractfile(m).read() if m.isreg() else None) for m in tar.getmembers()]


def write_bundle(path: str, members) -> None:
    """Write (TarInfo, bytes or None) pairs as a tar, in order."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            info = tarfile.TarInfo(info.name) if info is None else info
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)


def resign(members, secret_path: str, mutate=None):
    """Members with the manifest changed by ``mutate(doc)`` and signed again with the key at ``secret_path``."""
    from jitwarden import keys

    key = keys.load_signing_key(secret_path)
    out = []
    for info, data in members:
        if info.name == "manifest.json":
            doc = json.loads(data)
            if mutate:
                mutate(doc)
            data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
            mbytes = data
        if info.name == "manifest.sig":
            data = json.dumps({"schema": 1, "algorithm": "ed25519", "key_id": key.id,
                               "signature": key.sign(mbytes).hex()}).encode()
        out.append((info, data))
    return out
