"""Start-up seals of JAX's and CuPy's caches (``runtime/flatseal.py``) on the REAL H200 captures.

Every swap the captures show stock JAX and CuPy loading silently (x-y returned for x+y) is caught here,
including the CuPy one that no check of the file itself can see (its header hashes its own payload).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from jitwarden.model.layout import QUARANTINE_DIR, SEAL_FILE
from jitwarden.model.settings import LOAD_HOOKS
from jitwarden.runtime import flatseal
from tests.helpers.paths import SRC
from tests.unit.adapters.test_cupy import unpack as cupy_unpack
from tests.unit.adapters.test_jax import ADD, AUTOTUNE, SUB
from tests.unit.adapters.test_jax import unpack as jax_unpack

CUPY_ADD = "fe71f674b3b7a5f307b3a6435ca57567f05e6e1a.cubin"  # the add kernel k; cupy_swapped holds sub's bytes under it


def sealed(d: str) -> dict:
    with open(os.path.join(d, SEAL_FILE)) as f:
        return json.load(f)["files"]


def quarantined(root: str) -> list[str]:
    q = os.path.join(root, QUARANTINE_DIR)
    return sorted(os.listdir(q)) if os.path.isdir(q) else []


def copy_bytes(src: str, dst: str, age: float = 3600) -> None:
    with open(src, "rb") as f:
        data = f.read()
    with open(dst, "wb") as f:
        f.write(data)
    t = os.stat(dst).st_mtime - age
    os.utime(dst, (t, t))


@pytest.fixture
def jax_root(tmp_path):
    return jax_unpack("jax_cache", tmp_path)


def test_jax_cache_is_sealed_then_checked(jax_root):
    assert flatseal.check_root("jax", jax_root, "d1") == []
    assert len(sealed(jax_root)) == 30 and ADD in sealed(jax_root)
    assert len(sealed(os.path.join(jax_root, AUTOTUNE))) == 48
    assert flatseal.check_root("jax", jax_root, "d1") == [] and quarantined(jax_root) == []


def test_another_functions_executable_over_a_sealed_key_is_quarantined(jax_root):
    flatseal.check_root("jax", jax_root, "d1")
    copy_bytes(os.path.join(jax_root, SUB), os.path.join(jax_root, ADD), age=0)
    (line,) = flatseal.check_root("jax", jax_root, "d1")
    assert ADD in line and "sealed as" in line
    assert not os.path.exists(os.path.join(jax_root, ADD)) and os.path.exists(
        os.path.join(jax_root, SUB)
    )
    assert len(quarantined(jax_root)) == 1 and ADD not in sealed(jax_root)
    assert (
        flatseal.check_root("jax", jax_root, "d1") == []
    )  # JAX compiles f_add again; nothing left to catch


def test_an_executable_copied_to_a_new_key_is_quarantined(jax_root):
    """Same module name, so the file's own module name cannot tell: the seal does."""
    flatseal.check_root("jax", jax_root, "d1")
    new = "jit_f_sub-" + "0" * 64 + "-cache"
    copy_bytes(os.path.join(jax_root, SUB), os.path.join(jax_root, new))
    (line,) = flatseal.check_root("jax", jax_root, "d1")
    assert (
        new in line
        and f"very bytes of sealed {SUB}" in line
        and not os.path.exists(os.path.join(jax_root, new))
    )


def test_a_moved_autotune_result_is_quarantined(jax_root):
    flatseal.check_root("jax", jax_root, "d1")
    files = sorted(glob.glob(os.path.join(jax_root, AUTOTUNE, "*.pb")))
    copy_bytes(files[0], files[1], age=0)
    (line,) = flatseal.check_root("jax", jax_root, "d1")
    assert os.path.relpath(files[1], jax_root) in line


def test_new_entries_are_sealed_unless_still_being_written_and_gone_ones_dropped(jax_root):
    flatseal.check_root("jax", jax_root, "d1")
    import zlib

    fresh = (
        "jit_f_sub-" + "1" * 64 + "-cache"
    )  # f_sub compiled under another key (other options, say)
    with open(os.path.join(jax_root, SUB), "rb") as f:
        raw = zlib.decompress(f.read())
    with open(os.path.join(jax_root, fresh), "wb") as f:
        f.write(zlib.compress(raw, 1))
    assert flatseal.check_root("jax", jax_root, "d1") == [] and fresh not in sealed(jax_root)
    os.utime(os.path.join(jax_root, fresh), (1, 1))
    os.remove(os.path.join(jax_root, ADD))  # evicted
    assert flatseal.check_root("jax", jax_root, "d1") == []
    assert fresh in sealed(jax_root) and ADD not in sealed(jax_root)


