"""The size and newest mtime of a tree, walked by directory fds (stdlib only).

What a quarantine record says an entry weighs (:func:`size_of`) and what ``prune`` reads a partition's
last write from (:func:`tree_stats`): iteratively, never following a link, at any depth.
"""

from __future__ import annotations

import os
import stat

from jitwarden.store.paths import O_DIR_NOFOLLOW


def size_of(path: str, dir_fd: int | None = None) -> int:
    """Bytes of regular files under ``path`` (or of ``path`` itself), never following a symlink."""
    return tree_stats(path, dir_fd=dir_fd)[0]


def _one_level(fd: int, skip: frozenset[str], todo: list[str]) -> tuple[int, float]:
    """(bytes of the regular files, newest mtime) directly in the directory ``fd``, its subdirectories'
    names appended to ``todo``; names in ``skip`` and what cannot be read left out."""
    total, newest = 0, 0.0
    try:
        with os.scandir(fd) as it:
            for e in it:
                if e.name in skip:
                    continue
                try:
                    s = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                newest = max(newest, s.st_mtime)
                if stat.S_ISDIR(s.st_mode):
                    todo.append(e.name)
                elif stat.S_ISREG(s.st_mode):
                    total += s.st_size
    except OSError:
        pass
    return total, newest


def tree_stats(
    path: str, skip: frozenset[str] = frozenset(), dir_fd: int | None = None
) -> tuple[int, float]:
    """(bytes of regular files, newest mtime) under ``path``, without recursion or following links.

    Walks by directory fds, so a 10,000-deep chain (paths far beyond PATH_MAX) costs no
    stack and one fd per level still holding unvisited siblings. Unreadable parts are skipped.
    """
    try:
        st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return 0, 0.0
    if not stat.S_ISDIR(st.st_mode):
        return (st.st_size if stat.S_ISREG(st.st_mode) else 0), st.st_mtime
    total, newest = 0, 0.0
    try:
        fd = os.open(path, O_DIR_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return 0, st.st_mtime
    stack: list[tuple[int, list[str]]] = [(fd, [])]
    first = True
    while stack:
        fd, todo = stack[-1]
        if first:
            first = False
            size, latest = _one_level(fd, skip, todo)
            total, newest = total + size, max(newest, latest)
        if not todo:
            os.close(fd)
            stack.pop()
            continue
        name = todo.pop()
        try:
            child = os.open(name, O_DIR_NOFOLLOW, dir_fd=fd)
        except OSError:
            continue
        if not todo:  # the last child: this level is done, its fd need not stay open
            os.close(fd)
            stack.pop()
        stack.append((child, []))
        first = True
    return total, newest
