"""Removing files and trees, by directory fds, never following a link (stdlib only; ARCHITECTURE.md, "Layers").

One walk removes every tree (:func:`_remove_walk`): iterative, so any depth costs no stack (a
3,000-deep tree is removed, or refused with an OSError, never a RecursionError), and one directory
fd at a time, so any depth costs no more fds. It goes down by ``openat(name, O_NOFOLLOW)`` and back
up by ``openat("..")`` checked against the device and inode it left, so a directory moved while it
is removed stops the walk (OSError ESTALE) instead of leading it anywhere else.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)


def chmod_at(dir_fd: int, name: str, mode: int) -> None:
    """chmod a directory entry without following a symlink (through an O_PATH fd where there is one)."""
    o_path = getattr(os, "O_PATH", 0)
    if not o_path:  # pragma: no cover - Linux has O_PATH
        os.chmod(name, mode, dir_fd=dir_fd)
        return
    fd = os.open(name, o_path | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.ENOTDIR, "not a directory", name)
        os.chmod(f"/proc/self/fd/{fd}", mode)
    finally:
        os.close(fd)


def _ids(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _enter(dir_fd: int, name: str, mend: bool) -> int:
    """An fd of the directory ``name`` in ``dir_fd`` (never through a link); ``mend``: one we may not
    enter or change is made so first (it is ours, and going)."""
    if mend:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode) and mode & 0o700 != 0o700:
            chmod_at(dir_fd, name, mode | 0o700)
    return os.open(name, _O_DIR, dir_fd=dir_fd)


def _up(fd: int, want: tuple[int, int]) -> int:
    """An fd of the parent of the directory ``fd``, when it is still the directory ``want`` (dev, ino)."""
    pfd = os.open(os.pardir, _O_DIR, dir_fd=fd)
    if _ids(pfd) != want:
        os.close(pfd)
        raise OSError(errno.ESTALE, "a directory was moved while it was being removed")
    return pfd


def _clear(fd: int, quiet: bool) -> list[str]:
    """Unlink everything in the directory ``fd`` but its subdirectories; their names."""
    with os.scandir(fd) as it:
        names = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    subdirs = []
    for name, is_dir in names:
        if is_dir:
            subdirs.append(name)
            continue
        try:
            os.unlink(name, dir_fd=fd)
        except OSError:
            if not quiet:
                raise
    return subdirs


def _remove_walk(dir_fd: int, top: str, *, quiet: bool, mend: bool = False) -> None:
    """Remove ``top`` in ``dir_fd`` and everything below it (see the module docstring). ``quiet``: what
    fails is left and the rest still goes; else OSError on the first step that fails."""
    try:
        st = os.stat(top, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(top, dir_fd=dir_fd)
        return
    fd = _enter(dir_fd, top, mend)
    try:
        chain = [(top, _ids(fd), _clear(fd, quiet))]  # top down: the current fd is chain[-1]'s
        while chain:
            name, _, pending = chain[-1]
            if pending:
                sub = pending.pop()
                try:
                    sfd = _enter(fd, sub, mend)
                except OSError:
                    if not quiet:
                        raise
                    continue
                os.close(fd)
                fd = sfd
                chain.append((sub, _ids(fd), _clear(fd, quiet)))
                continue
            chain.pop()
            parent = _up(fd, chain[-1][1]) if chain else dir_fd
            os.close(fd)
            fd = parent
            try:
                os.rmdir(name, dir_fd=parent)
            except OSError:
                if not quiet:
                    raise
    finally:
        if fd != dir_fd:
            os.close(fd)


def rmtree_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` inside ``dir_fd`` and everything below it, never following a symlink, at any depth.
    OSError on the first step that fails."""
    _remove_walk(dir_fd, name, quiet=False)


def remove_tree_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` in ``dir_fd`` and everything below it, by directory fds, never following a link, at any
    depth; quiet on errors (what fails is left, the rest still goes)."""
    try:
        _remove_walk(dir_fd, name, quiet=True)
    except OSError:
        pass


def remove_tree(path: str) -> None:
    """Remove the directory ``path`` and everything below it (:func:`remove_tree_at` from its parent); quiet on errors."""
    parent, name = os.path.split(os.path.normpath(path))
    try:
        pfd = os.open(parent or os.curdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        remove_tree_at(pfd, name)
    finally:
        os.close(pfd)


def rmtree_trash(trash_fd: int, top: str) -> None:
    """Delete ``top`` inside the trash, at any depth, without following a symlink: a directory we may not
    enter or change is made so first (it is ours, and going). Every step is relative to the trash's fd:
    nothing outside it can be reached. OSError on the first step that fails."""
    _remove_walk(trash_fd, top, quiet=False, mend=True)


def _went(op: Callable[..., object], *args: object, **kw: object) -> bool:
    """Whether ``op(*args, **kw)`` (an unlink or rmdir) succeeded; an OSError is a False, never raised."""
    try:
        op(*args, **kw)
        return True
    except OSError:
        return False


def remove_file(path: str) -> bool:
    """Unlink ``path`` (a symlink itself, never its target); False when it could not be (gone, or refused)."""
    return _went(os.unlink, path)


def remove_empty_dir(path: str) -> bool:
    """Remove the directory ``path`` when it is empty (rmdir never removes anything else); whether it went."""
    return _went(os.rmdir, path)


def remove_empty_dir_at(dir_fd: int, name: str) -> bool:
    """Remove the empty directory ``name`` in ``dir_fd``; False when it is not there, not empty or not a directory."""
    return _went(os.rmdir, name, dir_fd=dir_fd)
