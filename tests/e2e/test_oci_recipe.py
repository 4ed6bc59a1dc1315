"""The deployment recipe of docs/fleets.md ("Deployment recipe"), run as written against a real registry.

The builder's commands, the init container's script and the Dockerfile's ``RUN`` step are read out of
the page itself and run by ``sh`` (not ``docker``: there is no engine here), against a real distribution
registry over HTTPS (a self-signed CA given through ``SSL_CERT_FILE``) with htpasswd auth, the
credentials filed as ``docker login`` and a ``dockerconfigjson`` Secret file them. The Dockerfile's
absolute paths are moved into a temp dir; its ``ARG``/``ENV`` become the step's environment.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("cryptography", reason="signed bundles need the [fleet] extra (cryptography)")

from tests.helpers import registry as reghelp
from tests.helpers.fleet import build_guarded, digest_of, entries, jw, node_env, triton_partition

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "fleets.md")
SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


def recipe(name: str) -> str:
    """The shell block between ``<!-- recipe: NAME -->`` and ``<!-- /recipe -->``."""
    text = open(DOC).read()
    m = re.search(rf"<!-- recipe: {name} -->\n```sh\n(.*?)```\n<!-- /recipe -->", text, re.DOTALL)
    assert m, f"docs/fleets.md has no recipe {name!r}"
    return m.group(1)


def dockerfile() -> str:
    m = re.search(r"```dockerfile\n(.*?)```", open(DOC).read(), re.DOTALL)
    assert m
    return m.group(1)


def sh(script: str, env: dict) -> subprocess.CompletedProcess:
    """``script`` by sh, ``jitwarden`` on PATH meaning this checkout."""
    bindir = os.path.join(env["HOME"], ".jw-bin")
    os.makedirs(bindir, exist_ok=True)
    shim = os.path.join(bindir, "jitwarden")
    with open(shim, "w") as f:
        f.write(f'#!/bin/sh\nexec {sys.executable} -m jitwarden "$@"\n')
    os.chmod(shim, 0o755)
    run_env = {**env, "PATH": bindir + os.pathsep + env.get("PATH", ""), "PYTHONPATH": SRC}
    return subprocess.run(
        ["sh", "-ec" if "rc=$?" not in script else "-c", script],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    exe = reghelp.binary()
    if exe is None:
        why = "no docker-registry on PATH (apt-get install docker-registry; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    r = reghelp.Registry(exe, str(tmp_path_factory.mktemp("registry-tls")), auth=True, tls=True)
    yield r
    r.stop()


def test_the_recipe_runs_as_written(registry, tmp_path):
    keys = tmp_path / "keys"
    keys.mkdir()
    ref = f"{registry.host}/kernels/llm-server:1.4.2"
    common = {"SSL_CERT_FILE": registry.ca, "KERNELS_REF": ref}
    # The builder: a warm-up through `jitwarden run`, then `push --rebuild`; `docker login`'s file.
    builder = node_env(
        str(tmp_path / "builder"), JITWARDEN_SIGNING_KEY=str(keys / "builder"), **common
    )
    assert jw(builder, "keygen")[0] == 0
    build_guarded(
        builder
    )  # what `jitwarden run -- python warmup.py` leaves: a guarded, sealed partition
    reghelp.docker_config(builder["HOME"], registry.host)
    script = recipe("builder").replace("jitwarden run -- python warmup.py\n", "")
    p = sh(script, builder)
    assert p.returncode == 0, p.stderr
    # The init container: its script is the YAML's, word for word; run with the pod's environment.
    init = recipe("init-container")
    text = open(DOC).read()
    assert "\n".join("          " + ln for ln in init.splitlines()) in text  # the YAML's args: |
    secret = tmp_path / "registry-secret"
    secret.mkdir()
    auth = reghelp.docker_config(str(secret), registry.host)
    pod = node_env(
        str(tmp_path / "cache"),
        JITWARDEN_TRUSTED_KEYS=str(keys / "builder.pub"),
        REGISTRY_AUTH_FILE=auth,
        **common,
    )
    p = sh(init, pod)
    assert p.returncode == 0, p.stderr
    doc = json.loads(open(os.path.join(pod["HOME"], "jitwarden-pull.json")).read())
    assert doc["counts"]["installed"] == 2 and doc["exit"] == 0
    assert entries(triton_partition(pod)) == entries(triton_partition(builder))
    # A node type nobody built for: exit 4 tolerated by the script, nothing installed.
    other = {**pod, "HOME": str(tmp_path / "cache-other"), "TORCHINDUCTOR_FREEZING": "1"}
    p = sh(init, node_env(other["HOME"], **{k: v for k, v in other.items() if k != "HOME"}))
    assert p.returncode == 0, p.stderr
    # A refused bundle (another key) fails the pod.
    wrong = tmp_path / "wrong"
    assert jw(node_env(str(tmp_path / "w")), "keygen", "-o", str(wrong))[0] == 0
    p = sh(
        init,
        {
            **pod,
            "HOME": str(tmp_path / "cache-wrong"),
            "JITWARDEN_TRUSTED_KEYS": str(wrong) + ".pub",
        },
    )
    assert p.returncode == 1, p.stderr


def test_the_dockerfile_step_bakes_a_verified_cache(registry, tmp_path):
    keys = tmp_path / "keys"
    keys.mkdir()
    ref = f"{registry.host}/kernels/llm-server:1.4.2"
    builder = node_env(
        str(tmp_path / "builder"),
        JITWARDEN_SIGNING_KEY=str(keys / "builder"),
        SSL_CERT_FILE=registry.ca,
    )
    assert jw(builder, "keygen")[0] == 0
    build_guarded(builder)
    reghelp.docker_config(builder["HOME"], registry.host)
    assert jw(builder, "push", ref)[0] == 0
    # The build context: builder.pub and a serving node's saved fingerprint (this machine's, forced apart
    # from the build environment below, which sees another one: an image build has no GPU).
    root = tmp_path / "image"
    ctx = tmp_path / "context"
    ctx.mkdir()
    (ctx / "builder.pub").write_bytes((keys / "builder.pub").read_bytes())
    rc, out, err = jw(builder, "fingerprint", "--format", "json")
    assert rc == 0, err
    (ctx / "node-fingerprint.json").write_text(out)
    steps = dockerfile()
    env = {"PATH": os.environ["PATH"], "SSL_CERT_FILE": registry.ca, "TORCHINDUCTOR_FREEZING": "1"}

    def moved(text: str) -> str:
        return re.sub(r"(?<![\w.])/(etc|opt)/", lambda m: f"{root}/{m.group(1)}/", text)

    for line in re.sub(r"\\\n\s*", " ", steps).splitlines():
        word, _, rest = line.partition(" ")
        if word == "ARG":
            k, _, v = rest.partition("=")
            env[k] = ref if k == "KERNELS_REF" else v  # `docker build --build-arg KERNELS_REF=…`
        elif word == "ENV":
            for pair in rest.split():
                k, _, v = pair.partition("=")
                env[k] = moved(v)
        elif word == "COPY":
            *srcs, dest = rest.split()
            os.makedirs(moved(dest), exist_ok=True)
            for s in srcs:
                with open(ctx / s, "rb") as f, open(os.path.join(moved(dest), s), "wb") as g:
                    g.write(f.read())
        elif word == "RUN":
            m = re.match(r"--mount=type=secret,id=[\w-]+,target=(\S+) (.*)", rest)
            assert m, rest
            target, cmd = moved(m.group(1)), moved(m.group(2))
            reghelp.docker_config(str(tmp_path / "secret"), registry.host)
            with (
                open(tmp_path / "secret" / ".docker" / "config.json", "rb") as f,
                open(target, "wb") as g,
            ):
                g.write(
                    f.read()
                )  # `docker build --secret id=registry-auth,src=~/.docker/config.json`
            full = node_env(env["HOME"], **{k: v for k, v in env.items() if k != "HOME"})
            assert digest_of(full) != digest_of(builder)  # the build's own environment is another
            p = sh(cmd, full)
            assert p.returncode == 0, p.stderr
    # The baked layer: the serving node's partition, what `jitwarden run` there uses, sealed and sound.
    serving = node_env(env["HOME"])
    assert entries(triton_partition(serving)) == entries(triton_partition(builder))
    rc, out, err = jw(serving, "verify", triton_partition(serving), "--format", "json")
    assert rc == 0, out + err
