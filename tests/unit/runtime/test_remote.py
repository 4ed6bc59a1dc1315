"""The guarded remote cache against a real redis-server/valkey-server: real Triton compiles, real poison.

A builder (writer role) compiles through ``RemoteGuardedCacheManager`` and stores signed
values; serving nodes (reader role) start with empty local caches. Poisoned values are
written straight into the server; a reader must then compile locally and end up with the
builder's exact cubin, and count the rejection.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip(
    "cryptography", reason="the remote cache signs values: needs the [fleet] extra (cryptography)"
)

from jitwarden.ops import keys
from jitwarden.runtime import remote
from tests.helpers import kernels
from tests.helpers.fleet import (
    SMALL_JOBS,
    build,
    counters,
    jw,
    node,
    node_env,
    triton_partition,
)


def entry_key(digest, rec):
    """Where RemoteGuardedCacheManager stores a whole kernel entry."""
    return remote.redis_key(digest, rec["id"], f"{remote.ENTRY_PREFIX}{rec['name']}.json")


def cubin(part, rec):
    with open(os.path.join(part, rec["id"], f"{rec['name']}.cubin"), "rb") as f:
        return f.read()


def test_reader_with_empty_cache_loads_the_builders_kernels(tmp_path, server, keypair):
    w = node(tmp_path, "builder", server, keypair, "writer")
    part_w, built = build(w)
    cw = counters(w)
    assert cw.get("put", 0) == len(built) and not any(k.startswith("reject") for k in cw)
    assert all(
        k.startswith(b"jitwarden:v1:" + os.path.basename(part_w).encode())
        for k in server.call("KEYS", "*")
    )
    r = node(tmp_path, "reader", server, keypair)
    part_r, got = build(r)
    c = counters(r)
    assert c.get("local-miss") == len(got) and c.get("miss", 0) == 0
    assert c.get("hit", 0) == len(got)  # each kernel entry came from the server as one signed value
    for rec_w, rec_r in zip(built, got):
        assert cubin(part_r, rec_r) == cubin(part_w, rec_w)
    rc, out, err = jw(r, "verify", part_r)
    assert rc == 0, out + err  # installed through the guard: sealed, not foreign-path


def test_reader_never_writes(tmp_path, server, keypair):
    r = node(tmp_path, "reader", server, keypair)
    build(r)
    assert server.call("DBSIZE") == 0
    assert "put" not in counters(r)


def _poison(server, digest, rec, how, attacker):
    from jitwarden.formats import resp  # noqa: F401

    key = entry_key(digest, rec)
    good = server.call("GET", key)
    assert good
    if how == "flip":
        bad = good[:-10] + bytes([good[-10] ^ 0x40]) + good[-9:]
    elif how == "truncate":
        bad = good[: len(good) // 2]
    elif how == "unsigned":
        bad = remote.open_value(key, good, _trust_all())[
            0
        ]  # the raw cubin, as a plain SET would store it
    elif how == "untrusted":
        bad = remote.seal_value(key, b"\x7fELF evil", attacker)
    elif how == "resigned-data":  # new data and header, old signature
        data, head = remote.open_value(key, good, _trust_all())
        evil = data.replace(b"add_kernel", b"evil_kernl")
        hb = json.dumps(
            {**head, "s": __import__("hashlib").sha256(evil).hexdigest(), "n": len(evil)},
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        import struct

        hlen = struct.unpack(">I", good[4:8])[0]
        sig = good[8 + hlen : 8 + hlen + 64]
        bad = remote.MAGIC + struct.pack(">I", len(hb)) + hb + sig + evil
    elif (
        how == "replay" or how == "namespace"
    ):  # the sub kernel's (valid, signed) cubin value under the add kernel's key
        return key
    else:
        raise AssertionError(how)
    server.call("SET", key, bad)
    return key


def _trust_all():
    class T:
        def verify(self, kid, sig, msg):
            return None

    return T()


POISONS = ["flip", "truncate", "unsigned", "untrusted", "resigned-data", "replay", "namespace"]
REASON = {
    "flip": "digest",
    "truncate": "truncated",
    "unsigned": "unsigned",
    "untrusted": "untrusted-key",
    "resigned-data": "signature",
    "replay": "wrong-key",
    "namespace": "wrong-key",
}


@pytest.mark.parametrize("how", POISONS)
def test_poisoned_values_never_load(tmp_path, server, keypair, how):
    w = node(tmp_path, "builder", server, keypair, "writer")
    part_w, built = build(w)
    digest = os.path.basename(part_w)
    add = next(b for b in built if b["variant"] == "add")
    sub = next(b for b in built if b["variant"] == "sub")
    key = _poison(server, digest, add, how, keys.SigningKey(os.urandom(32)))
    if how == "replay":
        server.call("SET", key, server.call("GET", entry_key(digest, sub)))
    if how == "namespace":
        other = node(tmp_path, "other-fp", server, keypair, "writer", TORCHINDUCTOR_FREEZING="1")
        part_o, built_o = build(other, [j for j in SMALL_JOBS if j["variant"] == "add"])
        assert os.path.basename(part_o) != digest
        server.call("SET", key, server.call("GET", entry_key(os.path.basename(part_o), add)))
    r = node(tmp_path, "reader", server, keypair)
    part_r, got = build(r)
    c = counters(r)
    assert c.get(f"reject:{REASON[how]}", 0) >= 1, c
    add_r = next(g for g in got if g["variant"] == "add")
    assert cubin(part_r, add_r) == cubin(
        part_w, add
    )  # compiled locally: the builder's exact kernel
    rc, out, err = jw(r, "verify", part_r)
    assert rc == 0, out + err


DRIVER = textwrap.dedent("""
    import json, os, signal, sys, time
    sys.path.insert(0, os.environ["JW_KERNEL_DIR"])
    import triton
    from triton.compiler import ASTSource
    from triton.backends.compiler import GPUTarget
    import jw_test_kernels as K
    done = []
    for i, job in enumerate(json.loads(os.environ["JW_JOBS"])):
        if i == 1:
            sig = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}[os.environ["JW_DO"]]
            os.kill(int(os.environ["JW_SERVER_PID"]), sig)  # the server dies or hangs mid-run
        src = ASTSource(fn=getattr(K, job["kernel"]), signature=job["signature"], constexprs=job["constexprs"])
        t = time.monotonic()
        k = triton.compile(src, target=GPUTarget("cuda", job["arch"], 32), options=job["options"])
        done.append({"name": k.metadata.name, "s": time.monotonic() - t})
    print(json.dumps(done))
