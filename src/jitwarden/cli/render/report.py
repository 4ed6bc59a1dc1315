"""Views of a scan report: its JSON body, the entries and caches tables, the summary line, short names.

JSON is a stable contract (``"schema": 1``, see :mod:`jitwarden.cli.render.output`): fields
are added, never repurposed.
"""

from __future__ import annotations

import os
import re
import time
from typing import TYPE_CHECKING

from jitwarden.cli.render.output import Streamed, list_items
from jitwarden.cli.render.table import Column, Grid
from jitwarden.model.entries import VERDICTS
from jitwarden.model.findings import Severity
from jitwarden.model.layout import PARTITIONS_DIR
from jitwarden.model.text import human_age, human_size, plural

if (
    TYPE_CHECKING
):  # building the CLI imports this module; the scanner is imported when a command runs
    from jitwarden.ops.scan import ScanReport, StreamedScan


def scan_json(report: ScanReport, fingerprint_digest: str | None, entries=None) -> dict:
    """The body of every scanning command's JSON (``entries``: those to list, default all)."""
    entries = report.entries if entries is None else entries
    return _scan_body(report, fingerprint_digest, [e.to_json() for e in entries])


def scan_json_streamed(
    report: StreamedScan, fingerprint_digest: str | None, entries: Streamed
) -> dict:
    """:func:`scan_json` of a streamed scan, whose ``entries`` :func:`entries_json` encoded chunk by chunk into a
    :class:`~jitwarden.cli.render.output.Streamed` list (written by ``JsonFormat.streamed_result``)."""
    return _scan_body(report, fingerprint_digest, entries)


def _scan_body(report, fingerprint_digest: str | None, entries) -> dict:
    return {
        "fingerprint_digest": fingerprint_digest,
        "target": report.target.to_json(),
        "environment": environment_json(report.judge),
        "caches": [c.to_json(fingerprint_digest) for c in report.caches],
        "entries": entries,
        "summary": report.summary(),
        "elapsed_s": round(report.elapsed, 3),
    }


def environment_json(judge) -> dict:
    """The environment a scan judged against (``environment`` in its JSON): the Python (``source``: ``--python``,
    ``JITWARDEN_PYTHON``, or ``self``, jitwarden's own) and the builds read from it."""
    import sys

    from jitwarden.env import interpreter

    other = interpreter.current()
    who = (
        other.to_json()
        if other is not None
        else {
            "python": sys.executable,
            "source": "self",
            "executable": sys.executable,
            "prefix": sys.prefix,
            "version": ".".join(map(str, sys.version_info[:3])),
        }
    )
    return {**who, "packages": dict(judge.versions)}


def environment_words(judge) -> str:
    """``Triton 3.6.0 of jitwarden's own Python`` or ``Triton 3.4.0 of /venv/bin/python (--python)``: what a
    verdict was made against, besides the GPU (pure over the judge and :mod:`jitwarden.env.interpreter`)."""
    from jitwarden.env import interpreter

    other = interpreter.current()
    triton = f"Triton {judge.triton_version}" if judge.triton_version else "no Triton"
    if other is None:
        return f"{triton} of jitwarden's own Python"
    return f"{triton} of {short_path(other.given)} ({other.source})"


def entries_json(indent: bool, codes: frozenset[str], entries) -> bytes:
    """The ``entries`` a scan's JSON lists (with ``codes``: only those with a finding of one of those codes),
    encoded as items of that list (:func:`~jitwarden.cli.render.output.list_items`): what a streamed scan
    emits where each chunk is judged (a worker process), so the entries never travel or wait whole."""
    if codes:
        entries = [e for e in entries if any(f.code in codes for f in e.findings)]
    return list_items([e.to_json() for e in entries], indent)


def short_path(path: str) -> str:
    """``path`` with the home directory as ``~``."""
    home = os.path.expanduser("~")
    return "~" + path[len(home) :] if home != "/" and path.startswith(home + os.sep) else path


def root_label(path: str, current: str | None = None) -> str:
    """A cache dir for a table: its real path (home as ``~``), so it can be copied; `` *`` after this
    environment's partition (``<base>/jitwarden-v1/<digest>``)."""
    m = re.search(rf"(?:^|/){re.escape(PARTITIONS_DIR)}/([0-9a-f]{{16}})$", path)
    return short_path(path) + (" *" if current and m and m.group(1) == current else "")


