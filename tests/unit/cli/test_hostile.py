"""Hostile trees: odd names, unreadable dirs (as an unprivileged user), a read-only filesystem,
a 10,000-deep chain, symlink cycles. Each gives a clear message, no traceback, and loses nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from jitwarden.store import quarantine as q
from tests.helpers import kernels
from tests.helpers.cli import jw as run_cli
from tests.helpers.maint import SRC, cli, snapshot, sub

NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def truncate_cubin(entry):
    cub = next(os.path.join(entry, n) for n in os.listdir(entry) if n.endswith(".cubin"))
    data = open(cub, "rb").read()
    open(cub, "wb").write(data[: len(data) // 2])


def no_traceback(p):
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr


def test_names_with_newlines_and_undecodable_bytes(cache):
    root, recs = cache
    broot = os.fsencode(root)
    odd = [b"bad\nname", b"\xff\xfe-not-utf8", b"tab\there"]
    for i, name in enumerate(odd):
        shutil.copytree(os.fsencode(recs["add_sm90"]["path"]), os.path.join(broot, name))
        truncate_cubin(os.fsdecode(os.path.join(broot, name)))
    before = snapshot(root)
    p = cli("clean", root, "--target", "90", "--dry-run")
    no_traceback(p)
    assert p.returncode == 0 and "bad\\nname" in p.stdout and "\\xff\\xfe" in p.stdout
    assert snapshot(root) == before
    p = cli("clean", root, "--target", "90", "-y")
    no_traceback(p)
    assert p.returncode == 0 and "quarantined 3" in p.stdout
    for name in odd:
        assert not os.path.lexists(os.path.join(broot, name))
    p = cli("quarantine", "ls", "--root", root)
    no_traceback(p)
    assert p.returncode == 0 and "3 quarantined" in p.stdout
    ids = [r.id for r in q.list_root(root)]
    p = cli("quarantine", "restore", *ids, "--root", root, "-y")
    no_traceback(p)
    after = snapshot(root)
    assert {
        k: v
        for k, v in after.items()
        if not k.startswith(("jitwarden-quarantine", ".jitwarden-lock"))
    } == before
    p = cli("doctor", root, "--target", "90")
    no_traceback(p)
    assert p.returncode == 1


@pytest.fixture
def nobody_cache(built_cache):
    """A cache owned by nobody under a dir nobody can reach (root reads everything; nobody does not)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to act as an unprivileged user")
    src, manifest = built_cache
    base = tempfile.mkdtemp(prefix="jw-hostile-")
    os.chmod(base, 0o755)
    root = kernels.copy_cache(src, os.path.join(base, "cache"))
    for d, dirs, files in os.walk(base):
        for n in dirs + files:
            os.lchown(os.path.join(d, n), 65534, 65534)
    os.lchown(base, 65534, 65534)
    yield root, {j["label"]: dict(j, path=os.path.join(root, j["id"])) for j in manifest}
    for d, dirs, files in os.walk(base):
        for n in dirs:
            os.chmod(os.path.join(d, n), 0o755)
    shutil.rmtree(base)


def as_nobody(*args, home):
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": home,
        "PYTHONPATH": SRC,
        "XDG_CACHE_HOME": os.path.join(home, ".cache"),
    }
    return run_cli(*args, env=env, prefix=NOBODY, src=None)


def test_unreadable_directory_as_an_unprivileged_user(nobody_cache):
    root, recs = nobody_cache
    home = os.path.dirname(root)
    locked = recs["add_sm90"]["path"]
    truncate_cubin(recs["sub_sm90"]["path"])
    os.chmod(locked, 0o000)  # nobody owns it but cannot list it
    before = dict(snapshot(root).items())
    p = as_nobody("clean", root, "--target", "90", "--dry-run", home=home)
    no_traceback(p)
    assert (
        p.returncode == 0 and "cannot list" not in p.stdout
    )  # unreadable: not damage, not planned
    p = as_nobody("clean", root, "--target", "90", "-y", "--format", "json", home=home)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    done = {d["path"]: d for d in json.loads(p.stdout)["done"]}
    assert done[recs["sub_sm90"]["path"]]["status"] == "quarantined"
    assert locked not in done  # what this user may not read is never moved as corrupt (issue 45)
    os.chmod(locked, 0o755)
    assert sub(snapshot(root), recs["add_sm90"]["id"]) == sub(before, recs["add_sm90"]["id"])
    os.chmod(root, 0o000)
    # A root this user may not open: a one-line usage error for what scans it, an empty list for its quarantine.
    for args, want in (
        (["clean", root, "-y"], 2),
        (["doctor", root], 2),
        (["quarantine", "ls", "--root", root], 0),
    ):
        p = as_nobody(*args, home=home)
        no_traceback(p)
        assert p.returncode == want, (args, p.returncode, p.stdout, p.stderr)
    p = as_nobody("clean", root, "-y", home=home)
    assert p.returncode == 2 and "permission denied" in p.stderr
    os.chmod(root, 0o755)
    p = as_nobody("quarantine", "empty", "--root", root, "-y", home=home)
    no_traceback(p)
    assert p.returncode == 0 and q.list_root(root) == []


