"""``doctor`` names misconfiguration that otherwise only shows as slowness (issue 23, item 9): a wrong Redis
password, an unreachable server, ``JITWARDEN_REMOTE`` without trusted keys (the remote cache then switches
itself off at run time), a cache dir variable naming a file. Against a real Redis server."""

from __future__ import annotations

import json
import os
import socket

import pytest

from tests.helpers.maint import cli


def _doctor(**env):
    e = dict(os.environ)
    e.update(env)
    p = cli("doctor", "--target", "90", "--format", "json", env=e)
    assert p.returncode in (0, 1), p.stderr
    assert "Traceback" not in p.stderr
    return {pr["code"]: pr for pr in json.loads(p.stdout)["problems"]}


@pytest.fixture
def trusted(keypair):
    """A trusted public key file (``keygen``'s), so only the server's answer is in question."""
    return keypair[1]


@pytest.fixture
def locked_server(server):
    """The real server of ``server`` (tests/conftest.py), its default user now behind a password."""
    server.call("CONFIG", "SET", "requirepass", "right-password")
    return server


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_wrong_redis_password_is_named(locked_server, trusted):
    url = f"redis://:wrong-password@127.0.0.1:{locked_server.port}/0"
    probs = _doctor(JITWARDEN_REMOTE=url, JITWARDEN_TRUSTED_KEYS=trusted)
    assert probs["remote-auth"]["severity"] == "warn"
    assert "wrong-password" not in json.dumps(probs)  # the password is never printed
    assert (
        "refused the credentials" in probs["remote-auth"]["message"] and probs["remote-auth"]["fix"]
    )
    # The right password: no remote problem at all.
    ok = _doctor(
        JITWARDEN_REMOTE=f"redis://:right-password@127.0.0.1:{locked_server.port}/0",
        JITWARDEN_TRUSTED_KEYS=trusted,
    )
    assert not [c for c in ok if c.startswith("remote-")], ok


def test_a_missing_password_is_named(locked_server, trusted):
    probs = _doctor(
        JITWARDEN_REMOTE=f"redis://127.0.0.1:{locked_server.port}/0", JITWARDEN_TRUSTED_KEYS=trusted
    )
    assert "remote-auth" in probs, probs


def test_an_unreachable_server_is_named(trusted):
    probs = _doctor(
        JITWARDEN_REMOTE=f"redis://127.0.0.1:{_free_port()}/0", JITWARDEN_TRUSTED_KEYS=trusted
    )
    assert "cannot reach redis://127.0.0.1:" in probs["remote-unreachable"]["message"]


def test_a_remote_without_trusted_keys_is_named(server):
    probs = _doctor(JITWARDEN_REMOTE=server.url)
    assert "switches itself off at run time" in probs["remote-keys"]["message"]
    assert (
        os.path.join(os.environ["HOME"], ".config", "jitwarden", "trusted-keys")
        in probs["remote-keys"]["fix"]
    )
    assert "remote-unreachable" not in probs and "remote-auth" not in probs


def test_a_remote_url_that_is_not_redis_is_named():
    probs = _doctor(JITWARDEN_REMOTE="http://cache.example:6379")
    assert "the remote cache is off" in probs["remote-config"]["message"]


@pytest.mark.parametrize("var", ["TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "VLLM_CACHE_ROOT"])
def test_a_cache_dir_variable_naming_a_file_is_named(tmp_path, var):
    f = tmp_path / "not-a-dir"
    f.write_text("x\n")
    probs = _doctor(**{var: str(f)})
    assert f"{var}={f} names a file" in probs["bad-cache-dir"]["message"]
    assert probs["bad-cache-dir"]["fix"].startswith(f"export {var}=")


def test_a_sound_configuration_names_nothing():
    probs = _doctor()
    assert not {
        "bad-cache-dir",
        "remote-config",
        "remote-keys",
        "remote-auth",
        "remote-unreachable",
    } & set(probs)
