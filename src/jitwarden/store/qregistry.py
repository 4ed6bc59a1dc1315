"""Every cache dir jitwarden has quarantined into, remembered under jitwarden's home (stdlib only).

``jitwarden clean /some/root`` moves entries into ``/some/root/jitwarden-quarantine/``;
without a note of that root, ``jitwarden quarantine ls`` (which looks in the roots it
discovers) would say "nothing quarantined" and the user would think the entries gone.
So every successful quarantine appends its root to ``<home>/quarantine-roots.jsonl``
(one JSON string per line, ``O_APPEND``: concurrent writers never interleave a line),
and listing reads it back.

The registry is a hint, never a source of truth: a missing, unreadable, truncated or
hostile file yields fewer roots, never an error; a root is listed only while its
quarantine dir is a real directory; the file is opened without following symlinks.
Nothing here raises into the caller.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

FILE = "quarantine-roots.jsonl"
_MAX_READ = 1 << 20  # read at most 1 MiB: a runaway file costs nothing
_COMPACT_AT = 256 << 10  # rewrite with the live roots only once the file grows past 256 KiB
_seen: set[tuple[str, str]] = set()  # (registry path, root) noted by this process


def path(env: Mapping[str, str] | None = None) -> str:
    from jitwarden.store.paths import memo_dir

    return os.path.join(memo_dir(env), FILE)


def _read(reg: str) -> list[str]:
    from jitwarden.store.reads import read_head

    try:
        data = read_head(
            reg, _MAX_READ
        )  # a FIFO or a device in its place is refused, never waited on
    except OSError:
        return []
    out = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            root = json.loads(line)
        except ValueError:
            continue
        if isinstance(root, str) and os.path.isabs(root) and "\0" not in root and root not in out:
            out.append(root)
    return out


def _live(root: str) -> bool:
    import stat

    from jitwarden.model.layout import QUARANTINE_DIR

    try:
        return stat.S_ISDIR(os.lstat(os.path.join(root, QUARANTINE_DIR)).st_mode)
    except (OSError, ValueError):
        return False


def roots(env: Mapping[str, str] | None = None) -> list[str]:
    """Remembered roots whose quarantine dir still exists, in the order they were first noted."""
    try:
        return [r for r in _read(path(env)) if _live(r)]
    except Exception:
        return []


def remember(root: str, env: Mapping[str, str] | None = None) -> bool:
    """Note ``root`` (a cache dir that now holds a quarantine); True when it was written. Never raises."""
    try:
        root = os.path.abspath(root)
        reg = path(env)
        if (reg, root) in _seen:
            return False
        known = _read(reg)
        if root in known:
            _seen.add((reg, root))
            return False
        from jitwarden.store.atomic import private_dir, write_atomic

        dfd = private_dir(
            os.path.dirname(reg)
        )  # none made or written where another user could write
        if dfd is None:
            return False
        name = os.path.basename(reg)
        try:
            try:
                size = os.lstat(name, dir_fd=dfd).st_size
            except OSError:
                size = 0
            if size > _COMPACT_AT:  # the live roots alone, by the one atomic writer
                keep = [r for r in known if _live(r)] + [root]
                data = "".join(json.dumps(r) + "\n" for r in keep).encode()
                write_atomic(dfd, name, data, None, mode=0o600)
            else:
                fd = os.open(
                    name,
                    os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o600,
                    dir_fd=dfd,
                )
                try:
                    os.write(fd, (json.dumps(root) + "\n").encode())
                finally:
                    os.close(fd)
        finally:
            os.close(dfd)
        _seen.add((reg, root))
        return True
    except Exception:
        return False
