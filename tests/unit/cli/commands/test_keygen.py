"""``jitwarden keygen`` with paths of the wrong type (issues 21 and 23): one line and exit 2, never a traceback,
never a directory the kernel would not resolve, never "pass --force" for a directory."""

from __future__ import annotations

import os
import stat

import pytest

pytest.importorskip("cryptography", reason="keys need the [fleet] extra (cryptography)")

from tests.helpers.fleet import jw, node_env


@pytest.fixture
def env(tmp_path):
    return node_env(str(tmp_path / "home"))


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _tree(top) -> list:
    return sorted(
        os.path.relpath(os.path.join(d, n), top) for d, ds, fs in os.walk(top) for n in ds + fs
    )


def test_config_dir_naming_a_file(env, tmp_path):
    f = tmp_path / "cfg"
    f.write_text("not a directory")
    rc, _, err = jw(dict(env, JITWARDEN_CONFIG_DIR=str(f)), "keygen")
    assert (
        rc == 2 and f"{f} is not a directory" in _one_line(err) and "JITWARDEN_CONFIG_DIR" in err
    ), err
    assert f.read_text() == "not a directory"


def test_an_unwritable_place_is_one_line(env, tmp_path):
    if os.geteuid() == 0:  # root writes through any mode bits; sysfs refuses even root
        target = "/sys/kernel/jitwarden-key"
    else:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        target = str(ro / "k")
    rc, _, err = jw(env, "keygen", "-o", target)
    assert rc == 2 and "cannot write" in _one_line(err), err
    assert not os.path.lexists(target)


def test_dotdot_is_resolved_as_the_kernel_does_never_collapsed(env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    rc, _, err = jw(env, "keygen", "-o", "x/nonexist/../../y/k")
    assert rc == 2 and "no such directory" in _one_line(err), err
    assert _tree(tmp_path) == before  # abspath would have made y/ here
    (tmp_path / "x" / "real").mkdir(parents=True)
    rc, out, err = jw(
        env, "keygen", "-o", "x/real/../../y/k"
    )  # resolvable up to the last '..': y is made
    assert rc == 0, err
    assert (tmp_path / "y" / "k").is_file() and stat.S_IMODE(
        (tmp_path / "y" / "k").stat().st_mode
    ) == 0o600
    assert (tmp_path / "y" / "k.pub").is_file()


def test_dotdot_through_a_link_follows_the_kernel_not_the_text(env, tmp_path, monkeypatch):
    (tmp_path / "far" / "deep").mkdir(parents=True)
    os.symlink(tmp_path / "far" / "deep", tmp_path / "ln")
    monkeypatch.chdir(tmp_path)
    rc, _, err = jw(env, "keygen", "-o", "ln/../k")  # the kernel: far/deep/.. = far; abspath: ./k
    assert rc == 0, err
    assert (tmp_path / "far" / "k").is_file() and not (tmp_path / "k").exists()


@pytest.mark.parametrize("force", [False, True])
def test_a_directory_as_the_key_never_says_force(env, tmp_path, force):
    d = tmp_path / "keys"
    d.mkdir()
    rc, _, err = jw(env, "keygen", "-o", str(d), *(["--force"] if force else []))
    line = _one_line(err)
    assert rc == 2 and "is a directory" in line and "--force" not in line, err
    assert os.listdir(d) == []
    (tmp_path / "k.pub").mkdir()
    rc, _, err = jw(env, "keygen", "-o", str(tmp_path / "k"), *(["--force"] if force else []))
    line = _one_line(err)
    assert rc == 2 and "k.pub is a directory" in line and "--force" not in line, err
    assert not (tmp_path / "k").exists()


def test_an_existing_key_needs_force_and_a_planted_link_is_replaced_not_followed(env, tmp_path):
    key = tmp_path / "k"
    rc, _, err = jw(env, "keygen", "-o", str(key))
    assert rc == 0, err
    old = key.read_text()
    rc, _, err = jw(env, "keygen", "-o", str(key))
    assert rc == 2 and "already exists (pass --force to replace it)" in _one_line(err)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.unlink(key)
    os.symlink(victim, key)
    rc, _, err = jw(env, "keygen", "-o", str(key), "--force")
    assert rc == 0, err
    assert victim.read_text() == "precious" and not key.is_symlink() and key.read_text() != old
    assert sorted(os.listdir(tmp_path)) == ["k", "k.pub", "victim"]  # no temporary left


def test_keygen_and_metrics_to_the_longest_legal_names(env, tmp_path):
    """Legal names whose temporaries (``.<name>.<random>.tmp``) were past NAME_MAX: a key of 251 bytes (its
    ``.pub`` is 255) and a metrics file of 255."""
    key = tmp_path / ("k" * 251)
    rc, _, err = jw(env, "keygen", "-o", str(key))
    assert rc == 0, err
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600 and os.path.exists(f"{key}.pub")
    prom = tmp_path / ("m" * 250 + ".prom")
    rc, _, err = jw(env, "metrics", "-o", str(prom))
    assert rc == 0, err
    assert prom.is_file()
    assert sorted(os.listdir(tmp_path)) == sorted([key.name, key.name + ".pub", prom.name, "home"])
