"""A second principal (issue 32): another user who can write the cache forges a kernel and its seal.

Each case is played as that user through ``setpriv`` (the tests run as root, as CI does), on real
Triton entries (``triton.compile`` for sm_90 on the CPU), and every entry point that trusts a seal
is asked about the forged entry: the guard (a real guarded compile: what Triton is handed), the
static launcher's load check (``sweep.check_loaded``), the bytes it is served
(``guards/inductor._sealed_bytes``), "unchanged since sealed" (``seal.unchanged``), the start-up check of
flat dirs (``flatseal.check_dir``), the bundle hook (``guards/inductor_bundle._judge``), ``export`` and ``verify``. The forgeries are the strongest another uid can
make: a seal with the substitute's sha256, ``fs_time_ns = 2**62``, authenticated with the forger's
own key. The end prints the tally: cases, kills, hangs, substitutes served.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import tracemalloc

import pytest

from jitwarden.runtime import flatseal, sweep
from jitwarden.runtime.guards import inductor, inductor_bundle
from jitwarden.store import seal
from tests.helpers.guarded import ADD, compile_jobs
from tests.helpers.paths import SRC

VICTIM, ATTACKER, TEAM = 4000, 4001, 4343
CUBIN = "add_kernel.cubin"
SEAL = ".jitwarden-seal.json"
TALLY = {"cases": 0, "kills": 0, "hangs": 0, "served substitutes": 0}

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root (to hand files to other users) and setpriv (to act as one)",
)
pytestmark = needs_root

FORGE = textwrap.dedent(
    """
    import hashlib, json, os, sys
    from jitwarden.store import seal
    entry, cubin, data_path, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if data_path:
        with open(data_path, "rb") as f:
            data = f.read()
        with open(os.path.join(entry, cubin), "r+b") as f:  # in place: the file is the team's to write
            f.truncate(0)
            f.write(data)
        sha, n = hashlib.sha256(data).hexdigest(), len(data)
    else:  # a sparse file of ``size`` bytes, and a seal that says so
        os.truncate(os.path.join(entry, cubin), size)
        sha, n = "0" * 64, size
    raw = open(os.path.join(entry, ".jitwarden-seal.json"), "rb").read()
    old = json.loads(raw.rsplit(b', "mac"', 1)[0] + b"}" if b', "mac"' in raw else raw)
    old["files"][cubin] = {"sha256": sha, "size": n}
    old["fs_time_ns"] = 2**62
    raw = json.dumps(old, sort_keys=True).encode()
    if hasattr(seal, "signed"):  # authenticated with the forger's own key (a jitwarden without MACs: plain)
        raw = seal.signed(os.path.basename(entry), raw)
    with open(os.path.join(entry, ".forged"), "wb") as f:
        f.write(raw)
    os.replace(os.path.join(entry, ".forged"), os.path.join(entry, ".jitwarden-seal.json"))
    print("forged")
    """
)


@pytest.fixture
def place():
    """A directory other users can reach (pytest's own base dir is private, 700), under this test's sandbox."""
    import pathlib
    import tempfile

    d = tempfile.mkdtemp(prefix="jw-2p-", dir=os.path.dirname(os.environ["HOME"]))
    os.chmod(d, 0o755)
    return pathlib.Path(d)


def _as(uid: int, gid: int, home: str, argv: list, groups: tuple = (), env=None, timeout=300):
    """Run ``argv`` as ``uid`` (``groups``: its supplementary groups, else none) with its own HOME."""
    os.makedirs(home, exist_ok=True)
    os.chown(home, uid, gid)
    who = ["setpriv", f"--reuid={uid}", f"--regid={gid}"]
    who += [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    e = dict(env or os.environ)
    e.update(HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"), PYTHONPATH=SRC)
    e.update(XDG_CACHE_HOME=os.path.join(home, ".cache"))
    TALLY["cases"] += 1
    try:
        p = subprocess.run(
            [*who, *argv], env=e, capture_output=True, text=True, timeout=timeout, cwd="/"
        )
    except subprocess.TimeoutExpired:
        TALLY["hangs"] += 1
        raise
    if p.returncode < 0:
        TALLY["kills"] += 1
    return p


def _forge(
    entry: str, home: str, data: bytes | None, size: int = 0, groups=(), name: str = CUBIN
) -> None:
    path = ""
    if data is not None:
        path = os.path.join(os.path.dirname(home), "substitute.bin")
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o644)
    p = _as(
        ATTACKER,
        ATTACKER,
        home,
        [sys.executable, "-c", FORGE, entry, name, path, str(size)],
        groups=groups,
    )
    assert p.stdout.strip() == "forged", p.stderr


def _tree(place, name: str) -> tuple[str, str, dict]:
    """A guarded cache of the real add kernel: (root, entry path, compile record)."""
    root = str(place / name)
    out = compile_jobs(root, jobs=ADD, guarded=True)
    rec = out["add_sm90"]
    return root, os.path.join(root, rec["id"]), rec


def _chown_tree(root: str, uid: int, gid: int, dmode: int | None = None, fmode: int | None = None):
    for d, dirs, files in os.walk(root):
        os.lchown(d, uid, gid)
        if dmode is not None:
            os.chmod(d, dmode)
        for n in files:
            os.lchown(os.path.join(d, n), uid, gid)
            if fmode is not None:
                os.chmod(os.path.join(d, n), fmode)


def _served(out: dict, evil: bytes) -> bool:
    served = out["add_sm90"]["cubin"] == hashlib.sha256(evil).hexdigest()
    TALLY["served substitutes"] += served
    return served


# ---------------------------------------------------------------- root reads another user's cache


def test_root_on_a_user_owned_cache_never_serves_the_users_forged_kernel(place, evil_cubin):
    """uid 4001 owns the cache root; it swaps the cubin for a subtracting one and writes a matching seal
    (``fs_time_ns`` 2**62). Root's entry points never take it on that seal's word: on main, the check at load
    said unchanged, the launcher was handed the substitute, and a guarded compile loaded it."""
    root, entry, rec = _tree(place, "cache")
    _chown_tree(root, ATTACKER, ATTACKER)
    _forge(entry, str(place / "attacker"), evil_cubin)
    ctimes = [os.lstat(os.path.join(entry, n)).st_ctime_ns for n in os.listdir(entry) if n != SEAL]

    assert seal.read(entry) is None  # another's seal: no seal
    assert seal.unchanged(entry, ctimes) is False
    assert inductor._sealed_bytes(entry, CUBIN) is None
    p = subprocess.run(
        [sys.executable, "-m", "jitwarden", "verify", "--quick", "--format", "json", root],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=SRC),
        timeout=300,
    )
    assert p.returncode == 1, p.stderr
    (e,) = [e for e in json.loads(p.stdout)["entries"] if e["id"] == rec["id"]]
    assert any(
        f["code"] == "unsafe" and f"owned by uid {ATTACKER}" in f["message"] for f in e["findings"]
    ), e["findings"]

    # The load check proves it (a cubin that is not its PTX's is refused) instead of loading it.
    copy_root = str(place / "copy")
    shutil.copytree(root, copy_root, symlinks=True)
    _chown_tree(copy_root, ATTACKER, ATTACKER)
    may, _line = sweep.check_loaded(os.path.join(copy_root, rec["id"]), None)
    assert may is False

    # A real guarded compile as root: Triton is handed the right kernel, compiled again.
    again = compile_jobs(root, jobs=ADD, guarded=True)
    assert not _served(again, evil_cubin)
    assert again["add_sm90"]["cubin"] == rec["cubin"]


def test_a_forged_seal_size_of_1_5_gb_is_never_read_by_the_launcher(place):
    """The forger makes the cubin a sparse 1.5 GB file and seals that size: the launcher's read is bounded
    by no unverified seal (on main it read and held all 1.5 GB)."""
    root, entry, _rec = _tree(place, "cache")
    _chown_tree(root, ATTACKER, ATTACKER)
    _forge(entry, str(place / "attacker"), None, size=1536 << 20)
    with open("/proc/self/io") as f:
        before = int(next(line for line in f if line.startswith("rchar")).split()[1])
    tracemalloc.start()
    try:
        assert inductor._sealed_bytes(entry, CUBIN) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    with open("/proc/self/io") as f:
        read = int(next(line for line in f if line.startswith("rchar")).split()[1]) - before
    assert peak < 16 << 20 and read < 16 << 20, (peak, read)


# ---------------------------------------------------------------- a group-writable team root

VICTIM_RUN = textwrap.dedent(
    """
    import json, os, sys
    from jitwarden.runtime import sweep
    from jitwarden.runtime.guards import inductor
    from jitwarden.store import seal
    os.umask(0o002)  # the victim's umask: what it writes is its group's to write
    entry, cubin, what = sys.argv[1], sys.argv[2], sys.argv[3]
    if what == "seal":
        names = [n for n in os.listdir(entry) if not n.startswith(".jitwarden")]
        seal.write(entry, seal.compute(entry, names), seal.newest_ctime(entry, names))
        print(json.dumps({"sealed": seal.read(entry) is not None}))
    else:
        ctimes = [os.lstat(os.path.join(entry, n)).st_ctime_ns for n in os.listdir(entry)
                  if n != ".jitwarden-seal.json"]
        data = inductor._sealed_bytes(entry, cubin)
        out = {"believed": seal.read(entry) is not None, "unchanged": seal.unchanged(entry, ctimes),
               "bytes": None if data is None else __import__("hashlib").sha256(data).hexdigest()}
        out["may_load"] = sweep.check_loaded(entry, None)[0]
        print(json.dumps(out))
    """
)


def _victim(entry: str, home: str, what: str, env=None) -> dict:
    p = _as(VICTIM, TEAM, home, [sys.executable, "-c", VICTIM_RUN, entry, CUBIN, what], env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("opted_in", [False, True])
def test_a_team_member_forging_in_a_group_writable_root_is_never_served(
    place, evil_cubin, opted_in
):
    """The victim works with umask 002 in a 2775 root of group 4343; a member of that group swaps the cubin
    and forges the seal. Without the opt-in the victim's runtime takes no seal there on its word (the group
    could have written it); named in JITWARDEN_TRUSTED_ROOTS, the victim's own seals are believed and the
    forger's, made with another key, are not. Either way the substitute is never served."""
    root, entry, rec = _tree(place, "team")
    _chown_tree(root, VICTIM, TEAM, dmode=0o2775, fmode=0o664)
    os.chmod(str(place), 0o755)
    env = dict(os.environ)
    if opted_in:
        env["JITWARDEN_TRUSTED_ROOTS"] = root
    home = str(place / "victim")
    assert _victim(entry, home, "seal", env)["sealed"] is opted_in  # believed only where opted in
    honest = _victim(entry, home, "check", env)
    # Without the opt-in nothing there is loaded on a seal's word: the launcher's kernels are compiled afresh.
    assert honest["believed"] is opted_in and honest["may_load"] is opted_in

    _forge(entry, str(place / "attacker"), evil_cubin, groups=(TEAM,))
    forged = _victim(entry, home, "check", env)
    evil = hashlib.sha256(evil_cubin).hexdigest()
    TALLY["served substitutes"] += forged["bytes"] == evil or forged["may_load"]
    assert forged == {"believed": False, "unchanged": False, "bytes": None, "may_load": False}


