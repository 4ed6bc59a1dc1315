"""``jitwarden import FILE``: install a signed bundle's entries into this environment's partitions.

Checks the signature against the trusted keys, then compares the bundle's fingerprint with
this node's and says what differs; installs only when they match, every digest checked,
each entry staged, moved in by rename, then sealed. Made for an init container:

- 0: every entry installed or already present;
- 1: refused: unsigned, untrusted or bad signature, tampered or unsafe content (nothing installed),
  or an entry ``verify`` finds an error in (that entry refused, never sealed nor installed);
- 2: usage error (no such file, bad option);
- 4: a sound bundle built for another environment: nothing installed, the differences are printed.
"""

from __future__ import annotations

import errno

from jitwarden.cli import options
from jitwarden.cli.commands import _bundles
from jitwarden.model.errors import EXIT_FINDINGS, UsageError


def register(sub) -> None:
    p = sub.add_parser(
        "import",
        help="install a signed cache bundle made by `jitwarden export`",
        description="Check a bundle's signature and digests and install the entries built for this "
        "environment. Exit 0 installed, 1 refused, 2 usage, 4 built for another environment.",
    )
    p.add_argument("bundle", metavar="FILE")
    p.add_argument(
        "--allow-unsigned",
        action="store_true",
        help="install an unsigned bundle, or one whose signature is not trusted (digests are still checked)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="check everything and say what would be installed"
    )
    _bundles.add_all_or_nothing_argument(p)
    options.add_format_argument(p)
    options.examples(
        p,
        "jitwarden import kernels.tar.gz --dry-run   check the bundle, install nothing",
        "jitwarden import kernels.tar.gz             install what matches this environment",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from jitwarden.env import fingerprint
    from jitwarden.ops import bundle, bundle_install, keys

    trusted = keys.load_trusted()  # keys.KeyError_: a usage error, by the error table
    fp = fingerprint.of_host()
    refused, opened, tar = None, None, None
    try:
        tar, opened = bundle.open_bundle(args.bundle, trusted, args.allow_unsigned)
    except bundle.Unsigned as exc:
        refused = f"{exc} (pass --allow-unsigned to install it anyway)"
    except bundle.BundleRefused as exc:
        refused = str(exc)
    except keys.KeyError_ as exc:
        refused = str(exc)
    except OSError as exc:
        raise UsageError(_not_a_bundle_file(args.bundle, exc)) from None
    if refused is not None:
        rep = bundle_install.ImportReport(
            args.bundle, "", fp.digest, None, "", refused=refused, dry_run=args.dry_run
        )
        return _bundles.finish(rep, args, EXIT_FINDINGS)
    assert tar is not None  # open_bundle returned: every way it fails set refused or raised
    try:
        rep, code = _bundles.install(
            args.bundle, tar, opened, fp, args.dry_run, all_or_nothing=args.all_or_nothing
        )
        return _bundles.finish(rep, args, code)
    finally:
        tar.close()


def _not_a_bundle_file(path: str, exc: OSError) -> str:
    """One line for a bundle path that cannot be opened as a regular file (pure)."""
    if isinstance(exc, FileNotFoundError):
        return f"{path}: no such file"
    if exc.errno == errno.EINVAL or isinstance(
        exc, IsADirectoryError
    ):  # reads.NotRegularFile: a directory, a FIFO
        return f"{path}: {exc.strerror}; a bundle is the file `jitwarden export -o FILE` writes"
    return f"{path}: cannot read ({exc.strerror or exc})"
