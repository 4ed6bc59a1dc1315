"""The keys that authenticate seals: an HMAC-SHA256 secret per user, and an optional team key (stdlib only).

A seal (:mod:`jitwarden.store.seal`) carries an HMAC over its content and the entry's name, so whoever
cannot read the key cannot write a seal that vouches for anything (ARCHITECTURE.md, store/).

- Your own key: ``<config>/seal/key`` (``<config>`` as :func:`config_dir`; the directory 0700, the file 0600,
  created with ``O_EXCL`` and published whole by ``link``), made at first use; where the config dir cannot
  hold one (a read-only ``HOME``), ``<jitwarden home>/seal/key`` (``JITWARDEN_HOME``, the memos' dir). A key file or directory
  another principal could have written (:mod:`jitwarden.store.trust`; root reading a user's ``HOME`` under
  ``sudo -E``) is never used: where ``HOME`` is another user's, the key lives under the home ``passwd``
  gives this uid; where no key can be kept at all, one lives in memory for this process (its seals are
  proven again next start).
- A team key: the file ``JITWARDEN_SEAL_KEY`` names (refused when others may read or write it). Seals are
  written with it, and seals made with either key are trusted (docs/threat-model.md says what it costs).

The file holds one line, ``jitwarden-seal-key <64 hex>``.
"""

from __future__ import annotations

import errno
import hmac
import os
import stat

from jitwarden.model.settings import SEAL_KEY
from jitwarden.store.paths import memo_dir
from jitwarden.store.reads import open_regular, read_fd
from jitwarden.store.trust import why_untrusted

TYPE_CHECKING = False  # mypy takes it as true; the runtime imports nothing for annotations
if TYPE_CHECKING:
    from collections.abc import Mapping

TAG = "jitwarden-seal-key"
KEY_DIR = "seal"
KEY_FILE = "key"
_DOMAIN = b"jitwarden-seal-v2\0"


class SealKeyError(OSError):
    """A key file that cannot be used: the message says which and why."""


def config_dir(env: Mapping[str, str] | None = None) -> str:
    """jitwarden's configuration directory: ``$JITWARDEN_CONFIG_DIR``, else ``${XDG_CONFIG_HOME:-~/.config}/jitwarden``."""
    from jitwarden.model import settings

    return settings.config_dir(os.environ if env is None else env)


def format_key(secret: bytes) -> bytes:
    """A key file's text for ``secret``."""
    return f"{TAG} {secret.hex()}\n".encode()


def parse_key(raw: bytes, where: str) -> bytes:
    """The 32-byte secret in a key file's text; SealKeyError unless it is exactly one key line."""
    parts = raw.split()
    if len(parts) != 2 or parts[0] != TAG.encode() or len(parts[1]) != 64:
        raise SealKeyError(errno.EINVAL, f"not a jitwarden seal key ({TAG} <64 hex>)", where)
    try:
        return bytes.fromhex(parts[1].decode("ascii"))
    except ValueError:
        raise SealKeyError(errno.EINVAL, "the key is not 64 hex digits", where) from None


def _read_key(path: str, private: bool) -> bytes:
    """The key in ``path``; ``private``: refused unless this user's alone (0600, ours, in a dir only we write)."""
    fd, st = open_regular(path)
    try:
        mode = st.st_mode & 0o777
        if private:
            why = why_untrusted(st) or why_untrusted(os.stat(os.path.dirname(path)))
            if why is None and st.st_uid != os.geteuid():
                why = f"owned by uid {st.st_uid}"
            if why is None and mode & 0o077:
                why = f"readable by others (mode {mode:o})"
        else:
            why = f"readable or writable by everyone (mode {mode:o})" if mode & 0o006 else None
        if why:
            raise SealKeyError(errno.EPERM, f"seal key {why}; not used", path)
        return parse_key(read_fd(fd, 256, st.st_size), path)
    finally:
        os.close(fd)


def _private_dir(d: str) -> bool:
    """Make ``d`` (0700) when missing; whether it is ours and nobody else's to write. Nothing is made inside a
    directory another user owns (root under ``sudo -E``). The key dir and file are checked themselves: whoever
    may write a directory above them can remove them, never put a key of theirs in their place."""
    try:
        top = os.path.dirname(d)
        while not os.path.lexists(top) and os.path.dirname(top) != top:
            top = os.path.dirname(top)
        if os.lstat(top).st_uid not in (os.geteuid(), 0):
            return False
        os.makedirs(d, 0o700, exist_ok=True)
        st = os.lstat(d)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and why_untrusted(st) is None


