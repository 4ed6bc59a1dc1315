"""``jitwarden export -o FILE``: one signed file of this environment's verified cache entries.

Only entries of this fingerprint's partitions, that pass ``verify`` (``--rebuild``: proven
by re-assembly first), and whose seal still holds go in. Exit 0 when the bundle was
written, 1 when nothing could be exported, 2 for a usage error.
"""

from __future__ import annotations

import os
import sys
import time

from jitwarden import __version__
from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.cli.commands import _common
from jitwarden.model import settings
from jitwarden.model.errors import EXIT_FINDINGS, EXIT_OK, UsageError, os_error_line
from jitwarden.model.findings import Severity
from jitwarden.model.text import human_size


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
    p.add_argument(
        "--kind",
        action="append",
        metavar="KIND",
        help="only these partitioned cache kinds (repeatable): triton, inductor, vllm, torch-ext",
    )
    p.add_argument(
        "--key",
        metavar="PATH",
        help=f"secret key (default: {settings.SIGNING_KEY.name}, else <config>/signing-key)",
    )
    p.add_argument(
        "--unsigned",
        action="store_true",
        help="write an unsigned bundle (import refuses it by default)",
    )
    options.add_format_argument(p)
    options.add_rebuild_arguments(p)
    p.set_defaults(func=run)


def select(report) -> tuple[list, list]:
    """(entries to export, [(entry, why not)]): anything with a finding at warn level or above stays home."""
    take, leave = [], []
    for e in report.entries:
        worst = max((f.severity for f in e.findings), default=None)
        if worst is not None and worst >= Severity.WARN:
            codes = sorted({f.code for f in e.findings if f.severity >= Severity.WARN})
            leave.append((e, "verify: " + ", ".join(codes)))
        elif e.kind == "triton" and not e.sealed:
            leave.append((e, "not sealed"))
        else:
            take.append(e)
    return take, leave


def run(args) -> int:
    from jitwarden.env.locations import PARTITION_VARS, default_base
    from jitwarden.model.entries import CacheRoot
    from jitwarden.ops import bundle, keys
    from jitwarden.ops import scan as scanner
    from jitwarden.store import partition

    kinds = _common.kinds_of(args) or bundle.PARTITIONED
    bad = [k for k in kinds if k not in bundle.PARTITIONED]
    if bad:
        raise UsageError(
            f"--kind {bad[0]}: only partitioned kinds can be exported ({', '.join(bundle.PARTITIONED)})"
        )
    req = _common.rebuild_request(args)
    orphans = _common.orphan_age(args)  # JITWARDEN_ORPHAN_AGE: export has no --orphan-age
    signer = None
    if not args.unsigned:
        path = keys.signing_key_path(args.key)
        try:
            signer = keys.load_signing_key(path)
        except keys.KeyTooOpen as exc:
            raise UsageError(str(exc)) from None
        except keys.KeyError_ as exc:
            raise UsageError(
                f"{exc} (make one with `jitwarden keygen`, or pass --unsigned)"
            ) from None
    _check_output(args.output)

    from jitwarden.env import fingerprint

    fp = fingerprint.collect()
    digest = fp.digest
    env = os.environ
    roots: list[tuple[CacheRoot, list[str] | None]] = []
    partitions = {}
    for kind, var in PARTITION_VARS:
        if kind not in kinds:
            continue
        cur = env.get(var)
        base = partition.base_of(cur) if cur else default_base(kind, env)
        pdir = partition.path_for(base, digest)
        if os.path.isdir(pdir) and not os.path.islink(pdir):
            roots.append(
                (
                    CacheRoot(
                        kind=kind, path=pdir, source="partition", partition=digest, base=base
                    ),
                    None,
                )
            )
            partitions[kind] = pdir
    target = _common.resolve_target(None, fp)
    judge = scanner.make_judge(target.arch, orphans, fp=fp)
    report = scanner.scan(roots, judge, target, expand=False)
    if req is not None:
        report = _common.rebuilt(report, req)
    take, leave = select(report)
    entries, skipped = [], [(e, why) for e, why in leave]
    for e in take:
        pdir = partitions[e.kind]
        rec = bundle.describe(e.kind, pdir, e.path, e.sealed)
        if isinstance(rec, str):
            skipped.append((e, rec))
        else:
            entries.append(rec)
    producer = {"jitwarden": __version__, **{p.name: p.version for p in fp.packages}}
    manifest = bundle.Manifest(digest, fp.to_json(), producer, time.time(), tuple(entries))
    try:
        size = bundle.write(args.output, manifest, partitions, signer) if entries else 0
    except (
        OSError
    ) as exc:  # the place changed since it was checked, a full or read-only disk: one line
        raise UsageError(_output_problem(args.output, exc)) from None
    doc = {
        "bundle": os.path.abspath(args.output) if entries else None,
        "digest": digest,
        "signed_by": signer.id if signer else None,
        "entries": len(entries),
        "bytes": sum(e.bytes for e in entries),
        "file_bytes": size,
        "skipped": [{"kind": e.kind, "path": e.path, "why": why} for e, why in skipped],
        "partitions": partitions,
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
    from jitwarden.store import fsutil

    try:
        os.close(fsutil.open_parent(path)[0])
    except OSError as exc:
        raise UsageError(_output_problem(path, exc)) from None


def _print(output: str, doc: dict, skipped, signer) -> None:
    for e, why in skipped:
        print(f"skipped {e.kind} {out.short_path(e.path)}: {why}", file=sys.stderr)
    if doc["entries"]:
        print(
            f"{output}: {doc['entries']} entries, {human_size(doc['bytes'])}, fingerprint {doc['digest']}, "
            + (f"signed by key {signer.id}" if signer else "UNSIGNED")
        )
    else:
        where = ", ".join(doc["partitions"].values()) or "no partition of this fingerprint exists"
        print(
            f"jitwarden: nothing to export for fingerprint {doc['digest']} ({where})",
            file=sys.stderr,
        )
