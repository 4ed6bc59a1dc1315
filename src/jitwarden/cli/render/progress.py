"""A progress bar on stderr, drawn here and handed to the engines as a plain ``callback(done, total)``."""

from __future__ import annotations

import contextlib
import os
import sys

from jitwarden.model.settings import PROGRESS


@contextlib.contextmanager
def progress_bar(total: int, label: str, *, env=None, stream=None):
    """Yield ``callback(done, total)`` drawing a bar named ``label`` (with elapsed time and an ETA) on stderr, or
    None when there is
    nothing to draw (``total`` 0, or stderr not a terminal unless ``JITWARDEN_PROGRESS`` is true).

    The bar is gone when the block ends, however it ends (Ctrl-C included).
    """
    stream = sys.stderr if stream is None else stream
    env = os.environ if env is None else env
    tty = hasattr(stream, "isatty") and stream.isatty()
    if not total or not (tty or PROGRESS.on(env)):
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=Console(file=stream),
        transient=True,
    )
    task = bar.add_task(label, total=total)
    bar.start()

    def cb(done: int, tot: int) -> None:
        bar.update(task, completed=done, total=tot)

    try:
        yield cb
    finally:
        bar.stop()
