"""The scan's memo (ops/scanmemo.py) between two principals, each played through ``setpriv`` (the tests run as
root, as CI does), on real Triton entries: root scanning with a user's HOME (``sudo -E``) leaves nothing of its
own in that HOME for the user's later scans to refuse, and a file another uid of the team rewrites in place
between two of the victim's scans is judged again from its bytes, never recalled."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from tests.helpers import kernels
from tests.helpers.paths import SRC

VICTIM, ATTACKER, TEAM = 4000, 4001, 4343

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root (to hand files to other users) and setpriv (to act as one)",
)


@pytest.fixture
def place():
    """A directory other users can reach (pytest's own base dir is private, 700), under this test's sandbox."""
    import pathlib
    import tempfile

    d = tempfile.mkdtemp(prefix="jw-memo-2p-", dir=os.path.dirname(os.environ["HOME"]))
    os.chmod(d, 0o755)
    return pathlib.Path(d)


def _env(home: str, **more) -> dict:
    e = dict(os.environ, HOME=home, PYTHONPATH=SRC, XDG_CACHE_HOME=os.path.join(home, ".cache"))
    e.pop("JITWARDEN_HOME", None)
    e.update(XDG_CONFIG_HOME=os.path.join(home, ".config"), **more)
    return e


def _verify(root: str, home: str, uid: int | None = None, groups: tuple = (), **env) -> str:
    who = []
    if uid is not None:
        who = ["setpriv", f"--reuid={uid}", f"--regid={uid}"]
        who += [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    p = subprocess.run(
        [
            *who,
            sys.executable,
            "-m",
            "jitwarden",
            "verify",
            "--quick",
            "--format",
            "json",
            "--target",
            "90",
            root,
        ],
        env=_env(home, **env),
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
    )
    assert p.returncode in (0, 1), p.stderr[-2000:]
    return re.sub(r'"elapsed_s": ?[0-9.eE+-]+', '"elapsed_s": 0', p.stdout)


def _cache(place, built_cache, name: str, own=None) -> str:
    """A copy of the session's real Triton cache, ``own(dir, files)`` applied to each dir (a chown, a chmod)."""
    src, _ = built_cache
    root = kernels.copy_cache(src, str(place / name))
    for d, _dirs, files in os.walk(root):
        if own:
            own(d, [os.path.join(d, f) for f in files])
    time.sleep(2.1)  # past the memo's racy window (a chown moves ctimes too): these stamps are kept
    return root


def _owner(uid: int, gid: int, dmode: int | None = None, fmode: int | None = None):
    def own(d: str, files: list[str]) -> None:
        for p, mode in [(d, dmode), *((f, fmode) for f in files)]:
            os.chown(p, uid, gid)
            if mode is not None:
                os.chmod(p, mode)

    return own


def _owned_by(path: str, uid: int) -> list[str]:
    got = []
    for d, dirs, files in os.walk(path):
        for n in [d, *(os.path.join(d, f) for f in files)]:
            if os.lstat(n).st_uid == uid:
                got.append(n)
    return got


def test_root_with_a_users_home_makes_no_scan_memo_there_and_the_user_keeps_one(place, built_cache):
    """Root's scan of its own cache with a user's HOME (``sudo -E``) writes no memo into the user's jitwarden
    dir: a root-owned ``scan/`` there would make every later scan of the user's miss, silently."""
    home = str(place / "victim")
    state = os.path.join(home, ".cache", "jitwarden")
    os.makedirs(state)
    for d, _dirs, _files in os.walk(home):
        os.chown(d, VICTIM, VICTIM)
    roots_cache = _cache(
        place, built_cache, "roots-cache"
    )  # root's own cache, judged by the quick path
    _verify(roots_cache, home)
    memos = os.path.join(state, "scan")
    assert not os.path.lexists(memos)
    mine = _cache(place, built_cache, "victims-cache", _owner(VICTIM, VICTIM))
    first = _verify(mine, home, VICTIM)
    assert os.listdir(memos) and not _owned_by(memos, 0)  # the user's own memo
    assert _verify(mine, home, VICTIM) == first


def test_a_file_another_uid_rewrites_in_place_is_judged_again(place, built_cache):
    home = str(place / "victim")
    os.makedirs(home)
    os.chown(home, VICTIM, VICTIM)
    team = _cache(
        place, built_cache, "team-cache", _owner(VICTIM, TEAM, 0o2775, 0o664)
    )  # the team's
    before = json.loads(_verify(team, home, VICTIM, (TEAM,)))
    clean = [e for e in before["entries"] if e["arch"] == 90 and not e["findings"]]
    assert clean
    entry = clean[0]["path"]
    cubin = next(os.path.join(entry, n) for n in os.listdir(entry) if n.endswith(".cubin"))
    p = subprocess.run(  # the attacker, in the team, spoils its ELF header in place, the size kept (only the owner may set times)
        [
            "setpriv",
            f"--reuid={ATTACKER}",
            f"--regid={ATTACKER}",
            f"--groups={TEAM}",
            sys.executable,
            "-c",
            "import sys\nwith open(sys.argv[1], 'r+b') as f: f.write(b'\\0\\0\\0\\0')",
            cubin,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    after = _verify(team, home, VICTIM, (TEAM,))
    assert after == _verify(team, home, VICTIM, (TEAM,), JITWARDEN_SCAN_MEMO="0")
    spoiled = next(e for e in json.loads(after)["entries"] if e["path"] == entry)
    assert spoiled["findings"]  # what the bytes say now, not what the memo said


def _run(home: str, *argv: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jitwarden", *argv],
        env=_env(home, **env),
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
    )


def test_root_with_a_users_home_leaves_nothing_of_its_own_there(place, built_cache):
    """Every state file jitwarden keeps under its home and config dir (the fingerprint memo, the activation memo,
    verify's and budget's stats, the quarantine registry, the scan memo) is written only into a dir of the
    writer's alone: root with a user's HOME (``sudo -E``) leaves no root-owned dir or file there, whether the
    user's jitwarden dirs exist yet or not, and the commands still succeed."""
    for made in (True, False):
        home = str(place / f"victim-{made}")
        os.makedirs(
            os.path.join(home, ".cache", "jitwarden") if made else home
        )  # the user ran jitwarden before, or never
        os.makedirs(os.path.join(home, ".config"))
        for d, _dirs, _files in os.walk(home):
            os.chown(d, VICTIM, VICTIM)
        roots_cache = _cache(place, built_cache, f"roots-cache-{made}")
        assert _verify(roots_cache, home)  # fingerprint memo, scan memo, stats/last-verify.json
        p = _run(home, "run", "--", sys.executable, "-c", "pass")  # the activation memo
        assert p.returncode == 0, p.stderr[-2000:]
        p = _run(home, "budget", "1G", "--dry-run")  # stats/last-budget.json where not dry
        assert p.returncode in (0, 1), p.stderr[-2000:]
        victim = next(iter(os.listdir(roots_cache)))
        p = _run(
            home, "clean", "--yes", os.path.join(roots_cache, victim)
        )  # the quarantine registry
        assert p.returncode in (0, 1), p.stderr[-2000:]
        left = [os.path.relpath(p, home) for p in _owned_by(home, 0)]
        assert left == [], f"root-owned in the user's home (made={made}): {left}"
