"""``jitwarden status``: the fingerprint's headline and every cache root with its health."""

from __future__ import annotations

from .. import report as out
from ..errors import EXIT_FINDINGS, EXIT_OK
from ..findings import Severity
from . import _common


def register(sub) -> None:
    p = sub.add_parser("status", help="fingerprint headline and cache health",
                       description="Show this environment's fingerprint headline and each cache root's health.")
    _common.add_scan_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    fp = _common.fingerprint_or_none()
    report = _common.run_scan(args, fp)
    if args.format == "json":
        doc = out.to_json(report, getattr(fp, "digest", None), "status", entries=[])
        doc["fingerprint"] = fp.to_json() if fp is not None else None
        out.print_json(doc)
    else:
        con = out.console()
        con.print(f"[bold]{fp.headline() if fp is not None else 'fingerprint unavailable'}[/bold]")
        if report.caches:
            digest = getattr(fp, "digest", None)
            con.print(out.caches_table(report, long=args.long, current_digest=digest))
            if any(c.root.partition == digest for c in report.caches):
                con.print("[dim]* this environment's partition; other partitions belong to other environments[/dim]")
        else:
            con.print("no kernel cache roots found")
        for c in report.caches:
            for f in c.findings:
                con.print(f"[bold red]{f.code}[/bold red] {out.cell(out.short_path(c.root.path))}: {out.cell(f.message)}")
        con.print(f"[dim]{out.summary_line(report)}[/dim]")
        if report.worst == Severity.ERROR:
            con.print("run [bold]jitwarden verify[/bold] for the entries at fault")
    return EXIT_FINDINGS if report.worst == Severity.ERROR else EXIT_OK
