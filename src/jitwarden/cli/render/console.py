"""The one console every table and line goes through, and lines built from plain pieces.

Markup is off on this console: nothing a cache holds (a name, a path, a message) is ever
read as rich markup, so nothing needs escaping for rich; :func:`text` still escapes
control characters and undecodable bytes (:func:`jitwarden.model.text.display`).
"""

from __future__ import annotations

import os
import sys

from jitwarden.model.text import display


def no_color(env=None) -> bool:
    """``NO_COLOR`` set to anything but the empty string (no-color.org): no escape sequence at all."""
    return bool((os.environ if env is None else env).get("NO_COLOR"))


def console(stderr: bool = False):
    """The console for stdout (or stderr).

    On a terminal: its width, colours unless ``NO_COLOR`` (then no escape sequence at
    all, bold and dim included). Piped: no escapes and no wrapping, so whole rows reach
    grep and awk. Markup is off: styles come only from :func:`text` pieces.
    """
    from rich.console import Console

    class _Console(Console):
        def print(self, *objects, crop: bool = False, **kw):
            # Not cropped at the width: a table line that must stay whole (a path or id moved below its row,
            # longer than the terminal) is soft-wrapped by the terminal and copied as one line.
            super().print(*objects, crop=crop, **kw)

    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    kw = {"color_system": None} if no_color() else {}
    return _Console(file=stream, highlight=False, emoji=False, markup=False, soft_wrap=not tty,
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
