"""Ed25519 keys for signed bundles and remote-cache values (stdlib at import; ``cryptography`` lazily).

Key files are one line of text each, like an SSH key:

- secret: ``jitwarden-ed25519-secret <64 hex seed>`` (mode 0600), held by builders only;
- public: ``jitwarden-ed25519 <64 hex public key> [comment]``, given to every node.

A key's id is the first 16 hex digits of sha256(public key bytes). Where keys are looked up:

- trusted public keys: ``JITWARDEN_TRUSTED_KEYS`` (``os.pathsep``-separated files or directories;
  a directory contributes every ``*.pub`` file in it), else ``<config>/trusted-keys/``;
- the signing key: ``--key`` on the command line, else ``JITWARDEN_SIGNING_KEY``, else ``<config>/signing-key``;

where ``<config>`` is ``$JITWARDEN_CONFIG_DIR``, else ``${XDG_CONFIG_HOME:-~/.config}/jitwarden``.
Only making and checking a signature imports ``cryptography`` (the ``[fleet]`` extra).
"""

from __future__ import annotations

import hashlib
import os

from jitwarden.model import settings
from jitwarden.model.errors import ExitStatus, JitwardenError
from jitwarden.store.sealkey import config_dir

SECRET_TAG = "jitwarden-ed25519-secret"
PUBLIC_TAG = "jitwarden-ed25519"


class KeyError_(JitwardenError, ValueError):
    """A key file that cannot be used, or no key where one is needed; the message says which and why."""

    exit_code = ExitStatus.USAGE


class KeyTooOpen(KeyError_):
    """A secret key file that group or others may access; refused like ``ssh`` refuses one, with the fix."""


def key_id(public: bytes) -> str:
    return hashlib.sha256(public).hexdigest()[:16]


def _ed25519():
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise KeyError_(
            "signatures need the 'cryptography' package: pip install cryptography (the 'fleet' extra)"
        ) from None
    return ed25519


class SigningKey:
    """A secret key that signs; ``public`` is its 32-byte public key."""

    __slots__ = ("_key", "public", "id")

    def __init__(self, seed: bytes):
        self._key = _ed25519().Ed25519PrivateKey.from_private_bytes(seed)
        from cryptography.hazmat.primitives import serialization as s

        self.public = self._key.public_key().public_bytes(s.Encoding.Raw, s.PublicFormat.Raw)
        self.id = key_id(self.public)

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)


class TrustedKeys:
    """The public keys signatures are checked against, by key id."""

    __slots__ = ("keys", "sources", "where", "_objs")

    def __init__(self, keys: dict, sources: tuple = (), where: str = "<config>/trusted-keys"):
        self.keys = dict(keys)  # id -> 32 raw bytes
        self.sources = tuple(sources)  # where they were read from, for messages
        self.where = where  # the directory *.pub files are read from by default, named in the hint
        self._objs: dict = {}

    def verify(self, kid: str, signature: bytes, message: bytes) -> str | None:
        """None when ``signature`` is a valid signature of ``message`` by trusted key ``kid``, else why not."""
        raw = self.keys.get(kid)
        if raw is None and not self.keys:
            return (
                f"signed by key {kid}, which is not among the trusted keys: none are configured "
                f"(set {settings.TRUSTED_KEYS.name}, or put *.pub files into {self.where})"
            )
        if raw is None:
            return f"signed by key {kid}, which is not among the trusted keys ({', '.join(self.sources) or 'none'})"
        obj = self._objs.get(kid)
        if obj is None:
            obj = self._objs[kid] = _ed25519().Ed25519PublicKey.from_public_bytes(raw)
        try:
            obj.verify(signature, message)
        except Exception:
            return f"the signature by key {kid} does not match"
        return None


def generate() -> tuple[str, str, str]:
    """(secret file text, public file text, key id) of a new key pair."""
    seed = os.urandom(32)
    key = SigningKey(seed)
    return f"{SECRET_TAG} {seed.hex()}\n", f"{PUBLIC_TAG} {key.public.hex()} {key.id}\n", key.id


def _hex32(text: str, what: str) -> bytes:
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise KeyError_(f"{what}: not a jitwarden Ed25519 key (expected 64 hex digits)")
    return raw


MAX_KEY_FILE = 1 << 20
"""Larger than any key file (a secret key is one line of 90 bytes; a trusted-keys file lists a few hundred)."""


def _read_key_file(path: str, what: str, *, secret: bool = False) -> str:
    """The text of the key file ``path`` through the bounded reader: a FIFO or device is refused at once, never
    waited on; a secret key that group or others may access is refused like ``ssh`` does, with the fix."""
    from jitwarden.store.reads import open_regular, read_fd

    try:
        fd, st = open_regular(
            path, follow=True
        )  # the user's own link to a key is fine; a FIFO never blocks
        try:
            if secret and st.st_mode & 0o077:
                raise KeyTooOpen(
                    f"{path}: secret key is accessible by group or others (mode "
                    f"{st.st_mode & 0o777:04o}); refusing to use it: run `chmod 600 {path}`"
                )
            data = read_fd(fd, MAX_KEY_FILE, st.st_size)
        finally:
            os.close(fd)
        if len(data) > MAX_KEY_FILE:
            raise OSError(f"larger than {MAX_KEY_FILE} bytes")
        return data.decode("ascii")
    except (
        OSError,
        UnicodeDecodeError,
    ) as exc:  # NotRegularFile says "not a regular file (a FIFO)"
        raise KeyError_(
            f"{path}: cannot read {what}: {getattr(exc, 'strerror', None) or exc}"
        ) from None


def load_signing_key(path: str) -> SigningKey:
    parts = _read_key_file(path, "signing key", secret=True).split()
    if len(parts) < 2 or parts[0] != SECRET_TAG:
        raise KeyError_(f"{path}: not a jitwarden secret key (it starts with {SECRET_TAG!r})")
    return SigningKey(_hex32(parts[1], path))


def parse_public(text: str, where: str) -> dict:
    """Every public key in ``text`` (one a line, ``#`` comments allowed) by id."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        if parts[0] != PUBLIC_TAG or len(parts) < 2:
            raise KeyError_(
                f"{where}:{n}: not a jitwarden public key line ({PUBLIC_TAG} <hex> [comment])"
            )
        raw = _hex32(parts[1], f"{where}:{n}")
        out[key_id(raw)] = raw
    return out


def trusted_key_paths(env=None) -> list[str]:
    env = os.environ if env is None else env
    raw = settings.TRUSTED_KEYS.raw(env)
    items = (
        [p for p in raw.split(os.pathsep) if p]
        if raw
        else [os.path.join(config_dir(env), "trusted-keys")]
    )
    out = []
    for p in items:
        if os.path.isdir(p):
            try:
                out += sorted(os.path.join(p, n) for n in os.listdir(p) if n.endswith(".pub"))
            except OSError:
                continue
        elif raw or os.path.exists(p):
            out.append(p)
    return out


def load_trusted(env=None) -> TrustedKeys:
    """The configured trusted keys; KeyError_ when a named file is unreadable or malformed."""
    keys: dict = {}
    paths = trusted_key_paths(env)
    for p in paths:
        keys.update(parse_public(_read_key_file(p, "trusted key"), p))
    return TrustedKeys(keys, tuple(paths), os.path.join(config_dir(env), "trusted-keys"))


def signing_key_path(explicit: str | None = None, env=None) -> str:
    env = os.environ if env is None else env
    return explicit or settings.SIGNING_KEY.raw(env) or os.path.join(config_dir(env), "signing-key")
