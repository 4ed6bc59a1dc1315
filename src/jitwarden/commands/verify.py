"""``jitwarden verify``: judge every entry; ``--quick`` reads, ``--rebuild`` re-assembles.

Exit status: 0 when nothing is at error level, 1 otherwise (design.md section 3).
"""

from __future__ import annotations

import dataclasses

from .. import report as out
from ..errors import EXIT_FINDINGS, EXIT_OK
from ..findings import Severity
from . import _common

# Entries whose files are already known broken are not rebuilt: the finding says enough.
_NO_REBUILD = {"corrupt", "incomplete", "foreign-path", "unsafe"}


def register(sub) -> None:
    p = sub.add_parser("verify", help="check cache entries for damage and mismatches",
                       description="Check every cache entry; exit 1 when any finding is at error level.")
    _common.add_scan_arguments(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="structural checks only (default)")
    try:
        from .. import rebuild_args as rebuild
    except ImportError:
        rebuild = None
    if rebuild is not None:
        rebuild.add_arguments(p, mode)
    p.add_argument("--all", action="store_true", help="list every entry, not only those with findings")
    p.set_defaults(func=run)


def run(args) -> int:
    if getattr(args, "rebuild", False):
        from .. import rebuild

        rebuild.check_arguments(args)
    fp = _common.fingerprint_or_none()  # also with --target: the judge needs the installed versions, GPU names, driver
    report = _common.run_scan(args, fp)
    if getattr(args, "rebuild", False):
        report = _rebuild(report, args)
    from ..metrics import record_verify  # for `jitwarden metrics`: when verify last ran, what it found

    record_verify(report.summary())
    if args.format == "json":
        out.print_json(out.to_json(report, getattr(fp, "digest", None), "verify --rebuild" if getattr(args, "rebuild", False) else "verify --quick"))
    else:
        con = out.console()
        shown = report.entries if args.all else [
            e for e in report.entries if any(f.severity > Severity.INFO for f in report.findings_of(e))
        ]
        for c in report.caches:
            for f in c.findings:
                con.print(f"[bold red]{f.code}[/bold red] {out.cell(out.short_path(c.root.path))}: {out.cell(f.message)}")
            if c.error:
                con.print(f"[bold red]error[/bold red] {out.cell(c.error)}")
        if shown:
            con.print(out.entries_table(report, shown, long=args.long, details=True))
        con.print(f"[dim]{out.summary_line(report)}[/dim]")
    return EXIT_FINDINGS if report.worst == Severity.ERROR else EXIT_OK


def _rebuild(report, args):
    import time

    from .. import rebuild

    start = time.perf_counter()
    candidates = [
        e for e in report.entries
        if e.kind == "triton" and e.type == "kernel" and not any(f.code in _NO_REBUILD for f in e.findings)
    ]
    results = rebuild.verify_entries(
        candidates,
        jobs=args.jobs,
        extra_ptxas=args.ptxas or [],
        keep_dir=args.keep,
        progress=rebuild.progress_callback(len(candidates)),
    )
    extra = {path: r.findings for path, r in results.items()}
    return dataclasses.replace(report, extra=extra, elapsed=report.elapsed + time.perf_counter() - start)
