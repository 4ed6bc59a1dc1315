"""A guarded remote kernel cache on Redis/Valkey: Triton's ``TRITON_REMOTE_CACHE_BACKEND``, checked on every get.

Standard library only at import (Triton's knobs import it); ``cryptography`` is imported
the first time a signature is made or checked.

- Keys are namespaced by fingerprint digest: ``jitwarden:v1:<digest>:<triton key>:<file>``,
  the digest being the name of the jitwarden partition Triton's cache dir is in (no
  partition: no namespace, so the remote cache stays off).
- A value is ``JWR1 | u32 header length | header JSON | Ed25519 signature (64 bytes) | data``;
  the header names the full key, the data's sha256 and size, the signing key's id, and for
  a group file the sha256 of each child. The signature covers ``JWR1`` and the header.
- Every get checks all of it: a value for another key (replayed, or from another
  fingerprint's namespace), a flipped byte, a truncated value, an untrusted or wrong
  signature is a miss, a counter and one log line, never data handed to Triton. A child
  whose sha256 a verified group vouched for needs no signature check of its own.
- Roles: ``JITWARDEN_REMOTE_ROLE=writer`` (builders: sign with ``JITWARDEN_SIGNING_KEY``
  and store) or ``reader`` (the default, serving nodes: never store). Give serving nodes a
  Redis user that can only read as well.
- A server that is down, refuses, stalls, drips or answers outside the protocol costs one
  timeout (``JITWARDEN_REMOTE_TIMEOUT``, default 0.5 s, the deadline of a whole request) and
  never more memory than :data:`MAX_VALUE` (``formats/resp.py`` bounds every reply), then the
  remote cache is skipped for ``JITWARDEN_REMOTE_RETRY`` seconds (default 30): Triton compiles
  locally, nothing raises into it.

Counters (hits, misses, rejects by reason, unavailable) are kept per process and written
to ``<jitwarden home>/stats/remote-<pid>.json`` at most once a second and at exit, for
``jitwarden metrics``.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import threading
import time

from jitwarden.formats import jsonlimits, resp
from jitwarden.model.settings import REMOTE, REMOTE_RETRY, REMOTE_ROLE, REMOTE_TIMEOUT, TRUSTED_KEYS
from jitwarden.runtime.say import log, say

MAGIC = b"JWR1"
NAMESPACE = "jitwarden:v1"
SIG_LEN = 64
MAX_HEADER = 1 << 20
MAX_VALUE = 256 << 20
"""The largest value the remote cache holds: a writer stores nothing larger, and a reply holding more
bulk bytes is refused before it is read (``resp.Client(max_reply=...)``)."""


class Rejected(ValueError):
    """A remote value that must not be used; ``reason`` is its counter label."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def redis_key(digest: str, key: str, filename: str) -> str:
    return f"{NAMESPACE}:{digest}:{key}:{filename}"


# ---------------------------------------------------------------- values (pure)


def seal_value(rkey: str, data: bytes, signer, children: dict | None = None) -> bytes:
    """The stored form of ``data`` under ``rkey``, signed by ``signer`` (keys.SigningKey)."""
    head = {"k": rkey, "s": hashlib.sha256(data).hexdigest(), "n": len(data), "i": signer.id}
    if children:
        head["c"] = dict(sorted(children.items()))
    hb = json.dumps(head, sort_keys=True, separators=(",", ":")).encode()
    return MAGIC + struct.pack(">I", len(hb)) + hb + signer.sign(MAGIC + hb) + data


def _framed(raw: bytes) -> tuple[bytes, bytes, bytes]:
    """(header bytes, signature, data) of a stored value's frame; Rejected when it is no whole jitwarden value."""
    if len(raw) < 8 + SIG_LEN:
        raise Rejected("truncated", f"{len(raw)} bytes")
    if raw[:4] != MAGIC:
        raise Rejected("unsigned", "not a jitwarden value (a plain SET from an unguarded client?)")
    (hlen,) = struct.unpack(">I", raw[4:8])
    if hlen > MAX_HEADER or 8 + hlen + SIG_LEN > len(raw):
        raise Rejected("truncated", f"header of {hlen} bytes in a {len(raw)}-byte value")
    return raw[8 : 8 + hlen], raw[8 + hlen : 8 + hlen + SIG_LEN], raw[8 + hlen + SIG_LEN :]


