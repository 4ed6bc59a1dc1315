"""A hostile registry: ``push`` and ``pull`` stay bounded in time and memory, end in one line, install nothing.

The registry is a real HTTP server on 127.0.0.1 (``tests/helpers/registry.Hostile``, a thread of this
test) that serves a real signed bundle (pushed once to a real distribution registry and copied) and
turns hostile at one point: it stalls, drips, loops, floods, lies about digests and sizes. Each
case runs ``jitwarden`` in a child process, so its peak RSS is its own; an honest copy of the same
server, measured in the same run, is the baseline. The counts are printed at the end
(``-s``) for the closing note.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("cryptography", reason="signed bundles need the [fleet] extra (cryptography)")

from tests.helpers import registry as reghelp
from tests.helpers.fleet import build_guarded, entries, node_env, triton_partition

TIMEOUT = "1"  # JITWARDEN_OCI_TIMEOUT of every case: one second a request
BOUND_S = 30.0  # generous: a child's start-up (~1-2 s here) plus a handful of deadlines
RSS_SLACK_KB = 64 << 10  # 64 MiB over the honest pull
RESULTS: list[dict] = []
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"


def _exe() -> str:
    exe = reghelp.binary()
    if exe is None:
        why = "no docker-registry on PATH (apt-get install docker-registry; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return exe


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A real signed bundle pushed to a real registry, its objects copied: {path: (content type, bytes)}."""
    import http.client

    base = tmp_path_factory.mktemp("hostile-oci")
    reg = reghelp.Registry(_exe(), str(base / "registry"))
    keys = base / "keys"
    keys.mkdir()
    env = node_env(
        str(base / "builder"),
        JITWARDEN_SIGNING_KEY=str(keys / "k"),
        JITWARDEN_TRUSTED_KEYS=str(keys / "k.pub"),
    )
    from tests.helpers.fleet import jw

    assert jw(env, "keygen")[0] == 0
    build_guarded(env)
    rc, out, err = jw(env, "push", f"{reg.host}/k/llm:v1", "--insecure", "--format", "json")
    assert rc == 0, err
    pushed = json.loads(out)

    def get(path, accept=""):
        c = http.client.HTTPConnection("127.0.0.1", reg.port, timeout=10)
        c.request("GET", path, headers={"Accept": accept} if accept else {})
        r = c.getresponse()
        body, ctype = r.read(), r.getheader("Content-Type", "")
        c.close()
        return ctype, body

    objects = {"/v2/": ("application/json", b"{}")}
    objects["/v2/k/llm/manifests/v1"] = get("/v2/k/llm/manifests/v1", INDEX)
    mpath = f"/v2/k/llm/manifests/{pushed['manifest']}"
    objects[mpath] = get(mpath, MANIFEST)
    m = json.loads(objects[mpath][1])
    for d in (m["config"], m["layers"][0]):
        objects[f"/v2/k/llm/blobs/{d['digest']}"] = get(f"/v2/k/llm/blobs/{d['digest']}")
    reg.stop()
    return {
        "objects": objects,
        "manifest": m,
        "mpath": mpath,
        "digest": pushed["manifest"],
        "pub": str(keys / "k.pub"),
        "builder": env,
        "base": base,
    }


# ---------------------------------------------------------------- behaviours


def _send(
    h,
    status: int,
    body: bytes,
    ctype: str = "application/json",
    length: int | None = None,
    extra=(),
):
    h.send_response(status)
    h.send_header("Content-Type", ctype)
    h.send_header("Docker-Distribution-Api-Version", "registry/2.0")
    h.send_header("Content-Length", str(len(body) if length is None else length))
    for k, v in extra:
        h.send_header(k, v)
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(body)


def _honest(served):
    def act(h):
        path = h.path.split("?")[0]
        if h.command in ("PUT", "POST"):
            _send(h, 500, b"")
            return
        got = served["objects"].get(path)
        if got is None:
            _send(h, 404, b'{"errors":[{"code":"NOT_FOUND","message":"no"}]}')
            return
        _send(h, 200, got[1], got[0] or "application/octet-stream")

    return act


def _at(served, pick, hostile):
    """``hostile(h)`` for the request ``pick(path)`` chooses, honest for the others."""
    honest = _honest(served)

    def act(h):
        if pick(h.path.split("?")[0]):
            hostile(h)
        else:
            honest(h)

    return act


