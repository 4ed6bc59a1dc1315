"""The one table builder: plain columns two spaces apart, every cell escaped at this boundary.

Cells become rich ``Text`` (never markup) after :func:`jitwarden.model.text.display`, so a
name like ``evil[/bold]`` or one holding an escape sequence prints as it is, harmless.
"""

from __future__ import annotations

from dataclasses import dataclass

from jitwarden.model.text import display


@dataclass(frozen=True, slots=True)
class Column:
    """A table column.

    ``right`` aligns numbers. A ``flex`` column gives up width on a narrow terminal, cut with ``…`` at its end
    (``cut="middle"``: in its middle, so a path keeps its last part, the ``*`` of this environment's partition
    included). A column with ``hide`` > 0 moves below its row, whole, when the row does not fit: the lowest
    ``hide`` first. A ``spill`` column (a kernel's name) gives up width like a flex one, but a cell cut there is
    also written whole below its row. Every other column (ids, status) is never cut. ``wrap``: last column only,
    gives up width and continues on following lines instead of being cut."""

    header: str
    right: bool = False
    flex: bool = False
    min: int = 8
    wrap: bool = False
    cut: str = "end"
    hide: int = 0
    spill: bool = False


@dataclass(frozen=True, slots=True)
class Row:
    """Cells (str or (str, style)) and detail lines printed below the row, indented, wrapped to the width."""

    cells: tuple
    details: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Layout:
    """How a grid fits a width: the columns shown in the row, each one's width, and whether every row fits."""

    shown: tuple[int, ...]
    widths: tuple[int, ...]
    fits: bool

    @property
    def hidden(self) -> bool:
        return bool(self.widths) and len(self.shown) < len(self.widths)


