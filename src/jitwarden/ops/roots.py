"""Which roots a scan judges: the paths a command names, the roots beneath a parent of roots, and this
environment's own roots (:mod:`jitwarden.ops.scan` judges them).
"""

from __future__ import annotations

import os
from operator import methodcaller

from jitwarden import adapters
from jitwarden.adapters import triton as tri
from jitwarden.adapters.base import listed, listing_once
from jitwarden.model.entries import CacheRoot
from jitwarden.model.errors import UsageError

SEARCH_DEPTH = 3
"""How many levels below a path that is no cache root :func:`roots_from_paths` looks for roots (``~`` holds
``~/.triton/cache``, ``~/.cache/vllm``, ``~/.nv/ComputeCache`` two levels down)."""
SEARCH_DIRS = 20000
"""At most this many directories are looked at in that search: a home of datasets costs a bounded time."""


def roots_from_paths(paths: list[str], env=os.environ) -> list[tuple[CacheRoot, list[str] | None]]:
    """Roots named on the command line; a path that is itself one entry scans just that entry.

    A path is taken as a root only on evidence (an adapter's ``looks_like_root``, or being a root this
    environment uses). A parent of roots (``~``, ``~/.triton``) stands for the roots found beneath it,
    each reported on its own; a path with no cache of a known kind is a :class:`UsageError` (exit 2),
    never an empty, clean-looking report (ARCHITECTURE.md, "The flow of one command").
    """
    out: list[tuple[CacheRoot, list[str] | None]] = []
    known = None
    for p in paths:
        _check_listable(p)
        path = os.path.abspath(p)
        with (
            listing_once()
        ):  # one listing of the path for this test and every adapter's (a root lists 10,000s)
            try:
                kernel_files = _holds_kernel_files(listed(path).names)
            except OSError as exc:
                raise UsageError(f"{p}: cannot list: {exc.strerror}") from None
            kind = adapters.kind_of_path(path)
        if kind in (None, tri.KIND) and kernel_files:
            out.append(
                (
                    CacheRoot(kind=tri.KIND, path=os.path.dirname(path), source="cli"),
                    [os.path.basename(path)],
                )
            )
            continue
        if kind is None:
            if known is None:
                known = {os.path.realpath(r.path): r.kind for r, _ in default_roots(env)}
            kind = known.get(
                os.path.realpath(path)
            )  # a root this environment uses, even while empty
        if kind is not None:
            out.append((CacheRoot(kind=kind, path=path, source="cli"), None))
            continue
        found, complete = roots_beneath(path)
        if not found:
            searched = (
                f"nor within {SEARCH_DEPTH} levels below it"
                if complete
                else f"nor in the first {SEARCH_DIRS} directories below it"
            )
            raise UsageError(
                f"{p}: no cache of a known kind here, {searched} "
                "(give a cache root such as ~/.triton/cache; `jitwarden doctor` lists the roots in use)"
            )
        out += [(CacheRoot(kind=k, path=r, source="cli"), None) for k, r in found]
    return out


def roots_beneath(
    path: str, depth: int = SEARCH_DEPTH, limit: int = SEARCH_DIRS
) -> tuple[list[tuple[str, str]], bool]:
    """((kind, root) of every cache root below ``path``, breadth first, never inside a root found; whether
    the search was complete): symlinks are not followed, jitwarden's own directories are skipped, and at
    most ``limit`` directories are looked at."""
    from jitwarden.model.layout import is_reserved

    found: list[tuple[str, str]] = []
    level, seen = [path], 0
    for _ in range(depth):
        below = []
        for d in level:
            try:
                with os.scandir(d) as it:
                    kids = sorted(
                        e.path
                        for e in it
                        if not is_reserved(e.name) and e.is_dir(follow_symlinks=False)
                    )
            except OSError:
                continue
            for k in kids:
                seen += 1
                if seen > limit:
                    return found, False
                kind = adapters.kind_of_path(k)
                if kind is not None:
                    found.append((kind, k))
                else:
                    below.append(k)
        level = below
    return found, True


def _holds_kernel_files(names: list[str]) -> bool:
    """Whether a directory's names include a ``__grp__*`` file, a ``.cubin`` or a ``.so`` (one entry's own
    directory, not a root): C-level passes of str methods over the names (10,000 in a root), nothing built."""
    return any(map(_IS_GROUP, names)) or any(map(_IS_KERNEL_FILE, names))


_IS_GROUP, _IS_KERNEL_FILE = (
    methodcaller("startswith", "__grp__"),
    methodcaller("endswith", (".cubin", ".so")),
)


def default_roots(
    env=os.environ, kinds: tuple[str, ...] | None = None
) -> list[tuple[CacheRoot, list[str] | None]]:
    return [(r, None) for r in adapters.discover_roots(env, kinds)]


def _check_listable(p: str) -> None:
    """Refuse (:class:`UsageError`) a path named on the command line that is not a directory this user
    may list, saying which and what lets them."""
    try:
        os.lstat(p)
    except FileNotFoundError:
        raise UsageError(f"{p}: no such file or directory") from None
    except OSError as exc:
        raise UsageError(f"{p}: {(exc.strerror or str(exc)).lower()}") from None
    if not os.path.isdir(p):
        raise UsageError(
            f"{p}: not a directory (give a cache root such as ~/.triton/cache, or one entry's directory)"
        )
    if not os.access(p, os.R_OK | os.X_OK):
        raise UsageError(
            f"{p}: permission denied: unreadable, so nothing in it was checked ({read_fix(p)})"
        )


def read_fix(path: str) -> str:
    """What lets this user read ``path``: ``chmod u+rwx`` when it is theirs, else its owner's help."""
    try:
        mine = os.stat(path).st_uid == os.geteuid()
    except OSError:
        mine = False
    return (
        f"chmod u+rwx {path}"
        if mine
        else f"sudo chown -R $USER {path}, or run jitwarden as its owner"
    )