def _header(hb: bytes) -> dict:
    """A value's header: its key ``k``, sha256 ``s``, size ``n`` and signing key id ``i``, each of its type;
    Rejected ("malformed") otherwise."""
    try:
        head = jsonlimits.loads(hb)
        k, s, n, kid = head["k"], head["s"], head["n"], head["i"]
        if not (
            isinstance(k, str)
            and isinstance(s, str)
            and isinstance(n, int)
            and isinstance(kid, str)
        ):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise Rejected("malformed", "header is not valid") from None
    return head


def open_value(rkey: str, raw: bytes, trusted, vouched: str | None = None) -> tuple[bytes, dict]:
    """(data, header) of a stored value, every check passed; Rejected otherwise.

    ``vouched``: the sha256 a verified group lists for this file; a value that matches it
    needs no signature check of its own (its digest is what was signed).
    """
    hb, sig, data = _framed(raw)
    head = _header(hb)
    k, s, n, kid = head["k"], head["s"], head["n"], head["i"]
    if k != rkey:
        raise Rejected(
            "wrong-key",
            f"stored for {k}, found under {rkey} (replayed or copied across namespaces)",
        )
    if len(data) != n:
        raise Rejected("truncated", f"{len(data)} bytes of data, {n} signed")
    if hashlib.sha256(data).hexdigest() != s:
        raise Rejected("digest", "sha256 of the data does not match its header")
    if vouched is not None and vouched == s:
        return data, head
    why = trusted.verify(kid, sig, MAGIC + hb)
    if why is not None:
        raise Rejected(
            "signature" if kid in trusted.keys else "untrusted-key", why
        )  # by the key set, not the words
    return data, head


ENTRY_PREFIX = "__entry__"
"""A whole kernel entry (group file and children) is stored as one value under ``__entry__<group name>``:
one round trip, and readers see one writer's complete set, never a mix of two writers' files."""


def pack_entry(files: dict) -> bytes:
    names = sorted(files)
    index = json.dumps([[n, len(files[n])] for n in names], separators=(",", ":")).encode()
    return struct.pack(">I", len(index)) + index + b"".join(files[n] for n in names)


def unpack_entry(data: bytes) -> dict:
    """{name: bytes}; ValueError when ``data`` is not a packed entry of plain file names."""
    try:
        (n,) = struct.unpack(">I", data[:4])
        index = jsonlimits.loads(data[4 : 4 + n])
        out, pos = {}, 4 + n
        for name, size in index:
            if (
                not isinstance(name, str)
                or not name
                or "/" in name
                or name.startswith(".")
                or size < 0
            ):
                raise ValueError(f"bad file name {name!r}")
            out[name] = data[pos : pos + size]
            pos += size
        if pos != len(data):
            raise ValueError("sizes do not add up")
        return out
    except (struct.error, TypeError, KeyError) as exc:
        raise ValueError(f"not a packed entry ({exc})") from None


# ---------------------------------------------------------------- process state


