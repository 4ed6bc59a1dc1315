"""``JITWARDEN_DEBUG`` is a flag like every switch: ``0`` keeps the one-line internal error (exit 3)."""

from __future__ import annotations

import pytest

from jitwarden.cli import main as cli
from jitwarden.env import fingerprint


def _planted(*_a, **_k):
    raise RuntimeError("planted bug")


@pytest.mark.parametrize("word", ["0", "off", "no", "false"])
def test_debug_off_words_keep_the_one_line_error(word, monkeypatch, isolated_env, capsys):
    monkeypatch.setattr(
        fingerprint, "of_host", _planted
    )  # a bug inside a command: the handler's job
    monkeypatch.setenv("JITWARDEN_DEBUG", word)
    assert cli.main(["fingerprint"]) == 3
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: planted bug" in err and "Traceback" not in err


def test_debug_on_shows_the_traceback(monkeypatch, isolated_env):
    monkeypatch.setattr(fingerprint, "of_host", _planted)
    monkeypatch.setenv("JITWARDEN_DEBUG", "1")
    with pytest.raises(RuntimeError, match="planted bug"):
        cli.main(["fingerprint"])
