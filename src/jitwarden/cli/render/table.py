"""The one table builder: plain columns two spaces apart, every cell escaped at this boundary.

Cells become rich ``Text`` (never markup) after :func:`jitwarden.model.text.display`, so a
name like ``evil[/bold]`` or one holding an escape sequence prints as it is, harmless.
"""

from __future__ import annotations

from dataclasses import dataclass

from jitwarden.model.text import display


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
    below the row; piped (no width limit) nothing is cut or wrapped. IDs are never cut. A
    terminal too narrow even for that gets the cells folded onto more lines (:meth:`folded`).
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

    def fits(self, width: int | None) -> bool:
        """Whether cutting flex columns (down to their minimum) makes every row fit in ``width``."""
        return width is None or sum(self.widths(width)) + 2 * (len(self.columns) - 1) <= width

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
        if not self.fits(width):
            yield self.folded()
            return
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

