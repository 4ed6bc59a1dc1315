"""Signed bundles: keygen, export, import on real Triton caches built through the guard.

Node A builds and exports; node B (another HOME, same fingerprint) imports. Attacks are
real tar files written by hand, signed with the trusted key where the point is to show
that the structural checks, not the signature, stop them.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tarfile
import time

import pytest

pytest.importorskip("cryptography", reason="signed bundles need the [fleet] extra (cryptography)")

from tests.helpers.fleet import (
    build_guarded,
    digest_of,
    entries,
    jw,
    node_env,
    read_bundle,
    resign,
    triton_partition,
    write_bundle,
)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Node A with a guarded Triton partition of two kernels, a key pair, and a signed bundle."""
    base = tmp_path_factory.mktemp("fleet")
    home_a = str(base / "a")
    keydir = base / "keys"
    keydir.mkdir()
    env_a = node_env(
        home_a,
        JITWARDEN_SIGNING_KEY=str(keydir / "builder"),
        JITWARDEN_TRUSTED_KEYS=str(keydir / "builder.pub"),
    )
    rc, out, err = jw(env_a, "keygen")
    assert rc == 0, err
    assert out.strip() == str(keydir / "builder.pub")
    assert stat.S_IMODE(os.stat(keydir / "builder").st_mode) == 0o600
    part = build_guarded(env_a)
    bundle = str(base / "bundle.tar")
    rc, out, err = jw(env_a, "export", "-o", bundle, "--format", "json")
    assert rc == 0, err
    doc = json.loads(out)
    return {
        "base": base,
        "env_a": env_a,
        "part_a": part,
        "bundle": bundle,
        "export": doc,
        "secret": str(keydir / "builder"),
        "pub": str(keydir / "builder.pub"),
    }


def node_b(fleet, tmp_path, **extra):
    return node_env(str(tmp_path / "b"), JITWARDEN_TRUSTED_KEYS=fleet["pub"], **extra)


def test_export_carries_every_sealed_entry_with_digests(fleet):
    doc = fleet["export"]
    assert doc["entries"] == len(entries(fleet["part_a"])) == 2
    members = read_bundle(fleet["bundle"])
    assert [m.name for m, _ in members[:2]] == ["manifest.json", "manifest.sig"]
    manifest = json.loads(members[0][1])
    assert (
        manifest["digest"] == doc["digest"] and manifest["fingerprint"]["digest"] == doc["digest"]
    )
    assert manifest["producer"]["triton"] == "3.6.0"
    for e in manifest["entries"]:
        assert e["kind"] == "triton" and e["sealed"]
        assert any(n.endswith(".cubin") for n in e["files"])
        assert all(len(r["sha256"]) == 64 for r in e["files"].values())


