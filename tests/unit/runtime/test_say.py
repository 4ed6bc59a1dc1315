"""The runtime's one logger and warn-once (runtime/say.py): a full disk or an unreachable remote said once per
process, not at every compile."""

from __future__ import annotations

import logging

from jitwarden.runtime import say


def test_warn_once_says_each_key_once(caplog):
    caplog.set_level(logging.WARNING, logger=say.LOGGER)
    for n in range(3):
        say.warn_once("test-say-disk", "disk full writing %s (%d)", "entry", n)
        say.warn_once("test-say-remote", "remote %s unreachable", "redis://x")
    got = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert got == [
        ("jitwarden", logging.WARNING, "disk full writing entry (0)"),
        ("jitwarden", logging.WARNING, "remote redis://x unreachable"),
    ]


def test_log_is_the_jitwarden_logger(caplog):
    caplog.set_level(logging.INFO, logger=say.LOGGER)
    say.log.info("proved %d entries", 3)
    assert [(r.name, r.getMessage()) for r in caplog.records] == [("jitwarden", "proved 3 entries")]
