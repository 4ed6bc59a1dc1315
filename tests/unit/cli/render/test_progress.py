"""The progress bar (cli/render/progress.py): drawn on a terminal, or where ``JITWARDEN_PROGRESS`` asks for it,
never into a pipe otherwise nor for nothing to do, and gone when its block ends however it ends."""

from __future__ import annotations

import io
import os

import pytest

from jitwarden.cli.render.progress import progress_bar

ERASE = b"\x1b[2K"
SHOW_CURSOR = b"\x1b[?25h"


def _on_a_pty(body) -> bytes:
    """What ``body(stream)`` writes to a real terminal (a pty) 100 columns wide."""
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    stream = os.fdopen(slave, "w")
    try:
        body(stream)
    finally:
        stream.close()
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the slave side is closed and everything was read
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return b"".join(chunks)


def test_a_terminal_gets_a_bar_that_is_gone_when_the_block_ends():
    def body(stream):
        with progress_bar(10, "proving", env={}, stream=stream) as cb:
            assert cb is not None
            for done in range(11):
                cb(done, 10)

    shown = _on_a_pty(body)
    assert b"proving" in shown and b"/10" in shown
    assert shown.rindex(ERASE) > shown.rindex(b"proving")  # transient: the last bar drawn is erased
    assert SHOW_CURSOR in shown[shown.rindex(b"proving") :]  # the cursor given back


def test_the_bar_is_gone_when_the_block_raises():
    def body(stream):
        with (
            pytest.raises(KeyboardInterrupt),
            progress_bar(5, "cleaning", env={}, stream=stream) as cb,
        ):
            cb(2, 5)
            raise KeyboardInterrupt

    shown = _on_a_pty(body)
    assert b"cleaning" in shown and shown.rindex(ERASE) > shown.rindex(b"cleaning")
    assert SHOW_CURSOR in shown[shown.rindex(b"cleaning") :]


@pytest.mark.parametrize(
    ("total", "env", "drawn"),
    [
        (10, {}, False),  # piped: nothing drawn into the pipe
        (10, {"JITWARDEN_PROGRESS": "0"}, False),
        (10, {"JITWARDEN_PROGRESS": "1"}, True),  # asked for (a CI log that wants it)
        (0, {"JITWARDEN_PROGRESS": "1"}, False),  # nothing to do
    ],
)
def test_a_pipe_gets_a_bar_only_when_asked_and_never_for_nothing(total, env, drawn):
    stream = io.StringIO()
    with progress_bar(total, "proving", env=env, stream=stream) as cb:
        assert (cb is not None) is drawn
        if cb is not None:
            cb(total, total)
    if not drawn:
        assert stream.getvalue() == ""
