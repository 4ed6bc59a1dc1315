"""The OCI distribution API (what ``docker``, ``oras`` and registries speak), over the standard library's
``http.client``, bounded in time and memory: the network reader of ``jitwarden push``/``pull``.

A registry is not trusted to be well-behaved (ARCHITECTURE.md, formats; docs/fleets.md, "OCI registries"):

- one deadline per request: connecting, sending, the status line, the headers and the whole body
  share it (every read of the socket is given what is left of it), so a registry that drips one
  byte at a time costs the deadline once. A blob's deadline grows with its size at a floor rate
  (:data:`MIN_RATE`), so a large layer can arrive and a stalled one cannot hold on;
- a body is bounded before it is read: a manifest or an index at most :data:`MAX_MANIFEST`, an
  error or a token reply at most :data:`MAX_SMALL`, a blob exactly the size its descriptor gives
  (a longer body, an endless chunked one, is cut there and refused);
- at most :data:`MAX_REDIRECTS` redirects (a loop is refused), never from HTTPS to plain HTTP, and
  credentials are never sent to another host than the registry's and the token realm of the registry's
  own challenge: a ``401`` from the host a redirect led to is an error, never a new authentication flow;
- plain HTTP only when asked (``insecure``): the caller says so loudly.

Authentication as registries ask for it: ``Basic`` with the caller's credentials, or the token flow
(a ``401`` with ``WWW-Authenticate: Bearer realm=…,service=…,scope=…``: a token asked of the realm
with those credentials, then sent as ``Bearer``). Digests are checked by the caller (``ops/oci``) on
what this module hands back: the bytes of a manifest, a :class:`~jitwarden.store.blobfile.BlobFile`
hashed as it was written.
"""

from __future__ import annotations

import base64
import http.client
import io
import re
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import urlencode, urljoin, urlsplit

from jitwarden.formats import jsonlimits
from jitwarden.model.errors import ExitStatus, JitwardenError

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer

MAX_MANIFEST = 4 << 20
"""The largest manifest or index read (distribution's own limit for a manifest it accepts is 4 MiB)."""

MAX_SMALL = 64 << 10
"""The largest error body or token reply read."""

MAX_REDIRECTS = 3
"""Redirects followed for one request (registries redirect blob reads to storage once)."""

POOL = 6
"""Every answer but a blob's shares a budget of ``POOL`` deadlines per client (one command), counted in time
spent waiting on the registry: one that answers each of a hundred requests just inside the deadline still
costs at most six of them."""

MIN_RATE = 1 << 20
"""Bytes a second a blob transfer is given beyond the deadline: a 1 GiB layer gets the deadline plus 1024 s."""

CHUNK = 1 << 20

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))

_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REF = re.compile(
    rf"(?P<host>{_HOST})(?::(?P<port>[0-9]{{1,5}}))?/(?P<repo>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?\Z"
)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")

Body = bytes | Callable[[], Iterable[bytes]] | None
"""What a request sends: nothing, bytes, or a callable giving the pieces (called again for each attempt)."""

Progress = Callable[[int, int], object]
"""``progress(done, total)``, called after each piece of a blob."""


class Sink(Protocol):
    """Where a blob's bytes go (a :class:`~jitwarden.store.blobfile.BlobFile`, which this layer cannot import;
    its ``place``, the directory it lies in, is named when a write fails)."""

    def write(self, data: bytes) -> int: ...


class RegistryError(JitwardenError):
    """The registry cannot be used: down, too slow, refusing, or answering outside the protocol or a bound.
    The message is one line; the CLI exits 2 (a registry that cannot be used is no finding about a cache)."""

    exit_code = ExitStatus.USAGE


class LocalWriteError(JitwardenError):
    """What the registry sent cannot be written here (the temp dir full or read-only): this node's trouble,
    not the registry's; the message says where. The CLI exits 2."""

    exit_code = ExitStatus.USAGE


class AuthError(RegistryError):
    """The registry wants credentials it was not given, or refused those it was given."""


class NotFound(RegistryError):
    """The registry answered 404 for what was asked."""