def _stall(h):
    time.sleep(
        60
    )  # the attack: a registry that accepts and never answers (the server thread is a daemon)


def _drip(h):
    h.wfile.write(b"HTTP/1.1 200 OK\r\n")
    for _ in range(
        600
    ):  # one header byte every 0.2 s: each read gets data well inside any per-read timeout
        h.wfile.write(b"X")
        h.wfile.flush()
        time.sleep(0.2)


def _flood(length_header: bool):
    def act(h):
        h.send_response(200)
        h.send_header("Content-Type", INDEX)
        if length_header:
            h.send_header("Content-Length", str(1 << 40))
        h.end_headers()
        chunk = b" " * (1 << 16)
        for _ in range(1 << 15):  # 2 GiB at most, far past every bound
            h.wfile.write(chunk)

    return act


def _redirect_self(h):
    h.send_response(307)
    h.send_header("Location", h.path)
    h.send_header("Content-Length", "0")
    h.end_headers()


def _is_layer(served):
    return lambda p: p.endswith(served["manifest"]["layers"][0]["digest"])


def _is_tag(p: str) -> bool:
    return p.endswith("/manifests/v1")


def _replace_tag(served, doc_fn):
    def act(h):
        raw = json.dumps(doc_fn(served)).encode()
        _send(h, 200, raw, MANIFEST)

    return _at(served, _is_tag, act)


