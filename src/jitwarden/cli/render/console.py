"""The one console every table and line goes through, and lines built from plain pieces.

Markup is off on this console: nothing a cache holds (a name, a path, a message) is ever
read as rich markup, so nothing needs escaping for rich; :func:`text` still escapes
control characters and undecodable bytes (:func:`jitwarden.model.text.display`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

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

        def on_broken_pipe(self) -> None:
            # rich exits 1 here (SystemExit), the "errors found" status: the reader leaving is no error. The
            # one handler (cli/main.py) makes it exit 0, as for every other write.
            self.quiet = True
            raise BrokenPipeError

    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    kw: dict[str, Any] = {"color_system": None} if no_color() else {}
    return _Console(
        file=stream,
        highlight=False,
        emoji=False,
        markup=False,
        soft_wrap=not tty,
        width=None if tty else 100_000,
        **kw,
    )


def text(*parts):
    """A line from plain pieces: each a str (no style) or a (str, style) pair; names are escaped, never read as markup."""
    from rich.text import Text

    t = Text()
    for p in parts:
        s, style = (p, None) if isinstance(p, str) else p
        t.append(display(str(s)), style=style)
    return t


def hanging(con, line, indent: int = 4) -> None:
    """Print ``line`` (a Text); on a terminal, what does not fit wraps onto lines indented by ``indent``, between
    words only: a path or an id longer than the width stays whole on its line, to be copied."""
    from rich.text import Text

    width = con.width
    if not con.is_terminal or len(line) <= width or width <= indent + 20:
        con.print(line)
        return
    first = True
    for piece in line.divide(_breaks(line.plain, width, indent))[0:]:
        piece.rstrip()
        if not piece.plain:
            continue
        out = piece if first else Text(" " * indent).append_text(piece)
        out.no_wrap, out.overflow = True, "ignore"
        con.print(out)
        first = False


def command(con, label: str, fix: str) -> None:
    """``label`` and a command to run (``doctor``'s ``fix:``), the command never broken: after the label where it
    fits, else whole on the next line (a terminal soft-wraps what is longer: copied, it is one line); a comment
    after two spaces and a parenthesis wraps between words below it. Piped: one line."""
    cmd, _, note = fix.partition("  (")
    if (
        "`" in cmd
    ):  # a fix in words, naming commands inside: wrapped between words like any sentence
        hanging(con, text(label, (fix, "bold")), indent=len(label))
        return
    if not con.is_terminal or len(label) + len(fix) <= con.width:
        con.print(text(label, (fix, "bold")))
        return
    pad = " " * len(label)
    head = text(label, (cmd, "bold"))
    if len(label) + len(cmd) > con.width:
        con.print(text(label.rstrip()))
        head = text(pad, (cmd, "bold"))
    head.no_wrap, head.overflow = True, "ignore"
    con.print(head)
    if note:
        hanging(con, text(pad + "(" + note), indent=len(label))


def footer(con, line) -> None:
    """A summary or legend under a table (counts, what a mark means): printed as :func:`hanging`, except under
    ``-q``, which keeps the result itself (the rows, what was done, an undo line) and drops what sums it up."""
    if not isinstance(sys.stderr, QuietStderr):
        hanging(con, line)


def _breaks(plain: str, width: int, indent: int) -> list[int]:
    """Offsets where ``plain`` is cut into lines of ``width`` (the first) and ``width - indent`` (the rest),
    at spaces only; a word longer than a line gets a line of its own (pure)."""
    cuts, start, room = [], 0, width
    while len(plain) - start > room:
        cut = plain.rfind(" ", start, start + room + 1)
        if cut <= start:  # one word longer than the line: whole, up to the next space
            cut = plain.find(" ", start + room)
            if cut < 0:
                break
        cuts.append(cut + 1)
        start, room = cut + 1, width - indent
    return cuts


class QuietStderr:
    """``-q/--quiet``, one meaning in every command: stderr keeps errors and questions only (no warning, note,
    hint or progress bar); stdout keeps the result without the footers that sum it up (:func:`footer`). Wraps
    the real stream; whole lines are judged."""

    KEEP = ("jitwarden: error", "jitwarden: internal error", "jitwarden: interrupted")

    def __init__(self, stream):
        self._stream, self._line = stream, ""

    def write(self, s: str) -> int:
        self._line += s
        while "\n" in self._line:
            line, self._line = self._line.split("\n", 1)
            if self._kept(line):
                self._stream.write(line + "\n")
        if self._line.endswith("[y/N] "):  # a question waits for its answer on the same line
            self._stream.write(self._line)
            self._stream.flush()
            self._line = ""
        return len(s)

    def _kept(self, line: str) -> bool:
        return line.startswith(self.KEEP) or (line.startswith("jitwarden ") and ": error: " in line)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return False  # no progress bar, no colour for what is dropped anyway

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self):
        return getattr(self._stream, "encoding", "utf-8")
