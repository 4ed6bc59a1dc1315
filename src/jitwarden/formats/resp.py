"""A minimal Redis/Valkey client (RESP2 over TCP), standard library only, bounded in time and memory.

Just what the remote cache needs: ``GET``, ``MGET``, ``SET``, ``AUTH``, ``SELECT``, ``PING``.
A server is not trusted to be well-behaved (ARCHITECTURE.md, formats):

- one deadline per request: connecting, sending and the whole reply share ``timeout``
  seconds, so a server that drips a byte at a time costs one timeout, not one per ``recv``;
- bounds on what a reply may hold: a line (:data:`MAX_LINE`), the bytes of all its bulk
  strings together (``max_reply``), the elements of all its arrays (:data:`MAX_ELEMENTS`) and
  their nesting (:data:`MAX_DEPTH`); a length past a bound is refused before anything is
  read or allocated for it;
- after a deadline or any protocol error (a bound passed, garbage, bytes nobody asked for)
  the connection is closed: the next request opens a fresh one, never reading the rest of
  a bad reply as its own.

Not thread-safe: one client per thread or a lock.
"""

from __future__ import annotations

import socket
import time
from operator import itemgetter
from typing import Any
from urllib.parse import unquote, urlsplit

from jitwarden.model.errors import JitwardenError

MAX_LINE = 64 << 10
"""The longest line of a reply (a status, an error, a length); Redis's own are a few hundred bytes."""

MAX_REPLY = 256 << 20
"""Default bound on the bytes of one reply's bulk strings together (the remote cache passes its own)."""

MAX_ELEMENTS = 4096
"""Bound on the array elements of one reply, all levels together (``MGET`` of a kernel's files: a handful)."""

MAX_DEPTH = 4
"""Arrays nested deeper are refused (the commands used here answer with depth 1 at most)."""


class RespError(JitwardenError):
    """The server answered with an error reply (``-ERR ...``, ``-NOPERM ...``); the connection stays in step."""


class ProtocolError(JitwardenError, ValueError):
    """A reply that is not RESP, or passes a bound; the connection is closed."""


class Address(tuple[Any, ...]):
    """(host, port, db, username, password) parsed from ``redis://[[user]:password@]host[:port][/db]``."""

    __slots__ = ()

    def __new__(
        cls,
        host: str,
        port: int,
        db: int = 0,
        username: str | None = None,
        password: str | None = None,
    ) -> Address:
        return tuple.__new__(cls, (host, port, db, username, password))

    host, port, db, username, password = (property(itemgetter(i)) for i in range(5))

    def display(self) -> str:
        """The address without its credentials, for log lines."""
        return f"redis://{self.host}:{self.port}/{self.db}"


def parse_url(url: str) -> Address:
    """ValueError (saying why) unless ``url`` is a ``redis://`` or ``valkey://`` URL."""
    u = urlsplit(url.strip())
    if u.scheme not in ("redis", "valkey"):
        raise ValueError(
            f"{url!r}: expected redis://host[:port][/db] (rediss:// and unix sockets are not supported)"
        )
    if not u.hostname:
        raise ValueError(f"{url!r}: no host")
    path = u.path.strip("/")
    try:
        db = int(path) if path else 0
        port = u.port or 6379
    except ValueError:
        raise ValueError(f"{url!r}: port and database must be numbers") from None
    return Address(
        u.hostname,
        port,
        db,
        unquote(u.username) if u.username else None,
        unquote(u.password) if u.password else None,
    )


