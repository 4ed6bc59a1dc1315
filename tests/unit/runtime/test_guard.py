"""The guarded Triton cache manager, on real Triton compiles (explicit GPUTarget, CPU only).

Every compile runs in a fresh interpreter with ``TRITON_CACHE_MANAGER`` set, exactly
as activation sets it; the entries are then damaged the way the seed report
describes (README, "The problem"), and the next compile must return a fresh kernel, not the damage.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest

from jitwarden.adapters import triton as adapter
from jitwarden.model.entries import Judge
from jitwarden.model.layout import QUARANTINE_DIR, SEAL_FILE
from jitwarden.store import quarantine, seal
from tests.helpers import kernels
from tests.helpers.cli import jw as run_cli
from tests.helpers.guarded import (
    DRIVER,
    JOBS,
    MANAGER,
    SRC,
    assert_sound,
    compile_jobs,
    kernel_dir,
    quarantined,
)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Fresh, stock compiles of JOBS: the cubins every guarded result must equal."""
    d = tmp_path_factory.mktemp("ref") / "cache"
    return compile_jobs(str(d), guarded=False)


def test_writes_are_sealed(tmp_path, reference):
    root = str(tmp_path / "cache")
    out = compile_jobs(root)
    for job in JOBS:
        assert out[job["label"]]["cubin"] == reference[job["label"]]["cubin"]
        assert_sound(root, out[job["label"]]["id"])
    again = compile_jobs(root)  # cache hits through the guard
    assert {k: v for k, v in again.items() if k != "_stderr"} == {
        k: v for k, v in out.items() if k != "_stderr"
    }
    assert quarantined(root) == []


def _cubin(root, rec):
    entry = os.path.join(root, rec["id"])
    return os.path.join(entry, next(n for n in os.listdir(entry) if n.endswith(".cubin")))


def _swap_other_kernel(root, out):
    shutil.copyfile(_cubin(root, out["sub_sm90"]), _cubin(root, out["add_sm90"]))


def _truncate_cubin(root, out):
    p = _cubin(root, out["add_sm90"])
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) // 2)


def _damage_metadata(root, out):
    p = os.path.join(root, out["add_sm90"]["id"], "add_kernel.json")
    with open(p, "w") as f:
        f.write('{"hash": "trunc')


@pytest.mark.parametrize("unsealed", [False, True], ids=["sealed", "legacy"])
@pytest.mark.parametrize(
    "tamper",
    [_swap_other_kernel, _truncate_cubin, _damage_metadata],
    ids=["other-kernel-cubin", "truncated-cubin", "damaged-metadata"],
)
def test_tampered_entry_is_a_miss_and_quarantined(tmp_path, reference, tamper, unsealed):
    root = str(tmp_path / "cache")
    out = compile_jobs(root, guarded=not unsealed)  # legacy: written by stock Triton, never sealed
    victim = out["add_sm90"]["id"]
    tamper(root, out)
    assert not os.path.exists(os.path.join(root, victim, SEAL_FILE)) or not unsealed
    again = compile_jobs(root)
    assert again["add_sm90"]["cubin"] == reference["add_sm90"]["cubin"]
    assert again["sub_sm90"]["cubin"] == reference["sub_sm90"]["cubin"]
    recs = quarantined(root)
    assert [r.entry_id for r in recs] == [victim], recs
    assert recs[0].reason in ("corrupt", "mismatch")
    assert "quarantined Triton cache entry" in again["_stderr"]
    assert_sound(root, victim)  # rebuilt in place, sealed
    # Legacy entries that pass the structural checks are sealed on first use, not quarantined.
    for label in ("add_b256_sm90", "sub_sm90"):
        assert_sound(root, out[label]["id"])


