"""A minimal Redis/Valkey client (RESP2 over TCP), standard library only, with hard timeouts.

Just what the remote cache needs: ``GET``, ``MGET``, ``SET``, ``AUTH``, ``SELECT``, ``PING``.
Every connect and every reply has a deadline, so a server that is down or hung costs
one timeout, never a hung workload. Not thread-safe: one client per thread or a lock.
"""

from __future__ import annotations

import socket
from operator import itemgetter
from urllib.parse import unquote, urlsplit


class RespError(Exception):
    """The server answered with an error reply (``-ERR ...``, ``-NOPERM ...``)."""


class Address(tuple):
    """(host, port, db, username, password) parsed from ``redis://[[user]:password@]host[:port][/db]``."""

    __slots__ = ()

    def __new__(cls, host: str, port: int, db: int = 0, username: str | None = None, password: str | None = None):
        return tuple.__new__(cls, (host, port, db, username, password))

    host, port, db, username, password = (property(itemgetter(i)) for i in range(5))

    def display(self) -> str:
        """The address without its credentials, for log lines."""
        return f"redis://{self.host}:{self.port}/{self.db}"


def parse_url(url: str) -> Address:
    """ValueError (saying why) unless ``url`` is a ``redis://`` or ``valkey://`` URL."""
    u = urlsplit(url.strip())
    if u.scheme not in ("redis", "valkey"):
        raise ValueError(f"{url!r}: expected redis://host[:port][/db] (rediss:// and unix sockets are not supported)")
    if not u.hostname:
        raise ValueError(f"{url!r}: no host")
    path = u.path.strip("/")
    try:
        db = int(path) if path else 0
        port = u.port or 6379
    except ValueError:
        raise ValueError(f"{url!r}: port and database must be numbers") from None
    return Address(u.hostname, port, db, unquote(u.username) if u.username else None,
                   unquote(u.password) if u.password else None)


def encode(*args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Client:
    """One connection, opened lazily; any socket error or timeout closes it and raises OSError."""

    def __init__(self, addr: Address, connect_timeout: float = 0.25, timeout: float = 0.5):
        self.addr = addr
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._buf = bytearray()

    def close(self) -> None:
        s, self._sock = self._sock, None
        self._buf.clear()
        if s is not None:
            try:
                s.close()
            except OSError:
                pass

    def _connect(self) -> None:
        s = socket.create_connection((self.addr.host, self.addr.port), timeout=self.connect_timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(self.timeout)
        self._sock = s
        if self.addr.password is not None:
            auth = ("AUTH", self.addr.username, self.addr.password) if self.addr.username else ("AUTH", self.addr.password)
            self._roundtrip(encode(*auth))
        if self.addr.db:
            self._roundtrip(encode("SELECT", self.addr.db))

    def execute(self, *args):
        """Send one command and return its reply (bytes, int, list, None); RespError for an error reply."""
        if self._sock is None:
            self._connect()
        return self._roundtrip(encode(*args))

    def _roundtrip(self, payload: bytes):
        try:
            self._sock.sendall(payload)
            return self._reply()
        except RespError:
            raise
        except (OSError, ValueError) as exc:
            self.close()
            raise OSError(f"{self.addr.display()}: {exc or type(exc).__name__}") from None

    def _fill(self) -> None:
        chunk = self._sock.recv(1 << 16)
        if not chunk:
            raise ConnectionResetError("connection closed by the server")
        self._buf += chunk

    def _line(self) -> bytes:
        while True:
            i = self._buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 2]
                return line
            self._fill()

    def _exact(self, n: int) -> bytes:
        while len(self._buf) < n + 2:
            self._fill()
        data = bytes(self._buf[:n])
        del self._buf[: n + 2]
        return data

    def _reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t == b"+":
            return rest
        if t == b":":
            return int(rest)
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        if t == b"-":
            raise RespError(rest.decode("utf-8", "replace"))
        raise ValueError(f"not a RESP reply: {line[:40]!r}")