def _own_key_at(base: str) -> bytes | None:
    """This user's key under ``base`` (a config dir), made when missing; None when none can be kept there."""
    d = os.path.join(base, KEY_DIR)
    path = os.path.join(d, KEY_FILE)
    if not _private_dir(d):
        return None
    try:
        return _read_key(path, private=True)
    except FileNotFoundError:
        pass
    except OSError:
        return None
    secret = os.urandom(32)
    tmp = os.path.join(d, f".key.{os.getpid()}.{secret[:4].hex()}")
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            os.write(fd, format_key(secret))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # published whole, never over a key another start made meanwhile
        except FileExistsError:
            pass
        return _read_key(path, private=True)
    except OSError:
        return None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


# own keys by their dir; team keys by ("team", path)
_CACHE: dict[str | tuple[str, str], bytes] = {}


def own_key(env: Mapping[str, str] | None = None) -> bytes:
    """This user's seal key (memoized by where it lives)."""
    env = os.environ if env is None else env
    base = config_dir(env)
    hit = _CACHE.get(base)
    if hit is None:
        hit = (
            _own_key_at(base)
            or _own_key_at(
                memo_dir(env)
            )  # a read-only config dir (a container's HOME): jitwarden's state dir
            or _key_of_passwd_home(env, base)
            or os.urandom(32)
        )
        _CACHE[base] = hit
    return hit


def _key_of_passwd_home(env: Mapping[str, str], base: str) -> bytes | None:
    """Where ``HOME`` is another user's (root under ``sudo -E``): the key under the home ``passwd`` gives this
    uid. Any other failure (a read-only or odd config dir) keeps the key in memory rather than write elsewhere."""
    import pwd

    try:
        if os.stat(env.get("HOME") or os.path.expanduser("~")).st_uid == os.geteuid():
            return None
        home = pwd.getpwuid(os.geteuid()).pw_dir
    except (OSError, KeyError):
        return None
    fallback = os.path.join(home, ".config", "jitwarden")
    return _own_key_at(fallback) if home and fallback != base else None


def key_stamps(env: Mapping[str, str] | None = None) -> list[tuple[str, tuple[int, ...] | None]]:
    """The stat of every file :func:`keys` may take a key from ((path, (dev, ino, size, mtime_ns, ctime_ns)) or
    (path, None)), making none: what a memo of judged seals is keyed by (a key made, rotated or named is another)."""
    import pwd

    env = os.environ if env is None else env
    paths = [os.path.join(base, KEY_DIR, KEY_FILE) for base in (config_dir(env), memo_dir(env))]
    try:
        paths.append(
            os.path.join(
                pwd.getpwuid(os.geteuid()).pw_dir, ".config", "jitwarden", KEY_DIR, KEY_FILE
            )
        )
    except KeyError:
        pass
    team = SEAL_KEY.raw(env)
    out: list[tuple[str, tuple[int, ...] | None]] = []
    for p in [*paths, *([team] if team else [])]:
        try:
            st = os.stat(p)
            out.append((p, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)))
        except OSError:
            out.append((p, None))
    return out


def team_key(env: Mapping[str, str] | None = None) -> bytes | None:
    """The team key ``JITWARDEN_SEAL_KEY`` names; None when unset; SealKeyError when it cannot be used."""
    path = SEAL_KEY.raw(os.environ if env is None else env)
    if not path:
        return None
    hit = _CACHE.get(("team", path))
    if hit is None:
        try:
            hit = _read_key(path, private=False)
        except SealKeyError:
            raise  # refused, with its reason
        except OSError as exc:
            raise SealKeyError(exc.errno, f"seal key unreadable: {exc.strerror}", path) from None
        _CACHE[("team", path)] = hit
    return hit


_KEYS: dict[tuple[str | None, ...], tuple[bytes, ...]] = {}


def keys(env: Mapping[str, str] | None = None) -> tuple[bytes, ...]:
    """The keys a seal may be made with, the one to write with first: the team key (when set and usable),
    then this user's own. Memoized by the variables that name them: a warm hit asks this for every seal."""
    env = os.environ if env is None else env
    where = (config_dir(env), env.get("HOME"), SEAL_KEY.raw(env))
    hit = _KEYS.get(where)
    if hit is None:
        try:
            team = team_key(env)
        except SealKeyError:
            team = None  # named but unusable: seals fall back to the user's own key
        own = own_key(env)
        hit = _KEYS[where] = (team, own) if team is not None else (own,)
    return hit


def mac(key: bytes, name: str, body: bytes) -> str:
    """The HMAC-SHA256 (hex) of a seal's ``body`` for the entry named ``name``."""
    msg = _DOMAIN + name.encode("utf-8", "surrogateescape") + b"\0" + body
    return hmac.digest(key, msg, "sha256").hex()


def authentic(name: str, body: bytes, tag: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether ``tag`` is the HMAC of ``body`` for ``name`` under a key this reader trusts."""
    return any(hmac.compare_digest(mac(k, name, body), tag) for k in keys(env))


def forget() -> None:
    """Drop every key read or made (a test that changes who it is, or deletes a key)."""
    _CACHE.clear()
    _KEYS.clear()