def test_read_only_filesystem(built_cache, tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a private read-only mount")
    src, _ = built_cache
    mnt = tmp_path / "ro"
    mnt.mkdir()
    staged = kernels.copy_cache(src, str(tmp_path / "staged"))
    truncate_cubin(os.path.join(staged, min(os.listdir(staged))))
    py = f"PYTHONPATH={SRC} {sys.executable} -m jitwarden"
    script = (
        f"mount -t tmpfs tmpfs {mnt} && cp -a {staged} {mnt}/cache && mount -o remount,ro {mnt} || exit 97; "
        f"{py} clean {mnt}/cache --target 90 -y >/dev/null; echo rc=$?; "
        f"{py} clean {mnt}/cache --target 90 --dry-run >/dev/null; echo rc=$?; "
        f"{py} doctor {mnt}/cache --target 90 >/dev/null; echo rc=$?; "
        f"find {mnt}/cache -type f | wc -l"
    )
    p = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=300
    )
    if p.returncode == 97:
        pytest.skip(f"cannot mount here: {p.stderr.strip()}")
    no_traceback(p)
    lines = p.stdout.split()
    assert lines[:3] == ["rc=2", "rc=0", "rc=1"], (p.stdout, p.stderr)
    assert "read-only file system; nothing changed" in p.stderr
    assert int(lines[3]) == sum(len(fs) for _, _, fs in os.walk(staged))  # nothing lost


def make_chain(parent: str, depth: int) -> None:
    fd = os.open(parent, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        nfd = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    os.close(os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    os.close(fd)


def chain_depth(path: str) -> int:
    fd, n = os.open(path, os.O_RDONLY), 0
    while True:
        try:
            nfd = os.open("d", os.O_RDONLY, dir_fd=fd)
        except FileNotFoundError:
            found = "bottom" in os.listdir(fd)
            os.close(fd)
            return n if found else -1
        os.close(fd)
        fd, n = nfd, n + 1


def test_ten_thousand_deep_chain_and_symlink_cycles(cache):
    root, recs = cache
    deep = recs["add_sm90"]["path"]
    truncate_cubin(deep)
    make_chain(deep, 10_000)
    cyc = recs["sub_sm90"]["path"]
    truncate_cubin(cyc)
    os.symlink("b", os.path.join(cyc, "a"))
    os.symlink("a", os.path.join(cyc, "b"))
    os.symlink(".", os.path.join(cyc, "self"))
    os.symlink(cyc, os.path.join(root, "LOOPLINK"))
    # Two truncated cubins are errors: exit 1 where they are judged, 0 where a clean only plans.
    for args, want in (
        (["verify", root, "--target", "90"], 1),
        (["doctor", root, "--target", "90"], 1),
        (["clean", root, "--target", "90", "--dry-run"], 0),
    ):
        p = cli(*args)
        no_traceback(p)
        assert p.returncode == want, (args, p.stdout, p.stderr)
    p = cli("clean", root, "--target", "90", "-y", "--format", "json")
    no_traceback(p)
    assert p.returncode == 0
    moved = {d["path"] for d in json.loads(p.stdout)["done"] if d["status"] == "quarantined"}
    assert {deep, cyc, os.path.join(root, "LOOPLINK")} <= moved
    recs_q = {r.original_path: r for r in q.list_root(root)}
    assert chain_depth(recs_q[deep].payload_path) == 10_000
    assert os.readlink(os.path.join(recs_q[cyc].payload_path, "a")) == "b"
    p = cli("quarantine", "restore", recs_q[deep].id, "--root", root, "-y")
    no_traceback(p)
    assert chain_depth(deep) == 10_000
    p = cli("quarantine", "empty", "--root", root, "-y")
    no_traceback(p)
    assert (
        p.returncode == 0
        and q.list_root(root) == []
        and os.path.isdir(os.path.join(root, recs["sub_sm90"]["id"])) is False
    )
    p = cli("clean", root, "--target", "90", "-y", "--purge")
    no_traceback(p)
    assert p.returncode == 0 and not os.path.lexists(deep)
    assert not os.path.lexists(os.path.join(root, ".jitwarden-trash"))
