"""``verify --quick`` / ``ls`` on real Triton caches, damaged in every way the vocabulary names."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from jitwarden.cli.main import main
from tests.helpers import kernels
from tests.helpers.cli import jw as run_cli


def run_json(capsys, *args) -> tuple[int, dict]:
    rc = main(["verify", "--format", "json", *args])
    doc = json.loads(capsys.readouterr().out)
    return rc, doc


def findings_by_id(doc) -> dict[str, list[str]]:
    return {e["id"]: [f["code"] for f in e["findings"]] for e in doc["entries"]}


def file_of(rec, ext) -> str:
    return os.path.join(rec["path"], f"{rec['name']}.{ext}")


def test_clean_cache_has_no_findings_above_info(cache, capsys):
    root, recs = cache
    rc, doc = run_json(capsys, root, "--target", "sm_90")
    assert rc == 0
    assert doc["summary"]["entries"] == len(recs)
    assert doc["summary"]["errors"] == 0 and doc["summary"]["warnings"] == 0
    codes = findings_by_id(doc)
    for rec in recs.values():
        expected = [] if rec["arch"] == 90 else ["foreign-arch"]
        assert codes[rec["id"]] == expected, rec["label"]


@pytest.mark.parametrize("arch", kernels.ARCHS)
def test_each_arch_is_clean_for_its_own_target(cache, capsys, arch):
    root, recs = cache
    rc, doc = run_json(capsys, root, "--target", str(arch))
    assert rc == 0
    codes = findings_by_id(doc)
    for rec in recs.values():
        if rec["arch"] == arch:
            assert codes[rec["id"]] == [], rec["label"]


def test_json_contract(cache, capsys):
    root, recs = cache
    rc, doc = run_json(capsys, root, "--target", "90")
    assert doc["schema"] == 2
    assert doc["tool"]["name"] == "jitwarden"
    assert doc["target"] == {"arch": 90, "source": "cli"}
    assert doc["caches"][0]["root"] == root and doc["caches"][0]["entries"] == len(recs)
    assert doc["caches"][0]["bytes"] == sum(e["bytes"] for e in doc["entries"]) > 0
    e = next(e for e in doc["entries"] if e["id"] == recs["matmul_sm90"]["id"])
    assert e["name"] == "matmul_kernel" and e["arch"] == 90 and e["kind"] == "triton"
    assert e["path"] == recs["matmul_sm90"]["path"] and e["root"] == root
    assert set(doc["summary"]) >= {"entries", "errors", "warnings", "by_code"}
    assert "fingerprint_digest" in doc


def damage_and_verify(capsys, root, rec, expected_code, target="90"):
    rc, doc = run_json(capsys, root, "--target", target)
    codes = findings_by_id(doc)[rec["id"]]
    assert expected_code in codes, (rec["label"], codes)
    return rc, doc


def test_truncated_cubin_is_corrupt(cache, capsys):
    root, recs = cache
    rec = recs["add_sm90"]
    p = file_of(rec, "cubin")
    data = open(p, "rb").read()
    open(p, "wb").write(data[: len(data) // 2])
    rc, doc = damage_and_verify(capsys, root, rec, "corrupt")
    assert rc == 1
    assert doc["summary"]["errors"] == 1


@pytest.mark.parametrize(
    "garbage", [b"\x00\xff\xfe garbage", b"", b"[1, 2, 3]", b'{"name": "add_kernel"']
)
def test_damaged_metadata_is_corrupt(cache, capsys, garbage):
    root, recs = cache
    rec = recs["add_sm90"]
    open(file_of(rec, "json"), "wb").write(garbage)
    rc, _ = damage_and_verify(capsys, root, rec, "corrupt")
    assert rc == 1


def test_damaged_group_file_is_corrupt(cache, capsys):
    root, recs = cache
    rec = recs["sub_sm90"]
    open(os.path.join(rec["path"], f"__grp__{rec['name']}.json"), "wb").write(os.urandom(64))
    damage_and_verify(capsys, root, rec, "corrupt")


def test_cubin_of_another_arch_is_mismatch(cache, capsys):
    root, recs = cache
    shutil.copyfile(file_of(recs["add_sm80"], "cubin"), file_of(recs["add_sm90"], "cubin"))
    _, doc = damage_and_verify(capsys, root, recs["add_sm90"], "mismatch")
    e = next(e for e in doc["entries"] if e["id"] == recs["add_sm90"]["id"])
    assert any("sm_80" in f["message"] for f in e["findings"])


def test_cubin_of_another_kernel_is_mismatch(cache, capsys):
    root, recs = cache
    # The seed's failure: a cubin of another kernel under this key ran and gave x-y for x+y.
    shutil.copyfile(file_of(recs["sub_sm90"], "cubin"), file_of(recs["add_sm90"], "cubin"))
    _, doc = damage_and_verify(capsys, root, recs["add_sm90"], "mismatch")
    e = next(e for e in doc["entries"] if e["id"] == recs["add_sm90"]["id"])
    assert any("add_kernel" in f["message"] and "sub_kernel" in f["message"] for f in e["findings"])


def test_new_abi_cubin_sm_is_read(cache, capsys):
    root, recs = cache
    shutil.copyfile(file_of(recs["add_sm120"], "cubin"), file_of(recs["add_sm121"], "cubin"))
    _, doc = damage_and_verify(capsys, root, recs["add_sm121"], "mismatch", target="121")
    e = next(e for e in doc["entries"] if e["id"] == recs["add_sm121"]["id"])
    assert any("sm_120" in f["message"] and "sm_121" in f["message"] for f in e["findings"])


def test_ptx_of_another_target_is_mismatch(cache, capsys):
    root, recs = cache
    shutil.copyfile(file_of(recs["add_sm80"], "ptx"), file_of(recs["add_sm90"], "ptx"))
    damage_and_verify(capsys, root, recs["add_sm90"], "mismatch")


def test_metadata_of_another_entry_is_mismatch(cache, capsys):
    root, recs = cache
    shutil.copyfile(file_of(recs["add_b256_sm90"], "json"), file_of(recs["add_sm90"], "json"))
    damage_and_verify(capsys, root, recs["add_sm90"], "mismatch")


def test_copied_cache_is_foreign_path(built_cache, tmp_path, capsys):
    src, manifest = built_cache
    dst = str(tmp_path / "copied")
    shutil.copytree(src, dst)  # group files still name the original tree
    rc, doc = run_json(capsys, dst, "--target", "90")
    assert rc == 1
    codes = findings_by_id(doc)
    assert all("foreign-path" in codes[j["id"]] for j in manifest)
    msg = next(f["message"] for f in doc["entries"][0]["findings"] if f["code"] == "foreign-path")
    assert "Triton loads them from that tree" in msg


def test_missing_listed_file_is_incomplete(cache, capsys):
    root, recs = cache
    os.unlink(file_of(recs["matmul_sm90"], "ptx"))
    rc, _ = damage_and_verify(capsys, root, recs["matmul_sm90"], "incomplete")
    assert rc == 1


def test_symlink_leaving_root_is_unsafe_and_not_followed(cache, capsys, tmp_path):
    root, recs = cache
    rec = recs["add_sm90"]
    outside = tmp_path / "outside.cubin"
    shutil.copyfile(file_of(recs["sub_sm90"], "cubin"), outside)
    os.unlink(file_of(rec, "cubin"))
    os.symlink(outside, file_of(rec, "cubin"))
    _, doc = damage_and_verify(capsys, root, rec, "unsafe")
    e = next(e for e in doc["entries"] if e["id"] == rec["id"])
    # Not followed: the other kernel behind the link is never read, so no symbol mismatch is derived from it.
    assert "mismatch" not in [f["code"] for f in e["findings"]]
    assert os.path.islink(file_of(rec, "cubin"))


def test_entry_symlinked_out_of_root_is_unsafe(cache, capsys, tmp_path):
    root, recs = cache
    rec = recs["add_sm90"]
    moved = tmp_path / "elsewhere"
    shutil.move(rec["path"], moved)
    os.symlink(moved, rec["path"])
    damage_and_verify(capsys, root, rec, "unsafe")


def test_world_writable_entry_is_unsafe(cache, capsys):
    root, recs = cache
    rec = recs["add_sm90"]
    os.chmod(rec["path"], 0o777)
    damage_and_verify(capsys, root, rec, "unsafe")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_foreign_owned_entry_is_unsafe(cache, capsys):
    root, recs = cache
    rec = recs["add_sm90"]
    os.chown(file_of(rec, "cubin"), 12345, 12345)
    damage_and_verify(capsys, root, rec, "unsafe")


def test_world_writable_root_is_unsafe(cache, capsys):
    root, recs = cache
    os.chmod(root, 0o777)
    rc, doc = run_json(capsys, root, "--target", "90")
    assert rc == 1
    assert [f["code"] for f in doc["caches"][0]["findings"]] == ["unsafe"]


def test_other_triton_version_is_stale(cache, capsys):
    root, recs = cache
    rec = recs["add_sm90"]
    p = file_of(rec, "json")
    md = json.load(open(p))
    md["triton_version"] = "3.5.1"
    json.dump(md, open(p, "w"))
    rc, doc = damage_and_verify(capsys, root, rec, "stale")
    assert rc == 0 and doc["summary"]["warnings"] == 1


def test_old_tmp_dir_is_orphan_and_fresh_one_is_not(cache, capsys):
    root, recs = cache
    old = os.path.join(
        recs["add_sm90"]["path"], "tmp.pid_4242_0c4f6a7e-aaaa-bbbb-cccc-1234567890ab"
    )
    new = os.path.join(
        recs["sub_sm90"]["path"], "tmp.pid_4243_0c4f6a7e-aaaa-bbbb-cccc-1234567890ab"
    )
    os.makedirs(old)
    os.makedirs(new)
    t = time.time() - 7200
    os.utime(old, (t, t))
    rc, doc = run_json(capsys, root, "--target", "90")
    codes = findings_by_id(doc)
    assert "orphan" in codes[recs["add_sm90"]["id"]]
    assert codes[recs["sub_sm90"]["id"]] == []
    assert rc == 0


def test_launcher_for_another_machine(cache, capsys, tmp_path):
    root, recs = cache
    src = tmp_path / "m.c"
    src.write_text("int f(void) { return 1; }\n")
    entry = os.path.join(root, kernels.entry_id("ab" * 32))
    os.makedirs(entry)
    import sysconfig

    so = os.path.join(entry, "cuda_utils" + sysconfig.get_config_var("EXT_SUFFIX"))
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", so, str(src)], check=True)
    rc, doc = run_json(capsys, root, "--target", "90")
    e = next(e for e in doc["entries"] if e["path"] == entry)
    assert e["type"] == "launcher" and e["findings"] == []
    data = bytearray(open(so, "rb").read())
    data[18:20] = (183 if os.uname().machine != "aarch64" else 62).to_bytes(2, "little")
    open(so, "wb").write(bytes(data))
    rc, doc = run_json(capsys, root, "--target", "90")
    e = next(e for e in doc["entries"] if e["path"] == entry)
    assert [f["code"] for f in e["findings"]] == ["mismatch"]


def test_seal_checksum_mismatch_is_corrupt(cache, capsys):
    from jitwarden.store import seal

    root, recs = cache
    rec = recs["add_sm90"]
    names = list(os.listdir(rec["path"]))
    seal.write(rec["path"], seal.compute(rec["path"], names))
    rc, doc = run_json(capsys, root, "--target", "90")
    assert findings_by_id(doc)[rec["id"]] == []
    p = file_of(rec, "ttir")
    with open(p, "a") as f:
        f.write("// edited\n")
    damage_and_verify(capsys, root, rec, "corrupt")


def test_verify_never_modifies_the_cache(cache, capsys):
    root, recs = cache
    shutil.copyfile(file_of(recs["sub_sm90"], "cubin"), file_of(recs["add_sm90"], "cubin"))
    before = snapshot(root)
    main(["verify", root, "--target", "90"])
    main(["ls", root])
    capsys.readouterr()
    assert snapshot(root) == before


def snapshot(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            out[p] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def test_ls_quiet_prints_ids(cache, capsys):
    root, recs = cache
    assert main(["ls", "--ids", root]) == 0
    ids = capsys.readouterr().out.split()
    assert sorted(ids) == sorted(r["id"] for r in recs.values())
    assert main(["ls", "--ids", "--name", "matmul*", root]) == 0
    assert len(capsys.readouterr().out.split()) == len(kernels.ARCHS)


def test_ls_filters_by_code(cache, capsys):
    root, recs = cache
    os.unlink(file_of(recs["matmul_sm90"], "ptx"))
    assert main(["ls", "--ids", "--code", "incomplete", root, "--target", "90"]) == 0
    assert capsys.readouterr().out.split() == [recs["matmul_sm90"]["id"]]


def test_single_entry_path(cache, capsys):
    root, recs = cache
    rc, doc = run_json(capsys, recs["add_sm90"]["path"], "--target", "90")
    assert [e["id"] for e in doc["entries"]] == [recs["add_sm90"]["id"]]


def test_partitions_are_scanned_as_their_own_caches(cache, capsys, tmp_path):
    root, recs = cache
    base = tmp_path / "base"
    part = base / "jitwarden-v1" / "0123456789abcdef"
    part.parent.mkdir(parents=True)
    kernels.copy_cache(root, str(part))
    rc, doc = run_json(capsys, str(base), "--target", "90")
    assert rc == 0
    parts = [c for c in doc["caches"] if c["partition"] == "0123456789abcdef"]
    assert parts and parts[0]["entries"] == len(recs)
    top = [c for c in doc["caches"] if c["root"] == str(base)]
    assert top[0]["entries"] == 0  # the partition dir is never taken for an entry


def cli(*args, user=None, env=None):
    return run_cli(*args, env=env, user=user, src=None)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["verify", "/nonexistent/cache"], "no such file"),
        (["ls", "--target", "sm_ninety", "/tmp"], "not a GPU architecture"),
        (["verify", "--orphan-age", "-5", "/tmp"], "orphan-age"),
        (["ls", "--code", "bogus", "/tmp"], "unknown finding code"),
        (["verify", "--format", "xml"], "invalid choice"),
        (["verify", "--rebuild", "--jobs", "0", "/nonexistent/cache"], "must be at least 1"),
        # Checked before the scan: a bad option is named even when the path is fine.
        (
            ["verify", "--rebuild", "--ptxas", "/nonexistent/ptxas", "/tmp"],
            "--ptxas /nonexistent/ptxas: no such file",
        ),
        (
            ["verify", "--rebuild", "--ptxas", "/etc/hostname", "/nonexistent/cache"],
            "--ptxas /etc/hostname",
        ),
    ],
)
def test_bad_input_one_line_exit_2(args, needle):
    p = cli(*args)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr
    assert "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_path_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    p = cli("verify", str(f))
    assert p.returncode == 2 and "not a directory" in p.stderr and "Traceback" not in p.stderr


def as_nobody(argv) -> tuple[int, str, str]:
    """Run the CLI in a forked child that dropped root for uid 65534 (no exec: the interpreter stays loaded)."""
    import jitwarden.cli.commands.verify
    import jitwarden.env.fingerprint  # noqa: F401

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            sys.stdout = os.fdopen(1, "w")
            sys.stderr = os.fdopen(2, "w")
            os.setgid(65534)
            os.setuid(65534)
            code = main(argv)
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
            code = 99
        os._exit(code)
    os.close(out_w)
    os.close(err_w)
    with os.fdopen(out_r) as o, os.fdopen(err_r) as e:
        out, err = o.read(), e.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out, err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_unreadable_files_are_reported_not_raised(built_cache, tmp_path):
    src, manifest = built_cache
    import pathlib
    import tempfile

    base = pathlib.Path(tempfile.mkdtemp(prefix="jw-shared-"))
    os.chmod(base, 0o755)
    root = kernels.copy_cache(src, str(base / "cache"))
    for d, dirs, files in os.walk(root):
        for n in dirs:
            os.chmod(os.path.join(d, n), 0o755)
        for n in files:
            os.chmod(os.path.join(d, n), 0o644)
    rec = next(r for r in manifest if r["arch"] == 90)
    other = next(r for r in manifest if r["arch"] == 90 and r is not rec)
    os.chmod(os.path.join(root, rec["id"], f"{rec['name']}.cubin"), 0o600)
    os.chmod(os.path.join(root, other["id"]), 0o700)
    rc, out, err = as_nobody(["verify", "--format", "json", "--target", "90", root])
    assert "Traceback" not in err
    assert rc == 1, err
    codes = findings_by_id(json.loads(out))
    assert "unreadable" in codes[rec["id"]] and "corrupt" not in codes[rec["id"]]
    assert "unreadable" in codes[other["id"]] and "corrupt" not in codes[other["id"]]
    rc, out, err = as_nobody(["verify", os.path.join(root, other["id"])])
    assert rc == 2 and "permission denied" in err and "Traceback" not in err
    shutil.rmtree(base)


def test_old_triton_temp_files_are_orphans(cache, capsys):
    root, recs = cache
    rec = recs["add_sm90"]
    leftover = file_of(rec, "cubin") + ".tmp.pid_777_5f0c4f6a7eaaaabbbbcccc"
    shutil.copyfile(file_of(rec, "cubin"), leftover)
    t = time.time() - 7200
    os.utime(leftover, (t, t))
    rc, doc = run_json(capsys, root, "--target", "90")
    assert findings_by_id(doc)[rec["id"]] == ["orphan"] and rc == 0


@pytest.mark.parametrize("target", [["cuda", 90, 32], 90])
def test_older_metadata_layouts(cache, capsys, target):
    root, recs = cache
    rec = recs["add_sm90"]
    p = file_of(rec, "json")
    md = json.load(open(p))
    md["target"] = target
    json.dump(md, open(p, "w"))
    rc, doc = run_json(capsys, root, "--target", "90")
    assert findings_by_id(doc)[rec["id"]] == [] and rc == 0
    rc, doc = run_json(capsys, root, "--target", "80")
    assert findings_by_id(doc)[rec["id"]] == ["foreign-arch"]


def test_amd_entry_is_foreign_not_corrupt(cache, capsys):
    root, recs = cache
    rec = recs["add_sm90"]
    p = file_of(rec, "json")
    md = json.load(open(p))
    md["target"] = {"backend": "hip", "arch": "gfx942", "warp_size": 64}
    json.dump(md, open(p, "w"))
    os.unlink(file_of(rec, "cubin"))
    grp = os.path.join(rec["path"], f"__grp__{rec['name']}.json")
    doc = json.load(open(grp))
    del doc["child_paths"][f"{rec['name']}.cubin"]
    json.dump(doc, open(grp, "w"))
    rc, out = run_json(capsys, root, "--target", "90")
    e = next(e for e in out["entries"] if e["id"] == rec["id"])
    assert [f["code"] for f in e["findings"]] == ["foreign-arch"] and "hip gfx942" in e["findings"][
        0
    ]["message"]


def test_metadata_without_a_target_is_unrecognised_not_corrupt(cache, capsys):
    """Whole JSON without the target Triton 3.4-3.9 write: a layout not known, so not judged, and not damage."""
    root, recs = cache
    rec = recs["add_sm90"]
    p = file_of(rec, "json")
    md = json.load(open(p))
    del md["target"]
    md.pop("arch", None)
    json.dump(md, open(p, "w"))
    rc, doc = run_json(capsys, root, "--target", "90")
    assert findings_by_id(doc)[rec["id"]] == ["unrecognised"] and rc == 0


def test_symlinked_seal_is_not_followed(cache, capsys, tmp_path):
    from jitwarden.store import seal

    root, recs = cache
    rec = recs["add_sm90"]
    seal.write(rec["path"], seal.compute(rec["path"], os.listdir(rec["path"])))
    outside = tmp_path / "seal.json"
    shutil.move(os.path.join(rec["path"], ".jitwarden-seal.json"), outside)
    os.symlink(outside, os.path.join(rec["path"], ".jitwarden-seal.json"))
    _, doc = damage_and_verify(capsys, root, rec, "unsafe")
    e = next(e for e in doc["entries"] if e["id"] == rec["id"])
    assert any(".jitwarden-seal.json is a symlink" in f["message"] for f in e["findings"])
    assert e["sealed"] is False  # the seal behind the link is never read
    with pytest.raises(seal.SealError, match="seal unreadable"):
        seal.read(rec["path"])  # the guard's reader does not follow it either


def test_an_entry_sealed_under_another_fingerprint_in_a_partition_is_a_mismatch(tmp_path, capsys):
    """What the runtime refuses to load, verify does not call clean: a partition's entry whose seal names another
    environment's fingerprint was moved or copied in. Outside a partition no fingerprint is judged."""
    from jitwarden.store import seal
    from tests.helpers.guarded import compile_jobs, entries

    part = str(tmp_path / "cache" / "jitwarden-v1" / ("c" * 16))
    compile_jobs(part, guarded=True)
    sealed = [
        n for n in entries(part) if os.path.exists(os.path.join(part, n, ".jitwarden-seal.json"))
    ]
    victim = sealed[0]
    path = os.path.join(part, victim)
    s = seal.read(path)
    assert s.fingerprint == "c" * 16  # what the guard sealed it under
    rc, doc = run_json(capsys, "--target", "90", part)
    assert rc == 0, findings_by_id(doc)
    seal.write(
        path,
        seal.Seal(s.files, "a" * 16, s.producer, s.sealed_at),
        seal.newest_ctime(path, list(s.files)),
    )
    rc, doc = run_json(capsys, "--target", "90", part)
    assert rc == 1 and {k: v for k, v in findings_by_id(doc).items() if v} == {victim: ["mismatch"]}
    (e,) = [e for e in doc["entries"] if e["id"] == victim]
    assert (
        "sealed under fingerprint aaaaaaaaaaaaaaaa, this partition is cccccccccccccccc"
        in e["findings"][0]["message"]
    )
    plain = str(tmp_path / "plain")
    shutil.copytree(part, plain, symlinks=True)
    rc, doc = run_json(capsys, "--target", "90", "--kind", "triton", plain)
    assert "mismatch" not in findings_by_id(doc).get(
        victim, []
    )  # no partition: judged by no fingerprint