# ---------------------------------------------------------------- flat dirs (JAX, CuPy) at start-up


def test_start_up_check_of_a_foreign_flat_dir_takes_no_seal_on_its_word(place, evil_cubin):
    """A CuPy-style dir owned by another user, with a file swapped after sealing and the seal forged to
    match: root's start-up check does not skip it as unchanged (on main, ``fs_time_ns`` 2**62 did)."""
    d = place / "cupy"
    d.mkdir()
    name = "ab" * 20 + ".cubin"
    good, bad = evil_cubin[:64], evil_cubin[64:128]
    (d / name).write_bytes(hashlib.sha1(good).hexdigest().encode() + good)
    seal.write(str(d), seal.compute(str(d), [name]), name=seal.flat_name(str(d)))
    _chown_tree(str(d), ATTACKER, ATTACKER)
    _forge(str(d), str(place / "attacker"), hashlib.sha1(bad).hexdigest().encode() + bad, name=name)
    old, at = seal.read_stamped(str(d), name=seal.flat_name(str(d)))
    assert (old, at) == (None, None)  # the unchanged fast path of check_dir has no time to trust
    flatseal.check_dir("cupy", str(d), str(d), [name], None)
    # Judged afresh and sealed by root's own key: the recorded digest is what is there now, not the forger's word.
    assert (
        seal.read_stamped(str(d), name=seal.flat_name(str(d)))[0] is None
    )  # still another's dir: no seal there proves anything to root


def test_the_bundle_hook_and_export_take_no_forged_seal_in_a_foreign_dir(place, evil_cubin):
    """A kernel dir an FX-graph bundle names is already on disk, another user's, cubin and seal forged: the bundle
    hook proves it and refuses it (on main the forged seal said unchanged and torch kept it), and ``export``
    carries no entry on that seal's word."""
    from jitwarden.ops import bundle

    root, entry, _rec = _tree(place, "cache")
    _chown_tree(root, ATTACKER, ATTACKER)
    _forge(entry, str(place / "attacker"), evil_cubin)
    assert bundle.describe("triton", root, entry, sealed=True) == "not sealed"
    st = inductor_bundle._Staged()
    artifact = object()
    st.existing[entry] = (artifact, root)
    inductor_bundle._judge(st)
    TALLY["served substitutes"] += id(artifact) not in st.refused
    assert id(artifact) in st.refused


def test_zz_tally():
    """The line to quote (issue 32's closing note)."""
    print(
        "\nsecond principal: "
        + ", ".join(f"{v} {k}" for k, v in TALLY.items())
        + " (cases: runs as another uid)"
    )
    assert TALLY["served substitutes"] == 0 and TALLY["hangs"] == 0 and TALLY["kills"] == 0