def test_the_captured_cupy_swap_is_caught_by_the_seal(tmp_path):
    root = cupy_unpack("cupy_cache", tmp_path)
    swapped = cupy_unpack("cupy_swapped", tmp_path)
    assert flatseal.check_root("cupy", root, "d1") == [] and len(sealed(root)) == 16
    copy_bytes(
        os.path.join(swapped, CUPY_ADD), os.path.join(root, CUPY_ADD), age=0
    )  # sub's file under add's key
    (line,) = flatseal.check_root("cupy", root, "d1")
    assert (
        CUPY_ADD in line
        and "CuPy compiles it again" in line
        and not os.path.exists(os.path.join(root, CUPY_ADD))
    )


def test_a_damaged_seal_is_resealed_not_fatal(tmp_path):
    root = cupy_unpack("cupy_cache", tmp_path)
    with open(os.path.join(root, SEAL_FILE), "w") as f:
        f.write("{not json")
    assert flatseal.check_root("cupy", root, "d1") == [] and len(sealed(root)) == 16


def _fake_site(tmp_path) -> str:
    """jaxlib and CuPy installed, as dist-info only (activation reads metadata, never imports them)."""
    site = tmp_path / "site"
    for dist in ("jax-0.11.2", "jaxlib-0.11.2", "cupy_cuda13x-14.2.0"):
        d = site / f"{dist}.dist-info"
        d.mkdir(parents=True, exist_ok=True)
        (d / "RECORD").write_text(f"{dist}/x.py,sha256=abc,1\n")
    return str(site)


def _run(tmp_path, env_extra: dict, cmd: list[str]) -> subprocess.CompletedProcess:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "TMPDIR": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([SRC, _fake_site(tmp_path)]),
        **env_extra,
    }
    return subprocess.run(
        [sys.executable, "-m", "jitwarden", "run", "--", *cmd],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
    )


def test_run_partitions_both_caches_and_checks_them_at_start(tmp_path):
    """The start-up check alone (the load hooks off: where they are on, the guards seal and prove instead)."""
    jroot = tmp_path / "jaxcache"
    jroot.mkdir()
    prog = "import os; print(os.environ['JAX_COMPILATION_CACHE_DIR']); print(os.environ['CUPY_CACHE_DIR'])"
    env = {"JAX_COMPILATION_CACHE_DIR": str(jroot), LOAD_HOOKS.name: "0"}
    r = _run(tmp_path, env, [sys.executable, "-c", prog])
    assert r.returncode == 0, r.stderr
    jdir, cdir = r.stdout.split()
    assert os.path.dirname(jdir) == os.path.join(str(jroot), "jitwarden-v1")
    assert os.path.dirname(cdir) == str(
        tmp_path / "home" / ".cupy" / "kernel_cache" / "jitwarden-v1"
    )
    # the partitions are real cache dirs: fill them as the tools would, then start again
    swapped = cupy_unpack("cupy_swapped", tmp_path / "cap")
    cache = cupy_unpack("cupy_cache", tmp_path / "cap")
    for n in os.listdir(cache):
        shutil.copy2(os.path.join(cache, n), os.path.join(cdir, n))
    r = _run(tmp_path, env, ["true"])
    assert r.returncode == 0 and "quarantined" not in r.stderr and len(sealed(cdir)) == 16
    copy_bytes(os.path.join(swapped, CUPY_ADD), os.path.join(cdir, CUPY_ADD), age=0)
    r = _run(tmp_path, env, ["true"])
    assert r.returncode == 0 and f"quarantined CuPy cache entry {CUPY_ADD}" in r.stderr
    assert not os.path.exists(os.path.join(cdir, CUPY_ADD))


def test_run_leaves_jax_off_when_the_user_left_it_off(tmp_path):
    r = _run(
        tmp_path,
        {},
        [sys.executable, "-c", "import os; print(os.environ.get('JAX_COMPILATION_CACHE_DIR'))"],
    )
    assert r.returncode == 0 and r.stdout.strip() == "None"


def test_verify_reports_a_sealed_file_that_changed(tmp_path, capsys):
    """Where a seal exists, verify catches what the file alone cannot show: the captured CuPy swap."""
    from tests.helpers import otherkinds as ok

    root = cupy_unpack("cupy_cache", tmp_path)
    swapped = cupy_unpack("cupy_swapped", tmp_path)
    flatseal.check_root("cupy", root, "d1")
    rc, doc = ok.verify(capsys, root, "--target", "90")
    assert rc == 0 and all(e["sealed"] for e in doc["entries"])
    copy_bytes(os.path.join(swapped, CUPY_ADD), os.path.join(root, CUPY_ADD), age=0)
    rc, doc = ok.verify(capsys, root, "--target", "90")
    assert rc == 1 and {k: v for k, v in ok.codes(doc).items() if v} == {CUPY_ADD: ["corrupt"]}
    jroot = jax_unpack("jax_cache", tmp_path)
    flatseal.check_root("jax", jroot, "d1")
    copy_bytes(os.path.join(jroot, ADD), os.path.join(jroot, SUB), age=0)
    rc, doc = ok.verify(capsys, jroot, "--target", "90")
    assert rc == 1 and {k: v for k, v in ok.codes(doc).items() if v} == {
        SUB: ["corrupt", "mismatch"]
    }


