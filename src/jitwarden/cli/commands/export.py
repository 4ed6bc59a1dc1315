"""``jitwarden export -o FILE``: one signed file of this environment's verified cache entries.

Only entries of this fingerprint's partitions, that pass ``verify`` (``--rebuild``: proven
by re-assembly first), and whose seal still holds go in. Exit 0 when the bundle was
written, 1 when nothing could be exported, 2 for a usage error.
"""

from __future__ import annotations

import os
import sys

from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.cli.commands import _bundles, _common
from jitwarden.model.errors import EXIT_FINDINGS, EXIT_OK, UsageError, os_error_line
from jitwarden.model.text import human_size, plural


def register(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a signed bundle of this environment's verified cache entries",
        description="Write one file (tar + signed manifest) of this fingerprint's sealed entries "
        "that pass verify, for `jitwarden import` on other nodes.",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE",
        help="the bundle to write (.gz: compressed)",
    )
    _bundles.add_bundle_arguments(p, "write an unsigned bundle (import refuses it by default)")
    options.add_format_argument(p)
    options.add_rebuild_arguments(p)
    options.examples(
        p,
        "jitwarden export -o kernels.tar.gz            sealed entries that pass verify, signed",
        "jitwarden export -o kernels.tar --rebuild      each kernel proven by a rebuild first",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from jitwarden.ops import bundle

    kinds = _bundles.kinds(args)
    req = _common.rebuild_request(args)
    signer = _bundles.load_signer(args.key, args.unsigned)
    _check_output(args.output)
    got = _bundles.bundle_contents(
        kinds, req, _common.orphan_age(args)
    )  # JITWARDEN_ORPHAN_AGE: no --orphan-age here
    entries, skipped = got.manifest.entries, got.skipped
    try:
        size = bundle.write(args.output, got.manifest, got.partitions, signer) if entries else 0
    except (
        OSError
    ) as exc:  # the place changed since it was checked, a full or read-only disk: one line
        raise UsageError(_output_problem(args.output, exc)) from None
    doc = {
        "bundle": os.path.abspath(args.output) if entries else None,
        "digest": got.manifest.digest,
        "signed_by": signer.id if signer else None,
        "entries": len(entries),
        "bytes": sum(e.bytes for e in entries),
        "file_bytes": size,
        "skipped": [{"kind": e.kind, "path": e.path, "why": why} for e, why in skipped],
        "partitions": got.partitions,
    }
    out.output_format(args).result(
        "export", lambda: doc, lambda: _print(args.output, doc, skipped, signer)
    )
    return EXIT_OK if entries else EXIT_FINDINGS


def _output_problem(path: str, exc: OSError) -> str:
    """One line for an output path that cannot be written (pure)."""
    where = exc.filename or os.path.dirname(path)
    return os_error_line(
        exc,
        {
            IsADirectoryError: f"{path}: is a directory; name the bundle file to write (e.g. {os.path.join(path, 'cache.tar')})",
            FileNotFoundError: f"{path}: directory {where} does not exist",
            NotADirectoryError: f"{path}: {where} is not a directory",
        },
        f"{path}: cannot write ({exc.strerror or exc})",
    )


def _check_output(path: str) -> None:
    """UsageError (exit 2, one line) before any work when ``path`` cannot be where the bundle goes."""
    from jitwarden.store import paths

    try:
        os.close(paths.open_parent(path)[0])
    except OSError as exc:
        raise UsageError(_output_problem(path, exc)) from None


def _print(output: str, doc: dict, skipped, signer) -> None:
    _bundles.print_skipped(skipped)
    if doc["entries"]:
        print(
            f"{output}: {plural(doc['entries'], 'entry')}, {human_size(doc['bytes'])}, fingerprint {doc['digest']}, "
            + (f"signed by key {signer.id}" if signer else "UNSIGNED")
        )
    else:
        where = ", ".join(doc["partitions"].values()) or "no partition of this fingerprint exists"
        print(
            f"jitwarden: nothing to export for fingerprint {doc['digest']} ({where})",
            file=sys.stderr,
        )