class _State:
    """Per process: configuration, one connection, the down-until clock, counters."""

    def __init__(self, env):
        self.pid = os.getpid()
        self.url = REMOTE.raw(env) or ""
        self.role = REMOTE_ROLE.text(env).lower()
        self.timeout = REMOTE_TIMEOUT.number(env)
        self.retry = REMOTE_RETRY.number(env)
        self.env = env
        self.lock = threading.Lock()
        self.down_until = 0.0
        self.counters: dict[str, int] = {}
        self.flushed = 0.0
        self.error = None
        self.addr = None
        self.client = None
        self._trusted = None
        self._signer = None
        try:
            self.addr = resp.parse_url(self.url)
            self.client = resp.Client(
                self.addr, min(self.timeout, 0.25), self.timeout, max_reply=MAX_VALUE
            )
        except ValueError as exc:
            self.error = f"{REMOTE.name}: {exc}"

    @property
    def writer(self) -> bool:
        return self.role == "writer"

    def trusted(self):
        if self._trusted is None:
            from jitwarden.ops import keys

            self._trusted = keys.load_trusted(self.env)
        return self._trusted

    def signer(self):
        if self._signer is None:
            from jitwarden.ops import keys

            self._signer = keys.load_signing_key(keys.signing_key_path(None, self.env))
        return self._signer

    def available(self) -> bool:
        return self.client is not None and time.monotonic() >= self.down_until

    def call(self, *args, down=None):
        """The reply; ``down`` when the server is down or slow (counted, logged once per outage) or skipped for
        its retry pause; None when it refuses. A failed call is told by ``down``, never by the retry pause,
        which may be over already (``JITWARDEN_REMOTE_RETRY`` may be 0)."""
        if not self.available():
            return down
        try:
            with self.lock:
                return self.client.execute(*args)
        except resp.RespError as exc:  # the server answered: e.g. NOPERM for a read-only user's SET
            self.count("refused")
            say(f"remote cache {self.addr.display()} refused {args[0]}: {exc}")
            return None
        except OSError as exc:
            self.down_until = time.monotonic() + self.retry
            self.count("unavailable")
            say(
                f"remote cache {self.addr.display()} unavailable ({exc}); compiling locally, "
                f"retrying in {self.retry:g} s"
            )
            return down

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n
        now = time.monotonic()
        if now - self.flushed >= 1.0:
            self.flush()

    def flush(self) -> None:
        self.flushed = time.monotonic()
        if not self.counters:
            return
        try:
            from jitwarden.store import atomic

            atomic.write_stats(
                f"remote-{self.pid}.json",
                {
                    "schema": 1,
                    "pid": self.pid,
                    "url": self.addr.display() if self.addr else None,
                    "role": self.role,
                    "counters": self.counters,
                    "written": time.time(),
                },
                ".remote-stats.",
                self.env,
            )
        except (OSError, ValueError, TypeError):
            pass


_DOWN = object()
"""What :meth:`_State.call` returns to a lookup when the server did not answer."""
_STATE: list = []


def state(env=None) -> _State:
    """This process's remote state, made again after a fork (sockets and counters are per process)."""
    if not _STATE or _STATE[0].pid != os.getpid():
        st = _State(os.environ if env is None else env)
        _STATE[:] = [st]
        import atexit

        atexit.register(st.flush)
    return _STATE[0]


def namespace_of_triton() -> str | None:
    """The fingerprint digest Triton's cache dir is partitioned by, None when it is not a partition."""
    from jitwarden.store.partition import split

    knobs = getattr(sys.modules.get("triton"), "knobs", None)
    d = getattr(getattr(knobs, "cache", None), "dir", None) if knobs is not None else None
    d = d or os.environ.get("TRITON_CACHE_DIR")
    s = split(d) if d else None
    return s[1] if s else None


# ---------------------------------------------------------------- Triton's interface


class RemoteCacheBackend:
    """Triton accepts a ``TRITON_REMOTE_CACHE_BACKEND`` class with a class of this name in its MRO:
    defined here so that loading the backend never imports Triton."""

    def __init__(self, key: str):
        pass