def test_copied_tree_is_foreign_path(tmp_path, reference):
    first = str(tmp_path / "first")
    out = compile_jobs(first)
    second = str(tmp_path / "second")
    shutil.copytree(first, second)  # its group files still point into `first`
    again = compile_jobs(second)
    for job in JOBS:
        assert again[job["label"]]["cubin"] == reference[job["label"]]["cubin"]
    recs = quarantined(second)
    assert sorted(r.entry_id for r in recs) == sorted(out[j["label"]]["id"] for j in JOBS)
    assert {r.reason for r in recs} == {"foreign-path"}
    for job in JOBS:
        entry = os.path.join(second, again[job["label"]]["id"])
        grp = json.load(
            open(os.path.join(entry, next(n for n in os.listdir(entry) if n.startswith("__grp__"))))
        )
        assert all(p.startswith(entry + os.sep) for p in grp["child_paths"].values())
        assert_sound(second, again[job["label"]]["id"])
    assert quarantined(first) == []


def test_quarantine_is_restorable(tmp_path, reference):
    root = str(tmp_path / "cache")
    out = compile_jobs(root)
    _truncate_cubin(root, out)
    compile_jobs(root)
    (rec,) = quarantined(root)
    assert rec.original_path == os.path.join(root, out["add_sm90"]["id"])
    with pytest.raises(quarantine.QuarantineError):
        quarantine.restore(rec)  # the rebuilt entry is there
    displaced = quarantine.restore(rec, replace=True)
    assert displaced is not None and displaced.reason == "replaced"
    assert os.path.getsize(_cubin(root, out["add_sm90"])) < os.path.getsize(
        _cubin(root, out["sub_sm90"])
    )
    assert os.path.isdir(os.path.join(root, QUARANTINE_DIR, displaced.id))


_LAUNCHER = textwrap.dedent(
    '''
    import os, sys
    from triton.runtime.build import compile_module_from_src
    src = """
    #include <Python.h>
    static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "jw_launch", NULL, -1, NULL};
    PyMODINIT_FUNC PyInit_jw_launch(void) { return PyModule_Create(&m); }
    """
    mod = compile_module_from_src(src, "jw_launch")
    print(mod.__file__)
    '''
)