#: How each severity looks in tables and lines.
SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARN: "yellow", Severity.INFO: "dim"}


#: How each verdict (:data:`~jitwarden.model.entries.VERDICTS`) looks in the STATUS column.
VERDICT_STYLE = {"proven": "green", "sealed": "green", "unproven": "cyan"}


def status_cell(findings, verdict: str | None = None):
    """The STATUS cell: the worst severity's codes, styled; with no finding, the entry's verdict (``proven``,
    ``sealed``, ``unproven``: what vouches for it), or ``ok`` for an entry that holds no code."""
    if not findings:
        return (verdict, VERDICT_STYLE[verdict]) if verdict else ("ok", "green")
    worst = max(f.severity for f in findings)
    codes = list(dict.fromkeys(f.code for f in findings if f.severity == worst))
    return (", ".join(codes), SEVERITY_STYLE[worst])


def entries_table(
    report: ScanReport,
    entries,
    long: bool = False,
    details: bool = False,
    current_digest: str | None = None,
) -> Grid:
    """One row per entry; with ``details``, each finding's message on its own line below the row.

    KIND and ROOT columns appear when the entries come from more than one kind or root (one id can be in the
    stock cache and in a partition); ``--long``: the whole id, and the path, last (on a narrow terminal, on its
    own line below the row). On a narrow terminal ID and STATUS are never cut, a long NAME is written whole
    below its row, and TYPE, AGE, SIZE, ARCH, KIND and ROOT move below the row, in that order (:class:`Grid`)."""
    entries = list(entries)
    kinds = len({e.kind for e in entries}) > 1
    roots = len({e.root for e in entries}) > 1
    g = Grid(_entry_columns(kinds, roots, long))
    now = time.time()
    for e in entries:
        row = [e.kind] if kinds else []
        row += [root_label(e.root, current_digest)] if roots else []
        row += [
            e.id if long else short_id(e),
            e.name or "-",
            e.type,
            f"sm_{e.arch}" if e.arch else "-",
            human_size(e.bytes),
            human_age(e.mtime, now),
            status_cell(e.findings, e.verdict),
        ]
        row += [e.path] if long else []
        g.add(*row, details=_finding_lines(e.findings, long) if details else [])
    return g


def _entry_columns(kinds: bool, roots: bool, long: bool) -> list[Column]:
    """The entries table's columns: KIND and ROOT when several, PATH with ``--long``."""
    return (
        ([Column("KIND", hide=7)] if kinds else [])
        + ([Column("ROOT", flex=True, min=24, cut="middle", hide=8)] if roots else [])
        + [
            Column("ID"),
            Column("NAME", spill=True, min=14, hide=11 if long else 0),
            Column("TYPE", hide=2),
            Column("ARCH", right=True, hide=6),
            Column("SIZE", right=True, hide=5),
            Column("AGE", right=True, hide=3),
            Column("STATUS", hide=10 if long else 0),
        ]
        + ([Column("PATH", hide=1)] if long else [])
    )


def _finding_lines(fs, long: bool) -> list[str]:
    """The lines below an entry's row: each finding worth saying (above info, else all), and with
    ``--long`` a finding's whole evidence (a rebuild's every ptxas) below its one-line message."""
    worth = [f for f in fs if f.severity > Severity.INFO] or list(fs)
    return [
        line
        for f in worth
        for line in [f"{f.code}: {f.message}"] + ([f"  {f.detail}"] if long and f.detail else [])
    ]


def short_id(e) -> str:
    """An entry's id short enough for a table at 80 columns (``short_key`` of its id)."""
    return short_key(e.id)


def short_key(entry_id: str) -> str:
    """The first 12 characters of an entry id's last component (Triton's 52-character key, Inductor's
    ``fxgraph/ab/<key>``): what tables show, and what ``quarantine restore`` takes back as a prefix (pure)."""
    last = entry_id.rstrip("/").rsplit("/", 1)[-1] or entry_id
    return last if len(last) <= 14 else last[:12]