def test_import_installs_sealed_entries_that_verify_and_hit(fleet, tmp_path):
    env_b = node_b(fleet, tmp_path)
    rc, out, err = jw(env_b, "import", fleet["bundle"], "--format", "json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["counts"] == {"installed": 2, "present": 0, "skipped": 0, "refused": 0}
    assert doc["signed_by"] and doc["match"]
    part_b = triton_partition(env_b)
    assert entries(part_b) == entries(fleet["part_a"])
    assert not [
        n for n in os.listdir(part_b) if n.startswith(".jitwarden-import")
    ]  # staging removed
    rc, out, err = jw(env_b, "verify", part_b, "--format", "json")
    assert rc == 0, out + err
    seals = {
        n: os.stat(os.path.join(part_b, n, ".jitwarden-seal.json")).st_mtime_ns
        for n in entries(part_b)
    }
    build_guarded(env_b)  # the same kernels again: every one must be a hit on the imported entries
    assert {
        n: os.stat(os.path.join(part_b, n, ".jitwarden-seal.json")).st_mtime_ns
        for n in entries(part_b)
    } == seals
    # A second import finds everything present.
    rc, out, _ = jw(env_b, "import", fleet["bundle"], "--format", "json")
    assert rc == 0 and json.loads(out)["counts"] == {
        "installed": 0,
        "present": 2,
        "skipped": 0,
        "refused": 0,
    }


def test_dry_run_writes_nothing(fleet, tmp_path):
    env_b = node_b(fleet, tmp_path)
    rc, out, _ = jw(env_b, "import", fleet["bundle"], "--dry-run")
    assert rc == 0 and "would install triton" in out
    assert entries(triton_partition(env_b)) == []


def test_import_from_a_read_only_place(fleet, tmp_path):
    ro = tmp_path / "image-layer"
    ro.mkdir()
    copy = ro / "bundle.tar"
    copy.write_bytes(open(fleet["bundle"], "rb").read())
    copy.chmod(0o444)
    ro.chmod(0o555)
    try:
        rc, _, err = jw(node_b(fleet, tmp_path), "import", str(copy))
        assert rc == 0, err
        assert sorted(os.listdir(ro)) == ["bundle.tar"]
    finally:
        ro.chmod(0o755)


def test_unsigned_is_refused_unless_allowed(fleet, tmp_path):
    bundle = str(tmp_path / "unsigned.tar")
    rc, _, err = jw(fleet["env_a"], "export", "-o", bundle, "--unsigned")
    assert rc == 0, err
    env_b = node_b(fleet, tmp_path)
    rc, _, err = jw(env_b, "import", bundle)
    assert rc == 1 and err.strip() == (
        "jitwarden: bundle refused: the bundle is unsigned (pass --allow-unsigned to "
        "install it anyway); nothing installed"
    ), err
    rc, out, _ = jw(env_b, "import", bundle, "--format", "json")
    assert (
        rc == 1
        and json.loads(out)["refused"]
        == "the bundle is unsigned (pass --allow-unsigned to install it anyway)"
    )
    assert entries(triton_partition(env_b)) == []
    rc, out, err = jw(env_b, "import", bundle, "--allow-unsigned", "--format", "json")
    assert rc == 0 and json.loads(out)["counts"]["installed"] == 2


def test_untrusted_key_is_refused(fleet, tmp_path):
    other = tmp_path / "other"
    rc, _, err = jw(node_env(str(tmp_path / "x")), "keygen", "-o", str(other))
    assert rc == 0, err
    env_b = node_env(str(tmp_path / "b"), JITWARDEN_TRUSTED_KEYS=str(other) + ".pub")
    rc, out, err = jw(env_b, "import", fleet["bundle"], "--format", "json")
    doc = json.loads(out)
    assert rc == 1 and "not among the trusted keys" in doc["refused"] and doc["exit"] == 1
    assert entries(triton_partition(env_b)) == []


def _flip(data: bytes, at: int = 40) -> bytes:
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]