class Grid:
    """The one table builder: plain columns two spaces apart, every cell escaped at this boundary.

    A rich renderable: ``console.print(grid)``. At the console's width (a terminal), flex columns are cut
    first; when a row still does not fit, the ``hide`` columns move onto an indented line below their row,
    whole (``type: kernel · size: 26.6 KiB``), so ids, names and status are never cut or split (ARCHITECTURE.md,
    ``cli/render``). Details wrap on their own lines below the row. Piped (no width limit) nothing is cut,
    moved or wrapped: one line per row. A terminal too narrow even for the columns that stay gets the cells
    folded onto more lines (:meth:`folded`).
    """

    def __init__(self, columns, rows=()):
        self.columns = tuple(c if isinstance(c, Column) else Column(c) for c in columns)
        self.rows: list[Row] = []
        for r in rows:
            self.add(*r)

    def add(self, *cells, details=()) -> None:
        self.rows.append(
            Row(tuple(_cell(c) for c in cells), tuple(display(d) for d in details if d))
        )

    def _natural(self) -> list[int]:
        return [
            max([len(c.header)] + [len(r.cells[i][0]) for r in self.rows])
            for i, c in enumerate(self.columns)
        ]

    def _shrunk(self, shown: list[int], natural: list[int], width: int) -> tuple[list[int], bool]:
        ws = {i: natural[i] for i in shown}
        over = sum(ws.values()) + 2 * (len(shown) - 1) - width
        flex = [
            i
            for i in shown
            if self.columns[i].flex or self.columns[i].wrap or self.columns[i].spill
        ]
        while over > 0 and flex:
            i = max(
                flex, key=lambda j: ws[j]
            )  # the widest flex column gives first, one column at a time
            if ws[i] <= max(self.columns[i].min, len(self.columns[i].header)):
                flex.remove(i)
                continue
            ws[i] -= 1
            over -= 1
        return [ws.get(i, natural[i]) for i in range(len(self.columns))], over <= 0

    def layout(self, width: int | None) -> Layout:
        """The columns kept in the row and their widths at ``width`` (None: no limit, everything natural)."""
        natural = self._natural()
        shown = list(range(len(self.columns)))
        if width is None:
            return Layout(tuple(shown), tuple(natural), True)
        hideable = sorted((c.hide, i) for i, c in enumerate(self.columns) if c.hide > 0)
        while True:
            ws, ok = self._shrunk(shown, natural, width)
            if ok or not hideable:
                return Layout(tuple(shown), tuple(ws), ok)
            shown.remove(hideable.pop(0)[1])

    def widths(self, width: int | None) -> list[int]:
        return list(self.layout(width).widths)

    def lines(self, width: int | None):
        from rich.text import Text

        lay = self.layout(width)
        ws, shown = lay.widths, lay.shown
        moved = [i for i in range(len(self.columns)) if i not in shown]
        last = shown[-1] if shown else -1
        more: list[str] = []

        def cut(s: str, w: int, col: Column) -> str:
            if col.cut == "middle" and w > 4:
                head = max(
                    2, (w - 1) // 4
                )  # the tail says most: a partition's @digest and its * mark
                return s[:head] + "…" + s[len(s) - (w - 1 - head) :]
            return s[: max(0, w - 1)] + "…"

        def line(cells, header=False, spilt=None):
            t = Text(style="bold" if header else "")
            for i in shown:
                (s, style), w, col = cells[i], ws[i], self.columns[i]
                if len(s) > w and col.wrap and i == last:
                    chunks = _wrap(s, w, indent="")
                    s, more[:] = chunks[0], chunks[1:]
                elif len(s) > w:
                    if col.spill and spilt is not None:
                        spilt.append((col.header.lower(), (s, style)))
                    s = cut(s, w, col)
                pad = " " * (w - len(s))
                if i == last and not col.right:
                    pad = ""
                t.append((pad + s) if col.right else (s + pad), style=style)
                if i != last:
                    t.append("  ")
            return t

        yield line([(c.header, None) for c in self.columns], header=True)
        start = sum(ws[i] for i in shown[:-1]) + 2 * (len(shown) - 1)
        for r in self.rows:
            spilt: list = []
            yield line(r.cells, spilt=spilt)
            for chunk in more:
                yield Text(" " * start + chunk, style=r.cells[last][1] or "")
            more.clear()
            pieces = spilt + [
                self._moved(i, r.cells[i], width) for i in moved if r.cells[i][0] not in ("", "-")
            ]
            yield from _moved_lines(pieces, width)
            for d in r.details:
                for chunk in _wrap(d, width, indent="    "):
                    yield Text(chunk, style="dim")

    def _moved(self, i: int, cell, width: int | None):
        """(header, cell) of a cell moved below its row: whole, except that a flex column's cell (a root label)
        is cut as in the row when even its own line is too narrow for it."""
        col, (s, style) = self.columns[i], cell
        room = None if width is None else width - 6 - len(col.header)
        if col.flex and room is not None and len(s) > room > 4:
            head = max(2, (room - 1) // 4) if col.cut == "middle" else room - 1
            s = s[:head] + "…" + (s[len(s) - (room - 1 - head) :] if col.cut == "middle" else "")
        return col.header.lower(), (s, style)

    def fits(self, width: int | None) -> bool:
        """Whether cutting flex columns and moving ``hide`` columns below their row makes every row fit in ``width``."""
        return self.layout(width).fits

    def folded(self):
        """The table for a terminal too narrow for its whole columns (a wide table such as the canary's): a
        rich Table whose cells fold onto more lines, still plain Text, never markup; details below each row's
        last cell."""
        from rich.table import Table
        from rich.text import Text

        t = Table(box=None, pad_edge=False, header_style="bold")
        for c in self.columns:
            t.add_column(c.header, justify="right" if c.right else "left", overflow="fold")
        for r in self.rows:
            cells = [Text(s, style=style or "") for s, style in r.cells]
            for d in r.details:
                cells[-1].append("\n" + d, style="dim")
            t.add_row(*cells)
        return t

    def __rich_console__(self, console, options):
        width = options.max_width if console.is_terminal else None
        if not self.fits(width) and not any(c.hide for c in self.columns):
            yield self.folded()  # a table of whole columns only (the canary's): fold its cells
            return
        for t in self.lines(width):
            t.no_wrap, t.overflow = (
                True,
                "ignore",
            )  # a moved path longer than the terminal stays one line to copy
            yield t

    def plain(self, width: int | None = None) -> str:
        """The table as plain text (tests, transcripts)."""
        return "\n".join(t.plain for t in self.lines(width))


def _moved_lines(pieces, width: int | None):
    """The cells moved below a row, ``header: value`` joined by `` · ``, broken only between pieces: a piece
    (a path, an id) is never split, so it can be copied whole."""
    from rich.text import Text

    t, n = Text("    "), 4
    for k, (s, style) in pieces:
        piece = len(k) + 2 + len(s)
        if n > 4 and width is not None and n + 3 + piece > width:
            yield t
            t, n = Text("    "), 4
        if n > 4:
            t.append(" · ", style="dim")
            n += 3
        t.append(f"{k}: ", style="dim")
        t.append(s, style=style or "dim")
        n += piece
    if n > 4:
        yield t


def _cell(c):
    s, style = (c, None) if isinstance(c, str) or c is None else c
    return (display("-" if s is None else str(s)), style)


def _wrap(text_: str, width: int | None, indent: str) -> list[str]:
    if width is None or len(indent) + len(text_) <= width:
        return [indent + text_]
    import textwrap

    return textwrap.wrap(
        text_,
        width=max(len(indent) + 10, width),
        initial_indent=indent,
        subsequent_indent=indent + "  " if indent else "",
        break_on_hyphens=False,
        break_long_words=True,
    ) or [indent]