def test_sweep_off_turns_the_check_off_and_says_so(tmp_path):
    from jitwarden.runtime.activation import reduced_protection

    root = cupy_unpack("cupy_cache", tmp_path)
    env = {"JITWARDEN_SWEEP": "0"}
    assert flatseal.startup({"CUPY_CACHE_DIR": root}, {}, "d1", env) == []
    assert not os.path.exists(os.path.join(root, SEAL_FILE))
    ((_setting, cost, _undo),) = reduced_protection(env)
    assert "CuPy" in cost
    assert (
        flatseal.startup({"CUPY_CACHE_DIR": root}, {}, "d1", {}) == [] and len(sealed(root)) == 16
    )


def test_run_leaves_a_remote_jax_cache_alone(tmp_path):
    """JAX takes gs:// and other etils paths: no local partition is made of one."""
    r = _run(
        tmp_path,
        {"JAX_COMPILATION_CACHE_DIR": "gs://bucket/jax-cache"},
        [sys.executable, "-c", "import os; print(os.environ['JAX_COMPILATION_CACHE_DIR'])"],
    )
    assert r.returncode == 0 and r.stdout.strip() == "gs://bucket/jax-cache"
    assert not os.path.exists(os.path.join(str(tmp_path), "gs:"))


def test_a_swap_before_any_seal_is_not_sealed_in(tmp_path):
    """Both entries written, then swapped before a start sealed them: the file alone shows it (JAX's module name),
    so it is quarantined rather than sealed, whatever the names' order."""
    root = jax_unpack("jax_swapped", tmp_path)
    swapped = "jit_f_add-fdabe1d4f303b975f435551660db2bfeb9936ac5371536484be84bdd0100c38b-cache"
    (line,) = flatseal.check_root("jax", root, "d1")
    assert (
        swapped in line and "mismatch" in line and not os.path.exists(os.path.join(root, swapped))
    )
    assert swapped not in sealed(root) and len(sealed(root)) == 6


def test_a_cupy_file_moved_to_another_key_is_quarantined_a_copy_beside_it_is_not(tmp_path):
    root = cupy_unpack("cupy_cache", tmp_path)
    flatseal.check_root("cupy", root, "d1")
    twin = (
        "1" * 40 + ".cubin"
    )  # one cubin under two keys: the same kernel, keyed anew after a CuPy upgrade
    copy_bytes(os.path.join(root, CUPY_ADD), os.path.join(root, twin))
    assert flatseal.check_root("cupy", root, "d1") == [] and twin in sealed(root)
    moved = "2" * 40 + ".cubin"
    os.rename(
        os.path.join(root, "5df1347ceae95afef2943b99cc67bb42fdc3bad2.cubin"),
        os.path.join(root, moved),
    )
    (line,) = flatseal.check_root("cupy", root, "d1")
    assert (
        moved in line
        and "moved or copied" in line
        and not os.path.exists(os.path.join(root, moved))
    )


def test_a_swap_written_a_moment_before_the_start_is_refused_not_left_to_settle(tmp_path):
    """A never-sealed file written in the last seconds is not sealed (it may still be being written), but one
    holding another module's executable is quarantined at once: the H200 run showed a swap made right after
    the build, then a start, was otherwise left in place and served (add5 = 3.0 under ``jitwarden run``)."""
    root = jax_unpack("jax_swapped", tmp_path)
    swapped = "jit_f_add-fdabe1d4f303b975f435551660db2bfeb9936ac5371536484be84bdd0100c38b-cache"
    now = __import__("time").time()
    for n in os.listdir(root):
        p = os.path.join(root, n)
        if os.path.isfile(p):
            os.utime(p, (now, now))  # everything just written
    (line,) = flatseal.check_root("jax", root, "d1")
    assert (
        swapped in line and "mismatch" in line and not os.path.exists(os.path.join(root, swapped))
    )
    assert not os.path.exists(os.path.join(root, SEAL_FILE)) or swapped not in sealed(root)