def caches_table(report: ScanReport, long: bool = False, current_digest: str | None = None) -> Grid:
    """One row per root, by its real path (a partition is ``<base>/jitwarden-v1/<digest>``, `` *`` marking this
    environment's; a root too long for the terminal is cut in its middle, so the digest and mark stay);
    ``--long``: full paths, and where each root came from (SOURCE)."""
    cols = [
        Column("KIND"),
        Column("ROOT", flex=not long, min=16, cut="middle", hide=9 if long else 0),
    ]
    if long:
        cols += [Column("SOURCE", hide=2), Column("PARTITION", hide=1)]
    g = Grid(
        cols
        + [
            Column("ENTRIES", right=True),
            Column("SIZE", right=True, hide=3),
            Column("ERR", right=True),
            Column("WARN", right=True),
            Column("QUAR", right=True, hide=4),
        ]
    )
    for c in report.caches:
        errs = warns = 0
        for e in c.entries:
            fs = e.findings
            sev = max((f.severity for f in fs), default=None)
            errs += sev == Severity.ERROR
            warns += sev == Severity.WARN
        errs += sum(f.severity == Severity.ERROR for f in c.findings)
        digest = c.root.partition
        mark = "*" if digest and digest == current_digest else ""
        if long:
            row = [c.root.kind, c.root.path, c.root.source, f"{digest}{mark}" if digest else "-"]
        else:
            row = [c.root.kind, root_label(c.root.path, current_digest)]
        g.add(
            *row,
            str(len(c.entries)),
            human_size(c.bytes),
            (str(errs), "bold red") if errs else "0",
            (str(warns), "yellow") if warns else "0",
            (str(c.quarantined), "yellow") if c.quarantined else "0",
        )
    return g


def print_overview(con, report: ScanReport, fp, digest: str | None, long: bool, empty: str) -> None:
    """The fingerprint's headline, then the caches table, or ``empty`` when no cache root was found."""
    from jitwarden.cli.render.console import text

    con.print(text((fp.headline() if fp is not None else "fingerprint unavailable", "bold")))
    if report.caches:
        print_caches(con, report, long=long, current_digest=digest)
    else:
        con.print(text(empty))


def print_caches(
    con, report: ScanReport, long: bool = False, current_digest: str | None = None
) -> None:
    """The caches table, and what ``jitwarden-v1/DIGEST`` means when a partition of this environment's is in it."""
    from jitwarden.cli.render.console import text

    con.print(caches_table(report, long=long, current_digest=current_digest))
    if any(c.root.partition == current_digest for c in report.caches):
        con.print(
            text(
                (
                    "jitwarden-v1/DIGEST: a partition (one environment's caches); * marks this "
                    "environment's",
                    "dim",
                )
            )
        )


def shown_summary(report: ScanReport, entries) -> dict:
    """``report.summary()`` over the ``entries`` a filter kept (``ls --name``, ``--code``): what the footer under
    them counts (pure; the one counting rule, :func:`jitwarden.ops.scan.tally`)."""
    from jitwarden.ops.scan import tally

    return tally(entries).summary()


def summary_line(report: ScanReport, entries=None) -> str:
    """The footer: entries, how many with errors and warnings, by code, what they were judged against. Given
    ``entries`` (those a filter kept), it counts those: ``4 of 36 entries shown · …``."""
    s = report.summary()
    if entries is not None and len(entries) != s["entries"]:
        total = s["entries"]
        s = shown_summary(report, entries)
        first = f"{s['entries']} of {plural(total, 'entry')} shown"
    else:
        first = plural(s["entries"], "entry")
    parts = [first, f"{s['errors']} with errors", f"{s['warnings']} with warnings"]
    codes = ", ".join(f"{k} {v}" for k, v in s["entries_by_code"].items())
    if codes:
        parts[-1] += f" (entries by code: {codes})"
    if any(s["verdicts"].values()):
        parts.append(verdicts_words(s["verdicts"]))
    tgt = report.target
    where = (
        f"judged against sm_{tgt.arch} ({tgt.source})"
        if tgt.arch
        else "no GPU and no --target: arch checks skipped"
    )
    env = environment_words(report.judge)
    where = f"{where} and {env}" if tgt.arch else f"{where} · judged against {env}"
    return f"{' · '.join(parts)} · {where} · {report.elapsed:.2f}s"


def verdicts_words(verdicts: dict) -> str:
    """``3 proven, 0 sealed, 264 unproven``: what vouches for the entries with no error (pure)."""
    return ", ".join(f"{verdicts[v]} {v}" for v in VERDICTS)
