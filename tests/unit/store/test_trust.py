"""The trust rule (store/trust), the seal keys (store/sealkey) and authenticated seals (store/seal), on real files.

Who may have written it decides what it proves: another owner, everyone-writable, or a group with other
members; a seal proves nothing unless its MAC is made with a key this reader holds (its own, or the team's).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from jitwarden.model.layout import SEAL_FILE
from jitwarden.store import partition, seal, sealkey, trust
from tests.helpers.paths import SRC

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv"
)
OTHER, NOGROUP = 4001, 4343  # a uid and a gid that name no one here: a group we cannot vouch for


def _entry(tmp_path, name="ENTRYKEY") -> str:
    d = tmp_path / name
    d.mkdir()
    (d / "k.cubin").write_bytes(b"\x7fELF" + bytes(range(200)))
    seal.write(str(d), seal.compute(str(d), ["k.cubin"]), seal.newest_ctime(str(d), ["k.cubin"]))
    return str(d)


def _ctimes(entry: str) -> list[int]:
    return [
        os.lstat(os.path.join(entry, n)).st_ctime_ns for n in os.listdir(entry) if n != SEAL_FILE
    ]


# ---------------------------------------------------------------- the rule


def test_the_rule_names_another_owner_everyone_writable_and_a_shared_group(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"")
    os.chmod(f, 0o644)
    assert trust.why_untrusted(os.stat(f)) is None
    os.chmod(f, 0o646)
    assert "writable by everyone" in trust.why_untrusted(os.stat(f))
    if os.geteuid() == 0:
        os.chmod(f, 0o664)
        os.chown(f, 0, NOGROUP)
        assert "writable by group 4343" in trust.why_untrusted(os.stat(f))
        os.chmod(f, 0o644)
        assert trust.why_untrusted(os.stat(f)) is None  # the group may read: nothing to fear
        os.chown(f, OTHER, OTHER)
        assert trust.why_untrusted(os.stat(f)) == "owned by uid 4001"
        # Root's own run is held to it too: no uid-0 exemption.
        assert trust.why_untrusted(os.stat(f), uid=0) == "owned by uid 4001"


def test_a_user_private_group_that_may_write_exposes_nothing():
    import grp
    import pwd

    me = pwd.getpwuid(os.geteuid())
    g = grp.getgrgid(me.pw_gid)
    if g.gr_name != me.pw_name or set(g.gr_mem) - {me.pw_name}:
        pytest.skip("this user's primary group is not a user-private group")
    assert trust.private_group(me.pw_gid, me.pw_uid) is True
    assert trust.private_group(NOGROUP, me.pw_uid) is False


def test_trusted_roots_waive_ownership_never_everyone_writable(tmp_path, monkeypatch):
    inside = tmp_path / "team" / "jitwarden-v1" / "d" / "KEY"
    inside.mkdir(parents=True)
    st = os.stat(inside)
    fake = os.stat_result(
        (st.st_mode | 0o020, *st[1:4], OTHER, *st[5:])
    )  # another's, group-writable
    assert trust.untrusted(str(inside), fake) == f"owned by uid {OTHER}"
    monkeypatch.setenv("JITWARDEN_TRUSTED_ROOTS", str(tmp_path / "team"))
    assert trust.untrusted(str(inside), fake) is None
    assert trust.untrusted(str(tmp_path / "elsewhere"), fake) is not None
    everyone = os.stat_result((st.st_mode | 0o002, *st[1:]))
    assert "everyone" in trust.untrusted(str(inside), everyone)
    monkeypatch.setenv("JITWARDEN_TRUSTED_ROOTS", "*")
    assert trust.untrusted(str(tmp_path / "elsewhere"), fake) is None


@needs_root
def test_root_may_not_use_a_partition_another_user_owns_unless_named(tmp_path, monkeypatch):
    base = tmp_path / "user-cache"
    part = base / "jitwarden-v1" / "abc"
    part.mkdir(parents=True)
    assert partition.unusable(str(part)) is None
    os.chown(base / "jitwarden-v1", OTHER, OTHER)
    assert partition.unusable(str(part)) == f"{base / 'jitwarden-v1'} belongs to uid {OTHER}"
    monkeypatch.setenv("JITWARDEN_TRUSTED_ROOTS", str(base))
    assert partition.unusable(str(part)) is None


# ---------------------------------------------------------------- keys


def test_the_own_key_is_made_once_0600_in_a_0700_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("JITWARDEN_CONFIG_DIR", str(tmp_path / "cfg"))
    k = sealkey.own_key()
    path = tmp_path / "cfg" / "seal" / "key"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert sealkey.parse_key(path.read_bytes(), str(path)) == k and len(k) == 32
    sealkey.forget()
    assert sealkey.own_key() == k  # read back, never made again
    assert os.listdir(path.parent) == ["key"]  # no temporary left behind


def test_a_key_others_may_read_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("JITWARDEN_CONFIG_DIR", str(tmp_path / "cfg"))
    k = sealkey.own_key()
    os.chmod(tmp_path / "cfg" / "seal" / "key", 0o644)
    sealkey.forget()
    assert sealkey.own_key() != k  # refused: a key in memory for this process instead


def test_a_team_key_lets_two_users_trust_each_others_seals(tmp_path, monkeypatch):
    team = tmp_path / "team.key"
    team.write_bytes(sealkey.format_key(os.urandom(32)))
    os.chmod(team, 0o640)
    entry = _entry(tmp_path)  # sealed with this user's own key
    monkeypatch.setenv(
        "JITWARDEN_CONFIG_DIR", str(tmp_path / "someone-else")
    )  # another user's own key
    assert seal.read(entry) is None
    monkeypatch.setenv("JITWARDEN_SEAL_KEY", str(team))
    seal.write(entry, seal.compute(entry, ["k.cubin"]))  # written with the team key
    monkeypatch.setenv("JITWARDEN_CONFIG_DIR", str(tmp_path / "a-third"))
    assert seal.read(entry) is not None
    os.chmod(team, 0o644)  # readable by everyone: no secret, never used
    sealkey.forget()
    assert seal.read(entry) is None


# ---------------------------------------------------------------- authenticated seals


def test_an_unauthenticated_seal_is_no_seal_and_bounds_nothing(tmp_path):
    entry = _entry(tmp_path)
    assert seal.read(entry) is not None and seal.unchanged(entry, _ctimes(entry)) is True
    raw = (tmp_path / "ENTRYKEY" / SEAL_FILE).read_bytes()
    doc = json.loads(raw.rsplit(b', "mac"', 1)[0] + b"}")
    doc["fs_time_ns"] = 2**62
    doc["files"]["k.cubin"]["size"] = 3 << 30
    (tmp_path / "ENTRYKEY" / SEAL_FILE).write_text(json.dumps(doc))  # what anyone could write
    assert seal.read(entry) is None and seal.sealed_at_ns(entry) is None
    assert seal.unchanged(entry, _ctimes(entry)) is False
    forged = raw.replace(b'"size": 204', b'"size": 205')  # content changed, MAC kept
    (tmp_path / "ENTRYKEY" / SEAL_FILE).write_bytes(forged)
    assert seal.read(entry) is None


def test_a_seal_of_the_previous_format_is_unsealed_never_damage(tmp_path):
    entry = _entry(tmp_path)
    old = {
        "schema": 1,
        "files": {"k.cubin": seal.compute(entry, ["k.cubin"]).files["k.cubin"]},
        "fingerprint": None,
        "producer": {},
        "sealed_at": 1.0,
        "fs_time_ns": 2**62,
    }
    (tmp_path / "ENTRYKEY" / SEAL_FILE).write_text(json.dumps(old, sort_keys=True))
    assert (
        seal.read(entry) is None
    )  # no SealError: the entry is proven and sealed again, not quarantined


def test_a_seal_replayed_onto_another_entry_proves_nothing(tmp_path):
    a = _entry(tmp_path, "AAAA")
    b = _entry(tmp_path, "BBBB")  # the same bytes under another key
    shutil.copy(os.path.join(a, SEAL_FILE), os.path.join(b, SEAL_FILE))
    assert seal.read(a) is not None and seal.read(b) is None


@needs_root
def test_root_takes_no_seal_in_an_entry_another_user_owns(tmp_path):
    """Even a seal root itself wrote (its own key) proves nothing once the entry is another's to rewrite."""
    entry = _entry(tmp_path)
    assert seal.read(entry) is not None
    os.chown(entry, OTHER, OTHER)
    assert seal.read(entry) is None and seal.distrusted(entry) == f"owned by uid {OTHER}"
    os.chown(entry, 0, 0)
    os.chown(os.path.join(entry, SEAL_FILE), OTHER, OTHER)
    assert seal.read(entry) is None


