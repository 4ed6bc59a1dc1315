"""A hostile Redis: the remote cache's lookups stay bounded in time and memory, end in a miss, never reuse the connection.

Each case is a real socket server on 127.0.0.1 (a thread of this test) answering every request
the way an attacker who owns the Redis server could. The workload's side runs in a child
process, through the path a workload takes (``GuardedRemoteBackend.get``), so its peak RSS
(``resource.getrusage``) is its own; a well-behaved server measured in the same run is the
baseline.
"""

from __future__ import annotations

import json
import os
import resource
import select
import socket
import subprocess
import sys
import threading
import time

import pytest

from jitwarden.formats import resp
from tests.helpers.wait import wait_for

TIMEOUT = 0.5  # the documented default of JITWARDEN_REMOTE_TIMEOUT
BOUND_S = 5.0  # a generous bound for one lookup with a 0.5 s deadline
RSS_SLACK_KB = 64 << 10  # 64 MiB over the baseline child


def _drip(conn):
    conn.sendall(b"$100\r\n")
    while True:  # one byte every 0.3 s: each recv gets data well inside any per-recv timeout
        conn.sendall(b"x")
        time.sleep(0.3)  # the attack itself: a server that is slow on purpose


def _stream(prefix: bytes, unit: bytes):
    def act(conn):
        conn.sendall(prefix)
        chunk = unit * max(1, (1 << 16) // len(unit))
        while True:
            conn.sendall(chunk)

    return act


def _once(data: bytes):
    """``data`` as the answer to every request, the connection kept open until the client drops it."""

    def act(conn):
        conn.sendall(data)
        while conn.recv(1 << 16):
            conn.sendall(data)

    return act


HOSTILE = {
    "drip": _drip,
    "huge-bulk": _stream(b"$99999999999\r\n", b"x"),
    "endless-line": _stream(b"+", b"a"),
    "huge-array": _stream(b"*2147483647\r\n", b":1\r\n"),
    "deep-nesting": _stream(b"", b"*1\r\n"),
    "garbage": _once(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"),
    "bulk-overrun": _once(b"$3\r\nabcdefgh\r\n"),
    "two-replies": _once(b"$-1\r\n$5\r\nwrong\r\n"),
    "nil": _once(b"$-1\r\n"),  # well-behaved: the baseline
}


class HostileServer:
    """Accepts connections on 127.0.0.1; answers each first request with ``act(conn)``; counts connections."""

    def __init__(self, act):
        self.act = act
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"redis://127.0.0.1:{self.sock.getsockname()[1]}/0"
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        try:
            with conn:
                if conn.recv(1 << 16):
                    self.act(conn)
        except OSError:
            pass  # the client dropped the connection: what it must do

    def close(self):
        self._stop = True
        self.sock.close()


CHILD = r"""
import json, resource, sys, time
from jitwarden.runtime import remote

backend = remote.GuardedRemoteBackend("k" * 52, digest="d" * 16)
runs = []
for _ in range(2):
    st = remote.state()
    while st.down_until != float("inf") and time.monotonic() < st.down_until:
        time.sleep(0.01)  # until the retry pause a failed lookup started is over (none before the first)
    t = time.monotonic()
    got = backend.get(["add.cubin"])
    runs.append({"s": time.monotonic() - t, "got": sorted(got)})
print(json.dumps({"runs": runs, "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "counters": remote.state().counters}))
"""


def _limit_memory():
    """A child that would grow without bound stops at 2 GiB of address space, not at the machine's memory."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def lookup_twice(url: str, tmp_path, retry: str = "0.05") -> dict:
    """Two lookups by one workload process (a short retry pause, so the second one asks the server again)."""
    env = dict(
        os.environ,
        JITWARDEN_REMOTE=url,
        JITWARDEN_REMOTE_RETRY=retry,
        JITWARDEN_REMOTE_TIMEOUT=str(TIMEOUT),
        JITWARDEN_HOME=str(tmp_path / "jw"),
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("two lookups took over 60 s")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    srv = HostileServer(HOSTILE["nil"])
    try:
        out = lookup_twice(srv.url, tmp_path_factory.mktemp("baseline"))
    finally:
        srv.close()
    assert [r["got"] for r in out["runs"]] == [[], []]
    assert (
        out["counters"].get("unavailable") is None and srv.connections == 1
    )  # a good connection is reused
    return out


@pytest.mark.parametrize("case", [c for c in HOSTILE if c != "nil"])
def test_hostile_server_costs_one_deadline_and_a_miss(case, tmp_path, baseline):
    srv = HostileServer(HOSTILE[case])
    try:
        out = lookup_twice(srv.url, tmp_path)
    finally:
        srv.close()
    for run in out["runs"]:
        assert (
            run["got"] == []
        )  # a miss: Triton compiles locally, never takes bytes from this server
        assert run["s"] < BOUND_S, (case, run)
    assert out["rss_kb"] < baseline["rss_kb"] + RSS_SLACK_KB, (
        case,
        out["rss_kb"],
        baseline["rss_kb"],
    )
    assert out["counters"].get("unavailable") == 2, out[
        "counters"
    ]  # each lookup failed and was counted
    assert (
        srv.connections == 2
    )  # the bad connection was dropped: the second lookup opened a fresh one


@pytest.mark.parametrize("case", ["garbage", "huge-bulk"])
def test_a_failed_lookup_is_never_taken_for_an_answer_when_the_retry_pause_is_over(case, tmp_path):
    """A failed lookup whose retry pause had already run out (``JITWARDEN_REMOTE_RETRY=0``, or a loaded machine
    with a short one) was judged as an answer: with no trusted keys, the remote cache switched itself off
    for the process, and the second lookup never asked the server (the hostile cases above, now and then)."""
    srv = HostileServer(HOSTILE[case])
    try:
        out = lookup_twice(srv.url, tmp_path, retry="0")
    finally:
        srv.close()
    assert [r["got"] for r in out["runs"]] == [[], []]
    assert out["counters"].get("unavailable") == 2, out[
        "counters"
    ]  # each lookup failed, and was counted as such
    assert srv.connections == 2  # the second lookup asked the server again


@pytest.mark.parametrize("case", ["drip", "deep-nesting", "garbage", "bulk-overrun", "two-replies"])
def test_client_drops_the_connection_after_a_protocol_error_or_deadline(case):
    """In this process, so only the cases whose memory a broken client could not blow up (the child test has them all)."""
    srv = HostileServer(HOSTILE[case])
    cl = resp.Client(resp.parse_url(srv.url), 0.25, TIMEOUT)
    try:
        for expected_connections in (1, 2):
            t = time.monotonic()
            with pytest.raises(OSError):
                cl.execute("GET", "k")
            assert time.monotonic() - t < BOUND_S
            assert (
                cl._sock is None
            )  # closed: nothing of the bad reply is left to be read as the next one
            assert srv.connections == expected_connections
    finally:
        cl.close()
        srv.close()


def test_an_error_inside_an_array_keeps_the_stream_in_step():
    """``*2 -ERR x $1 a``: the whole reply is read, the error raised, and the connection stays usable."""
    srv = HostileServer(_once(b"*2\r\n-ERR nested\r\n$1\r\na\r\n"))
    cl = resp.Client(resp.parse_url(srv.url), 0.25, TIMEOUT)
    try:
        with pytest.raises(resp.RespError, match="nested"):
            cl.execute("MGET", "a", "b")
        assert cl._sock is not None and not cl._buf
    finally:
        cl.close()
        srv.close()


def _late_extra(conn):
    """A nil reply, then, once the client has it, a reply nobody asked for, then nil to every later request."""
    conn.sendall(b"$-1\r\n")
    time.sleep(
        0.05
    )  # the race window itself: the extra reply arrives after the client read the one it asked for
    conn.sendall(b"$5\r\nwrong\r\n")
    while conn.recv(1 << 16):
        conn.sendall(b"$-1\r\n")


def test_bytes_nobody_asked_for_are_never_read_as_the_next_reply():
    srv = HostileServer(_late_extra)
    cl = resp.Client(resp.parse_url(srv.url), 0.25, TIMEOUT)
    try:
        assert cl.execute("GET", "a") is None
        wait_for(
            lambda: select.select([cl._sock], [], [], 0)[0],
            30,
            "the unsolicited reply to reach the client's socket",
        )
        assert (
            cl.execute("GET", "b") is None
        )  # not b"wrong": the connection was dropped and opened again
        assert srv.connections == 2
    finally:
        cl.close()
        srv.close()


def _slow_each(conn):
    """Answers AUTH, then GET, each after 0.35 s: within any per-read timeout, over one 0.5 s deadline together."""
    while True:  # the first request (AUTH) was read by the server already
        time.sleep(0.35)  # the attack itself: each answer late, within a per-read timeout
        conn.sendall(b"+OK\r\n")
        if not conn.recv(1 << 16):
            return


def test_logging_in_and_the_command_share_one_deadline():
    srv = HostileServer(_slow_each)
    cl = resp.Client(resp.parse_url(srv.url.replace("redis://", "redis://:pw@")), 0.25, TIMEOUT)
    try:
        with pytest.raises(OSError, match="no complete reply within 0.5 s"):
            cl.execute("GET", "a")
        assert cl._sock is None
    finally:
        cl.close()
        srv.close()
