"""``jitwarden ls``: every cache entry, one row each (``-q`` for ids only)."""

from __future__ import annotations

import fnmatch

from jitwarden.cli import render as out
from jitwarden.model.findings import CODES
from jitwarden.model.errors import UsageError
from jitwarden.cli.commands import _common


def register(sub) -> None:
    p = sub.add_parser("ls", help="list cache entries", description="List cache entries with their status.")
    _common.add_scan_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="print entry ids only (paths with --long), one per line")
    p.add_argument("--code", action="append", metavar="CODE", help="only entries with this finding code (repeatable)")
    p.add_argument("--name", metavar="GLOB", help="only entries whose kernel name matches GLOB")
    p.set_defaults(func=run)


def check_codes(codes) -> None:
    for c in codes or ():
        if c not in CODES:
            raise UsageError(f"unknown finding code {c!r} (one of: {', '.join(CODES)})")


def select(report, codes=None, name=None):
    entries = report.entries
    if codes:
        entries = [e for e in entries if any(f.code in codes for f in e.findings)]
    if name:
        entries = [e for e in entries if e.name and fnmatch.fnmatchcase(e.name, name)]
    return entries


def run(args) -> int:
    check_codes(args.code)
    fp = _common.fingerprint_or_none()  # also with --target: the judge needs the installed versions, GPU names, driver
    report = _common.run_scan(args, fp)
    entries = select(report, args.code, args.name)
    if args.quiet:
        import sys

        from jitwarden.model.text import display

        raw = not sys.stdout.isatty()  # ids for a pipe as they are; a terminal gets them escaped
        for e in entries:
            print((lambda x: x if raw else display(x))(e.path if args.long else e.id))
        return 0
    if args.format == "json":
        out.print_json(out.to_json(report, getattr(fp, "digest", None), "ls", entries))
        return 0
    con = out.console()
    if entries:
        con.print(out.entries_table(report, entries, long=args.long))
    else:
        con.print(out.text("no entries"))
    out.hanging(con, out.text((out.summary_line(report), "dim")))
    return 0
