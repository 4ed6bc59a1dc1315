"""``jitwarden push``/``pull`` against a real registry (CNCF distribution 2.8, Debian's docker-registry).

Builders A and B (their own HOMEs; B's fingerprint forced apart by a code-gen variable, as
docs/rebuild.md lists them under "env": no setting fakes a GPU) push real guarded Triton caches to ONE tag; nodes with A's,
B's and a third fingerprint pull it. Refusals are real: a byte flipped in the registry's own
storage, another key, a stopped registry, an index that lies about whose bundle it lists.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os

import pytest

pytest.importorskip("cryptography", reason="signed bundles need the [fleet] extra (cryptography)")

from tests.helpers import registry as reghelp
from tests.helpers.fleet import build_guarded, digest_of, entries, jw, node_env, triton_partition

B_FORCED = {"TORCHINDUCTOR_FREEZING": "1"}  # a code-gen variable: another fingerprint, same kernels
C_FORCED = {"TORCHINDUCTOR_MAX_AUTOTUNE": "1"}  # a third fingerprint nobody pushed for


def _exe() -> str:
    exe = reghelp.binary()
    if exe is None:
        why = "no docker-registry on PATH (apt-get install docker-registry; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return exe


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    r = reghelp.Registry(_exe(), str(tmp_path_factory.mktemp("registry")))
    yield r
    r.stop()


@pytest.fixture(scope="module")
def authed(tmp_path_factory):
    r = reghelp.Registry(_exe(), str(tmp_path_factory.mktemp("registry-auth")), auth=True)
    yield r
    r.stop()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, registry):
    """Builders A and B pushed to one tag; their keys and partitions."""
    base = tmp_path_factory.mktemp("oci")
    keys = base / "keys"
    keys.mkdir()
    env_a = node_env(
        str(base / "a"),
        JITWARDEN_SIGNING_KEY=str(keys / "builder"),
        JITWARDEN_TRUSTED_KEYS=str(keys / "builder.pub"),
    )
    rc, _, err = jw(env_a, "keygen")
    assert rc == 0, err
    env_b = node_env(
        str(base / "b"),
        JITWARDEN_SIGNING_KEY=str(keys / "builder"),
        JITWARDEN_TRUSTED_KEYS=str(keys / "builder.pub"),
        **B_FORCED,
    )
    assert digest_of(env_a) != digest_of(env_b)
    ref = f"{registry.host}/kernels/llm:v1"
    pushed = {}
    for name, env in (("a", env_a), ("b", env_b)):
        build_guarded(env)
        rc, out, err = jw(env, "push", ref, "--insecure", "--format", "json")
        assert rc == 0, err
        assert "WARNING: --insecure" in err
        pushed[name] = json.loads(out)
    return {
        "base": base,
        "ref": ref,
        "env_a": env_a,
        "env_b": env_b,
        "pushed": pushed,
        "pub": str(keys / "builder.pub"),
        "secret": str(keys / "builder"),
    }


def node(fleet, tmp_path, name: str, **extra) -> dict:
    return node_env(str(tmp_path / name), JITWARDEN_TRUSTED_KEYS=fleet["pub"], **extra)


def _get(registry, path: str, accept: str = "") -> tuple[int, bytes, dict]:
    c = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=10)
    c.request("GET", path, headers={"Accept": accept} if accept else {})
    r = c.getresponse()
    out = r.status, r.read(), dict(r.getheaders())
    c.close()
    return out


INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def test_one_tag_holds_an_index_of_both_fingerprints_annotated(fleet, registry):
    a, b = fleet["pushed"]["a"], fleet["pushed"]["b"]
    assert a["index"] == 1 and b["index"] == 2  # B's push added to A's index
    status, raw, _ = _get(registry, "/v2/kernels/llm/manifests/v1", INDEX)
    assert status == 200
    index = json.loads(raw)
    assert index["mediaType"] == INDEX
    listed = {d["annotations"]["dev.jitwarden.fingerprint"]: d for d in index["manifests"]}
    assert set(listed) == {digest_of(fleet["env_a"]), digest_of(fleet["env_b"])}
    for d in listed.values():
        assert d["artifactType"] == "application/vnd.jitwarden.bundle.v1"
        notes = d["annotations"]
        assert {
            "dev.jitwarden.compute-capability",
            "dev.jitwarden.driver",
            "dev.jitwarden.toolchain",
        } <= set(notes)
    # The manifest: config = the bundle's manifest.json, one layer = the bundle tar, the signature record.
    status, raw, _ = _get(registry, f"/v2/kernels/llm/manifests/{a['manifest']}", MANIFEST)
    m = json.loads(raw)
    assert m["config"]["mediaType"] == "application/vnd.jitwarden.bundle.manifest.v1+json"
    assert [x["mediaType"] for x in m["layers"]] == ["application/vnd.jitwarden.bundle.v1+tar"]
    assert json.loads(m["annotations"]["dev.jitwarden.signature"])["algorithm"] == "ed25519"
    # A second push of the same fingerprint replaces its own entry, never adds a duplicate.
    rc, out, err = jw(fleet["env_a"], "push", fleet["ref"], "--insecure", "--format", "json")
    assert rc == 0 and json.loads(out)["index"] == 2, err


def test_each_node_pulls_the_bundle_of_its_own_fingerprint(fleet, tmp_path):
    for name, forced, builder in (("c-as-a", {}, "env_a"), ("c-as-b", B_FORCED, "env_b")):
        env = node(fleet, tmp_path, name, **forced)
        rc, out, err = jw(env, "pull", fleet["ref"], "--insecure", "--format", "json")
        assert rc == 0, err
        doc = json.loads(out)
        assert doc["counts"]["installed"] == 2 and doc["match"] and doc["candidates"] == 2
        assert doc["digest"]["bundle"] == digest_of(fleet[builder])
        part = triton_partition(env)
        assert entries(part) == entries(triton_partition(fleet[builder]))
        rc, out, err = jw(env, "verify", part, "--format", "json")
        assert rc == 0, out + err
        build_guarded(env)  # the same kernels: hits on what was pulled, nothing rewritten
        assert entries(part) == entries(triton_partition(fleet[builder]))
        rc, out, _ = jw(env, "pull", fleet["ref"], "--insecure", "--format", "json")
        assert rc == 0 and json.loads(out)["counts"]["present"] == 2


def test_a_node_nobody_built_for_is_told_what_differs_per_candidate(fleet, tmp_path):
    env = node(fleet, tmp_path, "third", **C_FORCED)
    rc, out, err = jw(env, "pull", fleet["ref"], "--insecure")
    assert rc == 4, err
    lines = [ln for ln in err.splitlines() if ln.startswith("  sha256:")]
    assert len(lines) == 2
    assert all(
        "not installed: built for" in ln and "env:TORCHINDUCTOR_MAX_AUTOTUNE" in ln for ln in lines
    )
    assert any("env:TORCHINDUCTOR_FREEZING" in ln for ln in lines)
    assert "nothing installed" in err
    assert entries(triton_partition(env)) == []
    rc, out, _ = jw(env, "pull", fleet["ref"], "--insecure", "--format", "json")
    assert rc == 4 and len(json.loads(out)["candidates"]) == 2


def test_pull_by_digest(fleet, tmp_path):
    env = node(fleet, tmp_path, "bydigest")
    ref = fleet["ref"].rsplit(":", 1)[0] + "@" + fleet["pushed"]["a"]["manifest"]
    rc, out, err = jw(env, "pull", ref, "--insecure", "--format", "json")
    assert rc == 0 and json.loads(out)["counts"]["installed"] == 2, err
    # The digest of B's bundle names a bundle for another node: what differs, nothing installed.
    env2 = node(fleet, tmp_path, "bydigest-b")
    ref_b = fleet["ref"].rsplit(":", 1)[0] + "@" + fleet["pushed"]["b"]["manifest"]
    rc, _, err = jw(env2, "pull", ref_b, "--insecure")
    assert rc == 4 and "env:TORCHINDUCTOR_FREEZING" in err
    assert entries(triton_partition(env2)) == []


def test_the_signature_is_a_referrer_under_the_fallback_tag(fleet, registry):
    from jitwarden.ops import keys

    a = fleet["pushed"]["a"]
    assert a["signature_referrer"] == "tag " + a["manifest"].replace(":", "-")
    status, raw, _ = _get(
        registry, f"/v2/kernels/llm/manifests/{a['manifest'].replace(':', '-')}", INDEX
    )
    assert status == 200
    (ref,) = json.loads(raw)["manifests"]
    assert ref["artifactType"] == "application/vnd.jitwarden.signature.v1"
    _, raw, _ = _get(registry, f"/v2/kernels/llm/manifests/{ref['digest']}", MANIFEST)
    sigm = json.loads(raw)
    assert sigm["subject"]["digest"] == a["manifest"]
    _, sig, _ = _get(registry, f"/v2/kernels/llm/blobs/{sigm['layers'][0]['digest']}")
    _, bm, _ = _get(registry, f"/v2/kernels/llm/manifests/{a['manifest']}", MANIFEST)
    _, config, _ = _get(registry, f"/v2/kernels/llm/blobs/{json.loads(bm)['config']['digest']}")
    rec = json.loads(sig)
    trusted = keys.load_trusted({"JITWARDEN_TRUSTED_KEYS": fleet["pub"]})
    assert trusted.verify(rec["key_id"], bytes.fromhex(rec["signature"]), config) is None


def _layer_blob(registry, fleet) -> str:
    """The storage file of the layer the tag's index lists for A's fingerprint."""
    _, raw, _ = _get(registry, "/v2/kernels/llm/manifests/v1", INDEX)
    a_fp = digest_of(fleet["env_a"])
    (d,) = [
        d
        for d in json.loads(raw)["manifests"]
        if d["annotations"]["dev.jitwarden.fingerprint"] == a_fp
    ]
    _, raw, _ = _get(registry, f"/v2/kernels/llm/manifests/{d['digest']}", MANIFEST)
    digest = json.loads(raw)["layers"][0]["digest"].split(":")[1]
    (path,) = [p for p in registry.blobs() if os.path.basename(os.path.dirname(p)) == digest]
    return path


def test_a_blob_tampered_in_the_registry_storage_is_refused(fleet, registry, tmp_path):
    path = _layer_blob(registry, fleet)
    data = open(path, "rb").read()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 1  # inside an entry's files: the tar still parses
    try:
        with open(path, "wb") as f:
            f.write(bytes(flipped))
        env = node(fleet, tmp_path, "victim")
        rc, out, err = jw(env, "pull", fleet["ref"], "--insecure", "--format", "json")
        doc = json.loads(out)
        assert rc == 1, err
        assert "do not match its digest (tampered)" in doc["refused"]
        assert entries(triton_partition(env)) == []
        assert not os.path.isdir(triton_partition(env)) or not [
            n for n in os.listdir(triton_partition(env)) if n.startswith(".jitwarden")
        ]
    finally:
        with open(path, "wb") as f:
            f.write(data)


def test_another_key_or_none_is_refused(fleet, tmp_path):
    other = tmp_path / "other"
    rc, _, err = jw(node_env(str(tmp_path / "x")), "keygen", "-o", str(other))
    assert rc == 0, err
    env = node_env(str(tmp_path / "n"), JITWARDEN_TRUSTED_KEYS=str(other) + ".pub")
    rc, out, err = jw(env, "pull", fleet["ref"], "--insecure", "--format", "json")
    assert rc == 1 and "not among the trusted keys" in json.loads(out)["refused"], err
    assert entries(triton_partition(env)) == []
    # An unsigned push is refused by every pull.
    ref = fleet["ref"].replace(":v1", ":unsigned")
    rc, _, err = jw(fleet["env_a"], "push", ref, "--insecure", "--unsigned")
    assert rc == 0, err
    env = node(fleet, tmp_path, "n2")
    rc, _, err = jw(env, "pull", ref, "--insecure")
    assert rc == 1 and "unsigned" in err and entries(triton_partition(env)) == []


def test_an_index_that_lies_about_a_fingerprint_never_installs_a_foreign_bundle(
    fleet, registry, tmp_path
):
    """A writer of the registry relabels B's bundle with A's fingerprint: A's nodes refuse it."""
    status, raw, _ = _get(registry, "/v2/kernels/llm/manifests/v1", INDEX)
    index = json.loads(raw)
    a_fp, b_fp = digest_of(fleet["env_a"]), digest_of(fleet["env_b"])
    b = next(d for d in index["manifests"] if d["annotations"]["dev.jitwarden.fingerprint"] == b_fp)
    b = {**b, "annotations": {**b["annotations"], "dev.jitwarden.fingerprint": a_fp}}
    lie = json.dumps({**index, "manifests": [b]}).encode()
    c = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=10)
    c.request("PUT", "/v2/kernels/llm/manifests/lie", body=lie, headers={"Content-Type": INDEX})
    assert c.getresponse().status == 201
    c.close()
    env = node(fleet, tmp_path, "liar-victim")
    rc, out, err = jw(
        env, "pull", fleet["ref"].replace(":v1", ":lie"), "--insecure", "--format", "json"
    )
    assert rc == 1, err
    assert f"the signed manifest says {b_fp}" in json.loads(out)["refused"]
    assert entries(triton_partition(env)) == []