@dataclass(frozen=True, kw_only=True)
class Ref:
    """``HOST[:PORT]/REPO[:TAG|@DIGEST]`` as ``docker`` and ``oras`` write it."""

    host: str
    port: int | None
    repo: str
    tag: str | None
    digest: str | None

    @property
    def registry(self) -> str:
        """``host[:port]``: what credentials are filed under."""
        return self.host if self.port is None else f"{self.host}:{self.port}"

    @property
    def reference(self) -> str:
        """What ``/manifests/<reference>`` names: the digest when given, else the tag (``latest``)."""
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        return (
            f"{self.registry}/{self.repo}"
            + (f":{self.tag}" if self.tag else "")
            + (f"@{self.digest}" if self.digest else "")
        )


def parse_ref(text: str) -> Ref:
    """The reference in ``text``; ValueError saying what is wrong (pure)."""
    m = _REF.match(text.strip()) if isinstance(text, str) and len(text) <= 1024 else None
    if m is None:
        raise ValueError(
            f"{text!r}: expected HOST[:PORT]/REPO[:TAG|@DIGEST] "
            "(e.g. registry.example.com/kernels/llm:h200), the repository in lower case"
        )
    host = m.group("host")
    if "." not in host and ":" not in host and host != "localhost" and m.group("port") is None:
        raise ValueError(
            f"{text!r}: name the registry host first ({host!r} is no host name: write e.g. "
            f"registry.example.com/{host}/...)"
        )
    port = int(m.group("port")) if m.group("port") else None
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"{text!r}: port {port} is out of range")
    return Ref(
        host=host.strip("[]"),
        port=port,
        repo=m.group("repo"),
        tag=m.group("tag"),
        digest=m.group("digest"),
    )


# ---------------------------------------------------------------- one deadline per request


class _Deadline:
    def __init__(self, seconds: float, what: str):
        self.end, self.seconds, self.what = time.monotonic() + seconds, seconds, what

    def left(self) -> float:
        r = self.end - time.monotonic()
        if r <= 0:
            raise TimeoutError(f"{self.what}: no complete answer within {self.seconds:g} s")
        return r


class _DeadlineIO(io.RawIOBase):
    """The socket's reads, each given what is left of the request's deadline."""

    def __init__(self, owner: _DeadlineSocket):
        super().__init__()
        self._owner = owner

    def readable(self) -> bool:
        return True

    def readinto(self, b: WriteableBuffer) -> int:
        sock = self._owner._sock
        sock.settimeout(self._owner._dl.left())
        return sock.recv_into(b)

    def close(self) -> None:
        if not self.closed:
            self._owner._released()
        super().close()


class _DeadlineSocket:
    """A connected socket whose every send and read shares one deadline (what ``http.client`` is handed).

    Like a socket's own ``makefile``, a reader keeps the socket open until it is closed too: http.client
    closes the connection as soon as it sees a close-delimited answer, before the body is read.
    """

    def __init__(self, sock: socket.socket, deadline: _Deadline):
        self._sock, self._dl = sock, deadline
        self._readers, self._closing = 0, False

    def makefile(self, mode: str = "rb", *_a: object, **_k: object) -> io.BufferedReader:
        self._readers += 1
        return io.BufferedReader(_DeadlineIO(self))

    def _released(self) -> None:
        self._readers -= 1
        if self._closing and self._readers <= 0:
            self._sock.close()

    def sendall(self, data: ReadableBuffer) -> None:
        self._sock.settimeout(self._dl.left())
        self._sock.sendall(data)

    def close(self) -> None:
        self._closing = True
        if self._readers <= 0:
            self._sock.close()

    def __getattr__(
        self, name: str
    ) -> Any:  # the rest of a socket's interface, as http.client uses it
        return getattr(self._sock, name)


