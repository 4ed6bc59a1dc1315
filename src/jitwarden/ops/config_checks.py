"""Misconfiguration ``doctor`` names: settings that make a cache or the remote cache silently not work.

Each check reads the environment (and, for ``JITWARDEN_REMOTE``, asks the server one ``PING`` with a
short timeout, as the runtime would); the result is a list of frozen :class:`Misconfig` records, and only
the CLI prints them (ARCHITECTURE.md, "The flow of one command").
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from jitwarden.model import kinds, settings
from jitwarden.model.text import display

PING_TIMEOUT = 1.0
"""Seconds one ``PING`` may take: the runtime's own timeout is 0.5 s, so a server slower than this fails it too."""

DIR_VARS = tuple(k.var for k in kinds.partitioned(kinds.DIR) if k.var) + (
    "TRITON_HOME",
    "CUDA_CACHE_PATH",
    settings.HOME.name,
)
"""Variables that must name a directory (or a path where one can be made)."""


@dataclass(frozen=True, slots=True)
class Misconfig:
    """One setting that does not do what it says: its code, the sentence, and what fixes it."""

    code: str
    message: str
    fix: str


def check(env=os.environ, ping: bool = True) -> list[Misconfig]:
    """Every misconfiguration in ``env``: location variables naming a file, and the remote cache's URL, keys
    and server (``ping``: ask it)."""
    return _dirs(env) + _seal_key(env) + _remote(env, ping)


def _dirs(env) -> list[Misconfig]:
    out = []
    for var in DIR_VARS:
        value = env.get(var)
        if not value:
            continue
        path = os.path.expanduser(value)
        if os.path.lexists(path) and not os.path.isdir(path):
            what = "a file" if os.path.isfile(path) else "something that is not a directory"
            out.append(
                Misconfig(
                    "bad-cache-dir",
                    f"{var}={display(value)} names {what}: the cache cannot be "
                    "written there, so every compile fails or starts cold",
                    f"export {var}=<a directory>  (or unset {var} for the tool's default)",
                )
            )
    return out


def _seal_key(env) -> list[Misconfig]:
    """A team seal key (``JITWARDEN_SEAL_KEY``) the runtime cannot use: seals then fall back to the user's own key."""
    from jitwarden.store import sealkey

    var = settings.SEAL_KEY.name
    try:
        sealkey.team_key(env)
    except sealkey.SealKeyError as exc:
        return [
            Misconfig(
                "seal-key",
                f"{var}={display(str(exc.filename))}: {display(str(exc.strerror))}; seals are made with your own key only, "
                "so your team's are not believed (their kernels are proven again) nor yours theirs",
                f"a key file of one line 'jitwarden-seal-key <64 hex>' that others may not read: "
                f"printf 'jitwarden-seal-key %s\\n' \"$(openssl rand -hex 32)\" > FILE; chmod 640 FILE; "
                f"export {var}=FILE",
            )
        ]
    return []


def _remote(env, ping: bool) -> list[Misconfig]:
    from jitwarden.formats import resp
    from jitwarden.ops import keys

    remote = settings.REMOTE.name
    url = settings.REMOTE.text(env) or ""
    if not url:
        return []
    try:
        addr = resp.parse_url(url)
    except ValueError as exc:
        return [
            Misconfig(
                "remote-config",
                f"{remote}: {display(str(exc))}; the remote cache is off",
                f"export {remote}=redis://[user:password@]host[:port][/db]",
            )
        ]
    out = []
    trust_dir = os.path.join(keys.config_dir(env), "trusted-keys")
    try:
        trusted = keys.load_trusted(env)
    except keys.KeyError_ as exc:
        out.append(
            Misconfig(
                "remote-keys",
                f"{remote} is set but the trusted keys cannot be read "
                f"({display(str(exc))}): the remote cache switches itself off at run time",
                f"fix or remove that key file (trusted keys: {display(trust_dir)}/*.pub or "
                f"{settings.TRUSTED_KEYS.name})",
            )
        )
    else:
        if not trusted.keys:
            out.append(
                Misconfig(
                    "remote-keys",
                    f"{remote} is set but no public key is trusted: no value can be "
                    "checked, so the remote cache switches itself off at run time",
                    f"copy the builder's key (jitwarden keygen makes one) into {display(trust_dir)}/"
                    f"NAME.pub, or export {settings.TRUSTED_KEYS.name}=/path/to/builder.pub",
                )
            )
    if ping:
        problem = _ping(resp, addr)
        if problem is not None:
            out.append(problem)
    return out


def _ping(resp, addr) -> Misconfig | None:
    """None when the server answers ``PING`` (after ``AUTH`` and ``SELECT`` when the URL asks for them)."""
    client = resp.Client(addr, PING_TIMEOUT, PING_TIMEOUT)
    try:
        client.execute("PING")
        return None
    except resp.RespError as exc:
        why = display(str(exc))
        if any(
            w in why.upper()
            for w in ("WRONGPASS", "NOAUTH", "AUTH", "INVALID PASSWORD", "INVALID USERNAME")
        ):
            remote = settings.REMOTE.name
            return Misconfig(
                "remote-auth",
                f"{addr.display()} refused the credentials in {remote} ({why}): "
                "every get is refused, so kernels are compiled locally",
                f"export {remote}=redis://USER:PASSWORD@host:port/db  (the server's user and password)",
            )
        return Misconfig(
            "remote-refused",
            f"{addr.display()} refused PING ({why}): the remote cache cannot be used",
            "check the server's ACL for this user (it needs PING, GET and, on builders, SET)",
        )
    except OSError as exc:
        why = display(exc.strerror or str(exc) or type(exc).__name__)
        return Misconfig(
            "remote-unreachable",
            f"cannot reach {addr.display()} ({why}): each process waits out a "
            "timeout, then compiles locally",
            f"start the server or fix the host and port in {settings.REMOTE.name}",
        )
    finally:
        client.close()