def test_a_stopped_registry_is_exit_2_in_one_line(fleet, tmp_path):
    r = reghelp.Registry(_exe(), str(tmp_path / "shortlived"))
    ref = f"{r.host}/kernels/llm:v1"
    rc, _, err = jw(fleet["env_a"], "push", ref, "--insecure")
    assert rc == 0, err
    r.stop()
    env = node(fleet, tmp_path, "down", JITWARDEN_OCI_TIMEOUT="2")
    for verb, e in (("pull", env), ("push", fleet["env_a"])):
        rc, _, err = jw(e, verb, ref, "--insecure")
        lines = [
            ln for ln in err.splitlines() if not ln.startswith("jitwarden: WARNING: --insecure")
        ]
        assert (
            rc == 2
            and len(lines) == 1
            and lines[0].startswith(f"jitwarden: error: registry {r.host}")
        ), err
        assert "Traceback" not in err
    assert entries(triton_partition(env)) == []


# ---------------------------------------------------------------- auth (htpasswd)


def test_auth_from_docker_config_and_registry_auth_file(fleet, authed, tmp_path):
    ref = f"{authed.host}/kernels/llm:v1"
    env_a = dict(fleet["env_a"])
    rc, _, err = jw(env_a, "push", ref, "--insecure")
    assert rc == 2 and "the registry wants credentials" in err
    reghelp.docker_config(env_a["HOME"], authed.host)
    try:
        rc, _, err = jw(env_a, "push", ref, "--insecure")
        assert rc == 0, err
        assert "credentials and bundles travel readable" in err  # --insecure said loudly
    finally:
        os.unlink(os.path.join(env_a["HOME"], ".docker", "config.json"))
    # A node with REGISTRY_AUTH_FILE (podman's, skopeo's) pulls.
    auth_file = tmp_path / "auth.json"
    auth_file.write_text(
        json.dumps(
            {
                "auths": {
                    authed.host: {
                        "auth": base64.b64encode(
                            f"{reghelp.USER}:{reghelp.PASSWORD}".encode()
                        ).decode()
                    }
                }
            }
        )
    )
    env = node(fleet, tmp_path, "authed", REGISTRY_AUTH_FILE=str(auth_file))
    rc, out, err = jw(env, "pull", ref, "--insecure", "--format", "json")
    assert rc == 0 and json.loads(out)["counts"]["installed"] == 2, err
    # Wrong password: one line, exit 2.
    auth_file.write_text(
        json.dumps({"auths": {authed.host: {"username": reghelp.USER, "password": "wrong"}}})
    )
    env = node(fleet, tmp_path, "wrongpw", REGISTRY_AUTH_FILE=str(auth_file))
    rc, _, err = jw(env, "pull", ref, "--insecure")
    assert rc == 2 and "credentials refused" in err and entries(triton_partition(env)) == []