def test_tampered_manifest_fails_the_signature(fleet, tmp_path):
    members = read_bundle(fleet["bundle"])
    doc = json.loads(members[0][1])
    doc["producer"]["triton"] = "3.6.1"
    members[0] = (members[0][0], json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    bad = str(tmp_path / "bad.tar")
    write_bundle(bad, members)
    rc, _, err = jw(node_b(fleet, tmp_path), "import", bad)
    assert rc == 1 and "does not match" in err


@pytest.mark.parametrize("victim", [".cubin", "__grp__", ".json"])
def test_tampered_file_refuses_the_whole_bundle(fleet, tmp_path, victim):
    members = read_bundle(fleet["bundle"])
    hit = [
        i for i, (m, _d) in enumerate(members) if victim in m.name and m.name.startswith("entries/")
    ]
    assert hit
    i = hit[-1]
    members[i] = (members[i][0], _flip(members[i][1]))
    bad = str(tmp_path / "bad.tar")
    write_bundle(bad, members)
    env_b = node_b(fleet, tmp_path)
    rc, _, err = jw(env_b, "import", bad)
    assert rc == 1 and "tampered" in err and "nothing installed" in err
    part_b = triton_partition(env_b)
    assert entries(part_b) == []
    assert not os.path.isdir(part_b) or not [
        n for n in os.listdir(part_b) if n.startswith(".jitwarden-import")
    ]


def test_truncated_bundle_is_refused(fleet, tmp_path):
    data = open(fleet["bundle"], "rb").read()
    bad = tmp_path / "short.tar"
    bad.write_bytes(data[: len(data) * 2 // 3])
    env_b = node_b(fleet, tmp_path)
    rc, _, err = jw(env_b, "import", str(bad))
    assert rc == 1, err
    assert entries(triton_partition(env_b)) == []


def test_garbage_and_missing_files(fleet, tmp_path):
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"\x00not a tar at all" * 100)
    rc, _, err = jw(node_b(fleet, tmp_path), "import", str(junk))
    assert rc == 1 and "bundle" in err and "Traceback" not in err
    rc, _, err = jw(node_b(fleet, tmp_path), "import", str(tmp_path / "nope.tar"))
    assert rc == 2 and "no such file" in err


def test_other_fingerprint_says_what_differs(fleet, tmp_path):
    env_b = node_b(fleet, tmp_path, TORCHINDUCTOR_FREEZING="1")
    rc, out, err = jw(env_b, "import", fleet["bundle"])
    assert rc == 4
    assert "env:TORCHINDUCTOR_FREEZING" in out and "it changes the code compilers generate" in out
    assert "not installed: built for" in err and "this node is" in err
    assert entries(triton_partition(env_b)) == []
    rc, out, _ = jw(env_b, "import", fleet["bundle"], "--format", "json")
    doc = json.loads(out)
    assert (
        rc == 4
        and not doc["match"]
        and doc["differences"][0]["component"] == "env:TORCHINDUCTOR_FREEZING"
    )
    assert all(e["action"] == "skipped" for e in doc["entries"])


# ---------------------------------------------------------------- hostile bundles


def _member(name, type_=tarfile.REGTYPE, linkname="", data=b"x"):
    info = tarfile.TarInfo(name)
    info.type = type_
    info.linkname = linkname
    if type_ in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3
    return info, (data if type_ == tarfile.REGTYPE else None)


def _first_file(members):
    i = next(i for i, (m, _d) in enumerate(members) if m.name.startswith("entries/0/"))
    return i, members[i][0].name.split("/")[-1]


@pytest.mark.parametrize(
    "attack", ["dotdot", "absolute", "symlink", "hardlink", "device", "fifo", "extra-dir"]
)
def test_hostile_members_never_land_outside(fleet, tmp_path, attack):
    members = read_bundle(fleet["bundle"])
    i, fname = _first_file(members)
    outside = tmp_path / "outside"
    name = {
        "dotdot": f"entries/0/../../../{outside.name}",
        "absolute": str(outside),
        "extra-dir": f"entries/0/sub/{fname}",
    }.get(attack, f"entries/0/{fname}")
    kind = {
        "symlink": tarfile.SYMTYPE,
        "hardlink": tarfile.LNKTYPE,
        "device": tarfile.CHRTYPE,
        "fifo": tarfile.FIFOTYPE,
    }.get(attack, tarfile.REGTYPE)
    evil = _member(
        name,
        kind,
        linkname=str(outside) if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else "",
        data=members[i][1],
    )
    members.insert(i, evil)  # before the real file, so it is met first
    bad = str(tmp_path / f"{attack}.tar")
    write_bundle(bad, members)
    env_b = node_b(fleet, tmp_path)
    rc, _, err = jw(env_b, "import", bad)
    assert rc == 1, err
    assert not os.path.lexists(outside)
    assert entries(triton_partition(env_b)) == []
    home_files = [os.path.join(d, f) for d, _s, fs in os.walk(tmp_path / "b") for f in fs]
    assert not [
        f
        for f in home_files
        if "jitwarden-v1" in f and ".jitwarden-partition" not in f and "memo" not in f
    ], home_files


@pytest.mark.parametrize(
    "path", ["../../escape", "/tmp/escape-abs", "a/../../escape", "jitwarden-quarantine/x", ""]
)
def test_hostile_manifest_paths_are_refused_even_when_signed(fleet, tmp_path, path):
    def mutate(doc):
        doc["entries"][0]["path"] = path

    bad = str(tmp_path / "path.tar")
    write_bundle(bad, resign(read_bundle(fleet["bundle"]), fleet["secret"], mutate))
    env_b = node_b(fleet, tmp_path)
    rc, _, err = jw(env_b, "import", bad)
    assert rc == 1 and "entry 0" in err, err
    assert not os.path.lexists(tmp_path / "escape") and not os.path.lexists("/tmp/escape-abs")
    assert entries(triton_partition(env_b)) == []


def test_hostile_file_name_in_manifest_is_refused(fleet, tmp_path):
    def mutate(doc):
        files = doc["entries"][0]["files"]
        name = next(iter(files))
        files["../" + name] = files.pop(name)

    bad = str(tmp_path / "name.tar")
    write_bundle(bad, resign(read_bundle(fleet["bundle"]), fleet["secret"], mutate))
    rc, _, err = jw(node_b(fleet, tmp_path), "import", bad)
    assert rc == 1 and "unsafe file name" in err


def test_member_the_manifest_does_not_list_is_refused(fleet, tmp_path):
    members = read_bundle(fleet["bundle"])
    members.append(_member("entries/0/planted.so", data=b"\x7fELF"))
    bad = str(tmp_path / "planted.tar")
    write_bundle(bad, members)
    env_b = node_b(fleet, tmp_path)
    rc, _, err = jw(env_b, "import", bad)
    assert rc == 1 and "not a file the manifest lists" in err
    assert entries(triton_partition(env_b)) == []


def test_no_trusted_keys_configured_says_where_to_put_them(fleet, tmp_path):
    env_b = node_env(str(tmp_path / "b"))  # no JITWARDEN_TRUSTED_KEYS, empty config dir
    rc, _, err = jw(env_b, "import", fleet["bundle"])
    assert rc == 1 and "none are configured" in err and "JITWARDEN_TRUSTED_KEYS" in err


def test_trusted_keys_from_the_config_dir(fleet, tmp_path):
    env_b = node_env(str(tmp_path / "b"))
    d = tmp_path / "b" / ".config" / "jitwarden" / "trusted-keys"
    d.mkdir(parents=True)
    (d / "builder.pub").write_text(open(fleet["pub"]).read())
    rc, _, err = jw(env_b, "import", fleet["bundle"])
    assert rc == 0, err


def test_read_only_cache_volume_is_one_line_not_a_traceback(fleet, tmp_path):
    env_b = node_b(fleet, tmp_path)
    part = triton_partition(env_b)
    os.makedirs(os.path.dirname(part))
    with open(
        part, "w"
    ) as f:  # the partition path is taken by a file: makedirs fails like on a broken volume
        f.write("x")
    rc, _, err = jw(env_b, "import", fleet["bundle"])
    assert rc == 1 and "cannot install" in err and "Traceback" not in err


def test_export_rebuild_proves_first_and_kind_selects(fleet, tmp_path):
    out = str(tmp_path / "proven.tar")
    rc, so, err = jw(
        fleet["env_a"], "export", "-o", out, "--rebuild", "--kind", "triton", "--format", "json"
    )
    assert rc == 0, err
    assert json.loads(so)["entries"] == 2 and list(json.loads(so)["partitions"]) == ["triton"]
    rc, so, err = jw(
        fleet["env_a"],
        "export",
        "-o",
        str(tmp_path / "x.tar"),
        "--kind",
        "inductor",
        "--format",
        "json",
    )
    assert rc == 1 and json.loads(so)["entries"] == 0 and not os.path.exists(tmp_path / "x.tar")
    rc, _, err = jw(
        fleet["env_a"], "export", "-o", str(tmp_path / "y.tar"), "--kind", "cuda-compute"
    )
    assert rc == 2 and "only partitioned kinds" in err


def test_entries_that_fail_verify_stay_home(fleet, tmp_path):
    import shutil

    home = str(tmp_path / "a2")
    env = dict(
        fleet["env_a"],
        HOME=home,
        XDG_CACHE_HOME=os.path.join(home, ".cache"),
        XDG_CONFIG_HOME=os.path.join(home, ".config"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(home, "inductor"),
    )
    part = triton_partition(env)
    os.makedirs(os.path.dirname(part))
    shutil.copytree(
        fleet["part_a"], part
    )  # same digest: the group files now point into node A's tree
    rc, so, err = jw(env, "export", "-o", str(tmp_path / "z.tar"), "--format", "json")
    doc = json.loads(so)
    assert rc == 1 and doc["entries"] == 0
    assert {s["why"] for s in doc["skipped"]} == {"verify: foreign-path"}


def test_an_entry_sealed_under_another_fingerprint_stays_home(fleet, tmp_path, monkeypatch):
    """An entry moved in from another environment's partition keeps that environment's seal. Exported, the
    importer would seal it under this fingerprint and load it: it stays home, as verify calls it a mismatch."""
    from jitwarden.store import seal

    env = dict(fleet["env_a"], HOME=str(tmp_path / "a3"))
    env.update(
        XDG_CACHE_HOME=os.path.join(env["HOME"], ".cache"),
        XDG_CONFIG_HOME=os.path.join(env["HOME"], ".config"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(env["HOME"], "inductor"),
    )
    part = build_guarded(env)
    moved, kept = entries(part)
    path = os.path.join(part, moved)
    monkeypatch.setenv("XDG_CONFIG_HOME", env["XDG_CONFIG_HOME"])  # that node's seal key
    s = seal.read(path)
    seal.write(
        path,
        seal.Seal(s.files, "f" * 16, s.producer, s.sealed_at),
        seal.newest_ctime(path, list(s.files)),
    )
    rc, so, err = jw(env, "export", "-o", str(tmp_path / "z.tar"), "--format", "json")
    doc = json.loads(so)
    assert rc == 0 and doc["entries"] == 1, err
    assert [(os.path.basename(s_["path"]), s_["why"]) for s_ in doc["skipped"]] == [
        (moved, "verify: mismatch")
    ]
    assert [
        e["path"] for e in json.loads(read_bundle(str(tmp_path / "z.tar"))[0][1])["entries"]
    ] == [kept]


# ---------------------------------------------------------------- hostile destinations and inputs (issue 21)


def _sentinel(tmp_path):
    """A directory outside every root: whatever import writes there is a write outside the root."""
    d = tmp_path / "outside"
    d.mkdir()
    return d


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("dry_run", [False, True])
def test_symlinked_jitwarden_v1_is_refused_and_nothing_is_written_outside(fleet, tmp_path, dry_run):
    env_b = node_b(fleet, tmp_path)
    part = triton_partition(env_b)
    outside = _sentinel(tmp_path)
    os.makedirs(os.path.dirname(os.path.dirname(part)))
    os.symlink(outside, os.path.dirname(part))  # <base>/jitwarden-v1 -> outside
    rc, _, err = jw(env_b, "import", fleet["bundle"], *(["--dry-run"] if dry_run else []))
    assert rc == 1, err
    line = _one_line(err)
    assert "jitwarden-v1 is a symlink" in line and "nothing installed" in line
    assert os.listdir(outside) == []


def test_symlinked_partition_is_refused_and_nothing_is_written_outside(fleet, tmp_path):
    env_b = node_b(fleet, tmp_path)
    part = triton_partition(env_b)
    outside = _sentinel(tmp_path)
    os.makedirs(os.path.dirname(part))
    os.symlink(outside, part)  # <base>/jitwarden-v1/<digest> -> outside
    rc, _, err = jw(env_b, "import", fleet["bundle"])
    assert rc == 1, err
    assert f"{part} is a symlink" in _one_line(err)
    assert os.listdir(outside) == []


def test_symlinked_inductor_subdirectory_inside_a_real_partition_is_refused(fleet, tmp_path):
    """The worst case of the adversarial run: files landed outside and the exit status was 0."""

    def as_inductor(doc):
        e = doc["entries"][0]
        e["kind"], e["path"] = "inductor", "fxgraph/ab/" + e["path"]

    bad = str(tmp_path / "inductor.tar")
    write_bundle(bad, resign(read_bundle(fleet["bundle"]), fleet["secret"], as_inductor))
    env_b = node_b(fleet, tmp_path)
    from jitwarden.store import partition

    part = partition.path_for(env_b["TORCHINDUCTOR_CACHE_DIR"], digest_of(env_b))
    os.makedirs(part)
    outside = _sentinel(tmp_path)
    os.symlink(outside, os.path.join(part, "fxgraph"))
    rc, _, err = jw(env_b, "import", bad)
    assert rc == 1, err
    assert "fxgraph is a symlink" in _one_line(err)
    assert [os.path.join(d, f) for d, _s, fs in os.walk(outside) for f in fs] == []
    assert entries(triton_partition(env_b)) == []  # nothing of the bundle installed anywhere
    # The same bundle into a real subdirectory installs, so the refusal above is the link's doing.
    os.unlink(os.path.join(part, "fxgraph"))
    rc, out, err = jw(env_b, "import", bad, "--format", "json")
    assert rc == 0 and json.loads(out)["counts"]["installed"] == 2, err
    assert os.path.isdir(os.path.join(part, "fxgraph", "ab"))


def _signed_raw_manifest(fleet, raw: bytes, sig: bytes | None = None):
    from jitwarden.ops import keys

    key = keys.load_signing_key(fleet["secret"])
    members = read_bundle(fleet["bundle"])
    sig = (
        sig
        if sig is not None
        else json.dumps(
            {
                "schema": 1,
                "algorithm": "ed25519",
                "key_id": key.id,
                "signature": key.sign(raw).hex(),
            }
        ).encode()
    )
    return [(members[0][0], raw), (members[1][0], sig)] + members[2:]


@pytest.mark.parametrize("where", ["manifest", "signature"])
def test_deeply_nested_json_is_a_clean_refusal(fleet, tmp_path, where):
    deep = b"[" * 200_000 + b"]" * 200_000
    if where == "manifest":
        members = _signed_raw_manifest(fleet, deep)
    else:  # the signature record is at most 4 KiB: 2,000 levels, past what json.loads survives
        members = _signed_raw_manifest(
            fleet, read_bundle(fleet["bundle"])[0][1], sig=b"[" * 2000 + b"]" * 2000
        )
    bad = str(tmp_path / "deep.tar")
    write_bundle(bad, members)
    rc, _, err = jw(node_b(fleet, tmp_path), "import", bad)
    assert rc == 1, err
    assert "nothing installed" in _one_line(err)


def test_a_directory_or_a_file_that_is_no_bundle_gets_one_line(fleet, tmp_path):
    rc, _, err = jw(node_b(fleet, tmp_path), "import", str(tmp_path))
    assert rc == 2 and "a directory" in _one_line(err), err
    assert "no such file" not in err
    text = tmp_path / "passwd"
    text.write_text("root:x:0:0:root:/root:/bin/bash\n" * 20)
    rc, _, err = jw(node_b(fleet, tmp_path), "import", str(text))
    assert rc == 1 and "not a jitwarden bundle (not a tar file)" in _one_line(err), err
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    rc, _, err = jw(node_b(fleet, tmp_path), "import", str(fifo))  # never blocks on open
    assert rc == 2 and "a FIFO" in _one_line(err)


def test_export_to_a_directory_is_a_usage_error(fleet, tmp_path):
    rc, out, err = jw(fleet["env_a"], "export", "-o", str(tmp_path))
    assert rc == 2 and "is a directory" in _one_line(err), err
    assert os.listdir(tmp_path) == [] or all(not n.endswith(".tmp") for n in os.listdir(tmp_path))
    rc, out, err = jw(fleet["env_a"], "export", "-o", str(tmp_path / "nope" / "b.tar"))
    assert rc == 2 and "does not exist" in _one_line(err)


def test_export_honours_jitwarden_orphan_age(fleet, tmp_path):
    """A writer's leftover directory two hours old is an orphan under JITWARDEN_ORPHAN_AGE=60 and a compile
    still in progress under 1d: export judges with the setting, as every command does (it passed a fixed
    3600 s before, so the leftover was an orphan under both)."""
    leftover = os.path.join(fleet["part_a"], "tmp.pid_4242_0c0ffee")
    os.mkdir(leftover)
    with open(os.path.join(leftover, "x.json"), "w") as f:
        f.write("{}")
    old = time.time() - 7200
    os.utime(os.path.join(leftover, "x.json"), (old, old))
    os.utime(leftover, (old, old))
    try:
        for age, orphan in (("1d", False), ("60", True)):
            out = str(tmp_path / f"b-{age}.tar")
            env = dict(fleet["env_a"], JITWARDEN_ORPHAN_AGE=age)
            rc, so, err = jw(env, "export", "-o", out, "--format", "json")
            assert rc == 0, so + err
            doc = json.loads(so)
            assert doc["entries"] == 2  # the sealed entries; the leftover never goes
            why = [s["why"] for s in doc["skipped"] if s["path"] == leftover]
            assert len(why) == 1 and ("orphan" in why[0]) is orphan, (age, why)
    finally:
        shutil.rmtree(leftover)  # node A as the other tests of this module know it


def test_export_leaves_no_temporary_beside_the_bundle(fleet, tmp_path):
    out = tmp_path / "o" / "b.tar.gz"
    out.parent.mkdir()
    rc, so, err = jw(fleet["env_a"], "export", "-o", str(out), "--format", "json")
    assert rc == 0, err
    assert (
        os.listdir(out.parent) == ["b.tar.gz"]
        and json.loads(so)["file_bytes"] == out.stat().st_size
    )
    assert [m.name for m, _ in read_bundle(str(out))][:2] == ["manifest.json", "manifest.sig"]


def test_a_cache_root_that_is_a_file_names_the_path(fleet, tmp_path):
    env_b = node_b(fleet, tmp_path)
    base = os.path.dirname(os.path.dirname(triton_partition(env_b)))
    os.makedirs(os.path.dirname(base))
    with open(base, "w") as f:
        f.write("x")
    for extra in ([], ["--dry-run"]):
        rc, _, err = jw(env_b, "import", fleet["bundle"], *extra)
        assert rc == 1 and f"cannot install: Not a directory ({base})" in _one_line(err), err


def test_entry_files_names_a_flat_entry_and_leaves_no_listing_open(tmp_path):
    """``entry_files`` (export's look at an entry) names a flat entry's regular files, refuses a nested one, and
    closes every listing it opened, the refused one too (an export over thousands of entries holds no fds)."""
    import gc
    import warnings

    from jitwarden.ops import bundle

    flat, nested = tmp_path / "flat", tmp_path / "nested"
    for d in (flat, nested):
        d.mkdir()
        (d / "k.cubin").write_bytes(b"x")
        (d / "k.json").write_bytes(b"{}")
    (nested / "sub").mkdir()
    (tmp_path / "lone").write_bytes(b"x")
    os.symlink(flat, tmp_path / "link")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert bundle.entry_files(str(flat)) == {"k.cubin": None, "k.json": None}
        assert bundle.entry_files(str(nested)) is None
        assert bundle.entry_files(str(tmp_path / "lone")) == {"": None}
        assert bundle.entry_files(str(tmp_path / "link")) is None  # never followed
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], [
        str(w.message) for w in caught
    ]


# ---------------------------------------------------------------- import judges before it seals (issue 32)


def _with_garbage_cubin(fleet, size: int = 1 << 20):
    """The fleet bundle with one entry's cubin replaced by ``size`` bytes that are no ELF, the manifest's
    sha256 and size of it rewritten to match (what an unsigned or a careless signed bundle may carry)."""
    import hashlib

    members = read_bundle(fleet["bundle"])
    doc = json.loads(members[0][1])
    garbage = b"\x7fNOT-AN-ELF" + b"\x00" * (size - 11)
    e = doc["entries"][0]
    cubin = next(n for n in e["files"] if n.endswith(".cubin"))
    e["files"][cubin] = {"sha256": hashlib.sha256(garbage).hexdigest(), "size": len(garbage)}
    out = []
    for info, data in members:
        if info.name == f"entries/0/{cubin}":
            data = garbage
        out.append((info, data))
    return doc, out, cubin


@pytest.mark.parametrize("signed", [False, True])
def test_import_never_seals_what_verify_calls_corrupt(fleet, tmp_path, signed):
    doc, members, cubin = _with_garbage_cubin(fleet)
    bad_id = doc["entries"][0]["path"]
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    members[0] = (members[0][0], raw)
    if signed:
        members = resign(members, fleet["secret"])
    else:
        members = [(m, d) for m, d in members if m.name != "manifest.sig"]
    bad = str(tmp_path / "garbage.tar")
    write_bundle(bad, members)
    env_b = node_b(fleet, tmp_path)
    argv = ["import", bad, "--format", "json"] + ([] if signed else ["--allow-unsigned"])
    rc, out, err = jw(env_b, *argv)
    res = json.loads(out)
    assert rc == 1, err
    assert res["counts"] == {"installed": 1, "present": 0, "skipped": 0, "refused": 1}
    refused = [e for e in res["entries"] if e["action"] == "refused"]
    assert [e["path"] for e in refused] == [bad_id]
    assert "corrupt" in refused[0]["why"] and cubin in refused[0]["why"]
    part_b = triton_partition(env_b)
    assert bad_id not in entries(part_b)  # nothing of it installed, nor sealed anywhere
    assert len(entries(part_b)) == 1
    assert not [n for n in os.listdir(part_b) if n.startswith(".jitwarden-import")]
    rc, out, err = jw(env_b, "verify", part_b, "--format", "json")
    assert rc == 0, out + err  # what was installed passes verify
    rc, _, err = jw(env_b, *[a for a in argv if a not in ("--format", "json")])
    assert rc == 1 and f"refused triton {bad_id}: verify: corrupt" in err and "1 refused" in err


def test_export_to_the_longest_legal_name(fleet):
    """A 255-byte output name is legal; its temporary (``.<name>.<random>.tmp``) must fit NAME_MAX too."""
    out = str(fleet["base"] / ("b" * 251 + ".tar"))
    rc, _, err = jw(fleet["env_a"], "export", "-o", out)
    assert rc == 0, err
    assert tarfile.is_tarfile(out)
    assert os.listdir(fleet["base"]).count(os.path.basename(out)) == 1


# ---------------------------------------------------------------- entries that load each other (issue 47)


def _e(kind, path):
    from jitwarden.ops.bundle import BundleEntry

    return BundleEntry(kind, path, {"": {"sha256": "0" * 64, "size": 1}})


def test_an_entry_that_loads_a_refused_one_stays_out_with_it_and_not_the_reverse():
    from jitwarden.ops.bundle import with_dependencies

    es = [_e("inductor", "fxgraph/jh/fjh"), _e("inductor", "aotautograd/acw"), _e("triton", "K")]
    needs = {1: ("fxgraph/jh/fjh",)}
    got = with_dependencies(es, needs, {0: "verify: corrupt: x"}, elsewhere=True)
    assert got[1] == "loads inductor fxgraph/jh/fjh, which is refused (verify: corrupt: x)"
    assert 2 not in got
    # an AOTAutograd result refused alone keeps the FX graph: a whole entry without it
    assert with_dependencies(es, needs, {1: "verify: stale"}, elsewhere=True) == {
        1: "verify: stale"
    }
    # what the bundle does not carry: fine on a node that has it (install), refused for a bundle (push)
    lone = [es[1]]
    assert with_dependencies(lone, {0: ("fxgraph/jh/fjh",)}, {}, elsewhere=True) == {}
    assert with_dependencies(lone, {0: ("fxgraph/jh/fjh",)}, {}, elsewhere=False) == {
        0: "loads inductor fxgraph/jh/fjh, which the bundle does not carry"
    }


def test_install_moves_what_an_entry_loads_in_before_it():
    from jitwarden.ops.bundle import Manifest
    from jitwarden.ops.bundle_install import _loaded_first

    es = (_e("inductor", "aotautograd/acw"), _e("triton", "K"), _e("inductor", "fxgraph/jh/fjh"))
    m = Manifest("d", {}, {}, 0.0, es)
    assert _loaded_first({0, 1, 2}, {0: ("fxgraph/jh/fjh",)}, m) == [2, 0, 1]


def test_a_signed_manifest_with_one_entry_inside_another_is_refused(fleet, tmp_path):
    def mutate(doc):
        e = doc["entries"][0]
        name = next(iter(e["files"]))
        doc["entries"].append(
            {"kind": "triton", "path": e["path"] + "/" + name, "files": {"": e["files"][name]}}
        )

    bad = str(tmp_path / "nested.tar")
    write_bundle(bad, resign(read_bundle(fleet["bundle"]), fleet["secret"], mutate))
    rc, _, err = jw(node_b(fleet, tmp_path), "import", bad)
    assert rc == 1 and "holds another entry of the bundle" in err, err
    assert entries(triton_partition(node_b(fleet, tmp_path))) == []
