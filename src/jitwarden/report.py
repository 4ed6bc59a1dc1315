"""Output formats for scan results: the versioned JSON contract and human tables.

JSON is a stable contract (``"schema": 1``): fields are added, never repurposed.
"""

from __future__ import annotations

import json
import os
import sys
import time

from typing import TYPE_CHECKING

from . import __version__
from .findings import Severity

if TYPE_CHECKING:  # building the CLI imports this module; the scanner is imported when a command runs
    from .scan import ScanReport

SCHEMA = 1


def tool() -> dict:
    return {"name": "jitwarden", "version": __version__}


def to_json(report: ScanReport, fingerprint_digest: str | None, command: str, entries=None) -> dict:
    entries = report.entries if entries is None else entries
    out_entries = []
    for e in entries:
        d = e.to_json()
        d["findings"] = [f.to_json() for f in report.findings_of(e)]
        out_entries.append(d)
    return {
        "schema": SCHEMA,
        "tool": tool(),
        "command": command,
        "fingerprint_digest": fingerprint_digest,
        "target": report.target.to_json(),
        "caches": [c.to_json(fingerprint_digest) for c in report.caches],
        "entries": out_entries,
        "summary": report.summary(),
        "elapsed_s": round(report.elapsed, 3),
    }


def print_json(doc: dict) -> None:
    # Indented for a person at a terminal; compact (C encoder, ~3x faster) for pipes and files.
    if sys.stdout.isatty():
        sys.stdout.write(json.dumps(doc, indent=2))
    else:
        sys.stdout.write(json.dumps(doc, separators=(",", ":")))
    sys.stdout.write("\n")


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def human_age(mtime: float, now: float | None = None) -> str:
    if not mtime:
        return "-"
    s = max(0, (now or time.time()) - mtime)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{int(s // size)}{unit}"
    return f"{int(s)}s"


def short_path(path: str) -> str:
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if home != "/" and path.startswith(home + os.sep) else path


def console():
    from rich.console import Console

    # Piped output keeps whole rows (grep/awk-friendly) instead of wrapping at 80 columns.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 250)


def cell(text) -> str:
    """Text from a cache (names, paths, messages) as a table cell: control characters escaped, markup inert."""
    from rich.markup import escape

    from .ages import display

    return escape(display(str(text)))


_STYLE = {Severity.ERROR: "bold red", Severity.WARN: "yellow", Severity.INFO: "dim"}


def status_cell(findings) -> str:
    if not findings:
        return "[green]ok[/green]"
    worst = max(f.severity for f in findings)
    codes = list(dict.fromkeys(f.code for f in findings if f.severity == worst))
    return f"[{_STYLE[worst]}]{', '.join(codes)}[/{_STYLE[worst]}]"


def entries_table(report: ScanReport, entries, long: bool = False, details: bool = False):
    from rich.table import Table

    t = Table(box=None, pad_edge=False, header_style="bold")
    entries = list(entries)
    kinds = len({e.kind for e in entries}) > 1
    if kinds:
        t.add_column("KIND")
    t.add_column("ID")
    t.add_column("NAME")
    t.add_column("TYPE")
    t.add_column("ARCH", justify="right")
    t.add_column("SIZE", justify="right")
    t.add_column("AGE", justify="right")
    t.add_column("STATUS")
    if details:
        t.add_column("DETAILS", overflow="fold")
    now = time.time()
    for e in entries:
        fs = report.findings_of(e)
        row = [cell(e.kind)] if kinds else []
        row += [
            cell(e.path if long else short_id(e)),
            cell(e.name or "-"),
            cell(e.type),
            f"sm_{e.arch}" if e.arch else "-",
            human_bytes(e.bytes),
            human_age(e.mtime, now),
            status_cell(fs),
        ]
        if details:
            shown = [f for f in fs if f.severity > Severity.INFO] or list(fs)
            row.append(cell("; ".join(f.message for f in shown)))
        t.add_row(*row)
    return t


def short_id(e) -> str:
    """An entry id short enough for a table: Triton's 52-character keys cut to 12, paths to their tail."""
    if e.kind == "triton":
        return e.id[:12]
    return e.id if len(e.id) <= 40 else "…" + e.id[-39:]


def caches_table(report: ScanReport, long: bool = False, current_digest: str | None = None):
    """One row per root; a partition of this environment's fingerprint is marked ``*``."""
    from rich.table import Table

    t = Table(box=None, pad_edge=False, header_style="bold")
    numeric = ("ENTRIES", "SIZE", "ERRORS", "WARNINGS", "QUARANTINED")
    for col in ("KIND", "ROOT", "SOURCE", "PARTITION") + numeric:
        t.add_column(col, justify="right" if col in numeric else "left")
    for c in report.caches:
        errs = warns = 0
        for e in c.entries:
            fs = report.findings_of(e)
            sev = max((f.severity for f in fs), default=None)
            errs += sev == Severity.ERROR
            warns += sev == Severity.WARN
        errs += sum(f.severity == Severity.ERROR for f in c.findings)
        t.add_row(
            cell(c.root.kind),
            cell(c.root.path if long else short_path(c.root.path)),
            cell(c.root.source),
            "-" if not c.root.partition else c.root.partition[:12] + ("*" if c.root.partition == current_digest else ""),
            str(len(c.entries)),
            human_bytes(c.bytes),
            f"[bold red]{errs}[/bold red]" if errs else "0",
            f"[yellow]{warns}[/yellow]" if warns else "0",
            f"[yellow]{c.quarantined}[/yellow]" if c.quarantined else "0",
        )
    return t


def summary_line(report: ScanReport) -> str:
    s = report.summary()
    parts = [f"{s['entries']} entries", f"{s['errors']} with errors", f"{s['warnings']} with warnings"]
    codes = ", ".join(f"{k} {v}" for k, v in s["by_code"].items())
    tgt = report.target
    where = f"judged against sm_{tgt.arch} ({tgt.source})" if tgt.arch else "no GPU and no --target: arch checks skipped"
    return f"{' · '.join(parts)}{' (' + codes + ')' if codes else ''} · {where} · {report.elapsed:.2f}s"