def test_bad_refs_and_credential_files_are_usage_errors(fleet, registry, tmp_path):
    env = node(fleet, tmp_path, "usage")
    for bad, why in (
        ("kernels/llm:v1", "name the registry host first"),
        ("Registry.example.com/UPPER:v1", "expected HOST"),
        ("host.example/llm:bad tag", "expected HOST"),
        ("h.example/r@sha256:12", "expected HOST"),
    ):
        rc, _, err = jw(env, "pull", bad)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and why in err, (bad, err)
    rc, _, err = jw(fleet["env_a"], "push", "h.example:5000/r@sha256:" + "0" * 64)
    assert rc == 2 and "push names a tag" in err
    bad = tmp_path / "auth.json"
    bad.write_text(json.dumps({"auths": {"h.example": {"auth": "not base64 !"}}}))
    env = node(fleet, tmp_path, "badauth", REGISTRY_AUTH_FILE=str(bad))
    rc, _, err = jw(env, "pull", "h.example/r:v1")
    assert rc == 2 and "not base64" in err
    env = node(fleet, tmp_path, "noauth", REGISTRY_AUTH_FILE=str(tmp_path / "missing.json"))
    rc, _, err = jw(env, "pull", "h.example/r:v1")
    assert rc == 2 and "REGISTRY_AUTH_FILE=" in err and "no such file" in err
    # A tag nobody pushed: exit 2, one line; a tag holding something else: push refuses to touch it.
    rc, _, err = jw(
        env := node(fleet, tmp_path, "missing"),
        "pull",
        f"{registry.host}/kernels/llm:nope",
        "--insecure",
    )
    assert rc == 2 and "not found" in err and entries(triton_partition(env)) == []
    c = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=10)
    image = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": "sha256:"
            + hashlib.sha256(b"{}").hexdigest(),  # in the repo: every push's referrer uses it
            "size": 2,
        },
        "layers": [],
    }
    c.request(
        "PUT",
        "/v2/kernels/llm/manifests/other",
        body=json.dumps(image).encode(),
        headers={"Content-Type": MANIFEST},
    )
    assert c.getresponse().status == 201
    c.close()
    rc, _, err = jw(fleet["env_a"], "push", f"{registry.host}/kernels/llm:other", "--insecure")
    assert rc == 2 and "push to another tag" in err and "Traceback" not in err


def test_the_answers_budget_counts_time_spent_on_the_registry_not_the_command(registry):
    """push scans (minutes with --rebuild) between its first request and its uploads: that time is its
    own, and must not eat the registry's budget of POOL deadlines."""
    import time

    from jitwarden.formats import oci as wire

    client = wire.Client(
        wire.parse_ref(f"{registry.host}/kernels/llm:v1"), insecure=True, timeout=0.5
    )
    assert client.request("GET", "/v2/").status == 200
    time.sleep(wire.POOL * 0.5 + 0.5)  # the delay is what is tested: longer than the whole budget
    assert client.request("GET", "/v2/").status == 200
