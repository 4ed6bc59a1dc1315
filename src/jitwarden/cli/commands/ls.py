"""``jitwarden ls``: every cache entry, one row each (``--ids`` for ids only)."""

from __future__ import annotations

import fnmatch
import sys

from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.cli.commands import _common
from jitwarden.model.text import display


def register(sub) -> None:
    p = sub.add_parser(
        "ls",
        help="list cache entries of every kind",
        description="List the entries of every kind of kernel cache found (or of those named "
        "with --kind or PATH), with their status.",
    )
    options.add_scan_arguments(p)
    p.add_argument(
        "--ids", action="store_true", help="print entry ids only (paths with --long), one per line"
    )
    p.add_argument(
        "--code",
        action="append",
        metavar="CODE",
        help="only entries with this finding code (repeatable)",
    )
    p.add_argument("--name", metavar="GLOB", help="only entries whose kernel name matches GLOB")
    options.examples(
        p,
        "jitwarden ls --kind triton              Triton entries only",
        "jitwarden ls --code stale --ids         ids of stale entries, one per line",
        'jitwarden ls --name "*matmul*" --long   whole ids and paths',
    )
    p.set_defaults(func=run)


def select(report, codes=None, name=None):
    entries = report.entries
    if codes:
        entries = [e for e in entries if any(f.code in codes for f in e.findings)]
    if name:
        entries = [e for e in entries if e.name and fnmatch.fnmatchcase(e.name, name)]
    return entries


def run(args) -> int:
    _common.check_codes(args.code)
    fp = _common.fingerprint_or_none(
        args
    )  # also with --target: the judge needs the installed versions, GPU names, driver
    report = _common.run_scan(args, fp)
    entries = select(report, args.code, args.name)
    if args.ids:
        raw = not sys.stdout.isatty()  # ids for a pipe as they are; a terminal gets them escaped
        for e in entries:
            print((lambda x: x if raw else display(x))(e.path if args.long else e.id))
        return _common.unread_roots_status(report)
    out.output_format(args).result(
        "ls",
        lambda: out.scan_json(report, getattr(fp, "digest", None), entries),
        lambda: _print(report, entries, args.long, getattr(fp, "digest", None)),
    )
    return _common.unread_roots_status(report)


def _print(report, entries, long: bool, digest: str | None = None) -> None:
    con = out.console()
    if entries:
        con.print(out.entries_table(report, entries, long=long, current_digest=digest))
    else:
        con.print(out.text("no entries"))
    out.footer(con, out.text((out.summary_line(report, entries), "dim")))