def encode(*args: object) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Client:
    """One connection, opened lazily; a deadline or any socket or protocol error closes it and raises OSError.

    ``timeout``: seconds for one whole request (connect, send, complete reply); ``connect_timeout``
    bounds the TCP connect within it. ``max_reply``: bytes of bulk data one reply may hold.
    """

    def __init__(
        self,
        addr: Address,
        connect_timeout: float = 0.25,
        timeout: float = 0.5,
        max_reply: int = MAX_REPLY,
    ):
        self.addr = addr
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.max_reply = max_reply
        self._sock: socket.socket | None = None
        self._buf = bytearray()
        self._deadline = 0.0
        self._bytes_left = 0
        self._elements_left = 0

    def close(self) -> None:
        s, self._sock = self._sock, None
        self._buf.clear()
        if s is not None:
            try:
                s.close()
            except OSError:
                pass

    def execute(self, *args: object) -> Any:
        """Send one command and return its reply (bytes, int, list, None); RespError for an error reply.

        OSError (the connection closed) when the server is unreachable, misses the deadline or
        breaks the protocol.
        """
        self._deadline = time.monotonic() + self.timeout
        try:
            if self._sock is not None and self._stale():
                self.close()
            if self._sock is None:
                self._connect()
            return self._roundtrip(encode(*args))
        except RespError:
            raise
        except TimeoutError:  # the socket's own timeout is the remaining part of the same deadline
            self.close()
            raise OSError(
                f"{self.addr.display()}: no complete reply within {self.timeout:g} s"
            ) from None
        except (OSError, ValueError) as exc:
            self.close()
            raise OSError(f"{self.addr.display()}: {exc or type(exc).__name__}") from None

    def _connect(self) -> None:
        s = socket.create_connection(
            (self.addr.host, self.addr.port),
            timeout=max(0.001, min(self.connect_timeout, self._remaining())),
        )
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = s
        try:
            if self.addr.password is not None:
                auth = (
                    ("AUTH", self.addr.username, self.addr.password)
                    if self.addr.username
                    else ("AUTH", self.addr.password)
                )
                self._roundtrip(encode(*auth))
            if self.addr.db:
                self._roundtrip(encode("SELECT", self.addr.db))
        except RespError:
            self.close()  # not logged in or no such database: a later command must not run unauthenticated
            raise

    def _stale(self) -> bool:
        """Whether the idle connection has something to say before we ask: closed by the server, or bytes
        nobody asked for (a reply to read as the next one's). Either way it is not reused."""
        if self._buf:
            return True
        assert self._sock is not None  # only asked of an open connection
        try:
            self._sock.settimeout(0.0)
            self._sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return False
        except OSError:
            return True
        return True

    def _remaining(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no complete reply within {self.timeout:g} s")
        return left

    def _roundtrip(self, payload: bytes) -> Any:
        assert self._sock is not None  # connect() opened it
        self._sock.settimeout(self._remaining())
        self._sock.sendall(payload)  # the timeout bounds the whole sendall
        self._bytes_left, self._elements_left = self.max_reply, MAX_ELEMENTS
        reply = self._reply(0)
        if self._buf:
            raise ProtocolError(f"{len(self._buf)} bytes beyond the reply")
        if isinstance(reply, list):
            err = next((v for v in reply if isinstance(v, RespError)), None)
            if err is not None:
                raise err
        return reply

    def _fill(self) -> None:
        assert self._sock is not None  # connect() opened it
        self._sock.settimeout(self._remaining())
        chunk = self._sock.recv(1 << 16)
        if not chunk:
            raise ConnectionResetError("connection closed by the server")
        self._buf += chunk

    def _line(self) -> bytes:
        start = 0
        while True:
            i = self._buf.find(b"\r\n", start)
            if i >= 0:
                if i > MAX_LINE:
                    break
                line = bytes(self._buf[:i])
                del self._buf[: i + 2]
                return line
            if len(self._buf) > MAX_LINE:
                break
            start = max(0, len(self._buf) - 1)
            self._fill()
        raise ProtocolError(f"a line longer than {MAX_LINE} bytes")

    def _exact(self, n: int) -> bytes:
        while len(self._buf) < n + 2:
            self._fill()
        if self._buf[n : n + 2] != b"\r\n":
            raise ProtocolError("a bulk string longer than its length")
        data = bytes(self._buf[:n])
        del self._buf[: n + 2]
        return data

    def _reply(self, depth: int) -> Any:
        """One value, nested errors kept as RespError values so the whole reply is read (the stream stays in step)."""
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"$":
            n = _length(rest, self._bytes_left, "bulk string of", "bytes")
            if n < 0:
                return None
            self._bytes_left -= n
            return self._exact(n)
        if t == b"+":
            return rest
        if t == b":":
            return _length(rest, None, "", "")
        if t == b"*":
            if depth >= MAX_DEPTH:
                raise ProtocolError(f"arrays nested deeper than {MAX_DEPTH}")
            n = _length(rest, self._elements_left, "array of", "elements")
            if n < 0:
                return None
            self._elements_left -= n
            return [self._reply(depth + 1) for _ in range(n)]
        if t == b"-":
            err = RespError(rest.decode("utf-8", "replace"))
            if depth == 0:
                raise err
            return err
        raise ProtocolError(f"not a RESP reply: {line[:40]!r}")


def _length(raw: bytes, bound: int | None, what: str, unit: str) -> int:
    """The integer ``raw`` of a RESP header (ProtocolError unless a plain decimal), at most ``bound``."""
    digits = raw[1:] if raw[:1] == b"-" else raw
    if not digits.isdigit() or len(digits) > 19:
        raise ProtocolError(f"not a RESP integer: {raw[:40]!r}")
    n = int(raw)
    if bound is not None and n > bound:
        raise ProtocolError(f"a {what} {n} {unit}, more than the {bound} one reply may hold")
    return n