@needs_root
def test_another_user_cannot_read_this_users_key_nor_forge_with_its_own(tmp_path):
    entry = _entry(tmp_path)
    key = os.path.join(sealkey.config_dir(), sealkey.KEY_DIR, sealkey.KEY_FILE)
    home = tmp_path / "other"
    home.mkdir()
    os.chown(home, OTHER, OTHER)
    code = f"open({key!r}, 'rb').read()"
    p = subprocess.run(
        ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups"]
        + [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, HOME=str(home), PYTHONPATH=SRC),
    )
    assert p.returncode != 0 and "PermissionError" in p.stderr
    assert seal.read(entry) is not None


def test_doctor_names_a_team_key_the_runtime_cannot_use(tmp_path):
    from jitwarden.ops import config_checks

    team = tmp_path / "team.key"
    team.write_bytes(sealkey.format_key(os.urandom(32)))
    os.chmod(team, 0o644)
    env = dict(os.environ, JITWARDEN_SEAL_KEY=str(team))
    (m,) = [m for m in config_checks.check(env, ping=False) if m.code == "seal-key"]
    assert "readable or writable by everyone" in m.message and "chmod 640" in m.fix
    os.chmod(team, 0o640)
    sealkey.forget()
    assert [m for m in config_checks.check(env, ping=False) if m.code == "seal-key"] == []


