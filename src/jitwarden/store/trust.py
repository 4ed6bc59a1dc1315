"""Who may have written it decides what it proves: the one trust rule (stdlib only; ARCHITECTURE.md, store/).

A root, an entry, a seal or a lock that a principal other than the reader (and root, who can write
anything anyway) could have written proves nothing to the reader: the runtime does not take such an
entry on the word of its seal (it is proven at first use, or compiled privately), activation does not
use such a root, and ``verify`` calls it ``unsafe``. The reader being root changes nothing: root reading
uid 1000's cache reads what uid 1000 chose to put there (git's "dubious ownership").

A principal "could have written" a file or directory when it owns it, or when the mode lets others write
(``o+w``), or lets its group write and that group is not the owner's own (a user-private group with no
other member: the umask-002 default of most distributions exposes nothing).

The one opt-in, like git's ``safe.directory``: ``JITWARDEN_TRUSTED_ROOTS`` names roots whose ownership
the reader accepts (a team's shared cache); inside them only the seals' authentication decides
(:mod:`jitwarden.store.sealkey`). Its risk is in docs/threat-model.md.
"""

from __future__ import annotations

import os
import stat

from jitwarden.model.settings import TRUSTED_ROOTS

TYPE_CHECKING = False  # mypy takes it as true; the runtime imports nothing for annotations
if TYPE_CHECKING:
    from collections.abc import Mapping


def why_untrusted(st: os.stat_result, uid: int | None = None) -> str | None:
    """Why someone other than ``uid`` (default: this process's effective uid) or root could have written
    the file or directory whose stat is ``st``, else None (pure but for the group lookup, memoized)."""
    if st.st_mode & stat.S_IWOTH and not stat.S_ISLNK(st.st_mode):
        return f"writable by everyone (mode {st.st_mode & 0o7777:o})"
    return other_writer(st, uid)


def other_writer(st: os.stat_result, uid: int | None = None) -> str | None:
    """The part of :func:`why_untrusted` that a trusted root waives: another owner, or a group with other
    members that may write (everyone-writable is never waived)."""
    uid = os.geteuid() if uid is None else uid
    if st.st_uid not in (uid, 0):
        return f"owned by uid {st.st_uid}"
    mode = st.st_mode
    if mode & stat.S_IWGRP and not stat.S_ISLNK(mode) and not private_group(st.st_gid, st.st_uid):
        return f"writable by group {st.st_gid}, which has other members (mode {mode & 0o7777:o})"
    return None


_PRIVATE: dict[tuple[int, int], bool] = {}


def private_group(gid: int, owner: int) -> bool:
    """Whether ``gid`` is ``owner``'s user-private group: the owner's primary group, named like the owner,
    listing no one else. Any lookup that fails says no (memoized: one NSS lookup per group a process meets)."""
    key = (gid, owner)
    hit = _PRIVATE.get(key)
    if hit is None:
        hit = _PRIVATE[key] = _lookup_private(gid, owner)
    return hit


def _lookup_private(gid: int, owner: int) -> bool:
    import grp
    import pwd

    try:
        user = pwd.getpwuid(owner)
        group = grp.getgrgid(gid)
    except (KeyError, OSError):
        return False
    return (
        user.pw_gid == gid and group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}
    )


_ROOTS: dict[str, tuple[str, ...]] = {}


def trusted_roots(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The roots named by ``JITWARDEN_TRUSTED_ROOTS`` (``os.pathsep``-separated, absolute; ``*``: every
    root), resolved once per value."""
    raw = TRUSTED_ROOTS.raw(os.environ if env is None else env)
    if not raw:
        return ()
    hit = _ROOTS.get(raw)
    if hit is None:
        out = []
        for p in raw.split(os.pathsep):
            p = p.strip()
            if p == "*":
                out.append("*")
            elif os.path.isabs(p):
                out += {os.path.normpath(p), os.path.realpath(p)}
        hit = _ROOTS[raw] = tuple(out)
    return hit


def in_trusted_root(path: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether ``path`` is at or under a root the user named in ``JITWARDEN_TRUSTED_ROOTS``."""
    roots = trusted_roots(env)
    if not roots:
        return False
    if "*" in roots:
        return True
    for p in {os.path.normpath(os.path.abspath(path)), os.path.realpath(path)}:
        for r in roots:
            if p == r or p.startswith(r.rstrip(os.sep) + os.sep):
                return True
    return False


def untrusted(
    path: str, *stats: os.stat_result, env: Mapping[str, str] | None = None
) -> str | None:
    """Why the item at ``path`` (its ``stats``: the entry dir, its seal, ...) proves nothing to this reader,
    else None: the rule of :func:`why_untrusted` for each; inside a trusted root only everyone-writable counts."""
    for st in stats:
        why = why_untrusted(st)
        if why is not None and (st.st_mode & stat.S_IWOTH or not in_trusted_root(path, env)):
            return why
    return None
