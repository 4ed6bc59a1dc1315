"""Issue 45, item 2: what cannot be read is unknown, never clean and never damage.

Root reads everything, so each case runs as another uid (``setpriv``, as test_second_principal does) on a
private copy of a real Triton cache that uid owns, with the permission taken away from that uid itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import kernels
from tests.helpers.paths import SRC

UID = GID = 4100

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root (to hand files to another user) and setpriv (to act as one)",
)


@pytest.fixture
def world(built_cache, tmp_path):
    """(env, Triton root) of a user who owns a real cache: HOME and the root theirs, reachable by them."""
    import tempfile

    top = tempfile.mkdtemp(prefix="jw-unread-", dir=os.path.dirname(os.environ["HOME"]))
    os.chmod(top, 0o755)
    home, root = os.path.join(top, "home"), os.path.join(top, "triton")
    os.makedirs(home)
    kernels.copy_cache(built_cache[0], root)
    for d, dirs, files in os.walk(top):
        for n in [d, *(os.path.join(d, x) for x in dirs + files)]:
            os.lchown(n, UID, GID)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "JITWARDEN_", "XDG_"))
    }
    env.update(
        HOME=home,
        XDG_CACHE_HOME=os.path.join(home, ".cache"),
        XDG_CONFIG_HOME=os.path.join(home, ".config"),
        TRITON_CACHE_DIR=root,
        TORCHINDUCTOR_CACHE_DIR=os.path.join(top, "inductor"),
        PYTHONPATH=SRC,
    )
    yield env, root
    shutil.rmtree(top, ignore_errors=True)


def jw(env, *args):
    who = ["setpriv", f"--reuid={UID}", f"--regid={GID}", "--clear-groups"]
    return subprocess.run(
        [*who, sys.executable, "-m", "jitwarden", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
    )


def test_an_unreadable_root_fails_every_gate_with_the_fix(world):
    env, root = world
    os.chmod(root, 0)  # the user's own root, mode 000: `chmod 000 ~/.triton/cache`
    doc = jw(env, "doctor")
    assert doc.returncode == 1, doc.stdout + doc.stderr
    assert "unreadable" in doc.stdout and f"chmod u+rwx {root}" in doc.stdout, doc.stdout
    assert "corrupt" not in doc.stdout and "no errors" not in doc.stdout, doc.stdout
    ver = jw(env, "verify", "--format", "json")
    assert ver.returncode == 1, ver.stderr
    rep = json.loads(ver.stdout)
    assert rep["summary"]["errors"] >= 1, rep["summary"]
    st = jw(env, "status")
    assert st.returncode == 1 and "unreadable" in st.stdout, st.stdout + st.stderr
    assert jw(env, "ls").returncode == 1  # the listing is incomplete: says so by its status
    cl = jw(env, "clean", "--dry-run")
    assert cl.returncode == 1 and "nothing to clean" in (cl.stdout + cl.stderr).lower(), cl.stdout


def test_an_unreadable_entry_or_file_is_unreadable_once_never_corrupt_never_cleaned(world):
    env, root = world
    ids = sorted(n for n in os.listdir(root) if not n.startswith("."))
    whole, one_file = os.path.join(root, ids[0]), os.path.join(root, ids[1])
    cubin = next(f for f in os.listdir(one_file) if f.endswith(".cubin"))
    os.chmod(os.path.join(one_file, cubin), 0)
    os.chmod(whole, 0)
    ver = jw(env, "verify", "--format", "json")
    assert ver.returncode == 1, ver.stderr
    by_id = {e["id"]: e for e in json.loads(ver.stdout)["entries"]}
    for i in ids[:2]:
        codes = [f["code"] for f in by_id[i]["findings"]]
        assert "unreadable" in codes and "corrupt" not in codes, (i, by_id[i]["findings"])
    doc = jw(env, "doctor")
    assert doc.returncode == 1
    lines = [ln for ln in doc.stdout.splitlines() if "may not read" in ln]
    assert len(lines) == 1 and "2 entries" in lines[0], doc.stdout  # counted once, as unreadable
    assert "corrupt" not in doc.stdout, doc.stdout
    assert jw(env, "status").returncode == 1
    cl = jw(env, "clean", "-y")
    assert cl.returncode == 0, cl.stdout + cl.stderr
    os.chmod(whole, 0o755)
    assert os.path.exists(os.path.join(one_file, cubin)) and os.listdir(whole)  # both left in place
    assert not os.path.exists(os.path.join(root, "jitwarden-quarantine")) or not os.listdir(
        os.path.join(root, "jitwarden-quarantine")
    )


def test_clean_refuses_to_select_unreadable_entries():
    from tests.helpers.cli import jw as run_jw

    ran = run_jw("clean", "--code", "unreadable", "--dry-run", in_process=True)
    assert ran.returncode == 2 and "never moves it" in ran.stderr, ran.stderr