def test_a_config_dir_that_cannot_hold_a_key_puts_it_in_jitwardens_own_home(tmp_path, monkeypatch):
    blocked = tmp_path / "ro-config"
    blocked.write_text("a file where the config dir belongs (as a read-only HOME refuses it)\n")
    monkeypatch.setenv("JITWARDEN_CONFIG_DIR", str(blocked))
    monkeypatch.setenv("JITWARDEN_HOME", str(tmp_path / "state"))
    sealkey.forget()
    k = sealkey.own_key()
    path = tmp_path / "state" / "seal" / "key"
    assert sealkey.parse_key(path.read_bytes(), str(path)) == k
    sealkey.forget()
    assert sealkey.own_key() == k  # the same key next process: its seals are believed


@needs_root
def test_root_makes_nothing_in_a_users_config_dir_and_keeps_its_key_elsewhere(
    tmp_path, monkeypatch
):
    """sudo -E: HOME and its config dir are the user's. Root's key is never kept there (the user could swap it)."""
    user_home = tmp_path / "user"
    (user_home / ".config").mkdir(parents=True)
    os.chown(user_home, OTHER, OTHER)
    os.chown(user_home / ".config", OTHER, OTHER)
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(user_home / ".config"))
    monkeypatch.setenv(
        "JITWARDEN_HOME", str(tmp_path / "root-state")
    )  # root's own (as passwd's home would be)
    sealkey.forget()
    k = sealkey.own_key()
    assert not (user_home / ".config" / "jitwarden").exists()
    assert sealkey.parse_key((tmp_path / "root-state" / "seal" / "key").read_bytes(), "") == k
