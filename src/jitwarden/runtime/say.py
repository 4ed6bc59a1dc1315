"""The runtime's one voice (ARCHITECTURE.md, "The runtime"): every line jitwarden says inside a workload.

Everything the runtime says goes to the ``jitwarden`` logger, set up here only: :data:`log`
imports :mod:`logging` when there is something to say, and :func:`warn_once` / :func:`say` say a thing once per
process (a full disk or an unreachable remote cache must not flood a workload's log at every
compile). A line said inside a tool's load hook (:func:`hook_warning`) is a Python warning at the tool's call
instead, so the workload's own warning filters apply to what its JAX, CuPy or numba call brought about.
Standard library only, like all of the runtime.
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes it as true; typing stays off the activation path
if TYPE_CHECKING:
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


def say(line: str) -> None:
    """Log ``jitwarden: line`` as a warning, once per process for each line."""
    warn_once(line, "jitwarden: %s", line)


def hook_warning(line: str, key: str | None = None) -> None:
    """Say ``jitwarden: line`` from inside a tool's hook as a Python warning, attributed to the caller's caller;
    with ``key``, only the first time ``key`` is met in this process (a stale lock or an unsealable dir costs one
    line a run, never one a function)."""
    if key is not None:
        if key in _said:
            return
        _said.add(key)
    import warnings

    warnings.warn(f"jitwarden: {line}", stacklevel=3)