def _lying_layer(served, how: str):
    layer = served["objects"][f"/v2/k/llm/blobs/{served['manifest']['layers'][0]['digest']}"][1]

    def act(h):
        if how == "flipped":
            b = bytearray(layer)
            b[len(b) // 2] ^= 1
            _send(h, 200, bytes(b), "application/octet-stream")
        elif how == "short":
            _send(h, 200, layer[: len(layer) // 2], "application/octet-stream", length=len(layer))
            h.close_connection = True
        elif how == "endless":
            h.send_response(200)
            h.send_header("Content-Type", "application/octet-stream")
            h.end_headers()
            h.wfile.write(layer)
            for _ in range(1 << 14):
                h.wfile.write(b"\0" * (1 << 16))
        elif how == "longer-length":
            _send(h, 200, layer + b"\0" * 512, "application/octet-stream")

    return _at(served, _is_layer(served), act)


def _manifest_with(served, change):
    m = json.loads(json.dumps(served["manifest"]))
    change(m)
    return m


def _bearer_loop(h):
    _send(
        h,
        401,
        b"{}",
        extra=(
            ("WWW-Authenticate", f'Bearer realm="http://{h.headers["Host"]}/token",service="x"'),
        ),
    )


def _many_candidates(served):
    idx = json.loads(served["objects"]["/v2/k/llm/manifests/v1"][1])
    d = idx["manifests"][0]
    fake = [
        {
            **d,
            "digest": "sha256:" + f"{i:064x}",
            "annotations": {**d["annotations"], "dev.jitwarden.fingerprint": f"{i:016x}"},
        }
        for i in range(5000)
    ]
    return {**idx, "manifests": fake}


def _slow(served, inner):
    """``inner`` after 0.8 s on every request: each answer inside the 1 s deadline."""

    def act(h):
        time.sleep(0.8)  # the attack: a registry just fast enough for every single deadline
        inner(h)

    return act


PULL = {
    # name: (behaviour factory, expected exit, words the one line holds)
    "down": (None, 2, "Connection refused"),
    "stall": (lambda s: _stall, 2, "no complete answer within 1 s"),
    "drip-headers": (lambda s: _drip, 2, "no complete answer within 1 s"),
    "huge-manifest-claimed": (lambda s: _at(s, _is_tag, _flood(True)), 2, "more than the 4194304"),
    "endless-manifest": (lambda s: _at(s, _is_tag, _flood(False)), 2, "longer than the 4194304"),
    "redirect-loop": (lambda s: _redirect_self, 2, "more than 3 redirects"),
    "bearer-token-loop": (lambda s: _bearer_loop, 2, "the token service answered 401"),
    "not-json": (
        lambda s: _at(s, _is_tag, lambda h: _send(h, 200, b"\x00garbage{", MANIFEST)),
        1,
        "not JSON",
    ),
    "deep-json": (
        lambda s: _at(s, _is_tag, lambda h: _send(h, 200, b"[" * 100000 + b"]" * 100000, MANIFEST)),
        1,
        "not JSON",
    ),
    "not-a-bundle": (
        lambda s: _replace_tag(
            s, lambda s_: {"schemaVersion": 2, "mediaType": MANIFEST, "config": {}, "layers": []}
        ),
        1,
        "not a jitwarden bundle",
    ),
    "layer-claims-a-terabyte": (
        lambda s: _replace_tag(
            s, lambda s_: _manifest_with(s_, lambda m: m["layers"][0].update(size=1 << 40))
        ),
        1,
        "within",
    ),
    "signature-stripped": (
        lambda s: _replace_tag(
            s,
            lambda s_: _manifest_with(
                s_, lambda m: m["annotations"].pop("dev.jitwarden.signature")
            ),
        ),
        1,
        "unsigned",
    ),
    "layer-wrong-digest": (
        lambda s: _lying_layer(s, "flipped"),
        1,
        "do not match its digest (tampered)",
    ),
    "layer-short": (lambda s: _lying_layer(s, "short"), 2, "the blob ended after"),
    "layer-endless": (lambda s: _lying_layer(s, "endless"), 2, "more than the"),
    "layer-length-lies": (lambda s: _lying_layer(s, "longer-length"), 2, "bytes for a blob of"),
    "config-wrong-digest": (
        lambda s: _at(
            s,
            lambda p: p.endswith(s["manifest"]["config"]["digest"]),
            lambda h: _send(
                h,
                200,
                s["objects"][f"/v2/k/llm/blobs/{s['manifest']['config']['digest']}"][1].replace(
                    b'"schema"', b'"schemX"'
                ),
            ),
        ),
        1,
        "do not match its digest (tampered)",
    ),
    "index-of-5000-strangers": (lambda s: _replace_tag(s, _many_candidates), 4, "64 candidate(s)"),
    "slow-answers-to-64-candidates": (
        lambda s: _slow(s, _replace_tag(s, _many_candidates)),
        2,
        "answered too slowly (6 x 1 s",
    ),
}

PUSH = {
    "down": (None, 2, "Connection refused"),
    "stall": (lambda s: _stall, 2, "no complete answer within 1 s"),
    "redirect-loop": (lambda s: _redirect_self, 2, "more than 3 redirects"),
    "refuses-uploads": (lambda s: _honest(s), 2, "starting an upload: HTTP 500"),
    "huge-error-body": (
        lambda s: lambda h: _send(h, 500, b"x" * (1 << 20)),
        2,
        "more than the 65536",
    ),
}


def _peak_rss_kb(argv, env) -> tuple[subprocess.CompletedProcess, int, float]:
    """Run ``argv``; (its result, its peak RSS in KiB, seconds)."""
    code = (
        "import resource, subprocess, sys, json\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "print(json.dumps([p.returncode, p.stdout, p.stderr, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))\n"
    )
    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", code, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=BOUND_S * 4,
    )
    took = time.perf_counter() - t
    rc, out, err, rss = json.loads(p.stdout)
    return subprocess.CompletedProcess(argv, rc, out, err), rss, took


def _case(served, tmp_path, verb: str, name: str, factory):
    server = None
    if factory is None:
        host = f"127.0.0.1:{reghelp.free_port()}"
    else:
        server = reghelp.Hostile(factory(served))
        host = server.host
    try:
        if verb == "pull":
            env = node_env(
                str(tmp_path / "node"),
                JITWARDEN_TRUSTED_KEYS=served["pub"],
                JITWARDEN_OCI_TIMEOUT=TIMEOUT,
            )
        else:
            env = {**served["builder"], "JITWARDEN_OCI_TIMEOUT": TIMEOUT}
        env["PYTHONPATH"] = os.path.join(os.path.dirname(__file__), "..", "..", "src")
        p, rss, took = _peak_rss_kb(
            [sys.executable, "-m", "jitwarden", verb, f"{host}/k/llm:v1", "--insecure"], env
        )
    finally:
        if server is not None:
            server.stop()
    lines = [
        ln
        for ln in p.stderr.splitlines()
        if not ln.startswith(("jitwarden: WARNING: --insecure", "  sha256:"))
    ]
    return p, lines, rss, took, env, (server.hits if server else 0)


@pytest.fixture(scope="module")
def baseline_rss(served, tmp_path_factory):
    p, _lines, rss, _took, env, _hits = _case(
        served, tmp_path_factory.mktemp("honest"), "pull", "honest", _honest
    )
    assert p.returncode == 0, p.stderr
    assert len(entries(triton_partition(env))) == 2
    return rss


@pytest.mark.parametrize("name", sorted(PULL))
def test_hostile_registry_pull(served, baseline_rss, tmp_path, name):
    factory, want, words = PULL[name]
    p, lines, rss, took, env, hits = _case(served, tmp_path, "pull", name, factory)
    rec = {
        "verb": "pull",
        "case": name,
        "rc": p.returncode,
        "s": round(took, 2),
        "rss_kb": rss,
        "requests": hits,
        "ok": False,
    }
    RESULTS.append(rec)
    assert p.returncode == want, p.stderr
    assert len(lines) <= 2 and "Traceback" not in p.stderr, (
        p.stderr
    )  # the refusal, and import's count line at most
    assert words in p.stderr, p.stderr
    assert entries(triton_partition(env)) == []
    part = triton_partition(env)
    assert not os.path.isdir(part) or not [
        n for n in os.listdir(part) if n.startswith(".jitwarden-import")
    ]
    assert took < BOUND_S and rss < baseline_rss + RSS_SLACK_KB, (took, rss, baseline_rss)
    rec["ok"] = True


@pytest.mark.parametrize("name", sorted(PUSH))
def test_hostile_registry_push(served, tmp_path, name):
    factory, want, words = PUSH[name]
    p, lines, rss, took, _env, hits = _case(served, tmp_path, "push", name, factory)
    rec = {
        "verb": "push",
        "case": name,
        "rc": p.returncode,
        "s": round(took, 2),
        "rss_kb": rss,
        "requests": hits,
        "ok": False,
    }
    RESULTS.append(rec)
    assert p.returncode == want and len(lines) == 1 and words in lines[0], p.stderr
    assert took < BOUND_S
    rec["ok"] = True


@pytest.fixture(scope="module", autouse=True)
def counts():
    """The closing note's figures, printed after the cases (``-s``)."""
    yield
    by: dict = {}
    for r in RESULTS:
        by.setdefault(r["verb"], []).append(r)
    for verb, rs in sorted(by.items()):
        print(
            f"\nhostile registry, {verb}: {len(rs)} cases, {sum(r['ok'] for r in rs)} refused within "
            f"bounds; longest {max(r['s'] for r in rs)} s; peak RSS {max(r['rss_kb'] for r in rs) >> 10} MiB"
        )
        for r in rs:
            print(
                f"  {r['case']}: exit {r['rc']}, {r['s']} s, {r['rss_kb'] >> 10} MiB, {r['requests']} requests"
            )


# ---------------------------------------------------------------- the token flow (an honest token service)


def _token_registry(served, seen: list):
    """A registry that wants ``Bearer`` tokens from its realm, which wants the user's Basic credentials."""
    import base64

    honest = _honest(served)
    basic = "Basic " + base64.b64encode(f"{reghelp.USER}:{reghelp.PASSWORD}".encode()).decode()

    def act(h):
        path = h.path.split("?")[0]
        if path == "/token":
            seen.append(h.path)
            if h.headers.get("Authorization") != basic:
                _send(h, 401, b"{}")
                return
            _send(h, 200, json.dumps({"token": "tok-123"}).encode())
            return
        if h.headers.get("Authorization") != "Bearer tok-123":
            realm = f'Bearer realm="http://{h.headers["Host"]}/token",service="jw-test"'
            _send(h, 401, b"{}", extra=(("WWW-Authenticate", realm),))
            return
        honest(h)

    return act


def test_the_token_flow_pulls_with_docker_login_credentials(served, tmp_path):
    seen: list = []
    server = reghelp.Hostile(_token_registry(served, seen))
    try:
        env = node_env(str(tmp_path / "node"), JITWARDEN_TRUSTED_KEYS=served["pub"])
        p = subprocess.run(
            [sys.executable, "-m", "jitwarden", "pull", f"{server.host}/k/llm:v1", "--insecure"],
            env={**env, "PYTHONPATH": os.path.join(os.path.dirname(__file__), "..", "..", "src")},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 2 and "the token service answered 401" in p.stderr, p.stderr
        reghelp.docker_config(env["HOME"], server.host)
        p = subprocess.run(
            [sys.executable, "-m", "jitwarden", "pull", f"{server.host}/k/llm:v1", "--insecure"],
            env={**env, "PYTHONPATH": os.path.join(os.path.dirname(__file__), "..", "..", "src")},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.stop()
    assert p.returncode == 0, p.stderr
    assert len(entries(triton_partition(env))) == 2
    assert all("service=jw-test" in q and "scope=repository%3Ak%2Fllm%3Apull" in q for q in seen)


# ---------------------------------------------------------------- a signed bundle with one corrupt entry


@pytest.mark.parametrize("all_or_nothing", [False, True])
def test_a_signed_bundle_with_a_corrupt_entry_installs_the_sound_one(
    served, tmp_path, all_or_nothing
):
    """pull installs entry by entry: the one verify calls corrupt is refused by name and reason, the sound one
    goes in (``--all-or-nothing``: nothing goes in, the sound one skipped saying why)."""
    import hashlib
    import io
    import tarfile

    from jitwarden.ops import keys
    from jitwarden.ops import oci as registry

    objects = dict(served["objects"])
    m = served["manifest"]
    layer = objects[f"/v2/k/llm/blobs/{m['layers'][0]['digest']}"][1]
    members = []
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        for info in tar.getmembers():
            members.append((info, tar.extractfile(info).read()))
    doc = json.loads(members[0][1])
    e = doc["entries"][0]
    cubin = next(n for n in e["files"] if n.endswith(".cubin"))
    garbage = b"\x7fNOT-AN-ELF" + b"\0" * 4085
    e["files"][cubin] = {"sha256": hashlib.sha256(garbage).hexdigest(), "size": len(garbage)}
    mbytes = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    key = keys.load_signing_key(served["pub"][: -len(".pub")])
    sig = json.dumps(
        {"schema": 1, "algorithm": "ed25519", "key_id": key.id, "signature": key.sign(mbytes).hex()}
    ).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            data = {
                "manifest.json": mbytes,
                "manifest.sig": sig,
                f"entries/0/{cubin}": garbage,
            }.get(info.name, data)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    new_layer = out.getvalue()
    cfg = registry.descriptor(registry.CONFIG_TYPE, registry.sha256_digest(mbytes), len(mbytes))
    lay = registry.descriptor(
        registry.LAYER_TYPE, registry.sha256_digest(new_layer), len(new_layer)
    )
    notes = {**m["annotations"], registry.A_SIGNATURE: sig.decode()}
    raw = registry.bundle_manifest(cfg, lay, notes)
    objects["/v2/k/llm/manifests/v1"] = (MANIFEST, raw)
    objects[f"/v2/k/llm/blobs/{cfg['digest']}"] = ("application/octet-stream", mbytes)
    objects[f"/v2/k/llm/blobs/{lay['digest']}"] = ("application/octet-stream", new_layer)
    server = reghelp.Hostile(_honest({**served, "objects": objects}))
    try:
        env = node_env(str(tmp_path / "node"), JITWARDEN_TRUSTED_KEYS=served["pub"])
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "jitwarden",
                "pull",
                f"{server.host}/k/llm:v1",
                "--insecure",
                "--format",
                "json",
                *(["--all-or-nothing"] if all_or_nothing else []),
            ],
            env={**env, "PYTHONPATH": os.path.join(os.path.dirname(__file__), "..", "..", "src")},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.stop()
    assert p.returncode == 1, p.stderr
    res = json.loads(p.stdout)
    refused = next(x for x in res["entries"] if x["action"] == "refused")
    assert refused["path"] == e["path"] and "corrupt" in refused["why"] and cubin in refused["why"]
    if all_or_nothing:
        assert res["counts"] == {"installed": 0, "present": 0, "skipped": 1, "refused": 1}
        assert entries(triton_partition(env)) == []
    else:
        assert res["counts"] == {"installed": 1, "present": 0, "skipped": 0, "refused": 1}
        assert e["path"] not in entries(triton_partition(env))
        assert len(entries(triton_partition(env))) == 1


# ---------------------------------------------------------------- issue 47: the attacks through a proxy


def _pull(env, host, *extra, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "jitwarden", "pull", f"{host}/k/llm:v1", "--insecure", *extra],
        env={**env, "PYTHONPATH": os.path.join(os.path.dirname(__file__), "..", "..", "src")},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _resigned(served, change=None, created_delta: float = 0.0):
    """The served objects with the bundle's manifest changed by ``change(doc)`` (``created`` moved by
    ``created_delta``), signed again with the builder's key, its layer, config and tag rewritten."""
    import io
    import tarfile

    from jitwarden.ops import keys
    from jitwarden.ops import oci as registry

    objects = dict(served["objects"])
    m = served["manifest"]
    layer = objects[f"/v2/k/llm/blobs/{m['layers'][0]['digest']}"][1]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = [(i, tar.extractfile(i).read()) for i in tar.getmembers()]
    doc = json.loads(members[0][1])
    doc["created"] = doc["created"] + created_delta
    if change:
        change(doc)
    mbytes = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    key = keys.load_signing_key(served["pub"][: -len(".pub")])
    sig = json.dumps(
        {"schema": 1, "algorithm": "ed25519", "key_id": key.id, "signature": key.sign(mbytes).hex()}
    ).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            data = {"manifest.json": mbytes, "manifest.sig": sig}.get(info.name, data)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    new_layer = out.getvalue()
    cfg = registry.descriptor(registry.CONFIG_TYPE, registry.sha256_digest(mbytes), len(mbytes))
    lay = registry.descriptor(
        registry.LAYER_TYPE, registry.sha256_digest(new_layer), len(new_layer)
    )
    raw = registry.bundle_manifest(
        cfg, lay, {**m["annotations"], registry.A_SIGNATURE: sig.decode()}
    )
    objects["/v2/k/llm/manifests/v1"] = (MANIFEST, raw)
    objects[f"/v2/k/llm/manifests/{registry.sha256_digest(raw)}"] = (MANIFEST, raw)
    objects[f"/v2/k/llm/blobs/{cfg['digest']}"] = ("application/octet-stream", mbytes)
    objects[f"/v2/k/llm/blobs/{lay['digest']}"] = ("application/octet-stream", new_layer)
    return objects, registry.sha256_digest(raw), raw


def test_a_401_from_the_storage_host_sends_no_credentials_anywhere(served, tmp_path):
    """The registry redirects the layer to a storage host, which answers 401 with a realm on a third host: the
    registry's credentials must reach neither, and the error says what happened (not "credentials refused")."""
    token_seen: list = []
    storage_seen: list = []

    def token(h):
        token_seen.append((h.path, h.headers.get("Authorization")))
        _send(h, 200, json.dumps({"token": "stolen"}).encode())

    third = reghelp.Hostile(token)

    def storage(h):
        storage_seen.append(h.headers.get("Authorization"))
        realm = f'Bearer realm="http://{third.host}/token",service="storage"'
        _send(h, 401, b"{}", extra=(("WWW-Authenticate", realm),))

    store = reghelp.Hostile(storage)
    layer_path = f"/v2/k/llm/blobs/{served['manifest']['layers'][0]['digest']}"

    def redirect(h):
        h.send_response(307)
        h.send_header("Location", f"http://{store.host}{layer_path}?sig=x")
        h.send_header("Content-Length", "0")
        h.end_headers()

    reg = reghelp.Hostile(_at(served, lambda p: p == layer_path, redirect))
    try:
        env = node_env(str(tmp_path / "node"), JITWARDEN_TRUSTED_KEYS=served["pub"])
        reghelp.docker_config(env["HOME"], reg.host)
        p = _pull(env, reg.host)
    finally:
        for s in (reg, store, third):
            s.stop()
    assert p.returncode == 2, p.stderr
    assert token_seen == [] and storage_seen == [None], (token_seen, storage_seen)
    assert f"{store.host}, where the registry redirected GET" in p.stderr, p.stderr
    assert "credentials refused" not in p.stderr and "Traceback" not in p.stderr
    assert entries(triton_partition(env)) == []


def test_a_layer_larger_than_its_signed_files_is_refused_before_a_byte_is_read(served, tmp_path):
    layer_hits: list = []
    big = _manifest_with(served, lambda m: m["layers"][0].update(size=3 << 30))
    honest = _honest(served)

    def act(h):
        path = h.path.split("?")[0]
        if path.endswith("/manifests/v1"):
            _send(h, 200, json.dumps(big).encode(), MANIFEST)
        elif path.endswith(served["manifest"]["layers"][0]["digest"]):
            layer_hits.append(path)
            honest(h)
        else:
            honest(h)

    server = reghelp.Hostile(act)
    try:
        env = node_env(str(tmp_path / "node"), JITWARDEN_TRUSTED_KEYS=served["pub"])
        p = _pull(env, server.host)
    finally:
        server.stop()
    assert p.returncode == 1, p.stderr
    assert f"the layer claims {3 << 30} bytes" in p.stderr and "not downloaded" in p.stderr, (
        p.stderr
    )
    assert layer_hits == []


def test_a_full_local_tmpdir_is_said_to_be_local(served, tmp_path):
    """A write to TMPDIR that fails (here past RLIMIT_FSIZE: EFBIG, as ENOSPC is for a full disk) is this
    node's trouble: the line names TMPDIR, never "registry HOST"."""
    import resource
    import signal

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    server = reghelp.Hostile(_honest(served))
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    try:
        env = node_env(str(tmp_path / "node"), JITWARDEN_TRUSTED_KEYS=served["pub"])
        env["TMPDIR"] = str(tmpdir)
        p = subprocess.run(
            [sys.executable, "-m", "jitwarden", "pull", f"{server.host}/k/llm:v1", "--insecure"],
            env={**env, "PYTHONPATH": os.path.join(os.path.dirname(__file__), "..", "..", "src")},
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=small_files,
        )
    finally:
        server.stop()
    assert p.returncode == 2, p.stderr
    assert f"cannot write to TMPDIR {tmpdir}: File too large" in p.stderr, p.stderr
    assert f"registry {server.host}" not in p.stderr and "Traceback" not in p.stderr


def test_a_tag_moved_back_to_an_older_bundle_is_refused_unless_allowed(served, tmp_path):
    newer, newer_digest, _ = _resigned(served, created_delta=+100.0)
    older, _older_digest, _ = _resigned(served, created_delta=-100.0)
    env = node_env(str(tmp_path / "node"), JITWARDEN_TRUSTED_KEYS=served["pub"])
    now = {"objects": newer}  # one registry (one host:port) whose tag is moved back between pulls

    def act(h):
        _honest({**served, "objects": now["objects"]})(h)

    server = reghelp.Hostile(act)
    try:
        first = _pull(env, server.host)
        assert first.returncode == 0, first.stderr
        now["objects"] = older
        p = _pull(env, server.host)
        assert p.returncode == 1, p.stderr
        assert "the tag was moved back; pass --allow-older" in p.stderr, p.stderr
        assert newer_digest[:19] in p.stderr
        p = _pull(env, server.host, "--allow-older")
        assert p.returncode == 0, p.stderr
        now["objects"] = newer
        assert _pull(env, server.host).returncode == 0  # the newest again: fine
    finally:
        server.stop()


def test_an_index_with_two_bundles_of_one_fingerprint_is_refused_naming_both(served, tmp_path):
    other, other_digest, raw = _resigned(served, created_delta=+1.0)
    idx = json.loads(served["objects"]["/v2/k/llm/manifests/v1"][1])
    first = idx["manifests"][0]
    second = {**first, "digest": other_digest, "size": len(raw)}
    objects = {
        **other,
        **{k: v for k, v in served["objects"].items() if k != "/v2/k/llm/manifests/v1"},
        "/v2/k/llm/manifests/v1": (
            INDEX,
            json.dumps({**idx, "manifests": [first, second]}).encode(),
        ),
    }
    server = reghelp.Hostile(_honest({**served, "objects": objects}))
    try:
        env = node_env(str(tmp_path / "node"), JITWARDEN_TRUSTED_KEYS=served["pub"])
        p = _pull(env, server.host)
    finally:
        server.stop()
    assert p.returncode == 1, p.stderr
    assert first["digest"] in p.stderr and other_digest in p.stderr, p.stderr
    assert entries(triton_partition(env)) == []
