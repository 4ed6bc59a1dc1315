"""``jitwarden keygen``: make an Ed25519 key pair for signing bundles and remote-cache values."""

from __future__ import annotations

import os
import stat
import sys

from jitwarden.cli import options
from jitwarden.model import settings
from jitwarden.model.errors import EXIT_OK, UsageError, os_error_line


def register(sub) -> None:
    p = sub.add_parser(
        "keygen",
        help="make a key pair for signed bundles and the remote cache",
        description="Write a secret signing key (mode 0600, for builders) and its public key "
        "(PATH.pub, for every node's trusted keys).",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        default=None,
        help=f"secret key file (default: {settings.SIGNING_KEY.name}, else <config>/signing-key)",
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing key")
    options.examples(
        p,
        "jitwarden keygen                  a signing key pair for bundles (secret + .pub)",
        "jitwarden keygen -o team.key      write it to team.key (team.key.pub for the nodes)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from jitwarden.ops import keys
    from jitwarden.store import atomic, paths

    path = keys.signing_key_path(args.output)
    pub = path + ".pub"
    secret, public, kid = keys.generate()  # keys.KeyError_: a usage error, by the error table
    try:  # the directory as the kernel resolves it: made by fd where missing, never through a collapsed '..'
        dir_fd, name = paths.open_parent(path, create=True)
    except OSError as exc:
        raise UsageError(_where_problem(path, exc, args.output is None)) from None
    try:
        for n in (name, name + ".pub"):
            try:
                st = os.stat(n, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            shown = path if n == name else pub
            if stat.S_ISDIR(st.st_mode):
                raise UsageError(
                    f"{shown} is a directory; name the key file to write (e.g. "
                    f"{os.path.join(shown, 'signing-key')})"
                )
            if not args.force:
                raise UsageError(f"{shown} already exists (pass --force to replace it)")
        try:
            atomic.write_atomic(dir_fd, name, secret.encode(), f".{name}.", mode=0o600)
            atomic.write_atomic(dir_fd, name + ".pub", public.encode(), f".{name}.pub.", mode=0o644)
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {(exc.strerror or str(exc)).lower()}") from None
    finally:
        os.close(dir_fd)
    print(pub)
    print(
        f"jitwarden: key {kid}: secret key {path} (keep it on builders only), public key {pub} "
        f"(put it in every node's {settings.TRUSTED_KEYS.name})",
        file=sys.stderr,
    )
    return EXIT_OK


def _where_problem(path: str, exc: OSError, default: bool) -> str:
    """One line for a key path whose directory cannot be reached or made (pure)."""
    where = exc.filename or os.path.dirname(path)
    how = f" (from {settings.SIGNING_KEY.name} or {settings.CONFIG_DIR.name})" if default else ""
    return os_error_line(
        exc,
        {
            IsADirectoryError: f"{path} is a directory; name the key file to write (e.g. {os.path.join(path, 'signing-key')})",
            NotADirectoryError: f"{where} is not a directory, so {path}{how} cannot be written",
            FileNotFoundError: f"{where}: no such directory, so {path}{how} cannot be written (a directory before '..' is not made)",
        },
        f"cannot write {path}{how}: {(exc.strerror or str(exc)).lower()} ({where})",
    )
