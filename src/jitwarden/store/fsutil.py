"""The disk layer's names in one place, for callers written before it was split by concern (stdlib only).

Each concern has its own module, with one way to do its job (ARCHITECTURE.md, "Layers"):

- :mod:`~jitwarden.store.paths`: walking paths by directory fds (``O_NOFOLLOW``, one component at a time);
- :mod:`~jitwarden.store.reads`: bounded reads (``read_head``/``read_bytes``/``read_json``/``read_chunks``,
  ``digest_file``, ``stat_and_read``; EFBIG past a bound);
- :mod:`~jitwarden.store.atomic`: the one atomic writer (``O_EXCL`` temporary beside the target, ``fsync``,
  renamed by the directory's fd) and new files made exclusively;
- :mod:`~jitwarden.store.removal`: removing files and trees by fds, at any depth;
- :mod:`~jitwarden.store.tempdirs`: private temporary directories, in places only the caller can change;
- :mod:`~jitwarden.store.entrylock` and :mod:`~jitwarden.store.locks`: lock files and bounded waits.

New code imports from those modules. This module re-exports their public names unchanged, so code that
imports ``jitwarden.store.fsutil`` keeps working (one name per job: the old synonyms ``ensure_dir`` and
``private_tempdir`` are gone, their callers use ``make_dirs`` and ``private_dir``).
"""

from __future__ import annotations

from jitwarden.store.atomic import (
    NAME_MAX,
    AtomicWriter,
    create_new,
    temp_name,
    umask,
    write_atomic,
    write_bytes_atomic,
    write_json_atomic,
    write_new,
    write_new_file,
)
from jitwarden.store.entrylock import open_lock_file
from jitwarden.store.paths import (
    O_DIR_NOFOLLOW,
    UnsafeName,
    fd_path,
    inside,
    make_dir_at,
    make_dirs,
    memo_dir,
    open_beneath,
    open_dir,
    open_dir_at,
    open_dir_path,
    open_entry_dir,
    open_parent,
    package_dir,
    rename_at,
    rename_path,
    reserved_dir,
    unsafe_reserved,
)
from jitwarden.store.reads import (
    HASH_CHUNK,
    MAX_READ,
    NotPrivate,
    NotRegularFile,
    digest_file,
    kind_of,
    open_regular,
    open_regular_file,
    read_bytes,
    read_chunks,
    read_fd,
    read_head,
    read_json,
    read_own_json,
    read_private,
    stat_and_read,
    too_large,
    why_not_private,
)
from jitwarden.store.removal import (
    chmod_at,
    remove_empty_dir,
    remove_empty_dir_at,
    remove_file,
    remove_tree,
    remove_tree_at,
    rmtree_at,
    rmtree_trash,
)
from jitwarden.store.tempdirs import (
    Spill,
    make_private_dir,
    make_temp_dir,
    private_dir,
)

__all__ = [
    "HASH_CHUNK",
    "MAX_READ",
    "NAME_MAX",
    "O_DIR_NOFOLLOW",
    "AtomicWriter",
    "NotPrivate",
    "NotRegularFile",
    "Spill",
    "UnsafeName",
    "chmod_at",
    "create_new",
    "digest_file",
    "fd_path",
    "inside",
    "kind_of",
    "make_dir_at",
    "make_dirs",
    "make_private_dir",
    "make_temp_dir",
    "memo_dir",
    "open_beneath",
    "open_dir",
    "open_dir_at",
    "open_dir_path",
    "open_entry_dir",
    "open_lock_file",
    "open_parent",
    "open_regular",
    "open_regular_file",
    "package_dir",
    "private_dir",
    "read_bytes",
    "read_chunks",
    "read_fd",
    "read_head",
    "read_json",
    "read_own_json",
    "read_private",
    "remove_empty_dir",
    "remove_empty_dir_at",
    "remove_file",
    "remove_tree",
    "remove_tree_at",
    "rename_at",
    "rename_path",
    "reserved_dir",
    "rmtree_at",
    "rmtree_trash",
    "stat_and_read",
    "temp_name",
    "too_large",
    "umask",
    "unsafe_reserved",
    "why_not_private",
    "write_atomic",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_new",
    "write_new_file",
]