def test_a_swap_in_a_jax_dir_of_30000_files_is_caught_at_start_up_and_by_verify(tmp_path, capsys):
    """One seal covers the whole dir: 30,000 JAX names make it ~5 MB. It used to be read with the 4 MiB bound of an
    entry's seal, so past ~24,000 files it went unread: every start rehashed every file and resealed what it
    found, a swapped file included, and verify called every file unsealed."""
    import hashlib

    from jitwarden.store import seal
    from tests.helpers import otherkinds as ok

    root = str(tmp_path / "jax")
    os.makedirs(root)
    names = []
    for i in range(30000):
        names.append(f"jit_f-{hashlib.sha256(str(i).encode()).hexdigest()}-cache")
        with open(os.path.join(root, names[-1]), "wb") as f:
            f.write(
                b"not JAX's own bytes: " + i.to_bytes(4, "little") * 16
            )  # unrecognised (info): the seal judges
    seal.write(
        root,
        seal.compute(root, names, "d1", {"by": "start-up", "kind": "jax"}),
        seal.newest_ctime(root, names),
        name=seal.flat_name(root),  # a flat seal binds its dir's whole path
    )
    assert os.path.getsize(os.path.join(root, SEAL_FILE)) > seal.MAX_SEAL
    assert flatseal.check_root("jax", root, "d1") == []  # unchanged: read, not rewritten
    victim = names[12345]
    copy_bytes(
        os.path.join(root, names[2]), os.path.join(root, victim), age=0
    )  # another entry's bytes
    rc, doc = ok.verify(capsys, root, "--kind", "jax")
    assert rc == 1 and [k for k, v in ok.codes(doc).items() if "corrupt" in v] == [victim]
    (line,) = flatseal.check_root("jax", root, "d1")
    assert victim in line and "does not match its sealed sha256" in line
    assert (
        quarantined(root)
        and not os.path.exists(os.path.join(root, victim))
        and victim not in sealed(root)
    )


def test_sealing_one_file_never_carries_a_record_of_a_file_changed_since(tmp_path):
    """The load hooks seal file by file (flatseal.seal_file). A new seal's time vouches for every file it lists
    (the start-up check skips hashing what is older), so a sealed file swapped for one of the same size before
    the next file is sealed must leave the seal, not ride into it."""
    import hashlib

    d = cupy_unpack("cupy_cache", tmp_path)
    a, b = sorted(n for n in os.listdir(d) if n.endswith(".cubin"))[:2]

    def rec(n):
        with open(os.path.join(d, n), "rb") as f:
            data = f.read()
        return hashlib.sha256(data).hexdigest(), len(data)

    assert flatseal.seal_file("cupy", d, a, *rec(a), "test")
    with open(os.path.join(d, a), "r+b") as f:  # the same size, another byte
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    assert flatseal.seal_file("cupy", d, b, *rec(b), "test")
    assert set(flatseal.sealed_files(d)) == {b}
    swapped_sha, size = rec(a)
    assert not flatseal.seal_file(
        "cupy", d, a, "0" * 64, size, "test"
    )  # not what is on disk: refused


def test_a_seal_lock_held_by_another_process_is_waited_for_once_a_run_and_named(
    tmp_path, recwarn, monkeypatch
):
    """Issue 42: a lock another process (another uid's, a stuck one) holds on a team cache dir cost ~2 s per jitted
    function, every run, silently. It is waited for once, then not again in this process, and one line names it."""
    import subprocess
    import sys

    from jitwarden.model.layout import ENTRY_LOCK_FILE
    from jitwarden.runtime import flathooks, say

    d = tmp_path / "jaxc"
    d.mkdir()
    (d / ENTRY_LOCK_FILE).write_bytes(b"")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
            str(d / ENTRY_LOCK_FILE),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        flatseal._STUCK.pop(str(d), None)
        say._said.discard(f"stuck:{d}")
        names = []
        for i in range(3):
            name = f"jit_f{i}-{'a' * 64}-cache"
            (d / name).write_bytes(b"x" * 10)
            names.append(name)
        assert (
            flathooks.seal_written("jax", str(d), names[0], b"x" * 10) is False
        )  # waits, then gives up
        assert "held by another process" in flatseal.stuck(str(d))

        def no_wait(_s):
            raise AssertionError("waited for a lock already known to be stuck")

        monkeypatch.setattr(flatseal.time, "sleep", no_wait)
        assert (
            flathooks.seal_written("jax", str(d), names[1], b"x" * 10) is False
        )  # not waited for again
        assert flathooks.seal_written("jax", str(d), names[2], b"x" * 10) is False
        lines = [
            str(w.message) for w in recwarn if "cannot be sealed in this run" in str(w.message)
        ]
        assert (
            len(lines) == 1
            and ENTRY_LOCK_FILE in lines[0]
            and "held by another process" in lines[0]
        )
    finally:
        holder.kill()
        holder.wait()
