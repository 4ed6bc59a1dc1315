"""Walking paths by directory fds (stdlib only; ARCHITECTURE.md, "Layers").

Below a cache root, a directory is reached one component at a time from the root's fd with
``O_NOFOLLOW`` (:func:`open_beneath`, :func:`reserved_dir`): a symlink anywhere on the way fails
instead of leading outside. A path a user named (``-o``, ``--textfile-dir``) is resolved as the
kernel does, missing parts made by fd (:func:`open_dir_path`, :func:`open_parent`). Names jitwarden
keeps in a root are checked to be what it made (:func:`unsafe_reserved`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Mapping, Sequence

from jitwarden.store.reads import kind_of

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | _O_NOFOLLOW
"""Flags that open a directory to list it and to open what it holds by ``dir_fd``: a symlink in its
place fails (ELOOP), so does anything but a directory (ENOTDIR, before it is opened: a FIFO cannot block)."""
_O_DIR = O_DIR_NOFOLLOW
_O_DIR_FOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class UnsafeName(OSError):
    """A name jitwarden reserves inside a cache root holds something jitwarden did not make.

    A symlink, a hard-linked file, another user's file or directory, a file where a directory
    belongs: acting through it could reach outside the root, so jitwarden refuses.
    """


def open_dir(path: str) -> int:
    """An fd of the cache root ``path``. The path a user names may be a symlink; a partition
    (``<base>/jitwarden-v1/<digest>``) is opened from its base, never through a symlink below it."""
    from jitwarden.model.layout import PARTITIONS_DIR

    parent, digest = os.path.split(os.path.normpath(path))
    if os.path.basename(parent) != PARTITIONS_DIR or digest in ("", os.curdir, os.pardir):
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    base_fd = os.open(
        os.path.dirname(parent) or os.curdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    )
    try:
        pfd = reserved_dir(base_fd, PARTITIONS_DIR)
        if pfd is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), parent)
        try:
            return os.open(digest, _O_DIR, dir_fd=pfd)
        finally:
            os.close(pfd)
    finally:
        os.close(base_fd)


def _why_not_ours(st: os.stat_result, want_dir: bool, owners: tuple[int, ...] = ()) -> str | None:
    """Why ``st`` is not a file or directory jitwarden made, or None. ``owners``: uids allowed besides ours
    (the root's owner: root cleaning a user's cache acts on what that user's jitwarden made)."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if want_dir and not stat.S_ISDIR(st.st_mode):
        return f"is {kind_of(st.st_mode) if not stat.S_ISREG(st.st_mode) else 'a file'}, not a directory"
    if not want_dir and not stat.S_ISREG(st.st_mode):
        return f"is {kind_of(st.st_mode)}, not a regular file"
    if not want_dir and st.st_nlink > 1:
        return f"is a file with {st.st_nlink} hard links"
    if st.st_uid != os.geteuid() and st.st_uid not in owners:
        return f"is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}) nor the root's owner"
    if want_dir and st.st_mode & 0o002 and not st.st_mode & 0o1000:
        return f"is world-writable (mode {st.st_mode & 0o7777:o})"
    return None


def unsafe_reserved(root_fd: int, names: Mapping[str, bool]) -> list[str]:
    """Sentences naming each of ``names`` (name -> True for a directory) in the root that jitwarden did not make.

    Absent names are fine; reads only.
    """
    out = []
    owners = (os.fstat(root_fd).st_uid,)
    for name, want_dir in names.items():
        try:
            st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError as exc:
            out.append(f"{name} cannot be examined: {(exc.strerror or str(exc)).lower()}")
            continue
        why = _why_not_ours(st, want_dir, owners)
        if why:
            if stat.S_ISLNK(st.st_mode):
                try:
                    why += f" (-> {os.readlink(name, dir_fd=root_fd)})"
                except OSError:
                    pass
            out.append(f"{name} {why}")
    return out


def reserved_dir(root_fd: int, name: str, create: bool = False) -> int | None:
    """An fd of the directory ``name`` that jitwarden keeps in a root; None when absent (and not ``create``).

    Never follows a symlink; raises :class:`UnsafeName` when ``name`` is not a directory
    jitwarden made (see :func:`unsafe_reserved`).
    """
    try:
        fd = _open_made(name, root_fd, _O_DIR, create)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        seen = unsafe_reserved(root_fd, {name: True}) or [f"{name} is not a directory"]
        raise UnsafeName(
            errno.EPERM, f"{seen[0]}; not what jitwarden made, refusing to use it"
        ) from None
    why = _why_not_ours(os.fstat(fd), True, (os.fstat(root_fd).st_uid,))
    if why:
        os.close(fd)
        raise UnsafeName(errno.EPERM, f"{name} {why}; not what jitwarden made, refusing to use it")
    return fd


def open_beneath(root_fd: int, rel: str, create: bool = False) -> int:
    """An fd of the directory ``rel`` below ``root_fd``, walked one component at a time, never through a symlink.

    ``rel`` must be relative and free of ``..``; ``create`` makes missing directories on the way.
    :class:`UnsafeName` (errno ELOOP or ENOTDIR, naming the component) when a component is a symlink
    or not a directory.
    """
    parts = [p for p in rel.split(os.sep) if p not in ("", os.curdir)]
    if os.path.isabs(rel) or os.pardir in parts:
        raise UnsafeName(errno.EPERM, f"{rel} is not a path inside the root", rel)

    def step(fd: int, _i: int, part: str) -> int:
        try:
            return _open_made(part, fd, _O_DIR, create)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            where = os.path.join(*parts[: parts.index(part) + 1])
            try:
                mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
                what = (
                    "a symlink"
                    if stat.S_ISLNK(mode)
                    else ("a file" if stat.S_ISREG(mode) else kind_of(mode))
                )
            except OSError:
                what = None
            why = f"{where} is {what}, not a directory" if what else f"{where} is not a directory"
            raise UnsafeName(exc.errno, f"{why}; refusing to go through it", where) from None

    return _descend(os.dup(root_fd), parts, step)


def inside(root: str, path: str) -> str | None:
    """``path`` relative to ``root`` when it is lexically inside it (not the root itself), else None (pure)."""
    rel = os.path.relpath(os.path.normpath(path), os.path.normpath(root))
    if rel in (os.curdir, os.pardir) or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
        return None
    return rel


def package_dir(name: str, path: Sequence[str] | None = None) -> str | None:
    """Directory of an installed top-level package, found without importing it: on ``path`` alone when given
    (another interpreter's ``sys.path``), else as this process's import would find it."""
    try:
        if path is None:
            import importlib.util

            spec = importlib.util.find_spec(name)
        else:
            from importlib.machinery import PathFinder

            spec = PathFinder.find_spec(name, list(path))
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for loc in spec.submodule_search_locations or ():
        return loc
    return os.path.dirname(spec.origin) if spec.origin else None


def memo_dir(env: Mapping[str, str] | None = None) -> str:
    """Where jitwarden keeps memos and private roots: ``$JITWARDEN_HOME``, else ``${XDG_CACHE_HOME:-~/.cache}/jitwarden``."""
    from jitwarden.model.settings import home_dir

    return home_dir(os.environ if env is None else env)


def fd_path(fd: int) -> str:
    """A path that resolves to exactly the open directory ``fd`` (``/proc/self/fd/N``), for an API that takes paths.

    Nothing swapped in along the path that led to the directory can redirect it. OSError when
    ``/proc`` is not mounted.
    """
    p = f"/proc/self/fd/{fd}"
    if not os.path.isdir(p):
        raise OSError(errno.ENOENT, "/proc/self/fd is not available", p)
    return p


def open_dir_path(path: str, *, create: bool = False, mode: int = 0o755) -> int:
    """An fd of the directory a user named (``-o``, ``--textfile-dir``, ``JITWARDEN_CONFIG_DIR``), resolved as the kernel does.

    The user's own symlinks are followed and ``..`` means the parent of what was reached (never
    collapsed beforehand, as ``abspath`` would). ``create``: missing components are made one at a
    time by fd, but only after the last ``..``: a directory the kernel would not reach is never
    made. OSError: ENOENT (missing, or missing before a ``..``), ENOTDIR (a file on the way).
    """
    if not path:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    parts = [p for p in path.split("/") if p not in ("", os.curdir)]
    last_up = max((i for i, p in enumerate(parts) if p == os.pardir), default=-1)

    def step(fd: int, i: int, part: str) -> int:
        if create and i > last_up:
            _make_dir(part, fd, mode)
        try:
            return os.open(part, _O_DIR_FOLLOW, dir_fd=fd)
        except OSError as exc:
            raise type(exc)(
                exc.errno,
                exc.strerror,
                "/".join(parts[: i + 1])
                if not path.startswith("/")
                else "/" + "/".join(parts[: i + 1]),
            ) from None

    return _descend(os.open("/" if path.startswith("/") else os.curdir, _O_DIR_FOLLOW), parts, step)


def open_parent(path: str, *, create: bool = False) -> tuple[int, str]:
    """(fd of the directory that holds ``path``, the last name) for writing ``path`` there by fd.

    OSError EISDIR when ``path`` names no file (ends with ``/``, ``.`` or ``..``) or names a
    directory (a symlink at the name is fine: it is replaced, never followed); the parent as in
    :func:`open_dir_path`.
    """
    head, name = os.path.split(path)
    if name in ("", os.curdir, os.pardir):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", path)
    fd = open_dir_path(head or os.curdir, create=create)
    try:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return fd, name
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", path)
        return fd, name
    except BaseException:
        os.close(fd)
        raise


def open_dir_at(name: str, *, dir_fd: int | None = None) -> int:
    """An fd of the directory ``name`` (inside ``dir_fd``), never through a symlink (ELOOP) nor onto a non-directory."""
    return os.open(name, O_DIR_NOFOLLOW, dir_fd=dir_fd)


def open_entry_dir(path: str) -> int:
    """An fd of the directory ``path``, opened from its parent without following a link at ``path`` itself.

    FileNotFoundError when it is absent; OSError (ELOOP, ENOTDIR) when it is a symlink or not a directory.
    """
    parent, name = os.path.split(path.rstrip(os.sep))
    pfd = os.open(parent or os.curdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return os.open(name, _O_DIR, dir_fd=pfd)
    finally:
        os.close(pfd)


def make_dir_at(dir_fd: int, name: str, mode: int = 0o755) -> int:
    """Make the new directory ``name`` in ``dir_fd`` (FileExistsError when anything is there); its fd."""
    os.mkdir(name, mode, dir_fd=dir_fd)
    return os.open(name, _O_DIR, dir_fd=dir_fd)


def nearest_existing(path: str) -> tuple[str, list[str]]:
    """(``path`` or its nearest ancestor there is, a link counting; the names below it still to be made, top down)."""
    top, missing = os.path.normpath(path), []
    while not os.path.lexists(top):
        top, part = os.path.split(top)
        missing.append(part)
        top = top or os.curdir
    return top, missing[::-1]


def make_dirs(path: str, mode: int = 0o777) -> None:
    """``path`` and its missing parents as directories (``mode`` less the umask for new ones; an existing
    one is fine); OSError otherwise."""
    os.makedirs(path, mode=mode, exist_ok=True)


def rename_at(src_dir_fd: int, src: str, dst_dir_fd: int, dst: str) -> None:
    """``rename(2)`` of ``src`` to ``dst`` by directory fds (onto nothing or an empty directory; never through a link)."""
    os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


def rename_path(src: str, dst: str) -> None:
    """``rename(2)`` of ``src`` to ``dst`` by their parent directories' fds (onto nothing or an empty directory)."""
    sp, sn = os.path.split(os.path.normpath(src))
    dp, dn = os.path.split(os.path.normpath(dst))
    sfd = os.open(sp or os.curdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        dfd = os.open(dp or os.curdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            rename_at(sfd, sn, dfd, dn)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)


def _open_made(name: str, dir_fd: int, flags: int, create: bool, mode: int = 0o755) -> int:
    """An fd of the directory ``name`` in ``dir_fd`` opened with ``flags``; ``create``: made first when missing."""
    if create:
        _make_dir(name, dir_fd, mode)
    return os.open(name, flags, dir_fd=dir_fd)


def _make_dir(name: str, dir_fd: int, mode: int) -> None:
    """The directory ``name`` in ``dir_fd``, made when nothing is there (anything already there is left as it is)."""
    try:
        os.mkdir(name, mode, dir_fd=dir_fd)
    except FileExistsError:
        pass


def _descend(fd: int, parts: list[str], step: Callable[[int, int, str], int]) -> int:
    """The directory fd reached from ``fd`` (taken over) through ``step(fd, i, part)`` for each of ``parts`` in
    turn (each opens the next one in ``fd``): every fd on the way is closed, the last one too on an error."""
    try:
        for i, part in enumerate(parts):
            nxt = step(fd, i, part)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def which(name: str, path: str | None) -> str | None:
    """``shutil.which(name, path=path)`` on POSIX (an executable regular file, a name with a ``/`` as it is, else
    the first on ``path``, this process's PATH when None), without importing shutil (bz2, lzma) on ``run``'s start; stats only."""

    def runnable(p: str) -> bool:
        return os.path.isfile(p) and os.access(p, os.X_OK)

    if os.path.dirname(name):
        return name if runnable(name) else None
    if path is None:
        path = os.environ.get("PATH", os.defpath)
    for d in path.split(os.pathsep):
        candidate = os.path.join(d, name)
        if runnable(candidate):
            return candidate
    return None