def _launcher(root):
    env = dict(
        os.environ,
        TRITON_CACHE_DIR=root,
        TRITON_CACHE_MANAGER=MANAGER,
        PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    proc = subprocess.run(
        [sys.executable, "-c", _LAUNCHER], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1], proc.stderr


def _cached(root, loaded):
    """The cache's own file behind the private copy Triton imported (the guard serves verified copies)."""
    name = os.path.basename(loaded).split(".", 1)[1]  # "<n>.<name>": one private copy per use
    assert not loaded.startswith(root + os.sep), (
        "Triton imported the cache's file, not the verified copy"
    )
    (so,) = [
        os.path.join(root, e, name)
        for e in os.listdir(root)
        if os.path.exists(os.path.join(root, e, name))
    ]
    assert open(so, "rb").read() == open(loaded, "rb").read() if os.path.exists(loaded) else True
    return so


def test_launcher_module_is_sealed_and_verified(tmp_path):
    root = str(tmp_path / "cache")
    so = _cached(root, _launcher(root)[0])
    entry = os.path.dirname(so)
    s = seal.read(entry)
    assert s is not None and list(s.files) == [os.path.basename(so)] and seal.check(entry, s) == []
    with open(so, "r+b") as f:  # a damaged launcher would crash or misbehave at import
        f.truncate(64)
    loaded, err = _launcher(root)
    assert _cached(root, loaded) == so and "quarantined" in err
    (rec,) = quarantined(root)
    assert rec.entry_id == os.path.basename(entry) and rec.reason == "corrupt"
    assert seal.check(entry, seal.read(entry)) == []


def test_eight_concurrent_writers_end_sealed_and_consistent(tmp_path, reference):
    root = str(tmp_path / "cache")
    jobs = kernels.jobs_for(archs=(90, 120), variants=kernels.VARIANTS[:4])
    kdir = kernel_dir()
    env = dict(
        os.environ,
        TRITON_CACHE_DIR=root,
        TRITON_CACHE_MANAGER=MANAGER,
        JW_KERNEL_DIR=kdir,
        JW_JOBS=json.dumps(jobs),
        PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", DRIVER],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    results = []
    for p in procs:
        so, se = p.communicate(timeout=300)
        assert p.returncode == 0, se[-3000:]
        results.append(json.loads(so.strip().splitlines()[-1]))
    assert all(r == results[0] for r in results)
    for label in ("add_sm90", "add_b256_sm90", "sub_sm90"):
        assert results[0][label]["cubin"] == reference[label]["cubin"]
    ids = sorted({r["id"] for r in results[0].values()})
    assert sorted(adapter.list_entry_names(root)[0]) == ids
    for entry_id in ids:
        assert_sound(root, entry_id)
    assert quarantined(root) == []
    from jitwarden.ops import (
        rebuild,
    )  # verify --rebuild's engine: re-assemble each PTX, compare with the cubin

    entries = [
        adapter.inspect_entry(root, i, Judge(host_machine=adapter.host_machine())) for i in ids
    ]
    results = rebuild.verify_entries(entries, rebuild.RebuildOptions(jobs=2))
    assert len(results) == len(ids)
    assert {r.verdict for r in results.values()} == {"verified"}, {
        p: r.message for p, r in results.items()
    }


def _truncate_ptx(root, out):
    p = os.path.join(root, out["add_sm90"]["id"], "add_kernel.ptx")
    with open(p, "r+b") as f:
        f.truncate(100)


def test_truncated_ir_text_is_caught_on_the_hit_path(tmp_path, reference):
    root = str(tmp_path / "cache")
    out = compile_jobs(root)
    _truncate_ptx(root, out)
    again = compile_jobs(root)
    assert again["add_sm90"]["cubin"] == reference["add_sm90"]["cubin"]
    assert [r.entry_id for r in quarantined(root)] == [out["add_sm90"]["id"]]
    assert_sound(root, out["add_sm90"]["id"])


def test_mismatch_while_a_writer_is_mid_group_is_a_plain_miss(tmp_path, reference):
    """A reader never quarantines an entry another process is (re)writing: it misses, compiles, and
    its own put_group leaves the entry consistent and sealed."""
    import fcntl

    from jitwarden.runtime.guards import triton as guard

    root = str(tmp_path / "cache")
    out = compile_jobs(root)
    entry = os.path.join(root, out["add_sm90"]["id"])
    _swap_other_kernel(root, out)
    fd = os.open(os.path.join(entry, guard.ENTRY_WRITERS_FILE), os.O_RDONLY | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # exactly what a writer holds from its first put to its seal
        again = compile_jobs(root)
    finally:
        os.close(fd)
    assert again["add_sm90"]["cubin"] == reference["add_sm90"]["cubin"]
    assert quarantined(root) == []
    assert_sound(root, out["add_sm90"]["id"])


def _cli(args):
    return run_cli(*args, timeout=120)


def test_quarantine_command_lists_and_restores(tmp_path, reference):
    base = str(tmp_path / "volume")
    root = os.path.join(
        base, "jitwarden-v1", "0123456789abcdef"
    )  # a partition, as activation makes them
    out = compile_jobs(root)
    _truncate_cubin(root, out)
    compile_jobs(root)
    listed = _cli(["quarantine", "list", "--root", base, "--format", "json"])
    assert listed.returncode == 0, listed.stderr
    (rec,) = json.loads(listed.stdout)["quarantined"]
    assert (
        rec["entry_id"] == out["add_sm90"]["id"]
        and rec["reason"] == "corrupt"
        and rec["fingerprint"] == "0123456789abcdef"
    )
    table = _cli(["quarantine", "list", "--root", base])
    assert (
        rec["entry_id"][:12] in table.stdout and "corrupt" in table.stdout
    )  # the short id restore takes back
    asked = _cli(["quarantine", "restore", rec["id"][:20], "--root", base, "--replace"])
    assert asked.returncode == 2 and "pass -y" in asked.stderr  # not a terminal: never assumes yes
    refused = _cli(["quarantine", "restore", rec["id"], "--root", base, "-y"])
    assert refused.returncode == 2 and "--replace" in refused.stderr
    dry = _cli(["quarantine", "restore", rec["id"], "--root", base, "--replace", "--dry-run"])
    assert dry.returncode == 0 and f"restore {rec['entry_id'][:12]} into" in dry.stdout
    assert len(quarantined(root)) == 1
    done = _cli(
        ["quarantine", "restore", rec["id"], "--root", base, "--replace", "-y", "--format", "json"]
    )
    assert done.returncode == 0, done.stderr
    assert [d["quarantine_id"] for d in json.loads(done.stdout)["done"]] == [rec["id"]]
    assert [r.reason for r in quarantined(root)] == ["replaced"]  # the rebuilt entry moved aside
    purge = _cli(["quarantine", "purge", "--all", "--root", base, "-y"])
    assert purge.returncode == 0 and quarantined(root) == []


def _plant(path: str, shape: str, outside: str) -> None:
    if shape == "symlink-out":
        os.symlink(outside, path)
    elif shape == "fifo":
        os.mkfifo(path)
    else:
        os.mkdir(path)


@pytest.mark.parametrize("shape", ["symlink-out", "fifo", "dir"])
@pytest.mark.parametrize("lock_name", [".jitwarden-writers", ".jitwarden-lock"])
def test_an_entry_lock_that_is_no_regular_file_never_takes_the_workload_down(
    tmp_path, reference, lock_name, shape
):
    """A symlink, FIFO or directory planted as an entry's lock file: the guard never raises into Triton, never
    follows the link nor blocks on the FIFO; it compiles and publishes as stock Triton does (seals what it
    can lock), warns once per process, and never serves from an entry whose lock it cannot take."""
    from jitwarden.runtime.guards import triton as guard
    from tests.helpers.guarded import ADD

    root = str(tmp_path / "cache")
    eid = reference["add_sm90"]["id"]
    entry = os.path.join(root, eid)
    os.makedirs(entry)
    outside = str(tmp_path / "outside-target")
    planted = os.path.join(entry, lock_name)
    _plant(planted, shape, outside)
    for _ in range(2):  # a fresh write, then a lookup of what that write published
        out = compile_jobs(root, jobs=ADD)
        assert out["add_sm90"]["cubin"] == reference["add_sm90"]["cubin"]
        assert "Traceback" not in out["_stderr"]
        assert out["_stderr"].count("cannot lock Triton cache entry") <= 1, out["_stderr"]
    assert not os.path.lexists(outside)  # the link was never followed, its target never made
    if shape == "symlink-out":
        assert os.path.islink(planted) and os.readlink(planted) == outside
    elif shape == "fifo":
        assert stat.S_ISFIFO(os.lstat(planted).st_mode)
    else:
        assert os.path.isdir(planted) and not os.path.islink(planted)
    assert quarantined(root) == []
    if lock_name == guard.ENTRY_LOCK_FILE:
        assert seal.read(entry) is None  # never sealed without its lock
    else:
        s = seal.read(
            entry
        )  # the entry lock still orders the seal (the scan names the planted item itself)
        assert s is not None and seal.check(entry, s) == []


def test_a_child_mapped_to_another_file_of_the_entry_is_named_a_mismatch(tmp_path, reference):
    """Issue 47: a group mapping ``add_kernel.cubin`` to a planted ``evil.cubin`` inside the entry was quarantined
    as "points outside the entry", which it does not: the guard names what it saw."""
    root = str(tmp_path / "cache")
    out = compile_jobs(root, guarded=False)
    victim = out["add_sm90"]["id"]
    entry = os.path.join(root, victim)
    gname = next(n for n in os.listdir(entry) if n.startswith("__grp__"))
    with open(os.path.join(entry, gname)) as f:
        doc = json.load(f)
    cubin = next(k for k in doc["child_paths"] if k.endswith(".cubin"))
    shutil.copyfile(_cubin(root, out["sub_sm90"]), os.path.join(entry, "evil.cubin"))
    doc["child_paths"][cubin] = os.path.join(entry, "evil.cubin")
    with open(os.path.join(entry, gname), "w") as f:
        json.dump(doc, f)
    again = compile_jobs(root)
    assert again["add_sm90"]["cubin"] == reference["add_sm90"]["cubin"]
    recs = [r for r in quarantined(root) if r.entry_id == victim]
    assert [r.reason for r in recs] == ["mismatch"], recs
    assert f"{cubin} points to a file named evil.cubin" in again["_stderr"] + json.dumps(
        [r.to_json() for r in recs]
    )
    assert "points outside the entry" not in again["_stderr"]
