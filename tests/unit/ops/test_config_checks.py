"""Misconfiguration ``doctor`` names (ops/config_checks.py), decided from an environment and one ``PING`` to a
real Redis server: a location variable naming what is not a directory, a remote URL that is not Redis, no
trusted key, wrong credentials, a user the server's ACL forbids ``PING``, a server nobody answers at."""

from __future__ import annotations

import os
import socket

import pytest

from jitwarden.ops import config_checks


def _env(tmp_path, **extra) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), **extra}


def _codes(found) -> list[str]:
    return [m.code for m in found]


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_sound_environment_names_nothing(tmp_path):
    (tmp_path / "triton").mkdir()
    env = _env(
        tmp_path, TRITON_CACHE_DIR=str(tmp_path / "triton"), VLLM_CACHE_ROOT=str(tmp_path / "new")
    )
    assert config_checks.check(env) == []  # a path still to be made is fine


@pytest.mark.parametrize("var", config_checks.DIR_VARS)
def test_every_location_variable_naming_a_file_is_named(tmp_path, var):
    (tmp_path / "f").write_text("x")
    (found,) = config_checks.check(_env(tmp_path, **{var: str(tmp_path / "f")}))
    assert found.code == "bad-cache-dir" and found.message.startswith(
        f"{var}={tmp_path / 'f'} names a file"
    )
    assert found.fix.startswith(f"export {var}=<a directory>")


def test_a_fifo_or_a_dangling_link_is_not_a_directory_and_tilde_is_expanded(tmp_path, monkeypatch):
    env = _env(tmp_path, TRITON_HOME="~/fifo", CUDA_CACHE_PATH=str(tmp_path / "dangling"))
    monkeypatch.setenv("HOME", env["HOME"])  # what ~ means to the tools that read the variable
    os.mkfifo(tmp_path / "home" / "fifo")
    os.symlink(tmp_path / "missing", tmp_path / "dangling")
    found = config_checks.check(env)
    assert [(m.code, m.message.split(" names ")[0]) for m in found] == [
        ("bad-cache-dir", "TRITON_HOME=~/fifo"),
        ("bad-cache-dir", f"CUDA_CACHE_PATH={tmp_path / 'dangling'}"),
    ]
    assert all("something that is not a directory" in m.message for m in found)


def test_a_remote_url_that_is_not_redis_turns_the_remote_off(tmp_path):
    (found,) = config_checks.check(_env(tmp_path, JITWARDEN_REMOTE="http://cache.example:6379"))
    assert found.code == "remote-config" and found.message.endswith("the remote cache is off")
    assert found.fix == "export JITWARDEN_REMOTE=redis://[user:password@]host[:port][/db]"


def test_a_remote_without_a_trusted_key_is_named_before_any_ping(tmp_path):
    env = _env(tmp_path, JITWARDEN_REMOTE=f"redis://127.0.0.1:{_free_port()}/0")
    (found,) = config_checks.check(env, ping=False)
    assert found.code == "remote-keys" and "no public key is trusted" in found.message
    assert os.path.join(env["HOME"], ".config", "jitwarden", "trusted-keys") in found.fix
    (tmp_path / "bad.pub").write_text("not a key\n")
    env["JITWARDEN_TRUSTED_KEYS"] = str(tmp_path / "bad.pub")
    (found,) = config_checks.check(env, ping=False)
    assert found.code == "remote-keys" and "cannot be read" in found.message


def test_a_server_nobody_answers_at_is_unreachable(tmp_path, keypair):
    url = f"redis://127.0.0.1:{_free_port()}/0"
    env = _env(tmp_path, JITWARDEN_REMOTE=url, JITWARDEN_TRUSTED_KEYS=keypair[1])
    (found,) = config_checks.check(env)
    assert found.code == "remote-unreachable" and found.message.startswith(f"cannot reach {url}")


def test_the_server_answers_ping_or_says_why_not(tmp_path, keypair, server):
    env = _env(tmp_path, JITWARDEN_REMOTE=server.url, JITWARDEN_TRUSTED_KEYS=keypair[1])
    assert config_checks.check(env) == []
    server.call("ACL", "SETUSER", "getter", "on", ">getter-pw", "~*", "+get")  # no PING
    env["JITWARDEN_REMOTE"] = f"redis://getter:getter-pw@127.0.0.1:{server.port}/0"
    (found,) = config_checks.check(env)
    assert found.code == "remote-refused" and "refused PING" in found.message
    env["JITWARDEN_REMOTE"] = f"redis://getter:wrong-pw@127.0.0.1:{server.port}/0"
    (found,) = config_checks.check(env)
    assert found.code == "remote-auth" and "refused the credentials" in found.message
    assert "wrong-pw" not in found.message + found.fix  # a password is never printed