""")


@pytest.mark.parametrize("do", ["kill", "stop"])
def test_server_killed_or_hung_mid_run_costs_a_local_compile(tmp_path, server, keypair, do):
    jobs = [
        dict(j) for j in kernels.jobs_for(archs=(90,)) if j["variant"] in ("add", "sub", "add_b256")
    ]
    r = node(tmp_path, "reader", server, keypair, JITWARDEN_REMOTE_TIMEOUT="0.3")
    part = triton_partition(r)
    kdir = tmp_path / "k"
    kdir.mkdir()
    (kdir / "jw_test_kernels.py").write_text(kernels.KERNEL_SOURCE)
    env = dict(
        r,
        TRITON_CACHE_DIR=part,
        JW_KERNEL_DIR=str(kdir),
        JW_JOBS=json.dumps(jobs),
        JW_DO=do,
        JW_SERVER_PID=str(server.proc.pid),
    )
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(json.loads(proc.stdout.strip().splitlines()[-1])) == 3  # every kernel compiled
    assert "unavailable" in proc.stderr and "compiling locally" in proc.stderr
    c = counters(r)
    assert c.get("unavailable") == 1, (
        c
    )  # one timeout, then the server is skipped, not retried per kernel
    if do == "stop":
        os.kill(server.proc.pid, signal.SIGCONT)


def test_down_server_from_the_start(tmp_path, keypair):
    class Gone:
        url = "redis://127.0.0.1:1/0"

    r = node(tmp_path, "reader", Gone(), keypair)
    part, got = build(r)
    assert len(got) == len(SMALL_JOBS)
    assert counters(r).get("unavailable") == 1


def test_stock_remote_cache_manager_with_the_guarded_backend(tmp_path, server, keypair):
    """Triton's own RemoteCacheManager, TRITON_REMOTE_CACHE_BACKEND=jitwarden.remote:GuardedRemoteBackend."""
    stock = {
        "TRITON_CACHE_MANAGER": "triton.runtime.cache:RemoteCacheManager",
        "TRITON_REMOTE_CACHE_BACKEND": "jitwarden.remote:GuardedRemoteBackend",
    }
    w = node(tmp_path, "builder", server, keypair, "writer", **stock)
    w.update(stock)
    part_w, built = build(w)
    keys_before = server.call("DBSIZE")
    assert keys_before > 0
    r = node(tmp_path, "reader", server, keypair, **stock)
    r.update(stock)
    more = [
        j for j in kernels.jobs_for(archs=(90,)) if j["variant"] == "add_b256"
    ]  # not on the server
    part_r, got = build(r, SMALL_JOBS + more)
    got = got[: len(SMALL_JOBS)]
    assert server.call("DBSIZE") == keys_before
    c = counters(r)
    assert (
        c.get("put-skipped-reader", 0) > 0
    )  # Triton's manager asks the reader to store: it does not
    assert (
        c.get("hit", 0) >= len(got) * 2
        and c.get("miss", 0) >= 1
        and not any(k.startswith("reject") for k in c)
    ), c
    for a, b in zip(built, got):
        assert cubin(part_r, b) == cubin(part_w, a)