def _connection(
    scheme: str, host: str, port: int | None, deadline: _Deadline
) -> http.client.HTTPConnection:
    base = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection

    class Conn(base):  # type: ignore[valid-type,misc]
        def connect(self) -> None:
            super().connect()
            # http.client's connect() leaves its connected socket here; mypy sees only the wrapper
            # assigned below (the base class is chosen at run time), hence the cast.
            raw = cast(socket.socket, self.sock)  # type: ignore[has-type]
            self.sock = _DeadlineSocket(raw, deadline)

    if scheme == "https":
        return Conn(host, port, timeout=deadline.left(), context=ssl.create_default_context())
    return Conn(host, port, timeout=deadline.left())


@dataclass(frozen=True, kw_only=True)
class _Call:
    """One request as asked: what to send, how much of the answer to read and where, its deadline."""

    method: str
    path: str
    headers: dict[str, str]
    body: Body
    size: int
    max_body: int
    sink: Sink | None
    progress: Progress | None
    scope: str
    deadline: _Deadline


@dataclass(frozen=True, kw_only=True)
class Response:
    status: int
    headers: dict[str, str]  # lower-case name -> value
    body: bytes = b""


def _challenge(value: str) -> tuple[str, dict[str, str]]:
    """(scheme, params) of a ``WWW-Authenticate`` value (pure)."""
    scheme, _, rest = value.strip().partition(" ")
    params = {k.lower(): v for k, v in re.findall(r'(\w+)="([^"]*)"', rest)}
    return scheme.lower(), params


