"""``jitwarden verify``: judge every entry; ``--quick`` reads, ``--rebuild`` re-assembles.

Exit status: 0 when nothing is at error level, 1 otherwise.
"""

from __future__ import annotations

import dataclasses
import os

from jitwarden.cli import render as out
from jitwarden.model.errors import EXIT_FINDINGS, EXIT_OK, UsageError
from jitwarden.model.findings import Severity
from jitwarden.cli.commands import _common

# Entries whose files are already known broken are not rebuilt: the finding says enough.
_NO_REBUILD = {"corrupt", "incomplete", "foreign-path", "unsafe"}


def register(sub) -> None:
    p = sub.add_parser("verify", help="check cache entries for damage and mismatches",
                       description="Check every cache entry and list those with findings (--all: every entry); "
                                   "exit 1 when any finding is at error level.")
    _common.add_scan_arguments(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="structural checks only (default)")
    try:
        from jitwarden.cli import options as rebuild
    except ImportError:
        rebuild = None
    if rebuild is not None:
        rebuild.add_arguments(p, mode)
    p.add_argument("--all", action="store_true", help="list every entry, not only those with findings")
    p.add_argument("--code", action="append", metavar="CODE", help="only entries with this finding code (repeatable)")
    p.set_defaults(func=run)


def check_rebuild_options(args) -> None:
    """``--keep``, ``--ptxas`` and ``--jobs`` act only with ``--rebuild``: given without it, refuse (exit 2)
    rather than ignore them silently."""
    if getattr(args, "rebuild", False):
        return
    for opt, val in (("--keep", getattr(args, "keep", None)), ("--ptxas", getattr(args, "ptxas", None)),
                     ("--jobs", getattr(args, "jobs", None))):
        if val:
            raise UsageError(f"{opt} needs --rebuild (it only changes how kernels are rebuilt)")


def run(args) -> int:
    from jitwarden.cli.commands.ls import check_codes

    check_codes(args.code)
    check_rebuild_options(args)
    args.keep_existed = bool(getattr(args, "keep", None)) and os.path.lexists(args.keep)
    if getattr(args, "rebuild", False):
        from jitwarden.ops import rebuild

        rebuild.check_arguments(args)
    fp = _common.fingerprint_or_none()  # also with --target: the judge needs the installed versions, GPU names, driver
    report = _common.run_scan(args, fp)
    results: dict = {}
    if getattr(args, "rebuild", False):
        report = _rebuild(report, args, results)
    from jitwarden.ops.metrics import record_verify  # for `jitwarden metrics`: when verify last ran, what it found

    record_verify(report.summary())
    codes = set(args.code or ())
    if args.format == "json":
        entries = [e for e in report.entries if any(f.code in codes for f in e.findings)] if codes else None
        out.print_json(out.to_json(report, getattr(fp, "digest", None),
                                   "verify --rebuild" if getattr(args, "rebuild", False) else "verify --quick", entries))
    else:
        con = out.console()
        if codes:
            shown = [e for e in report.entries if any(f.code in codes for f in e.findings)]
        elif args.all:
            shown = report.entries
        else:
            shown = [e for e in report.entries if any(f.severity > Severity.INFO for f in e.findings)]
        for c in report.caches:
            for f in c.findings:
                con.print(out.text((f.code, "bold red"), " ", out.short_path(c.root.path), ": ", f.message))
            if c.error:
                con.print(out.text(("error", "bold red"), " ", c.error))
        if shown:
            con.print(out.entries_table(report, shown, long=args.long, details=True))
        if getattr(args, "rebuild", False):
            out.hanging(con, out.text((rebuild_summary(results), "dim")))
        out.hanging(con, out.text((out.summary_line(report), "dim")))
    return EXIT_FINDINGS if report.worst == Severity.ERROR else EXIT_OK


def rebuild_summary(results: dict) -> str:
    """``rebuilt 12 kernels: 11 verified (ptxas V12.8.93 ×11), 1 not-reproducible`` (pure)."""
    from jitwarden.model.text import plural

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
            parts.append(f"{n} verified (with " + ", ".join(f"{_tool(p)} ×{k}" for p, k in tools.items()) + ")")
        else:
            parts.append(f"{n} {verdict}")
    return f"rebuilt {plural(len(results), 'kernel')}: " + ", ".join(parts)


def _tool(path: str) -> str:
    """A ptxas path, short: ``…/triton/backends/nvidia/bin/ptxas`` for one inside an installed package."""
    marker = os.sep + "site-packages" + os.sep
    return "…/" + path.split(marker, 1)[1] if marker in path else out.short_path(path)


def _drop_empty_keep(args) -> None:
    """``--keep DIR`` that this run created and left empty (nothing differed) is removed again."""
    keep = getattr(args, "keep", None)
    if keep and getattr(args, "keep_existed", True) is False:
        try:
            os.rmdir(keep)
        except OSError:
            pass  # not empty (cubins kept) or not ours to remove


def _rebuild(report, args, results: dict | None = None):
    import time

    from jitwarden.ops import rebuild

    start = time.perf_counter()
    candidates = [
        e for e in report.entries
        if e.kind == "triton" and e.type == "kernel" and not any(f.code in _NO_REBUILD for f in e.findings)
    ]
    try:
        got = rebuild.verify_entries(
            candidates,
            jobs=args.jobs,
            extra_ptxas=args.ptxas or [],
            keep_dir=args.keep,
            progress=rebuild.progress_callback(len(candidates)),
        )
    finally:
        _drop_empty_keep(args)
    if results is not None:
        results.update(got)
    rebuilt = report.with_findings({path: r.findings for path, r in got.items()})
    return dataclasses.replace(rebuilt, elapsed=report.elapsed + time.perf_counter() - start)
