"""Output formats for scan results: the versioned JSON contract and human tables.

JSON is a stable contract (``"schema": 1``): fields are added, never repurposed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jitwarden import __version__
from jitwarden.model.text import display, plural
from jitwarden.model.findings import Severity

if TYPE_CHECKING:  # building the CLI imports this module; the scanner is imported when a command runs
    from jitwarden.ops.scan import ScanReport

SCHEMA = 1


def tool() -> dict:
    return {"name": "jitwarden", "version": __version__}


def to_json(report: ScanReport, fingerprint_digest: str | None, command: str, entries=None) -> dict:
    entries = report.entries if entries is None else entries
    out_entries = [e.to_json() for e in entries]
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


def root_label(path: str, current: str | None = None) -> str:
    """A cache dir for a table: ``~`` for home, and a partition ``<base>/jitwarden-v1/<digest>`` as
    ``<base>/@<digest[:12]>`` (``*`` after this environment's)."""
    import re

    from jitwarden.model.layout import PARTITIONS_DIR

    def part(m):
        return f"{m.group(1)}@{m.group(2)[:12]}{'*' if current and m.group(2) == current else ''}"

    return re.sub(rf"(^|/){re.escape(PARTITIONS_DIR)}/([0-9a-f]{{16}})(?=/|$)", part, short_path(path))


def no_color(env=None) -> bool:
    """``NO_COLOR`` set to anything but the empty string (no-color.org): no escape sequence at all."""
    return bool((os.environ if env is None else env).get("NO_COLOR"))


def console(stderr: bool = False):
    """The one console every table and line goes through.

    On a terminal: its width, colours unless ``NO_COLOR`` (then no escape sequence at
    all, bold and dim included). Piped: no escapes and no wrapping, so whole rows reach
    grep and awk.
    """
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    kw = {"color_system": None} if no_color() else {}
    return Console(file=stream, highlight=False, emoji=False, markup=True, soft_wrap=not tty,
                   width=None if tty else 100_000, **kw)


def text(*parts):
    """A line from plain pieces: each a str (no style) or a (str, style) pair; names are escaped, never read as markup."""
    from rich.text import Text

    t = Text()
    for p in parts:
        s, style = (p, None) if isinstance(p, str) else p
        t.append(display(str(s)), style=style)
    return t


def hanging(con, line, indent: int = 4) -> None:
    """Print ``line`` (a Text); on a terminal, what does not fit wraps onto lines indented by ``indent``."""
    from rich.text import Text

    width = con.width
    if not con.is_terminal or len(line) <= width or width <= indent + 20:
        con.print(line)
        return
    cut = line.plain.rfind(" ", 0, width + 1)
    if cut <= width // 2:
        cut = width - 1
    first, rest = line.divide([cut + 1])
    first.rstrip()
    con.print(first)
    for chunk in rest.wrap(con, width - indent):
        con.print(Text(" " * indent).append_text(chunk))


@dataclass(frozen=True, slots=True)
class Column:
    """A table column: ``right`` aligns numbers; a ``flex`` column gives up width (cut with …) on a narrow terminal."""

    header: str
    right: bool = False
    flex: bool = False
    min: int = 8
    wrap: bool = False  # last column only: give up width, and continue on following lines instead of cutting


@dataclass(frozen=True, slots=True)
class Row:
    """Cells (str or (str, style)) and detail lines printed below the row, indented, wrapped to the width."""

    cells: tuple
    details: tuple[str, ...] = ()


class Grid:
    """The one table builder: plain columns two spaces apart, every cell escaped at this boundary.

    A rich renderable: ``console.print(grid)``. At the console's width (a terminal), flex
    columns are cut so that each row fits on one line, and details wrap on their own lines
    below the row; piped (no width limit) nothing is cut or wrapped. IDs are never cut.
    """

    def __init__(self, columns, rows=()):
        self.columns = tuple(c if isinstance(c, Column) else Column(c) for c in columns)
        self.rows: list[Row] = []
        for r in rows:
            self.add(*r)

    def add(self, *cells, details=()) -> None:
        self.rows.append(Row(tuple(_cell(c) for c in cells), tuple(display(d) for d in details if d)))

    def widths(self, width: int | None) -> list[int]:
        natural = [max([len(c.header)] + [len(r.cells[i][0]) for r in self.rows]) for i, c in enumerate(self.columns)]
        if width is None:
            return natural
        ws = list(natural)
        over = sum(ws) + 2 * (len(ws) - 1) - width
        flex = [i for i, c in enumerate(self.columns) if c.flex or c.wrap]
        while over > 0 and flex:
            i = max(flex, key=lambda j: ws[j])  # the widest flex column gives first, one column at a time
            if ws[i] <= max(self.columns[i].min, len(self.columns[i].header)):
                flex.remove(i)
                continue
            ws[i] -= 1
            over -= 1
        return ws

    def lines(self, width: int | None):
        from rich.text import Text

        ws = self.widths(width)
        last = len(ws) - 1

        more: list[str] = []

        def line(cells, header=False):
            t = Text(style="bold" if header else "")
            for i, ((s, style), w, col) in enumerate(zip(cells, ws, self.columns)):
                if len(s) > w and col.wrap and i == last:
                    chunks = _wrap(s, w, indent="")
                    s, more[:] = chunks[0], chunks[1:]
                elif len(s) > w:
                    s = s[: max(0, w - 1)] + "…"
                pad = " " * (w - len(s))
                if i == last and not col.right:
                    pad = ""
                t.append((pad + s) if col.right else (s + pad), style=style)
                if i != last:
                    t.append("  ")
            return t

        yield line([(c.header, None) for c in self.columns], header=True)
        start = sum(ws[:-1]) + 2 * last
        for r in self.rows:
            yield line(r.cells)
            for chunk in more:
                yield Text(" " * start + chunk, style=r.cells[-1][1] or "")
            more.clear()
            for d in r.details:
                for chunk in _wrap(d, width, indent="    "):
                    yield Text(chunk, style="dim")

    def __rich_console__(self, console, options):
        width = options.max_width if console.is_terminal else None
        yield from self.lines(width)

    def plain(self, width: int | None = None) -> str:
        """The table as plain text (tests, transcripts)."""
        return "\n".join(t.plain for t in self.lines(width))


def _cell(c):
    s, style = (c, None) if isinstance(c, str) or c is None else c
    return (display("-" if s is None else str(s)), style)


def _wrap(text_: str, width: int | None, indent: str) -> list[str]:
    if width is None or len(indent) + len(text_) <= width:
        return [indent + text_]
    import textwrap

    return textwrap.wrap(text_, width=max(len(indent) + 10, width), initial_indent=indent,
                         subsequent_indent=indent + "  " if indent else "", break_on_hyphens=False,
                         break_long_words=True) or [indent]


def cell(text) -> str:
    """Text from a cache (names, paths, messages) as a table cell: control characters escaped, markup inert."""
    from rich.markup import escape

    from jitwarden.model.text import display

    return escape(display(str(text)))


_STYLE = {Severity.ERROR: "bold red", Severity.WARN: "yellow", Severity.INFO: "dim"}


def status_cell(findings):
    """The STATUS cell: ``ok``, or the worst severity's codes, styled."""
    if not findings:
        return ("ok", "green")
    worst = max(f.severity for f in findings)
    codes = list(dict.fromkeys(f.code for f in findings if f.severity == worst))
    return (", ".join(codes), _STYLE[worst])


def entries_table(report: ScanReport, entries, long: bool = False, details: bool = False) -> Grid:
    """One row per entry; with ``details``, each finding's message on its own line below the row."""
    entries = list(entries)
    kinds = len({e.kind for e in entries}) > 1
    cols = ([Column("KIND")] if kinds else []) + [
        Column("ID", flex=long), Column("NAME", flex=True, min=10), Column("TYPE", flex=True, min=6),
        Column("ARCH", right=True), Column("SIZE", right=True), Column("AGE", right=True), Column("STATUS", flex=True, min=8)]
    g = Grid(cols)
    now = time.time()
    for e in entries:
        fs = e.findings
        row = [e.kind] if kinds else []
        row += [e.path if long else short_id(e), e.name or "-", e.type, f"sm_{e.arch}" if e.arch else "-",
                human_bytes(e.bytes), human_age(e.mtime, now), status_cell(fs)]
        shown = ()
        if details:
            shown = [f for f in fs if f.severity > Severity.INFO] or list(fs)
            shown = [f"{f.code}: {f.message}" for f in shown]
        g.add(*row, details=shown)
    return g


def short_id(e) -> str:
    """An entry's id short enough for a table at 80 columns (``short_key`` of its id)."""
    return short_key(e.id)


def short_key(entry_id: str) -> str:
    """The first 12 characters of an entry id's last component (Triton's 52-character key, Inductor's
    ``fxgraph/ab/<key>``): what tables show, and what ``quarantine restore`` takes back as a prefix (pure)."""
    last = entry_id.rstrip("/").rsplit("/", 1)[-1] or entry_id
    return last if len(last) <= 14 else last[:12]


def caches_table(report: ScanReport, long: bool = False, current_digest: str | None = None) -> Grid:
    """One row per root. A partition shows as ``<base>/@<digest>``, ``*`` marking this environment's;
    ``--long``: full paths, and where each root came from (SOURCE)."""
    cols = [Column("KIND"), Column("ROOT", flex=not long, min=16)]
    if long:
        cols += [Column("SOURCE"), Column("PARTITION")]
    g = Grid(cols + [Column("ENTRIES", right=True), Column("SIZE", right=True), Column("ERR", right=True),
                     Column("WARN", right=True), Column("QUAR", right=True)])
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
        g.add(*row, str(len(c.entries)), human_bytes(c.bytes),
              (str(errs), "bold red") if errs else "0", (str(warns), "yellow") if warns else "0",
              (str(c.quarantined), "yellow") if c.quarantined else "0")
    return g


def summary_line(report: ScanReport) -> str:
    s = report.summary()
    parts = [plural(s["entries"], "entry"), f"{s['errors']} with errors", f"{s['warnings']} with warnings"]
    codes = ", ".join(f"{k} {v}" for k, v in s["by_code"].items())
    tgt = report.target
    where = f"judged against sm_{tgt.arch} ({tgt.source})" if tgt.arch else "no GPU and no --target: arch checks skipped"
    return f"{' · '.join(parts)}{' (' + codes + ')' if codes else ''} · {where} · {report.elapsed:.2f}s"