class Client:
    """Requests to one registry (``https://HOST[:PORT]``, or ``http://`` when ``insecure``).

    ``timeout``: seconds for one request, connect to complete reply (a blob's grows with its size).
    ``credentials``: (user, password) for Basic auth or the token flow, or None.
    """

    def __init__(
        self,
        ref: Ref,
        *,
        insecure: bool,
        timeout: float,
        credentials: tuple[str, str] | None = None,
    ):
        self.ref, self.timeout, self.credentials = ref, timeout, credentials
        self.scheme = "http" if insecure else "https"
        self._auth: str | None = None
        self.requests = 0
        self._spent = 0.0  # seconds spent waiting on answers that are not blobs (the POOL budget)

    # -- the wire

    def _url(self, path: str) -> str:
        return f"{self.scheme}://{self.ref.registry}{path}"

    def _once(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | Iterable[bytes] | None,
        deadline: _Deadline,
        read: Callable[[http.client.HTTPResponse, Response], bytes],
    ) -> tuple[Response, bytes]:
        """One request to ``url``: (Response without body, what ``read(response)`` returned)."""
        u = urlsplit(url)
        conn = _connection(u.scheme, u.hostname or "", u.port, deadline)
        try:
            path = (u.path or "/") + (f"?{u.query}" if u.query else "")
            conn.putrequest(method, path, skip_accept_encoding=True)
            for k, v in headers.items():
                conn.putheader(k, v)
            if body is None:
                conn.endheaders()
            elif isinstance(body, (bytes, bytearray)):
                conn.endheaders(bytes(body))
            else:
                conn.endheaders()
                for piece in body:
                    conn.send(piece)
            resp = conn.getresponse()
            try:
                head = Response(
                    status=resp.status, headers={k.lower(): v for k, v in resp.getheaders()}
                )
                return head, read(resp, head)
            finally:
                resp.close()
        finally:
            conn.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: Body = None,
        size: int = 0,
        max_body: int = MAX_SMALL,
        sink: Sink | None = None,
        progress: Progress | None = None,
        scope: str = "pull",
    ) -> Response:
        """``method path`` with redirects followed (GET, HEAD) and authentication as the registry asks.

        The body of the answer: at most ``max_body`` bytes (more is a RegistryError), or, with
        ``sink`` (a BlobFile), exactly ``size`` bytes written into it (``progress(done, total)``
        after each piece). ``body``: bytes, or a callable giving an iterable of pieces to send
        (called again for a retry after a ``401``). RegistryError (one line) for anything that
        is not an answer within the bounds.
        """
        if size:  # a blob: its own deadline, grown with its size
            seconds = self.timeout + size / MIN_RATE
        else:
            seconds = min(self.timeout, POOL * self.timeout - self._spent)
            if seconds <= 0:
                raise RegistryError(self._too_slow())
        started = time.monotonic()
        call = _Call(
            method=method,
            path=path,
            headers=dict(headers or {}),
            body=body,
            size=size,
            max_body=max_body,
            sink=sink,
            progress=progress,
            scope=scope,
            deadline=_Deadline(seconds, f"{self.ref.registry}: {method} {path}"),
        )
        try:
            return self._with_auth(call)
        except TimeoutError:  # the deadline's own, or a socket read given what was left of it
            if not size and self._spent + time.monotonic() - started >= POOL * self.timeout:
                raise RegistryError(self._too_slow()) from None
            raise RegistryError(
                f"{call.deadline.what}: no complete answer within {call.deadline.seconds:.3g} s"
            ) from None
        except ssl.SSLError as exc:
            raise RegistryError(
                f"{self.ref.registry}: TLS failed ({exc.reason or exc}); a plain-HTTP registry needs --insecure"
            ) from None
        except (http.client.HTTPException, ConnectionError, OSError) as exc:
            what = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise RegistryError(f"{self.ref.registry}: {what}") from None
        finally:
            if not size:
                self._spent += time.monotonic() - started

    def _too_slow(self) -> str:
        return (
            f"{self.ref.registry}: answered too slowly ({POOL} x {self.timeout:g} s spent on "
            "manifests and small answers)"
        )

    def _with_auth(self, call: _Call) -> Response:
        for attempt in range(2):
            hdrs = dict(call.headers)
            if self._auth:
                hdrs["Authorization"] = self._auth
            head, data, where = self._follow(call, self._url(call.path), hdrs)
            if head.status == 401 and where != self.ref.registry:
                # A storage host's challenge is not the registry's: its realm would get the registry's
                # credentials. Never a new authentication flow for it.
                raise RegistryError(
                    f"{self.ref.registry}: {where}, where the registry redirected {call.method} "
                    f"{call.path}, answered 401; credentials go only to the registry and the token "
                    "realm of its own challenge, so nothing was sent there"
                )
            if head.status != 401 or attempt:
                break
            self._authenticate(head.headers.get("www-authenticate", ""), call.deadline, call.scope)
        if head.status == 401:
            raise AuthError(
                f"{self.ref.registry}: credentials refused"
                if self.credentials
                else f"{self.ref.registry}: the registry wants credentials (docker login, or "
                "REGISTRY_AUTH_FILE / ~/.docker/config.json)"
            )
        return Response(status=head.status, headers=head.headers, body=data)

    def _follow(
        self, call: _Call, url: str, headers: dict[str, str]
    ) -> tuple[Response, bytes, str]:
        """(the last answer, its body, the ``host[:port]`` that gave it) of ``url``, redirects followed."""
        home = urlsplit(url).netloc
        for _hop in range(MAX_REDIRECTS + 1):
            pieces = call.body() if callable(call.body) else call.body
            head, data = self._once(
                call.method,
                url,
                headers,
                pieces,
                call.deadline,
                lambda r, h: self._read(r, h, call.max_body, call.sink, call.size, call.progress),
            )
            self.requests += 1
            if head.status not in (301, 302, 303, 307, 308) or call.method not in ("GET", "HEAD"):
                return head, data, urlsplit(url).netloc
            where = head.headers.get("location")
            if not where:
                raise RegistryError(
                    f"{self.ref.registry}: a redirect ({head.status}) without a Location"
                )
            nxt = urljoin(url, where)
            if urlsplit(nxt).scheme not in ("http", "https") or (
                urlsplit(url).scheme == "https" and urlsplit(nxt).scheme == "http"
            ):
                raise RegistryError(
                    f"{self.ref.registry}: refused a redirect to {urlsplit(nxt).scheme}://"
                )
            if urlsplit(nxt).netloc != home:
                headers = {k: v for k, v in headers.items() if k != "Authorization"}
            url = nxt
        raise RegistryError(f"{self.ref.registry}: more than {MAX_REDIRECTS} redirects (a loop?)")

    @staticmethod
    def _read(
        resp: http.client.HTTPResponse,
        head: Response,
        max_body: int,
        sink: Sink | None,
        size: int,
        progress: Progress | None,
    ) -> bytes:
        """The body: into ``sink`` when the answer is a 200 for a blob, else at most ``max_body`` bytes."""
        if sink is not None and head.status == 200:
            return _into(resp, head, sink, size, progress)
        if head.status in (301, 302, 303, 307, 308):
            return b""
        length = head.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > max_body:
            raise RegistryError(f"an answer of {int(length)} bytes, more than the {max_body} read")
        data = resp.read(max_body + 1)
        if len(data) > max_body:
            raise RegistryError(f"an answer longer than the {max_body} bytes read")
        return data

    # -- authentication

    def _authenticate(self, challenge: str, deadline: _Deadline, scope: str) -> None:
        scheme, params = _challenge(challenge)
        if scheme == "basic" and self.credentials:
            raw = f"{self.credentials[0]}:{self.credentials[1]}".encode()
            self._auth = "Basic " + base64.b64encode(raw).decode()
        elif scheme == "bearer" and params.get("realm"):
            self._auth = "Bearer " + self._token(params, deadline, scope)
        elif not self.credentials:
            return
        else:
            raise AuthError(
                f"{self.ref.registry}: unsupported authentication {scheme or '(none)'!r}"
            )

    def _token(self, params: dict[str, str], deadline: _Deadline, scope: str) -> str:
        realm = params["realm"]
        if urlsplit(realm).scheme not in ("https", self.scheme):
            raise AuthError(
                f"{self.ref.registry}: refused a token realm over {urlsplit(realm).scheme}://"
            )
        q = {"service": params.get("service", "")}
        q["scope"] = params.get("scope") or f"repository:{self.ref.repo}:{scope}"
        hdrs: dict[str, str] = {}
        if self.credentials:
            raw = f"{self.credentials[0]}:{self.credentials[1]}".encode()
            hdrs["Authorization"] = "Basic " + base64.b64encode(raw).decode()
        head, data = self._once(
            "GET",
            f"{realm}?{urlencode(q)}",
            hdrs,
            None,
            deadline,
            lambda r, h: self._read(r, h, MAX_SMALL, None, 0, None),
        )
        if head.status != 200:
            raise AuthError(f"{self.ref.registry}: the token service answered {head.status}")
        try:
            doc = jsonlimits.loads(data, max_bytes=MAX_SMALL)
            token = doc.get("token") or doc.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token or len(token) > MAX_SMALL:
            raise AuthError(f"{self.ref.registry}: the token service gave no token")
        return token


