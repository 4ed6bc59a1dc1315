"""The runtime's one logger and its one warn-once (ARCHITECTURE.md, "The runtime").

Everything the runtime says goes to the ``jitwarden`` logger, set up here only: :data:`log`
imports :mod:`logging` when there is something to say, and :func:`warn_once` says a thing once per
process (a full disk or an unreachable remote cache must not flood a workload's log at every
compile). Standard library only, like all of the runtime.
"""

from __future__ import annotations

from typing import Any

LOGGER = "jitwarden"
_said: set[str] = set()


class _Log:
    """``logging.getLogger("jitwarden")``, imported at the first thing said."""

    def __getattr__(self, level: str) -> Any:
        import logging

        return getattr(logging.getLogger(LOGGER), level)


log = _Log()


def warn_once(key: str, msg: str, *args: object) -> None:
    """Log the warning ``msg % args`` unless one under ``key`` was logged in this process already."""
    if key not in _said:
        _said.add(key)
        log.warning(msg, *args)
