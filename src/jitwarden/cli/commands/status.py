"""``jitwarden status``: the fingerprint's headline and every cache root with its health."""

from __future__ import annotations

from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.cli.commands import _common
from jitwarden.model.errors import EXIT_FINDINGS, EXIT_OK
from jitwarden.model.findings import Severity


def register(sub) -> None:
    p = sub.add_parser(
        "status",
        help="fingerprint headline and cache health",
        description="Show this environment's fingerprint headline and each cache root's health.",
    )
    options.add_scan_arguments(p)
    options.examples(
        p,
        "jitwarden status                    headline and each root's health",
        "jitwarden status --format json      the same for a program (exit 1 on errors)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    fp = _common.fingerprint_or_none(args)
    report = _common.run_scan(args, fp)
    notes = _common.protection_lines(report)
    digest = getattr(fp, "digest", None)

    def body() -> dict:
        return {
            **out.scan_json(report, digest, entries=[]),
            "fingerprint": fp.to_json() if fp is not None else None,
            "protection": notes,
        }

    out.output_format(args).result(
        "status", body, lambda: _print(report, fp, digest, notes, args.long)
    )
    return EXIT_FINDINGS if report.worst == Severity.ERROR else EXIT_OK


def _print(report, fp, digest, notes, long: bool) -> None:
    con = out.console()
    out.print_overview(con, report, fp, digest, long, "no kernel cache roots found")
    for c in report.caches:
        for f in c.findings:
            con.print(
                out.text((f.code, "bold red"), " ", out.short_path(c.root.path), ": ", f.message)
            )
    out.footer(con, out.text((out.summary_line(report), "dim")))
    for n in notes:
        head = "reduced protection" if n["kind"] == "reduced-protection" else "leftover trash"
        what = n["what"] if n["kind"] == "reduced-protection" else out.short_path(n["what"])
        con.print(out.text((head, "yellow"), " ", what, ": ", n["why"]))
        con.print(out.text("    fix: ", (n["fix"], "bold")))
    if report.worst == Severity.ERROR:
        con.print(out.text("run ", ("jitwarden verify", "bold"), " for the entries at fault"))