def _into(
    resp: http.client.HTTPResponse, head: Response, sink: Sink, want: int, progress: Progress | None
) -> bytes:
    """Exactly ``want`` bytes of a blob into ``sink``; RegistryError when the body is longer, shorter, or
    says another length."""
    length = head.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) != want):
        raise RegistryError(f"the registry sends {length} bytes for a blob of {want}")
    done = 0
    while done < want:
        piece = resp.read(min(CHUNK, want - done))
        if not piece:
            raise RegistryError(f"the blob ended after {done} of {want} bytes")
        try:
            sink.write(piece)
        except OSError as exc:
            place = getattr(sink, "place", None) or "the temporary directory"
            raise LocalWriteError(
                f"cannot write to TMPDIR {place}: {exc.strerror or exc} (a local disk error, not the "
                "registry's; set TMPDIR to a place with room)"
            ) from None
        done += len(piece)
        if progress is not None:
            progress(done, want)
    if resp.read(1):
        raise RegistryError(f"the registry sends more than the {want} bytes of the blob")
    return b""


def error_line(resp: Response) -> str:
    """The registry's own words for a refusal (``{"errors": [{"code", "message"}]}``), else its status (pure)."""
    try:
        doc = jsonlimits.loads(resp.body, max_bytes=MAX_SMALL)
        e = doc["errors"][0]
        text = f"{e.get('code', '')}: {e.get('message', '')}".strip(": ")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        text = ""
    text = " ".join(text.split())[:200]
    return f"HTTP {resp.status}" + (f" ({text})" if text else "")