class GuardedRemoteBackend(RemoteCacheBackend):
    """``TRITON_REMOTE_CACHE_BACKEND=jitwarden.remote:GuardedRemoteBackend``: signed, namespaced, never fatal."""

    def __init__(self, key: str, digest: str | None = None):
        super().__init__(key)
        self._key = key
        self._st = state()
        self._digest = digest or namespace_of_triton()
        self._vouched: dict[str, str] = {}
        self._put: dict[str, str] = {}
        if self._st.error:
            say(f"remote cache off: {self._st.error}")
        elif self._digest is None:
            say(
                "remote cache off: Triton's cache dir is not a jitwarden partition, so there is no fingerprint "
                "to namespace remote entries by (run under jitwarden activation)"
            )

    @property
    def enabled(self) -> bool:
        return self._digest is not None and self._st.client is not None

    @property
    def writer(self) -> bool:
        return self.enabled and self._st.writer

    def _rkey(self, filename: str) -> str:
        assert self._digest is not None  # asked only when enabled
        return redis_key(self._digest, self._key, filename)

    def get(self, filenames) -> dict:
        """{filename: data} of the values that exist and pass every check; never raises."""
        try:
            return self._get(list(filenames))
        except Exception as exc:
            say(f"remote cache get failed ({type(exc).__name__}: {exc}); compiling locally")
            return {}

    def _get(self, filenames: list) -> dict:
        st = self._st
        if not self.enabled or not filenames:
            return {}
        rkeys = [self._rkey(f) for f in filenames]
        reply = (
            st.call("GET", rkeys[0], down=_DOWN)
            if len(rkeys) == 1
            else st.call("MGET", *rkeys, down=_DOWN)
        )
        if reply is _DOWN:
            return {}
        raws = [reply] if len(rkeys) == 1 else (reply or [None] * len(rkeys))
        trusted = self._keys_to_check()
        if trusted is None:
            return {}
        out = {}
        for name, rkey, raw in zip(filenames, rkeys, raws):
            data = self._opened(name, rkey, raw, trusted)
            if data is not None:
                out[name] = data
        return out

    def _keys_to_check(self):
        """The public keys values are checked by; None, and the remote cache off for this process (one line),
        when they cannot be read or there are none."""
        st = self._st
        try:
            trusted = st.trusted()
        except Exception as exc:
            st.down_until = float("inf")
            say(f"remote cache off: cannot check signatures ({exc})")
            return None
        if not trusted.keys:
            st.down_until = float("inf")
            say(
                f"remote cache off: no trusted public keys (set {TRUSTED_KEYS.name}), so no value could be checked"
            )
            return None
        return trusted

    def _opened(self, name: str, rkey: str, raw, trusted) -> bytes | None:
        """The data of the value ``raw`` got for ``name`` when it passes every check, counted; else None."""
        st = self._st
        if raw is None:
            st.count("miss")
            return None
        try:
            data, head = open_value(rkey, raw, trusted, self._vouched.get(name))
        except Rejected as rej:
            st.count("reject:" + rej.reason)
            log.warning(
                "jitwarden: remote cache value rejected (%s) for %s: %s",
                rej.reason,
                rkey,
                rej.detail,
            )
            return None
        except Exception as exc:
            st.count("reject:error")
            say(f"remote cache value not checked ({type(exc).__name__}: {exc}); not used")
            return None
        if isinstance(head.get("c"), dict):
            self._vouched.update({str(k): str(v) for k, v in head["c"].items()})
        st.count("hit")
        return data

    # -- whole entries: one value, one round trip, one signature (RemoteGuardedCacheManager) --

    def get_entry(self, filename: str) -> dict | None:
        """{file: data} of the whole kernel entry stored under ``filename`` (the group's name), or None; never raises."""
        got = self.get([ENTRY_PREFIX + filename])
        raw = got.get(ENTRY_PREFIX + filename)
        if raw is None:
            return None
        try:
            return unpack_entry(raw)
        except (
            ValueError
        ) as exc:  # signed but not an entry: a writer bug, not an attack; still a miss
            self._st.count("reject:malformed")
            say(f"remote cache entry {filename} not used: {exc}")
            return None

    def put_entry(self, filename: str, files: dict) -> None:
        """Store every file of one kernel entry as one signed value (writer role only); never raises."""
        self.put(ENTRY_PREFIX + filename, pack_entry(files))

    def put(self, filename: str, data) -> None:
        """Store ``data`` signed (writer role only); never raises."""
        try:
            self._put_one(filename, data if isinstance(data, bytes) else str(data).encode())
        except Exception as exc:
            say(f"remote cache put failed ({type(exc).__name__}: {exc})")

    def _put_one(self, filename: str, data: bytes) -> None:
        st = self._st
        if not self.enabled:
            return
        if not st.writer:
            st.count("put-skipped-reader")
            return
        children = None
        if filename.startswith("__grp__"):
            try:
                names = jsonlimits.loads(data).get("child_paths")
                names = list(names) if isinstance(names, (list, dict)) else []
            except (ValueError, AttributeError):
                names = []
            children = {n: self._put[n] for n in names if n in self._put}
        rkey = self._rkey(filename)
        value = seal_value(rkey, data, st.signer(), children)
        if len(value) > MAX_VALUE:
            st.count("put-too-large")
            say(
                f"remote cache: {filename} not stored ({len(value)} bytes, more than the {MAX_VALUE} a value may hold)"
            )
            return
        self._put[filename] = hashlib.sha256(data).hexdigest()
        if st.call("SET", rkey, value) is not None:
            st.count("put")