def test_activation_wires_the_remote_cache(tmp_path, server):
    from jitwarden.runtime import activation, remote_wiring

    base = node_env(str(tmp_path / "n"))
    env = dict(base, JITWARDEN_REMOTE=server.url)
    rec = activation.activate(env=env, quiet=True)
    assert env["TRITON_CACHE_MANAGER"] == remote_wiring.REMOTE_MANAGER == rec.cache_manager
    assert env["TRITON_REMOTE_CACHE_BACKEND"] == remote_wiring.BACKEND
    child = dict(env)  # a child process inherits the wiring and keeps it, without a warning
    rec2 = activation.activate(env=child, quiet=True)
    assert child["TRITON_CACHE_MANAGER"] == remote_wiring.REMOTE_MANAGER
    assert not [w for w in rec2.warnings if "TRITON_CACHE_MANAGER" in w]
    later = {
        k: v for k, v in child.items() if k != "JITWARDEN_REMOTE"
    }  # a process started without it
    activation.activate(env=later, quiet=True)
    assert (
        later["TRITON_CACHE_MANAGER"] == activation.MANAGER
    )  # switched off again: back to the plain guard
    bad = dict(base, JITWARDEN_REMOTE="http://nope")
    rec3 = activation.activate(env=bad, quiet=True)
    assert bad["TRITON_CACHE_MANAGER"] == activation.MANAGER and any(
        "not a redis://" in w for w in rec3.warnings
    )
    ind = dict(base, TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE="1")
    rec4 = activation.activate(env=ind, quiet=True)
    assert any(
        "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE is on" in w and "unguarded" in w for w in rec4.warnings
    )


def test_value_checks_are_exact():
    signer = keys.SigningKey(os.urandom(32))
    trusted = keys.TrustedKeys({signer.id: signer.public})
    key = remote.redis_key("0123456789abcdef", "KEY", "k.cubin")
    v = remote.seal_value(key, b"payload", signer)
    assert remote.open_value(key, v, trusted)[0] == b"payload"
    for raw, reason, k in [
        (v[:-1], "truncated", key),
        (v[:10], "truncated", key),
        (b"x" * 100, "unsigned", key),
        (v[:-1] + b"X", "digest", key),
        (v, "wrong-key", key.replace("KEY", "KEX")),
    ]:
        with pytest.raises(remote.Rejected) as exc:
            remote.open_value(k, raw, trusted)
        assert exc.value.reason == reason
    hdr_flip = bytearray(v)
    hdr_flip[12] ^= 1  # inside the header JSON
    with pytest.raises(remote.Rejected):
        remote.open_value(key, bytes(hdr_flip), trusted)


def test_redis_acl_roles(tmp_path, server, keypair):
    """Serving nodes with a Redis user that can only read: hits work; a misconfigured writer is refused, not stuck."""
    server.call("ACL", "SETUSER", "builder", "on", ">wpw", "~jitwarden:*", "+@all")
    server.call("ACL", "SETUSER", "reader", "on", ">rpw", "~jitwarden:*", "+@read", "+@connection")
    url = server.url.replace("redis://", "redis://{}@")

    class At:
        def __init__(self, who):
            self.url = url.format(who)

    w = node(tmp_path, "builder", At("builder:wpw"), keypair, "writer")
    part_w, built = build(w)
    n = server.call("DBSIZE")
    assert n > 0
    r = node(tmp_path, "reader", At("reader:rpw"), keypair, "writer")  # wrongly told it may write
    r["JITWARDEN_SIGNING_KEY"] = keypair[0]
    more = [j for j in kernels.jobs_for(archs=(90,)) if j["variant"] == "add_b256"]
    part_r, got = build(r, SMALL_JOBS + more)
    c = counters(r)
    assert server.call("DBSIZE") == n  # the ACL kept it from writing
    assert c.get("refused", 0) >= 1 and c.get("hit", 0) == 2 and "unavailable" not in c, c
    from jitwarden.formats import resp

    cl = resp.Client(resp.parse_url(url.format("reader:rpw")))
    with pytest.raises(resp.RespError, match="NOPERM"):
        cl.execute("SET", "jitwarden:v1:x", "y")
    cl.close()


def test_packed_entries_refuse_odd_names():
    assert remote.unpack_entry(remote.pack_entry({"a.cubin": b"1", "__grp__a.json": b"{}"})) == {
        "a.cubin": b"1",
        "__grp__a.json": b"{}",
    }
    for files in ({"../x": b"1"}, {".jitwarden-seal.json": b"{}"}, {"a/b": b""}):
        with pytest.raises(ValueError):
            remote.unpack_entry(remote.pack_entry(files))
    with pytest.raises(ValueError):
        remote.unpack_entry(remote.pack_entry({"a": b"12"})[:-1])


def test_rejection_reason_comes_from_the_trusted_key_set():
    """untrusted-key when the signer is not trusted, signature when a trusted key's signature is wrong."""
    signer, other = keys.SigningKey(os.urandom(32)), keys.SigningKey(os.urandom(32))
    key = remote.redis_key("0123456789abcdef", "KEY", "k.cubin")
    v = remote.seal_value(key, b"payload", signer)
    for trusted, reason in [
        (keys.TrustedKeys({other.id: other.public}), "untrusted-key"),
        (keys.TrustedKeys({signer.id: other.public}), "signature"),
    ]:
        with pytest.raises(remote.Rejected) as exc:
            remote.open_value(key, v, trusted)
        assert exc.value.reason == reason
