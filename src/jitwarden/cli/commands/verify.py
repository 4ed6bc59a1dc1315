"""``jitwarden verify``: judge every entry; ``--quick`` reads, ``--rebuild`` re-assembles.

Each entry with no error gets a verdict: ``proven``, ``sealed`` or ``unproven`` (docs/commands.md, "Verdicts").
Exit status: 0 when nothing is at error level (``--strict``: and no entry is unproven), 1 otherwise.
"""

from __future__ import annotations

import os

from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.cli.commands import _common
from jitwarden.model.findings import Severity
from jitwarden.model.text import plural


def register(sub) -> None:
    p = sub.add_parser(
        "verify",
        help="check cache entries for damage and mismatches",
        description="Check every cache entry and list those with findings (--all: every entry); "
        "exit 1 when any finding is at error level (--strict: or any entry is unproven).",
    )
    options.add_scan_arguments(p)
    options.add_strict_argument(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="structural checks only (default)")
    options.add_rebuild_arguments(p, mode)
    p.add_argument(
        "--all", action="store_true", help="list every entry, not only those with findings"
    )
    p.add_argument(
        "--code",
        action="append",
        metavar="CODE",
        help="only entries with this finding code (repeatable)",
    )
    options.examples(
        p,
        "jitwarden verify                         every cache found; exit 1 on an error-level finding",
        "jitwarden verify --rebuild -j 8         also re-assemble each kernel and compare",
        "jitwarden verify --format json > report.json || handle_it",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    _common.check_codes(args.code)
    req = _common.rebuild_request(args)
    fp = _common.fingerprint_or_none(
        args
    )  # also with --target: the judge needs the installed versions, GPU names, driver
    fmt = out.output_format(args)
    if req is None and fmt.streams:
        return _run_streamed(args, fp, fmt)
    report = _common.run_scan(args, fp)
    results: dict = {}
    if req is not None:
        report = _common.rebuilt(report, req, results)
    from jitwarden.ops.metrics import (
        record_verify,
    )  # for `jitwarden metrics`: when verify last ran, what it found

    record_verify(report.summary())
    codes = set(args.code or ())
    with_codes = (
        [e for e in report.entries if any(f.code in codes for f in e.findings)] if codes else None
    )
    fmt.result(
        "verify",
        lambda: {
            "mode": "rebuild" if req is not None else "quick",
            **out.scan_json(report, getattr(fp, "digest", None), with_codes),
        },
        lambda: _print(
            report,
            with_codes,
            args.all,
            args.long,
            results if req is not None else None,
            _common.unproven_note(report, args.strict, req is not None),
        ),
    )
    return _common.verdict_exit(report, args.strict)


def _run_streamed(args, fp, fmt) -> int:
    """``verify --quick`` in JSON: each chunk of entries is encoded where it was judged (a worker process) and
    set aside on disk in order (:class:`~jitwarden.store/tempdirs.Spill`), then written after the roots' totals,
    which the document puts first: the same bytes as the whole report gives, in memory flat in the number
    of entries (ARCHITECTURE.md, "The flow of one command")."""
    from functools import partial

    from jitwarden.ops.metrics import record_verify
    from jitwarden.store.tempdirs import Spill

    indent = out.indented(fmt.indent)
    emit = partial(out.entries_json, indent, frozenset(args.code or ()))
    with Spill() as spill:
        entries = out.Streamed(spill, indent)
        report = _common.run_scan(args, fp, emit=emit, sink=entries.add)
        record_verify(report.summary())
        fmt.streamed_result(
            "verify",
            {
                "mode": "quick",
                **out.scan_json_streamed(report, getattr(fp, "digest", None), entries),
            },
        )
    return _common.verdict_exit(report, args.strict)


def _print(
    report, with_codes, all_: bool, long: bool, results: dict | None, note: str | None
) -> None:
    con = out.console()
    if with_codes is not None:
        shown = with_codes
    elif all_:
        shown = report.entries
    else:
        shown = [e for e in report.entries if any(f.severity > Severity.INFO for f in e.findings)]
    for c in report.caches:
        for f in c.findings:
            con.print(
                out.text((f.code, "bold red"), " ", out.short_path(c.root.path), ": ", f.message)
            )
        if c.error and not any(f.code == "unreadable" for f in c.findings):
            con.print(out.text(("error", "bold red"), " ", c.error))
    if shown:
        con.print(out.entries_table(report, shown, long=long, details=True))
    if results is not None:
        out.footer(con, out.text((rebuild_summary(results), "dim")))
    out.footer(con, out.text((out.summary_line(report), "dim")))
    if note:
        out.footer(con, out.text((note, "dim")))


def rebuild_summary(results: dict) -> str:
    """``rebuilt 12 kernels: 11 verified (ptxas V12.8.93 ×11), 1 not-reproducible`` (pure)."""
    if not results:
        return "rebuilt 0 kernels: nothing to rebuild (no Triton kernel entry without a file-level error)"
    verdicts: dict[str, int] = {}
    tools: dict[str, int] = {}
    for r in results.values():
        verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
        if r.ptxas:
            tools[r.ptxas] = tools.get(r.ptxas, 0) + 1
    parts = []
    for verdict, n in verdicts.items():
        if verdict == "verified" and tools:
            parts.append(
                f"{n} verified (with "
                + ", ".join(f"{_tool(p)} ×{k}" for p, k in tools.items())
                + ")"
            )
        else:
            parts.append(f"{n} {verdict}")
    return f"rebuilt {plural(len(results), 'kernel')}: " + ", ".join(parts)


def _tool(path: str) -> str:
    """A ptxas path, short: ``…/triton/backends/nvidia/bin/ptxas`` for one inside an installed package."""
    marker = os.sep + "site-packages" + os.sep
    return "…/" + path.split(marker, 1)[1] if marker in path else out.short_path(path)
