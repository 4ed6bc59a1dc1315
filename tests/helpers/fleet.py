"""Shared by the fleet tests: nodes with their own HOME, the CLI run in-process, bundles built by hand."""

from __future__ import annotations

import io
import json
import os
import tarfile

from tests.helpers import kernels
from tests.helpers.cli import environ
from tests.helpers.cli import jw as run_cli

GUARD = "jitwarden.guard:GuardedCacheManager"
SMALL_JOBS = [j for j in kernels.jobs_for(archs=(90,)) if j["variant"] in ("add", "sub")]


def node_env(home: str, **extra) -> dict:
    """An environment whose every cache and config lives under ``home``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "JITWARDEN_", "VLLM_"))
    }
    env.update(
        HOME=home,
        XDG_CACHE_HOME=os.path.join(home, ".cache"),
        XDG_CONFIG_HOME=os.path.join(home, ".config"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(home, "inductor"),
    )
    env.update(extra)
    return env


def jw(env: dict, *argv) -> tuple[int, str, str]:
    """Run ``jitwarden ARGV`` in this process under ``env``: (exit code, stdout, stderr)."""
    return tuple(run_cli(*argv, env=env, in_process=True, src=None))


def digest_of(env: dict) -> str:
    from jitwarden.env import fingerprint

    with environ(env):
        return fingerprint.of_host().digest


def triton_partition(env: dict) -> str:
    from jitwarden.env.locations import default_base
    from jitwarden.store import partition

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
    from jitwarden.ops import keys

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
            data = json.dumps(
                {
                    "schema": 1,
                    "algorithm": "ed25519",
                    "key_id": key.id,
                    "signature": key.sign(mbytes).hex(),
                }
            ).encode()
        out.append((info, data))
    return out


# ---------------------------------------------------------------- a real Redis/Valkey server

REMOTE_MANAGER = "jitwarden.runtime.remote_manager:RemoteGuardedCacheManager"


def server_binary() -> str | None:
    """redis-server or valkey-server on PATH (CI installs one), else None."""
    import shutil

    return shutil.which("valkey-server") or shutil.which("redis-server")


class Server:
    """A redis-server/valkey-server of this test on a free port; no persistence."""

    def __init__(self, binary: str, workdir: str, *extra: str):
        import socket
        import subprocess

        from tests.helpers.wait import wait_for

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def answers() -> bool:
            try:
                self.call("PING")
                return True
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"{binary} exited before it answered on port {self.port}"
                    ) from None
                return False

        try:
            wait_for(answers, 10, f"{binary} to answer PING on port {self.port}")
        except BaseException:
            self.stop()  # never left running behind a test that could not use it
            raise

    def call(self, *args):
        from jitwarden.formats import resp

        c = resp.Client(resp.parse_url(self.url), 1.0, 2.0)
        try:
            return c.execute(*args)
        finally:
            c.close()

    def stop(self) -> None:
        import signal

        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()


def remote_env(env: dict, server, role: str = "reader", **extra) -> dict:
    out = dict(
        env,
        JITWARDEN_REMOTE=server.url,
        JITWARDEN_REMOTE_ROLE=role,
        TRITON_CACHE_MANAGER=REMOTE_MANAGER,
        JITWARDEN_HOME=os.path.join(env["HOME"], ".jw"),
    )
    out.update(extra)
    return out


def counters(env: dict) -> dict:
    """The remote counters every process of this node wrote (summed)."""
    d = os.path.join(env["JITWARDEN_HOME"], "stats")
    total: dict = {}
    for n in os.listdir(d) if os.path.isdir(d) else ():
        if n.startswith("remote-") and n.endswith(".json"):
            with open(os.path.join(d, n)) as f:
                for k, v in json.load(f)["counters"].items():
                    total[k] = total.get(k, 0) + v
    return total


def compile_into(part: str, jobs, env: dict, kernel_dir: str) -> list[dict]:
    """Like kernels.build_cache, with the kernel source at one path shared by every node.

    Triton's -lineinfo puts the source path into the cubin while its key does not cover it:
    nodes whose kernel file lives at different paths build different cubins under one key.
    """
    import subprocess
    import sys

    os.makedirs(kernel_dir, exist_ok=True)
    src = os.path.join(kernel_dir, "jw_test_kernels.py")
    if not os.path.exists(src):
        with open(src, "w") as f:
            f.write(kernels.KERNEL_SOURCE)
    os.makedirs(part, exist_ok=True)
    run_env = dict(
        env, TRITON_CACHE_DIR=part, JW_KERNEL_DIR=kernel_dir, JW_JOBS=json.dumps(list(jobs))
    )
    proc = subprocess.run(
        [sys.executable, "-c", kernels.DRIVER], env=run_env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"triton.compile failed:\n{proc.stderr[-4000:]}")
    built = json.loads(proc.stdout.strip().splitlines()[-1])
    for job in built:
        job["id"] = kernels.entry_id(job["hash"])
        job["path"] = os.path.join(part, job["id"])
    return built


def node(tmp_path, name, server, keypair, role="reader", **extra):
    env = node_env(str(tmp_path / name), JITWARDEN_TRUSTED_KEYS=keypair[1], **extra)
    if role == "writer":
        env["JITWARDEN_SIGNING_KEY"] = keypair[0]
    return remote_env(env, server, role)


def build(env, jobs=SMALL_JOBS):
    part = triton_partition(env)
    shared = os.path.join(os.path.dirname(os.path.dirname(env["HOME"])), "kernel-src")
    return part, compile_into(part, [dict(j) for j in jobs], env, shared)
